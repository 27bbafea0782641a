//! The smallest useful server built with the installer: namespaces and configmaps over the
//! embedded store, on a loopback port, until Ctrl-C.
//!
//! ```text
//! cargo run -p listwatch-endpoints --example minimal_server -- 127.0.0.1:8081
//! kubectl --server http://127.0.0.1:8081 create namespace demo
//! kubectl --server http://127.0.0.1:8081 create configmap c -n demo --from-literal=k=v
//! kubectl --server http://127.0.0.1:8081 get configmaps -A -w
//! ```
//!
//! Each resource gets its own `Arc<dyn Storage>`: wrap it (e.g. in a cacher) and the
//! installer serves the wrapper instead.
//!
//! No background controllers run here: a deleted namespace stays `Terminating` (the binary
//! runs `listwatch-controllers`' namespace controller, which empties it and lets it go).

use std::sync::Arc;

use listwatch_endpoints::{Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use listwatch_storage::Storage;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".into());
    let store: Arc<dyn Storage> = Arc::new(MemStore::new());
    let api = Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .short_names(["ns"])
                .name_validation(NameValidation::Label),
            Arc::clone(&store),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]),
            store,
        )
        .build();
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("serving on http://{}", listener.local_addr()?);
    let shutdown = api.shutdown_handle();
    let on_ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.shutdown();
        }
    });
    axum::serve(listener, api.router())
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
}
