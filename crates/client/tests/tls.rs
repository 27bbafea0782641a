//! TLS with the `rustls` feature: the client trusts the configured CA (and only it) and can
//! present a client certificate. Certificates are made with the `openssl` command, which
//! `cargo xtask test` provisions; the tests are `#[ignore]`d for plain `cargo test` and fail
//! without it under xtask.
//!
//! Needs the `rustls` feature, which this crate's dev-dependency on itself enables; there is
//! deliberately no `#![cfg(feature = "rustls")]` here: without the feature this file fails to
//! build instead of compiling to nothing and passing by vanishing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use listwatch_client::{HttpConfig, HttpListerWatcher, ListRequest, ListerWatcher};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A CA and a server certificate for 127.0.0.1 signed by it (panics without openssl).
fn make_certs(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lw-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ok = openssl(
        &dir,
        &[&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=lw-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]]
        .concat(),
    ) && openssl(&dir, &[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat())
        && std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .is_ok()
        && openssl(
            &dir,
            &["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf"],
        );
    assert!(
        ok,
        "openssl is missing or failed: `cargo xtask test` provisions it (or install it)"
    );
    dir
}

/// Serves one fixed list response per connection over TLS, on a thread.
fn serve_tls(dir: &Path, client_ca: Option<&Path>) -> String {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_client_cert_verifier(match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .unwrap()
        }
        None => rustls::server::WebPkiClientVerifier::no_client_auth(),
    })
    .with_single_cert(chain, key)
    .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut head = Vec::new();
            let mut buf = [0u8; 512];
            while !head.ends_with(b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            if head.is_empty() {
                continue;
            }
            let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"secure","namespace":"ns","resourceVersion":"41"}}]}"#;
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.write_all(resp.as_bytes());
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    url
}

#[tokio::test]
#[ignore = "needs openssl"]
async fn https_lists_succeed_with_the_servers_ca_and_fail_with_another() {
    let dir = make_certs("ok");
    let url = serve_tls(&dir, None);
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let lw =
        HttpListerWatcher::new(HttpConfig::new(&url).unwrap().ca_pem(ca), "/api/v1/pods").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(
        (page.resource_version.as_str(), page.items[0].name()),
        ("42", "secure")
    );

    let other = make_certs("other");
    let wrong_ca = std::fs::read(other.join("ca.pem")).unwrap();
    let lw = HttpListerWatcher::new(
        HttpConfig::new(&url).unwrap().ca_pem(wrong_ca),
        "/api/v1/pods",
    )
    .unwrap();
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    assert!(
        e.status().is_none(),
        "a TLS failure is not an API error: {e}"
    );

    // Without a CA the system's roots are trusted (client-go's default); this test CA is
    // not among them.
    if let Ok(lw) = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods") {
        let e = lw.list(&ListRequest::default()).await.unwrap_err();
        assert!(e.status().is_none(), "refused by TLS, not served: {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&other).ok();
}

/// `insecure-skip-tls-verify` (kubeconfig or `HttpConfig::insecure_skip_tls_verify`): a
/// server whose CA the client does not know is served; without it, refused; with a CA as well,
/// a configuration error (client-go's rule).
#[tokio::test]
#[ignore = "needs openssl"]
async fn insecure_skip_tls_verify_is_honoured_and_refused_with_a_ca() {
    let dir = make_certs("insecure");
    let url = serve_tls(&dir, None);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user: {{}}\n"
    );
    let config = HttpConfig::from_kubeconfig_yaml(&kubeconfig, &dir).unwrap();
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items[0].name(), "secure");
    // Without the flag and without the CA: refused by TLS.
    let other = make_certs("insecure-other");
    let strict = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(std::fs::read(other.join("ca.pem")).unwrap());
    let e = HttpListerWatcher::new(strict.clone(), "/api/v1/pods")
        .unwrap()
        .list(&ListRequest::default())
        .await
        .unwrap_err();
    assert!(e.status().is_none(), "refused by TLS: {e}");
    // Both: refused when the client is built.
    let both = HttpListerWatcher::new(strict.insecure_skip_tls_verify(true), "/api/v1/pods");
    assert!(
        matches!(&both, Err(listwatch_client::Error::Config(m)) if m.contains("insecure")),
        "{both:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&other).ok();
}

