//! kube-rs 5 over HTTP/2 against the built server: typed creates, lists, and two runtime
//! watchers (list-watch and streaming-list modes) receiving events, over TLS with ALPN `h2`
//! (the `--pki-dir` admin certificate) and over h2c with prior knowledge.
//!
//! kube-client 5 builds its own hyper client with HTTP/1.1 only (its rustls connector
//! enables `http1` alone, and there is no `http2` feature), so these tests give
//! [`kube::Client::new`] a hyper-util client built for HTTP/2 behind kube's own base-URI
//! layer — the documented way to give kube-rs a custom transport. Over TLS the client offers
//! only `h2` by ALPN, so a server that offers only `http/1.1` fails the handshake (the last
//! test shows that); h2c with prior knowledge cannot fall back either.
//!
//! The evidence is the server's: `apiserver_requests_by_protocol_total` grows by every
//! request of the client as HTTP/2 and by nothing as HTTP/1.1 beyond the metric reads
//! (which are HTTP/1.1 on connections of their own), both watches are open, and they share
//! the client's one connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::metrics::{
    CONNECTIONS, H1_REQUESTS, H2_REQUESTS, WATCHES, plain_metrics, sum_of, tls_metrics,
};
use common::{PATIENCE, Server};
use futures::StreamExt;
use futures::stream::BoxStream;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::client::ConfigExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

type Watch = BoxStream<'static, Result<Event<ConfigMap>, watcher::Error>>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// rustls trusting the `--pki-dir` CA, presenting the admin certificate.
pub(crate) fn admin_tls(pki: &Path) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let certs = CertificateDer::pem_file_iter(pki.join("admin.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).unwrap();
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .unwrap()
}

/// A kube client for `url` over a hyper-util client speaking HTTP/2 over TLS: ALPN offers
/// `h2` alone.
pub(crate) fn kube_over_tls_h2(url: &str, tls: rustls::ClientConfig) -> Client {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http2()
        .build();
    let hyper = HyperClient::builder(TokioExecutor::new()).build(connector);
    kube_over(url, hyper)
}

/// A kube client for `url` over h2c with prior knowledge.
fn kube_over_h2c(url: &str) -> Client {
    let hyper = HyperClient::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    kube_over(url, hyper)
}

/// kube's base-URI layer (what its own client stack puts in front of hyper) over `hyper`.
fn kube_over<C>(url: &str, hyper: HyperClient<C, kube::client::Body>) -> Client
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let config = kube::Config::new(url.parse().unwrap());
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .service(hyper);
    Client::new(service, "default")
}

/// Collects a watcher's events until `pred` holds for one of them.
async fn until(stream: &mut Watch, pred: impl Fn(&Event<ConfigMap>) -> bool) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.next().await {
                Some(Ok(ev)) if pred(&ev) => return,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("watcher error: {e}"),
                None => panic!("watcher ended"),
            }
        }
    })
    .await
    .expect("the event arrives");
}

fn is_applied(ev: &Event<ConfigMap>, name: &str) -> bool {
    matches!(ev, Event::Apply(c) | Event::InitApply(c) if c.name_any() == name)
}

/// Creates, lists and watches through `client`; returns the two watchers, still open.
async fn creates_lists_and_watches(client: &Client) -> [Watch; 2] {
    // The first request opens the client's connection; the rest reuse it.
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":"h2"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "h2");
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata":{"name":name},"data":{"k":"v"}})).unwrap()
    };
    let created = cms
        .create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let listed = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|c| c.name_any())
            // The namespace's CA bundle, published by the root-CA controller (issue 28).
            .filter(|n| n != "kube-root-ca.crt")
            .collect::<Vec<_>>(),
        ["before"]
    );

    let mut watches: [Watch; 2] = [
        watcher(cms.clone(), watcher::Config::default()).boxed(),
        watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed(),
    ];
    for w in &mut watches {
        until(w, |e| is_applied(e, "before")).await;
        until(w, |e| matches!(e, Event::InitDone)).await;
    }
    // A create while both watch reaches both as a watch event.
    cms.create(&PostParams::default(), &cm("during"))
        .await
        .unwrap();
    for w in &mut watches {
        until(
            w,
            |e| matches!(e, Event::Apply(c) if c.name_any() == "during"),
        )
        .await;
    }
    watches
}

/// Waits until the server reports both watches open and `conns` connections, and checks
/// that between `before` and then every request of the client was HTTP/2: at least `h2`
/// more of them, and no more HTTP/1.1 ones than the `reads` metric reads after `before`.
async fn served_over_http2(
    read: impl Fn() -> String + Send + Sync + 'static,
    before: &str,
    h2: f64,
    conns: f64,
) {
    let read = Arc::new(read);
    let mut reads = 0.0;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = Arc::clone(&read);
        let m = tokio::task::spawn_blocking(move || r()).await.unwrap();
        reads += 1.0;
        assert_eq!(
            sum_of(&m, H1_REQUESTS) - sum_of(before, H1_REQUESTS),
            reads,
            "requests counted as HTTP/1.1 beyond the metric reads:\n{m}"
        );
        let grown = sum_of(&m, H2_REQUESTS) - sum_of(before, H2_REQUESTS);
        assert!(grown >= h2, "{grown} HTTP/2 requests, want ≥ {h2}:\n{m}");
        // The two watches on the client's one connection; the other is the reader's.
        if sum_of(&m, WATCHES) == 2.0 && sum_of(&m, CONNECTIONS) == conns {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "want 2 watches and {conns} connections:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// The namespace and two configmap creates, the test's list, the list-watch watcher's list
// and watch, the streaming-list watcher's one watch: at least 7 requests.
const CLIENT_REQUESTS: f64 = 7.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_creates_lists_and_watches_over_tls_with_alpn_h2() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let server = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let (addr, p) = (server.addr.clone(), pki.clone());
    let read = move || tls_metrics(&addr, &p);
    let before = read();
    assert_eq!(sum_of(&before, H2_REQUESTS), 0.0, "{before}");

    let client = kube_over_tls_h2(&server.url, admin_tls(&pki));
    let _watches = creates_lists_and_watches(&client).await;
    served_over_http2(read, &before, CLIENT_REQUESTS, 2.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_creates_lists_and_watches_over_h2c_with_prior_knowledge() {
    let server = Server::start(&[]);
    assert!(server.url.starts_with("http://"), "{}", server.url);
    let addr = server.addr.clone();
    let read = move || plain_metrics(&addr);
    let before = read();
    assert_eq!(sum_of(&before, H2_REQUESTS), 0.0, "{before}");

    let client = kube_over_h2c(&server.url);
    let _watches = creates_lists_and_watches(&client).await;
    served_over_http2(read, &before, CLIENT_REQUESTS, 2.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_h2_client_fails_against_a_server_that_offers_only_http1() {
    // What the tests above would meet on a server that (as this one once did) advertises
    // only `http/1.1`: the handshake fails, the request errors, nothing falls back.
    use rcgen::{CertificateParams, KeyPair};
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        acceptor.accept(tcp).await.map(drop)
    });

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = kube_over_tls_h2(&format!("https://{addr}"), tls);
    let err = tokio::time::timeout(
        PATIENCE,
        Api::<Namespace>::all(client).list(&ListParams::default()),
    )
    .await
    .unwrap()
    .unwrap_err();
    let server_side = tokio::time::timeout(PATIENCE, accepted)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(
        server_side
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>()),
        Some(&rustls::Error::NoApplicationProtocol),
        "server: {server_side}; client: {err}"
    );
}
