//! listwatch-client over HTTP/2 against the built server: with the `--pki-dir` admin
//! credentials over TLS, an [`HttpClient`] negotiates `h2` by ALPN, and its lists and
//! several concurrent watches (reflectors) are served as HTTP/2 streams multiplexed on one
//! TCP connection.
//!
//! The evidence is the server's own: `apiserver_requests_by_protocol_total` (no request of
//! the client counted as HTTP/1.1), `apiserver_longrunning_requests` (the watches are open)
//! and `apiserver_open_connections` (one connection for all of them, plus the one reading
//! the metrics). `/metrics` is read over a separate HTTP/1.1 TLS connection (rustls without
//! ALPN), so each read adds exactly one HTTP/1.1 request: a client that fell back to
//! HTTP/1.1 shows up as more than that.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::metrics::{CONNECTIONS, H1_REQUESTS, H2_REQUESTS, WATCHES, sum_of, tls_metrics};
use common::{PATIENCE, Server};
use futures::StreamExt;
use listwatch_client::{Config, HttpClient, HttpConfig, Store, Writer, reflector, watcher};
use serde_json::json;

const WATCHERS: usize = 3;

/// The `/metrics` reads made so far.
static READS: AtomicUsize = AtomicUsize::new(0);

/// `/metrics` over its own HTTP/1.1 TLS connection, as the generated admin; counted.
fn metrics(addr: &str, pki: &Path) -> String {
    READS.fetch_add(1, Ordering::SeqCst);
    tls_metrics(addr, pki)
}

/// The metrics, read on a blocking thread.
async fn read_metrics(addr: &str, pki: &Path) -> String {
    let (addr, pki) = (addr.to_owned(), pki.to_owned());
    tokio::task::spawn_blocking(move || metrics(&addr, &pki))
        .await
        .unwrap()
}

async fn synced(store: &Store<listwatch_api::Object>, want: usize) {
    tokio::time::timeout(PATIENCE, store.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while store.len() != want {
        assert!(Instant::now() < deadline, "{} of {want} pods", store.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_lists_and_watches_over_one_multiplexed_http2_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pki: PathBuf = dir.path().join("pki");
    let server = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let before = read_metrics(&server.addr, &pki).await;
    assert_eq!(sum_of(&before, H2_REQUESTS), 0.0, "{before}");
    let h1_before = sum_of(&before, H1_REQUESTS);

    let client =
        HttpClient::new(HttpConfig::from_kubeconfig(&pki.join("admin.kubeconfig")).unwrap())
            .unwrap();
    // Writes through the same client: the first one opens the connection (and learns it is
    // HTTP/2), so that the watchers below share it instead of racing to open their own.
    client
        .create("/api/v1/namespaces", &json!({"metadata":{"name":"lw"}}))
        .await
        .unwrap();
    for i in 0..4 {
        let pod = json!({"metadata":{"name":format!("p{i}")},
            "spec":{"containers":[{"name":"c","image":"x"}]}});
        client
            .create("/api/v1/namespaces/lw/pods", &pod)
            .await
            .unwrap();
    }

    let mut drivers = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..WATCHERS {
        let writer = Writer::default();
        stores.push(writer.store());
        let lw = client.lister_watcher("/api/v1/namespaces/lw/pods").unwrap();
        drivers.push(tokio::spawn(
            reflector(writer, watcher(lw, Config::default())).for_each(|_| async {}),
        ));
    }
    for store in &stores {
        synced(store, 4).await;
    }
    // A pod created while they watch reaches every store through its watch.
    let pod = json!({"metadata":{"name":"late"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    client
        .create("/api/v1/namespaces/lw/pods", &pod)
        .await
        .unwrap();
    for store in &stores {
        synced(store, 5).await;
    }

    // Every watch open at once, all on the client's one connection (the other open one is
    // the metrics reader's; the earlier readers' connections close after their response).
    let deadline = Instant::now() + PATIENCE;
    loop {
        let m = read_metrics(&server.addr, &pki).await;
        // HTTP/1.1: only this test's metrics reads, never the client. Each read is counted
        // once, on the same side of its own sample every time, so between the first read
        // and this one the count grew by the reads after the first.
        let reads = READS.load(Ordering::SeqCst) as f64;
        assert_eq!(
            sum_of(&m, H1_REQUESTS) - h1_before,
            reads - 1.0,
            "requests counted as HTTP/1.1 beyond the metrics reads:\n{m}"
        );
        // Namespace + 5 pods created, and each reflector's list and watch, all HTTP/2.
        let h2 = sum_of(&m, H2_REQUESTS);
        assert!(
            h2 >= (6 + 2 * WATCHERS) as f64,
            "{h2} HTTP/2 requests:\n{m}"
        );
        if sum_of(&m, WATCHES) == WATCHERS as f64 && sum_of(&m, CONNECTIONS) == 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "want {WATCHERS} watches on 1 client connection (+1 reader):\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for d in drivers {
        d.abort();
    }
}