#[tokio::test]
#[ignore = "needs openssl"]
async fn a_kubeconfig_client_certificate_is_presented_to_a_server_that_requires_one() {
    use base64::Engine;
    let dir = make_certs("mtls");
    // A client certificate signed by the same CA.
    assert!(openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
            "-subj",
            "/CN=admin/O=system:masters"
        ],
    ));
    std::fs::write(
        dir.join("client.cnf"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    assert!(openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.pem",
            "-days",
            "1",
            "-extfile",
            "client.cnf"
        ],
    ));
    let url = serve_tls(&dir, Some(&dir.join("ca.pem")));
    let b64 = |f: &str| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(dir.join(f)).unwrap())
    };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n\
         clusters:\n- name: k\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\n\
         users:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64("ca.pem"),
        b64("client.pem"),
        b64("client.key"),
    );
    let config = HttpConfig::from_kubeconfig_yaml(&kubeconfig, &dir).unwrap();
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items[0].name(), "secure");

    let no_cert = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(std::fs::read(dir.join("ca.pem")).unwrap());
    let lw = HttpListerWatcher::new(no_cert, "/api/v1/pods").unwrap();
    assert!(
        lw.list(&ListRequest::default()).await.is_err(),
        "the server requires a client certificate"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// An HTTP/2-capable TLS server (ALPN `h2`, `http/1.1`): answers lists and short watches,
/// recording each request's HTTP version and counting TCP connections.
async fn serve_h2(
    dir: &Path,
) -> (
    String,
    Arc<std::sync::Mutex<Vec<http::Version>>>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use futures::FutureExt;
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let versions: Arc<std::sync::Mutex<Vec<http::Version>>> = Arc::default();
    let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (log, count) = (Arc::clone(&versions), Arc::clone(&conns));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    log.lock().unwrap().push(req.version());
                    let watch = req.uri().query().is_some_and(|q| q.contains("watch=1"));
                    if req.uri().path().contains("/hang/") {
                        // A watch that stays open with nothing to say.
                        let pending = futures::stream::pending::<
                            Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>,
                        >();
                        let body = http_body_util::StreamBody::new(pending).boxed();
                        return futures::future::ready(Ok::<_, std::convert::Infallible>(
                            hyper::Response::new(body),
                        ))
                        .left_future();
                    }
                    let body = if watch {
                        concat!(
                            r#"{"type":"ADDED","object":{"metadata":{"name":"h2pod","namespace":"ns","resourceVersion":"43"}}}"#,
                            "\n",
                            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"44"}}}"#,
                            "\n"
                        )
                    } else {
                        r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"secure","namespace":"ns","resourceVersion":"41"}}]}"#
                    };
                    futures::future::ready(Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        Full::new(bytes::Bytes::from_static(body.as_bytes())).boxed(),
                    )))
                    .right_future()
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (url, versions, conns)
}

