//! The reference operator of `crates/client/examples/website_operator.rs` written with
//! kube-rs (kube 5: `kube-runtime`'s `Controller`, `finalizer`, `events::Recorder`,
//! `#[derive(CustomResource)]`), for the comparison in docs/client.md: same `Website` kind,
//! same children, registry, finalizer, events, status and Lease.
//!
//! ```text
//! cargo run -p listwatch-apiserver --example website_operator_kube -- http://127.0.0.1:8080
//! ```
//!
//! kube-rs has no leader election: operators add a crate for it (kube-leader-election,
//! kube-lease-manager). Here the election is listwatch-runtime's `LeaderElector` over a
//! `LeaseLock` written on kube-rs's `Api<Lease>` (the `LeaseLock` block below), so the
//! lease behaves the same for both operators and only the controller differs. Each term
//! builds a new `Controller` (its watches list again), as kube-rs operators do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, CustomResource, Resource, ResourceExt};
use listwatch_client::leaderelection::{
    LeaderElectionConfig, LeaderElector, LeaseLock, LeaseRecord, LeaseState, lease_state,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer guarding the registry record.
pub const FINALIZER: &str = "example.com/website-registry";
/// The namespace of the registry and the Lease.
pub const SYSTEM_NAMESPACE: &str = "website-system";
/// The ConfigMap recording every Website.
pub const REGISTRY: &str = "website-registry";
const MANAGER: &str = "website-operator";

/// A Website: what to serve and how many replicas serve it.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Website", namespaced)]
#[kube(status = "WebsiteStatus")]
pub struct WebsiteSpec {
    /// The page served.
    pub content: String,
    /// How many replicas serve it.
    pub replicas: i32,
}

/// What the operator observed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebsiteStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A status condition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`.
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

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The finalizer's bookkeeping failed.
    #[error("{0}")]
    Finalizer(#[source] Box<FinalizerError<Error>>),
}

/// How one replica runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// This replica's leader election identity.
    pub identity: String,
    /// The Lease's duration, renew deadline and retry period.
    pub lease: (Duration, Duration, Duration),
    /// Counts reconciles.
    pub reconciles: Arc<AtomicU64>,
}

struct Context {
    client: Client,
    recorder: Recorder,
    reconciles: Arc<AtomicU64>,
}

fn labels(website: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/instance".to_owned(), website.to_owned())])
}

async fn record(client: &Client, key: &str, value: Option<String>) -> Result<(), Error> {
    let registry = Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let patch = json!({"data": {key: value}});
    match registry
        .patch(REGISTRY, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 && value.is_some() => {
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
            match registry.create(&PostParams::default(), &cm).await {
                // Created meanwhile by another worker: patch that one.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let merge = Patch::Merge(&patch);
                    registry
                        .patch(REGISTRY, &PatchParams::default(), &merge)
                        .await?;
                    Ok(())
                }
                r => r.map(|_| ()).map_err(Into::into),
            }
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        r => r.map(|_| ()).map_err(Into::into),
    }
}

