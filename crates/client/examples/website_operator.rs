//! The reference operator of listwatch-client: a `Website` custom resource
//! (`example.com/v1`, namespaced, with a status subresource) served by a ConfigMap with its
//! content and a Deployment with its replicas.
//!
//! ```text
//! kubectl apply -f - <<< "$(cargo run -q -p listwatch-client --example website_operator -- --crd)"
//! cargo run -p listwatch-client --example website_operator -- http://127.0.0.1:8080
//! ```
//!
//! What it shows, with the toolkit only:
//! - **owned children**: `<name>-content` (ConfigMap) and `<name>` (Deployment), each with a
//!   `controller: true` owner reference to the Website ([`controller_owner_reference`]), applied
//!   server-side only when the informer's copy differs from what is wanted; the garbage
//!   collector deletes them with the Website;
//! - **owns and watches relations**: a change of a child queues its Website
//!   ([`owned_by`]); a change of the registry ConfigMap queues every Website it lists (a
//!   mapping function of our own);
//! - **a finalizer** ([`finalizer`]) doing cleanup outside the Website's namespace: each
//!   Website is recorded in the ConfigMap `website-registry` of namespace `website-system`,
//!   and the record is removed before the Website may go;
//! - **Events** through the [`Recorder`] when children change and when the record is removed;
//! - **status conditions** (`Ready`) with `observedGeneration`, written through the status
//!   subresource only when they change;
//! - **leader election** on the Lease `website-system/website-operator`: only the leader
//!   reconciles; every term reconciles every Website again;
//! - **consistent first views**: its informers start from lists at no version (fresh, as
//!   etcd has it; `Config::consistent_first_list`), so a restart never acts on a lagging
//!   server's cache.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::CustomResource;
use listwatch_client::events::{EventData, EventType, Recorder, object_reference};
use listwatch_client::finalizer::{Event, FinalizerError, finalizer};
use listwatch_client::kube::CustomResourceExt;
use listwatch_client::leaderelection::{
    HttpLeaseLock, LeaderElectionConfig, LeaderElector, default_identity,
};
use listwatch_client::relations::{controller_owner_reference, owned_by};
use listwatch_client::{
    Action, Api, Config, Controller, HttpClient, HttpConfig, Informer, InformerConfig, ObjectKey,
    Patch, PatchParams, Resource, Store,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer guarding the registry record.
pub const FINALIZER: &str = "example.com/website-registry";
/// The namespace of the registry and the Lease.
pub const SYSTEM_NAMESPACE: &str = "website-system";
/// The ConfigMap recording every Website (the "external" state the finalizer cleans up).
pub const REGISTRY: &str = "website-registry";
/// The field manager of the operator's writes.
const MANAGER: &str = "website-operator";

/// A Website: what to serve and how many replicas serve it. kube-rs's derive writes the
/// `Website` type, its CRD and schema (`Website::crd()`); listwatch-client's `kube` feature
/// makes it a resource for `Api`, informers, the finalizer, owner references and events.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Website", namespaced)]
#[kube(status = "WebsiteStatus")]
pub struct WebsiteSpec {
    /// The page served.
    pub content: String,
    /// How many replicas serve it.
    #[schemars(range(min = 0))]
    pub replicas: i32,
}

/// `status` of a [`Website`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebsiteStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and its reason.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A status condition (metav1.Condition's fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type, `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The generation it was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// A reconcile's error: the API call that failed, or the finalizer's bookkeeping.
type ReconcileError = FinalizerError<listwatch_client::Error>;

/// How one replica of the operator runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// This replica's leader election identity.
    pub identity: String,
    /// The Lease's duration, renew deadline and retry period.
    pub lease: (Duration, Duration, Duration),
    /// Counts finished reconciles, failed ones included (a figure for comparisons; the
    /// stale-view tests wait on it).
    pub reconciles: Arc<AtomicU64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            identity: default_identity(),
            lease: (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2),
            ),
            reconciles: Arc::default(),
        }
    }
}