#[tokio::test]
#[ignore = "needs openssl"]
async fn https_uses_http2_when_the_server_offers_it_multiplexing_one_connection() {
    use futures::StreamExt;
    use listwatch_client::{HttpClient, WatchEvent, WatchRequest};

    let dir = make_certs("h2");
    let (url, versions, conns) = serve_h2(&dir).await;
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let client = HttpClient::new(HttpConfig::new(&url).unwrap().ca_pem(ca)).unwrap();
    let pods = client.lister_watcher("/api/v1/pods").unwrap();
    let nodes = client.lister_watcher("/api/v1/nodes").unwrap();
    // The first connection (two racing first requests would each dial: hyper only learns
    // that the connection is h2 from the handshake), then concurrent lists and a watch from
    // two lister-watchers of the client, all over it.
    let request = ListRequest::default();
    pods.list(&request).await.unwrap();
    let (a, b) = tokio::join!(pods.list(&request), nodes.list(&request));
    assert_eq!(a.unwrap().items[0].name(), "secure");
    assert_eq!(b.unwrap().resource_version, "42");
    let mut events = pods.watch(&WatchRequest::default()).await.unwrap();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.name(), "h2pod"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        events.next().await.unwrap().unwrap(),
        WatchEvent::Bookmark {
            resource_version,
            ..
        } if resource_version == "44"
    ));
    let seen = versions.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|v| *v == http::Version::HTTP_2), "{seen:?}");
    assert_eq!(
        conns.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one multiplexed connection for both lister-watchers"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A TCP relay that, once `blackhole` is set, keeps the connections open but forwards
/// nothing (a NAT or load balancer that lost its state without a reset).
async fn relay(to: String, blackhole: Arc<std::sync::atomic::AtomicBool>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let upstream = tokio::net::TcpStream::connect(&to).await.unwrap();
            let (cr, cw) = client.into_split();
            let (ur, uw) = upstream.into_split();
            for (mut r, mut w) in [(cr, uw), (ur, cw)].map(|(r, w)| {
                (
                    Box::new(r) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                    Box::new(w) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                )
            }) {
                let blackhole = Arc::clone(&blackhole);
                tokio::spawn(async move {
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = r.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        if !blackhole.load(std::sync::atomic::Ordering::SeqCst)
                            && w.write_all(&buf[..n]).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        }
    });
    format!("https://{addr}")
}

#[tokio::test]
#[ignore = "needs openssl"]
async fn on_http2_an_unanswered_ping_ends_a_silent_watch_on_a_dead_connection() {
    use futures::StreamExt;
    use listwatch_client::{HttpClient, WatchRequest};

    let dir = make_certs("h2ping");
    let (url, _, _) = serve_h2(&dir).await;
    let blackhole = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let via = relay(
        url.trim_start_matches("https://").to_owned(),
        Arc::clone(&blackhole),
    )
    .await;
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let mut config = HttpConfig::new(&via)
        .unwrap()
        .ca_pem(ca)
        .tcp_keepalive(None);
    config.http2_ping = Some(Duration::from_secs(1));
    let client = HttpClient::new(config).unwrap();
    let lw = client.lister_watcher("/hang/pods").unwrap();
    let mut events = lw.watch(&WatchRequest::default()).await.unwrap();
    // Alive: pings are answered, the watch just has nothing to say.
    assert!(
        tokio::time::timeout(Duration::from_secs(3), events.next())
            .await
            .is_err()
    );
    blackhole.store(true, std::sync::atomic::Ordering::SeqCst);
    // Dead: the next ping goes unanswered and the connection is dropped (expected about
    // 1.5 s in: the interval plus the half-interval ping timeout), long before the watch's
    // own idle deadline (minutes). Only the 10 s bound is asserted, no timing.
    let end = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the dead connection was noticed");
    assert!(
        !matches!(end, Some(Ok(_))),
        "the watch ends or fails, it does not deliver: {end:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
#[ignore = "needs openssl"]
async fn a_tls_handshake_failure_moves_the_client_to_the_next_server() {
    use listwatch_client::HttpClient;
    // Two servers of "one cluster": the first presents a certificate of another CA (a
    // replica with the wrong certificate, or an impostor), the second the right one.
    let good = make_certs("failover-good");
    let bad = make_certs("failover-bad");
    let (bad_url, good_url) = (serve_tls(&bad, None), serve_tls(&good, None));
    let ca = std::fs::read(good.join("ca.pem")).unwrap();
    let config = HttpConfig::with_servers([&bad_url, &good_url])
        .unwrap()
        .ca_pem(ca);
    let client = HttpClient::new(config).unwrap();
    let page = client
        .lister_watcher("/api/v1/pods")
        .unwrap()
        .list(&ListRequest::default())
        .await
        .unwrap();
    assert_eq!(page.items[0].name(), "secure");
    assert_eq!(client.current_server(), good_url);
    std::fs::remove_dir_all(&good).ok();
    std::fs::remove_dir_all(&bad).ok();
}