async fn apply(ctx: &Context, website: &Website) -> Result<Action, Error> {
    let (name, ns) = (website.name_any(), website.namespace().unwrap_or_default());
    let Some(owner) = website.controller_owner_ref(&()) else {
        return Ok(Action::await_change());
    };
    let meta = |child: String| ObjectMeta {
        name: Some(child),
        namespace: Some(ns.clone()),
        labels: Some(labels(&name)),
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
        metadata: meta(name.clone()),
        spec: Some(DeploymentSpec {
            replicas: Some(website.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
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
    // Server-side apply every time (kube-rs's idiom: no cache of the children here).
    let params = PatchParams::apply(MANAGER).force();
    Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .patch(&configmap.name_any(), &params, &Patch::Apply(&configmap))
        .await?;
    Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &params, &Patch::Apply(&deployment))
        .await?;
    let key = format!("{ns}.{name}");
    record(
        &ctx.client,
        &key,
        Some(format!("replicas={}", website.spec.replicas)),
    )
    .await?;
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
        let event = KubeEvent {
            type_: EventType::Normal,
            reason: "ChildrenApplied".into(),
            note: Some(format!(
                "generation {} applied",
                generation.unwrap_or_default()
            )),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &website.object_ref(&())).await {
            tracing::warn!(website = %name, error = %e, "event not recorded");
        }
        let status = WebsiteStatus {
            observed_generation: generation,
            conditions: vec![want],
        };
        Api::<Website>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(Action::await_change())
}

async fn cleanup(ctx: &Context, website: &Website) -> Result<Action, Error> {
    let key = format!(
        "{}.{}",
        website.namespace().unwrap_or_default(),
        website.name_any()
    );
    record(&ctx.client, &key, None).await?;
    let event = KubeEvent {
        type_: EventType::Normal,
        reason: "RegistryCleaned".into(),
        note: Some("removed from the registry".into()),
        action: "Cleanup".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &website.object_ref(&())).await {
        tracing::warn!(error = %e, "event not recorded");
    }
    Ok(Action::await_change())
}

async fn reconcile(website: Arc<Website>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let ns = website.namespace().unwrap_or_default();
    let api = Api::<Website>::namespaced(ctx.client.clone(), &ns);
    let c = Arc::clone(&ctx);
    finalizer(&api, FINALIZER, website, |event| async move {
        match event {
            Event::Apply(w) => apply(&c, &w).await,
            Event::Cleanup(w) => cleanup(&c, &w).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn error_policy(_: Arc<Website>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// listwatch-runtime's `LeaseLock` on kube-rs's `Api<Lease>`.
struct KubeLeaseLock(Api<Lease>);

fn lease_error(e: impl std::fmt::Display) -> listwatch_client::Error {
    listwatch_client::Error::Request(e.to_string())
}

impl KubeLeaseLock {
    fn state(lease: &Lease) -> listwatch_client::Result<LeaseState> {
        lease_state(&serde_json::to_value(lease).map_err(lease_error)?)
    }
    fn lease(record: &LeaseRecord, rv: Option<&str>) -> listwatch_client::Result<Lease> {
        let body = json!({
            "metadata": {"name": MANAGER, "resourceVersion": rv},
            "spec": record.to_spec(),
        });
        serde_json::from_value(body).map_err(lease_error)
    }
}

#[async_trait::async_trait]
impl LeaseLock for KubeLeaseLock {
    async fn get(&self) -> listwatch_client::Result<Option<LeaseState>> {
        match self.0.get_opt(MANAGER).await.map_err(lease_error)? {
            Some(l) => Self::state(&l).map(Some),
            None => Ok(None),
        }
    }
    async fn create(&self, record: &LeaseRecord) -> listwatch_client::Result<LeaseState> {
        let lease = Self::lease(record, None)?;
        let created = self.0.create(&PostParams::default(), &lease).await;
        Self::state(&created.map_err(lease_error)?)
    }
    async fn update(&self, record: &LeaseRecord, rv: &str) -> listwatch_client::Result<LeaseState> {
        let lease = Self::lease(record, Some(rv))?;
        let replaced = self
            .0
            .replace(MANAGER, &PostParams::default(), &lease)
            .await;
        Self::state(&replaced.map_err(lease_error)?)
    }
    fn describe(&self) -> String {
        format!("{SYSTEM_NAMESPACE}/{MANAGER}")
    }
}

/// Runs one replica against `url` until `shutdown` resolves.
pub async fn run(
    url: &str,
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = Client::try_from(kube::Config::new(url.parse()?))?;
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: Some(options.identity.clone()),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        reconciles: options.reconciles,
    });
    let (lease_duration, renew_deadline, retry_period) = options.lease;
    let lock = KubeLeaseLock(Api::namespaced(client.clone(), SYSTEM_NAMESPACE));
    let elector = LeaderElector::new(
        lock,
        LeaderElectionConfig {
            lease_duration,
            renew_deadline,
            retry_period,
            ..LeaderElectionConfig::new(options.identity)
        },
    )?;
    let lead = || {
        let (client, ctx) = (client.clone(), Arc::clone(&ctx));
        let config = watcher::Config::default();
        let registry = watcher::Config::default().fields(&format!("metadata.name={REGISTRY}"));
        Controller::new(Api::<Website>::all(client.clone()), config.clone())
            .owns(Api::<ConfigMap>::all(client.clone()), config.clone())
            .owns(Api::<Deployment>::all(client.clone()), config)
            .watches(
                Api::<ConfigMap>::namespaced(client, SYSTEM_NAMESPACE),
                registry,
                |cm: ConfigMap| {
                    let keys: Vec<String> = cm.data.unwrap_or_default().into_keys().collect();
                    keys.into_iter().filter_map(|k| {
                        let (ns, name) = k.split_once('.')?;
                        Some(ObjectRef::<Website>::new(name).within(ns))
                    })
                },
            )
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {})
    };
    elector.run(lead, shutdown).await;
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let options = Options {
        identity: listwatch_client::leaderelection::default_identity(),
        lease: (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2),
        ),
        reconciles: Arc::default(),
    };
    let shutdown = async {
        tokio::signal::ctrl_c().await.ok();
    };
    run(&url, options, shutdown).await
}
