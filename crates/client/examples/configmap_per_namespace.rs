//! An example controller: keeps a ConfigMap `namespace-info` in every namespace, with the
//! namespace's name and a message, recreating it when deleted and restoring it when edited.
//!
//! ```text
//! cargo run -p listwatch-client --example configmap_per_namespace -- http://127.0.0.1:8080
//! cargo run -p listwatch-client --example configmap_per_namespace --features rustls   # kubeconfig
//! ```
//!
//! Two informers (namespaces, ConfigMaps) of k8s-openapi types feed one [`Controller`] whose
//! keys are namespace names; `reconcile` compares the desired ConfigMap with the informer's
//! copy and creates or replaces it through an [`Api`] that shares the informers' connections.
//! No URL is written by hand: `Api::<ConfigMap>::all` lists and watches
//! `/api/v1/configmaps`, `Api::<ConfigMap>::namespaced` writes to
//! `/api/v1/namespaces/{ns}/configmaps`. A conflict (someone changed it meanwhile) is an
//! error: the key is retried with backoff, by which time the informer has the newer copy.
//! `MESSAGE` sets the message. Needs the `k8s-openapi` feature.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use listwatch_client::{
    Action, Api, Controller, HttpClient, HttpConfig, Informer, InformerConfig, ObjectKey, Resource,
    Store,
};

/// The name of the ConfigMap kept in every namespace.
pub const NAME: &str = "namespace-info";

/// The controller's state: the informers' stores and the writing client.
struct Context {
    client: HttpClient,
    namespaces: Store<Namespace>,
    configmaps: Store<ConfigMap>,
    message: String,
}

fn desired_data(namespace: &str, message: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("namespace".to_owned(), namespace.to_owned()),
        ("message".to_owned(), message.to_owned()),
    ])
}

async fn reconcile(ctx: Arc<Context>, key: ObjectKey) -> Result<Action, listwatch_client::Error> {
    let ns = key.name();
    let Some(namespace) = ctx.namespaces.get_by_name(None, ns) else {
        // Gone: its ConfigMaps go with it.
        return Ok(Action::Done);
    };
    if namespace.metadata.deletion_timestamp.is_some() {
        return Ok(Action::Done);
    }
    let want = desired_data(ns, &ctx.message);
    let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    match ctx.configmaps.get_by_name(Some(ns), NAME) {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "configmap-per-namespace".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(want),
                ..ConfigMap::default()
            };
            match api.create(&cm).await {
                // Already there: the informer has not seen it yet; it will requeue us.
                Err(e) if e.code() == Some(409) => {}
                r => {
                    r?;
                    tracing::info!(namespace = ns, "created {NAME}");
                }
            }
        }
        Some(current) if current.data.as_ref() != Some(&want) => {
            let mut cm = ConfigMap::clone(&current);
            cm.data = Some(want);
            // The copy's resourceVersion is the precondition: a 409 means it changed.
            api.replace(NAME, &cm).await?;
            tracing::info!(namespace = ns, "restored {NAME}");
        }
        Some(_) => {}
    }
    Ok(Action::Done)
}

/// Runs the controller against `config` until `shutdown` resolves; returns whether the
/// reconciles in flight finished within the drain deadline.
pub async fn run(
    config: HttpConfig,
    message: String,
    workers: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<bool, listwatch_client::Error> {
    let client = HttpClient::new(config)?;
    let namespaces = Informer::spawn(
        Api::<Namespace>::cluster(client.clone()),
        InformerConfig::default(),
    );
    let configmaps = Informer::spawn(
        Api::<ConfigMap>::all(client.clone()),
        InformerConfig::default(),
    );
    let controller = Controller::default();
    // A namespace's own key; a ConfigMap's namespace when it is ours.
    let _ns = namespaces
        .add_handler(controller.enqueue(|n: &Namespace| Some(ObjectKey::new(None, n.name()))));
    let _cm = configmaps.add_handler(controller.enqueue(|cm: &ConfigMap| {
        (cm.name() == NAME)
            .then(|| Resource::namespace(cm).map(|ns| ObjectKey::new(None, ns)))
            .flatten()
    }));
    // Reconcile only from complete caches (client-go's WaitForCacheSync).
    // A list refused for good (403: RBAC missing) fails the run instead of hanging, and so
    // does a server still unreachable after a minute.
    let not_synced = |e| listwatch_client::Error::Config(format!("cache cannot sync: {e}"));
    let within = std::time::Duration::from_secs(60);
    namespaces
        .wait_until_synced_within(within)
        .await
        .map_err(not_synced)?;
    configmaps
        .wait_until_synced_within(within)
        .await
        .map_err(not_synced)?;
    let ctx = Arc::new(Context {
        client,
        namespaces: namespaces.store(),
        configmaps: configmaps.store(),
        message,
    });
    Ok(controller
        .run(
            workers,
            move |key| reconcile(Arc::clone(&ctx), key),
            shutdown,
            Duration::from_secs(30),
        )
        .await)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = match std::env::args().nth(1) {
        Some(url) => HttpConfig::new(url)?,
        None => HttpConfig::from_default_kubeconfig()?,
    };
    let message = std::env::var("MESSAGE").unwrap_or_else(|_| "managed by listwatch".into());
    let shutdown = async {
        tokio::signal::ctrl_c().await.ok();
    };
    run(config, message, 2, shutdown).await?;
    Ok(())
}
