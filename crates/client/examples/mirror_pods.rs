//! Mirrors the pods of a server and prints every change.
//!
//! ```text
//! cargo run -p listwatch-client --example mirror_pods -- http://127.0.0.1:8080
//! cargo run -p listwatch-client --example mirror_pods --features rustls   # current kubeconfig context
//! ```
//!
//! With a URL the example watches all namespaces; with the kubeconfig it watches the
//! context's namespace when it has one. `BEARER_TOKEN` adds a token to a URL;
//! `STREAMING_LIST=1` syncs with a streaming list (sendInitialEvents) instead of paged lists.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::{Object, SelectableFields};
use listwatch_client::{
    Config, EventHandler, HttpConfig, HttpListerWatcher, Informer, InformerConfig,
};

struct PrintChanges;

fn describe(o: &Object) -> String {
    let node = o
        .to_value()
        .ok()
        .and_then(|v| v["spec"]["nodeName"].as_str().map(str::to_owned));
    format!(
        "{}/{} rv={} node={}",
        o.namespace().unwrap_or("-"),
        o.name(),
        o.resource_version(),
        node.as_deref().unwrap_or("<none>")
    )
}

impl EventHandler<Object> for PrintChanges {
    fn on_add(&mut self, o: &Arc<Object>, in_initial_list: bool) {
        println!(
            "{} {}",
            if in_initial_list {
                "LISTED "
            } else {
                "ADDED  "
            },
            describe(o)
        );
    }
    fn on_update(&mut self, old: &Arc<Object>, new: &Arc<Object>) {
        if old.resource_version() == new.resource_version() {
            println!("RESYNC  {}", describe(new));
        } else {
            println!(
                "UPDATED {} (was rv={})",
                describe(new),
                old.resource_version()
            );
        }
    }
    fn on_delete(&mut self, o: &Arc<Object>, final_state_unknown: bool) {
        let note = if final_state_unknown {
            " (final state unknown)"
        } else {
            ""
        };
        println!("DELETED {}{note}", describe(o));
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = match std::env::args().nth(1) {
        Some(url) => {
            let mut c = HttpConfig::new(url)?;
            if let Ok(token) = std::env::var("BEARER_TOKEN") {
                c = c.bearer_token(token);
            }
            c
        }
        None => HttpConfig::from_default_kubeconfig()?,
    };
    let path = match &config.default_namespace {
        Some(ns) => format!("/api/v1/namespaces/{ns}/pods"),
        None => "/api/v1/pods".to_owned(),
    };
    println!("mirroring {}{path}", config.base_url);
    let lw = HttpListerWatcher::new(config, &path)?
        .with_selectable_fields(SelectableFields::new(["spec.nodeName"]));
    let streaming = std::env::var("STREAMING_LIST").is_ok_and(|v| v == "1");
    let informer = Informer::spawn(
        lw,
        InformerConfig::default()
            .reflector(Config::default().streaming_list(streaming))
            .resync_period(Duration::from_secs(300)),
    );
    let printer = informer.add_handler(PrintChanges);
    // Bounded: a wrong URL or an outage is an error here, not a silent hang.
    informer
        .wait_until_synced_within(Duration::from_secs(60))
        .await?;
    println!("synced: {} pods", informer.store().len());
    tokio::select! {
        _ = printer => {}
        _ = tokio::signal::ctrl_c() => println!("bye: {} pods mirrored", informer.store().len()),
    }
    Ok(())
}
