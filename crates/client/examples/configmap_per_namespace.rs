//! An example controller: keeps a ConfigMap `namespace-info` in every namespace, with the
//! namespace's name and a message, recreating it when deleted and restoring it when edited.
//!
//! ```text
//! cargo run -p listwatch-client --example configmap_per_namespace -- http://127.0.0.1:8080
//! cargo run -p listwatch-client --example configmap_per_namespace --features rustls   # kubeconfig
//! ```
//!
//! Two informers (namespaces, ConfigMaps) feed one [`Controller`] whose keys are namespace
//! names; `reconcile` compares the desired ConfigMap with the informer's copy and creates or
//! replaces it through an [`HttpClient`] that shares the informers' connections. A conflict
//! (someone changed it meanwhile) is an error: the key is retried with backoff, by which time
//! the informer has the newer copy. `MESSAGE` sets the message.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::Object;
use listwatch_client::{
    Action, Controller, HttpClient, HttpConfig, Informer, InformerConfig, ObjectKey, Store,
};
use serde_json::{Value, json};

/// The name of the ConfigMap kept in every namespace.
pub const NAME: &str = "namespace-info";

/// The controller's state: the informers' stores and the writing client.
struct Context {
    client: HttpClient,
    namespaces: Store<Object>,
    configmaps: Store<Object>,
    message: String,
}

fn desired_data(namespace: &str, message: &str) -> Value {
    json!({ "namespace": namespace, "message": message })
}

async fn reconcile(ctx: Arc<Context>, key: ObjectKey) -> Result<Action, listwatch_client::Error> {
    let ns = key.name();
    let Some(namespace) = ctx.namespaces.get_by_name(None, ns) else {
        // Gone: its ConfigMaps go with it.
        return Ok(Action::Done);
    };
    let terminating = namespace
        .to_value()
        .ok()
        .is_some_and(|v| v["metadata"]["deletionTimestamp"].is_string());
    if terminating {
        return Ok(Action::Done);
    }
    let want = desired_data(ns, &ctx.message);
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    match ctx.configmaps.get_by_name(Some(ns), NAME) {
        None => {
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": NAME, "namespace": ns, "labels": { "app.kubernetes.io/managed-by": "configmap-per-namespace" } },
                "data": want,
            });
            match ctx.client.create(&path, &cm).await {
                // Already there: the informer has not seen it yet; it will requeue us.
                Err(e) if e.code() == Some(409) => {}
                r => {
                    r?;
                    tracing::info!(namespace = ns, "created {NAME}");
                }
            }
        }
        Some(current) => {
            let mut cm = current
                .to_value()
                .map_err(|e| listwatch_client::Error::Decode(e.to_string()))?;
            if cm["data"] != want {
                cm["data"] = want;
                // The copy's resourceVersion is the precondition: a 409 means it changed.
                ctx.client.replace(&format!("{path}/{NAME}"), &cm).await?;
                tracing::info!(namespace = ns, "restored {NAME}");
            }
        }
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
        client.lister_watcher("/api/v1/namespaces")?,
        InformerConfig::default(),
    );
    let configmaps = Informer::spawn(
        client.lister_watcher("/api/v1/configmaps")?,
        InformerConfig::default(),
    );
    let controller = Controller::default();
    // A namespace's own key; a ConfigMap's namespace when it is ours.
    let _ns = namespaces
        .add_handler(controller.enqueue(|o: &Object| Some(ObjectKey::new(None, o.name()))));
    let _cm = configmaps.add_handler(controller.enqueue(|o: &Object| {
        (o.name() == NAME)
            .then(|| o.namespace().map(|ns| ObjectKey::new(None, ns)))
            .flatten()
    }));
    // Reconcile only from complete caches (client-go's WaitForCacheSync).
    namespaces.wait_until_synced().await.ok();
    configmaps.wait_until_synced().await.ok();
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