struct Context {
    client: HttpClient,
    configmaps: Store<ConfigMap>,
    deployments: Store<Deployment>,
    recorder: Recorder,
    reconciles: Arc<AtomicU64>,
}

fn labels(website: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/instance".to_owned(), website.to_owned())])
}

/// The children `website` asks for.
fn desired(website: &Website) -> Option<(ConfigMap, Deployment)> {
    let name = website.metadata.name.as_deref()?;
    let owner = controller_owner_reference(website)?;
    let meta = |child: String| ObjectMeta {
        name: Some(child),
        namespace: website.metadata.namespace.clone(),
        labels: Some(labels(name)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let configmap = ConfigMap {
        metadata: meta(format!("{name}-content")),
        data: Some(BTreeMap::from([(
            "index.html".to_owned(),
            website.spec.content.clone(),
        )])),
        ..ConfigMap::default()
    };
    let deployment = Deployment {
        metadata: meta(name.to_owned()),
        spec: Some(DeploymentSpec {
            replicas: Some(website.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels(name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some("nginx:1.27".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    Some((configmap, deployment))
}

/// The registry's key for `website`.
fn record_key(website: &Website) -> String {
    format!(
        "{}.{}",
        website.metadata.namespace.as_deref().unwrap_or_default(),
        website.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Sets (`Some`) or removes (`None`) the registry's record of `website`.
async fn record(
    client: &HttpClient,
    key: &str,
    value: Option<String>,
) -> listwatch_client::Result<()> {
    let registry = Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let patch = json!({"data": {key: value}});
    match registry
        .patch(REGISTRY, &Patch::Merge(&patch), &PatchParams::default())
        .await
    {
        Err(e) if e.code() == Some(404) && value.is_some() => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(REGISTRY.into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    key.to_owned(),
                    value.unwrap_or_default(),
                )])),
                ..ConfigMap::default()
            };
            match registry.create(&cm).await {
                // Created meanwhile by another worker: patch that one.
                Err(e) if e.code() == Some(409) => registry
                    .patch(REGISTRY, &Patch::Merge(&patch), &PatchParams::default())
                    .await
                    .map(|_| ()),
                r => r.map(|_| ()),
            }
        }
        Err(e) if e.code() == Some(404) => Ok(()),
        r => r.map(|_| ()),
    }
}

async fn apply(ctx: &Context, website: &Website) -> listwatch_client::Result<Action> {
    let (Some(name), Some(ns)) = (
        website.metadata.name.as_deref(),
        website.metadata.namespace.as_deref(),
    ) else {
        return Ok(Action::Done);
    };
    let Some((configmap, deployment)) = desired(website) else {
        return Ok(Action::Done);
    };
    let current_cm = ctx
        .configmaps
        .get_by_name(Some(ns), &format!("{name}-content"));
    if current_cm
        .as_ref()
        .map(|c| (&c.data, &c.metadata.owner_references))
        != Some((&configmap.data, &configmap.metadata.owner_references))
    {
        let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
        api.apply(&format!("{name}-content"), &configmap, MANAGER, true)
            .await?;
    }
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let current_deploy = ctx.deployments.get_by_name(Some(ns), name);
    if current_deploy
        .as_ref()
        .map(|d| (replicas(d), &d.metadata.owner_references))
        != Some((replicas(&deployment), &deployment.metadata.owner_references))
    {
        let api = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
        api.apply(name, &deployment, MANAGER, true).await?;
    }
    record(
        &ctx.client,
        &record_key(website),
        Some(format!("replicas={}", website.spec.replicas)),
    )
    .await?;
    // The status (and an Event), when it is not what this generation's would be: a reconcile
    // that fails before the status is written publishes again on its retry.
    let generation = website.metadata.generation;
    let old = website.status.clone().unwrap_or_default();
    let ready = old.conditions.iter().find(|c| c.type_ == "Ready");
    let want = Condition {
        type_: "Ready".into(),
        status: "True".into(),
        observed_generation: generation,
        reason: "ChildrenApplied".into(),
        message: format!("{} replicas serve the content", website.spec.replicas),
        last_transition_time: match ready {
            Some(c) if c.status == "True" => c.last_transition_time.clone(),
            _ => Some(listwatch_client::leaderelection::micro_time_now()),
        },
    };
    if old.observed_generation != generation || ready != Some(&want) {
        let event = EventData {
            type_: EventType::Normal,
            reason: "ChildrenApplied".into(),
            action: "Reconcile".into(),
            note: Some(format!(
                "generation {} applied",
                generation.unwrap_or_default()
            )),
        };
        publish(ctx, website, &event).await;
        let status = WebsiteStatus {
            observed_generation: generation,
            conditions: vec![want],
        };
        let api = Api::<Website>::namespaced(ctx.client.clone(), ns);
        let patch = json!({"status": status});
        api.patch_status(name, &Patch::Merge(&patch), &PatchParams::default())
            .await?;
    }
    Ok(Action::Done)
}

/// Records `event` and waits (at most 15 s) until it is written: the status transition or
/// finalizer removal that follows stops it from being published again, so it must be on the
/// server first (a crash right after that write would lose a queued event). `publish` alone
/// never waits.
async fn publish(ctx: &Context, website: &Website, event: &EventData) {
    if let Err(e) = ctx
        .recorder
        .publish(&object_reference(website), event)
        .await
    {
        tracing::warn!(error = %e, "event not recorded");
    }
    if !ctx.recorder.flush(Duration::from_secs(15)).await {
        tracing::warn!(reason = %event.reason, "event not written within 15 s");
    }
}

async fn cleanup(ctx: &Context, website: &Website) -> listwatch_client::Result<Action> {
    record(&ctx.client, &record_key(website), None).await?;
    let event = EventData {
        type_: EventType::Normal,
        reason: "RegistryCleaned".into(),
        action: "Cleanup".into(),
        note: Some("removed from the registry".into()),
    };
    publish(ctx, website, &event).await;
    // The children go with the Website: the garbage collector follows their owner references.
    Ok(Action::Done)
}

async fn reconcile(
    ctx: Arc<Context>,
    key: ObjectKey,
    website: Option<Arc<Website>>,
) -> Result<Action, ReconcileError> {
    let outcome = reconcile_website(&ctx, key, website).await;
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    outcome
}

async fn reconcile_website(
    ctx: &Arc<Context>,
    key: ObjectKey,
    website: Option<Arc<Website>>,
) -> Result<Action, ReconcileError> {
    let Some(website) = website else {
        return Ok(Action::Done);
    };
    let Some(ns) = key.namespace() else {
        return Ok(Action::Done);
    };
    let api = Api::<Website>::namespaced(ctx.client.clone(), ns);
    let c = Arc::clone(ctx);
    finalizer(&api, FINALIZER, website, |event| async move {
        match event {
            Event::Apply(w) => apply(&c, &w).await,
            Event::Cleanup(w) => cleanup(&c, &w).await,
        }
    })
    .await
}

/// Waits, at most a minute, for the first sync of `informer`; its failure (a list refused
/// for good: 400, 401, 403, 404, 405, 406, an answer that is not the list; or still failing
/// after a minute: the server unreachable, 5xx, 429) is returned, not ignored.
async fn synced<K: Resource>(
    informer: &Informer<K>,
    what: &str,
) -> Result<(), listwatch_client::Error> {
    informer
        .wait_until_synced_within(std::time::Duration::from_secs(60))
        .await
        .map_err(|e| listwatch_client::Error::Config(format!("the {what} cache cannot sync: {e}")))
}

/// Runs one replica of the operator against `config` until `shutdown` resolves.
pub async fn run(
    config: HttpConfig,
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), listwatch_client::Error> {
    let client = HttpClient::new(config)?;
    // Consistent first views: each informer starts from a list at no version (served as
    // fresh as etcd), not at version "0", which any server may answer from a lagging cache.
    // A restart against such a cache would see a Website already deleted and cleaned up as
    // live, and record it again in the registry for good (found by
    // `website_operator_sieve::stale_view_after_restart_changes_nothing`).
    let consistent = || Config {
        consistent_first_list: true,
        ..Config::default()
    };
    let websites = Informer::spawn(
        Api::<Website>::all(client.clone()),
        InformerConfig::default().reflector(consistent()),
    );
    let configmaps = Informer::spawn(
        Api::<ConfigMap>::all(client.clone()),
        InformerConfig::default().reflector(consistent()),
    );
    let deployments = Informer::spawn(
        Api::<Deployment>::all(client.clone()),
        InformerConfig::default().reflector(consistent()),
    );
    let controller = Controller::default();
    let _w = websites
        .add_handler(controller.enqueue(|w: &Website| Some(listwatch_client::Resource::key(w))));
    let _d = deployments.add_handler(controller.enqueue(owned_by::<Website, Deployment>()));
    // Owns the content ConfigMaps; watches the registry: a change of it queues every Website
    // it records (e.g. someone deleted it).
    let _c = configmaps.add_handler(controller.enqueue(owned_by::<Website, ConfigMap>()));
    let queue = controller.queue().clone();
    let _r = configmaps.add_handler(controller.enqueue(move |cm: &ConfigMap| {
        let registry = cm.metadata.namespace.as_deref() == Some(SYSTEM_NAMESPACE)
            && cm.metadata.name.as_deref() == Some(REGISTRY);
        if registry {
            for key in cm.data.iter().flat_map(|d| d.keys()) {
                if let Some((ns, name)) = key.split_once('.') {
                    queue.add(ObjectKey::new(Some(ns), name));
                }
            }
        }
        None
    }));
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), MANAGER, options.identity.clone()),
        client: client.clone(),
        configmaps: configmaps.store(),
        deployments: deployments.store(),
        reconciles: options.reconciles,
    });
    let (lease_duration, renew_deadline, retry_period) = options.lease;
    let elector = LeaderElector::new(
        HttpLeaseLock::new(client, SYSTEM_NAMESPACE, MANAGER)?,
        LeaderElectionConfig {
            lease_duration,
            renew_deadline,
            retry_period,
            ..LeaderElectionConfig::new(options.identity)
        },
    )?;
    // Reconcile only from complete caches (client-go's WaitForCacheSync); a list the server
    // refuses for good (403: RBAC missing for one of them) fails the run instead of hanging.
    synced(&websites, "websites").await?;
    synced(&configmaps, "configmaps").await?;
    synced(&deployments, "deployments").await?;
    let store = websites.store();
    elector
        .run(
            || {
                let (controller, store, ctx) =
                    (controller.clone(), store.clone(), Arc::clone(&ctx));
                async move {
                    controller
                        .run_with_objects(
                            store,
                            2,
                            move |key, website| reconcile(Arc::clone(&ctx), key, website),
                            std::future::pending::<()>(),
                            Duration::from_secs(10),
                        )
                        .await;
                }
            },
            shutdown,
        )
        .await;
    // Events are written in the background (`Recorder::publish` never waits): write what is
    // still queued before going.
    ctx.recorder.flush(Duration::from_secs(5)).await;
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("--crd") {
        println!("{}", serde_json::to_string_pretty(&Website::crd())?);
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = match std::env::args().nth(1) {
        Some(url) => HttpConfig::new(url)?,
        None => HttpConfig::infer()?,
    };
    let shutdown = async {
        tokio::signal::ctrl_c().await.ok();
    };
    run(config, Options::default(), shutdown).await?;
    Ok(())
}
