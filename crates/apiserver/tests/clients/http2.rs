//! HTTP/2 against the binary: h2c with prior knowledge and HTTP/1.1 on the same plaintext
//! port; over TLS, ALPN picks `h2` for kubectl and curl and `http/1.1` for a client that
//! asks for it; many watch streams share one connection, and one whose client stops
//! granting flow-control window does not hold back the others; a watch ends with
//! END_STREAM; a client that resets a watch stream frees its watcher; the stream past
//! `--http2-max-streams-per-connection` is refused with REFUSED_STREAM.
//!
//! The protocol of each request is read from the server's
//! `apiserver_requests_by_protocol_total` counters and from curl's `%{http_version}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{PATIENCE, Server, http, run_ok};

/// The sum of the `/metrics` samples (read over plaintext HTTP/1.1) whose line starts
/// with `series`.
fn metric(addr: &str, series: &str) -> f64 {
    let r = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    sum_of(&String::from_utf8(r.body).unwrap(), series)
}

fn sum_of(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const H2_REQUESTS: &str = "apiserver_requests_by_protocol_total{protocol=\"HTTP/2\"}";
const H1_REQUESTS: &str = "apiserver_requests_by_protocol_total{protocol=\"HTTP/1.1\"}";
const WATCHES: &str = "apiserver_longrunning_requests";

/// Waits until `series` reads `want`.
fn wait_for_metric(addr: &str, series: &str, want: f64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = metric(addr, series);
        if v == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} stayed at {v}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A CA and a server certificate it signed for 127.0.0.1, made in-process:
/// (CA certificate file, server certificate file, server key file).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    // Names of their own: OpenSSL (curl) takes a leaf named as its issuer for self-signed.
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "listwatch-test-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let leaf = leaf.signed_by(&key, &issuer).unwrap();
    let (ca_file, cert_file, key_file) =
        (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (ca_file, cert_file, key_file)
}

/// curl with a deadline; `-w` prints the HTTP version last, after a newline.
fn curl(args: &[&str]) -> (String, String) {
    common::require("curl");
    let out = run_ok(
        Command::new("curl")
            .args(["-sS", "--max-time", "60", "-w", "\n%{http_version}"])
            .args(args),
    );
    let (body, version) = out.rsplit_once('\n').unwrap();
    (body.to_owned(), version.to_owned())
}

fn names_in_list(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let mut names: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort_unstable();
    names
}

const NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

#[test]
#[ignore = "needs curl"]
fn curl_lists_and_watches_over_h2c_with_prior_knowledge_and_http1_on_the_same_port() {
    let server = Server::start(&[]);
    let url = |path: &str| format!("{}{path}", server.url);

    let (body, version) = curl(&["--http2-prior-knowledge", &url("/api/v1/namespaces")]);
    assert_eq!(version, "2");
    assert_eq!(names_in_list(&body), NAMESPACES);

    // A watch: its events as DATA frames, then END_STREAM at its timeout (curl exits 0;
    // a reset stream would be curl error 92).
    let (body, version) = curl(&[
        "-N",
        "--http2-prior-knowledge",
        &url("/api/v1/namespaces?watch=1&timeoutSeconds=1"),
    ]);
    assert_eq!(version, "2");
    let mut added: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .inspect(|e| assert_eq!(e["type"], "ADDED"))
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    added.sort_unstable();
    assert_eq!(added, NAMESPACES);

    // HTTP/1.1 on the same port, chunked.
    let (body, version) = curl(&[
        "--http1.1",
        "-N",
        &url("/api/v1/namespaces?watch=1&timeoutSeconds=1"),
    ]);
    assert_eq!(version, "1.1");
    assert_eq!(body.lines().count(), 4, "{body}");
    let r = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces?watch=1&timeoutSeconds=1",
        &[],
        b"",
    );
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.lines().len(), 4);

    assert_eq!(metric(&server.addr, H2_REQUESTS), 2.0);
    assert!(metric(&server.addr, H1_REQUESTS) >= 2.0);
}

#[test]
#[ignore = "needs kubectl and curl"]
fn over_tls_kubectl_and_curl_negotiate_h2_and_http1_still_works() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let server = Server::start(&[
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-private-key-file",
        key.to_str().unwrap(),
    ]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let ca_arg = ca.to_str().unwrap();
    let url = |path: &str| format!("{}{path}", server.url);
    // Metrics over HTTP/1.1, so that reading them does not count as HTTP/2.
    let metrics = || curl(&["--http1.1", "--cacert", ca_arg, &url("/metrics")]).0;
    let before = metrics();
    assert_eq!(sum_of(&before, H2_REQUESTS), 0.0);

    let kubectl = || {
        let mut c = server.kubectl(dir.path());
        c.arg("--certificate-authority").arg(&ca);
        c.args(["--token", "unused"]);
        c
    };
    let ns = run_ok(kubectl().args(["get", "namespaces", "-o", "name"]));
    assert!(ns.contains("namespace/default"), "{ns}");
    let after_get = sum_of(&metrics(), H2_REQUESTS);
    assert!(after_get >= 1.0, "kubectl get did not use HTTP/2");

    // kubectl's watch: the existing namespaces, then one created while it watches.
    let (mut child, lines) =
        common::spawn_lines(kubectl().args(["get", "namespaces", "--watch", "-o", "name"]));
    for _ in 0..4 {
        let l = lines.recv_timeout(PATIENCE).unwrap();
        assert!(l.starts_with("namespace/"), "{l}");
    }
    let (created, version) = curl(&[
        "--http2",
        "--cacert",
        ca_arg,
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"metadata":{"name":"over-h2"}}"#,
        &url("/api/v1/namespaces"),
    ]);
    assert_eq!(version, "2", "{created}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap();
        if l == "namespace/over-h2" {
            break;
        }
    }
    let m = metrics();
    // get + its discovery, the watch's list and watch, curl's create.
    assert!(sum_of(&m, H2_REQUESTS) >= after_get + 3.0, "{m}");
    assert_eq!(sum_of(&m, WATCHES), 1.0, "kubectl's watch is open");
    let _ = child.kill();
    let _ = child.wait();

    // A client asking only for HTTP/1.1 gets it.
    let (body, version) = curl(&["--http1.1", "--cacert", ca_arg, &url("/api/v1/namespaces")]);
    assert_eq!(version, "1.1");
    assert!(names_in_list(&body).contains(&"over-h2".to_owned()));
    let (_, version) = curl(&["--http2", "--cacert", ca_arg, &url("/api/v1/namespaces")]);
    assert_eq!(version, "2");
}

/// An h2 client connection to `addr` (prior knowledge), with a small per-stream window and
/// a large connection window, as a watch client should have.
async fn h2_client(addr: &str, stream_window: u32) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(stream_window)
        .initial_connection_window_size(64 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Starts a GET on `client`; returns the response's body once its head arrived.
async fn get(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: &str,
    path: &str,
) -> h2::RecvStream {
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(())
        .unwrap();
    let mut ready = client.clone().ready().await.unwrap();
    let (resp, _) = ready.send_request(req, true).unwrap();
    *client = ready;
    let resp = tokio::time::timeout(PATIENCE, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

/// Reads whole watch events (JSON lines) from `body` until `want` of them arrived,
/// releasing flow-control window as it reads.
async fn read_events(
    body: &mut h2::RecvStream,
    pending: &mut Vec<u8>,
    want: usize,
) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    loop {
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
        if events.len() >= want {
            return events;
        }
        let chunk = tokio::time::timeout(PATIENCE, body.data())
            .await
            .expect("events keep coming")
            .expect("the stream is open")
            .unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        pending.extend_from_slice(&chunk);
    }
}

fn create_configmaps(addr: &str, prefix: &str, n: usize, size: usize) {
    let data = "x".repeat(size);
    for i in 0..n {
        let body =
            serde_json::json!({"metadata": {"name": format!("{prefix}-{i}")}, "data": {"d": data}});
        let r = http(
            addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_share_a_connection_and_a_stalled_one_holds_back_no_other() {
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    const STREAMS: usize = 20;
    const WINDOW: u32 = 16 * 1024;
    let mut client = h2_client(&addr, WINDOW).await;
    let mut bodies = Vec::new();
    for _ in 0..STREAMS {
        bodies.push(
            get(
                &mut client,
                &addr,
                "/api/v1/namespaces/default/configmaps?watch=1",
            )
            .await,
        );
    }
    let a = addr.clone();
    tokio::task::spawn_blocking(move || wait_for_metric(&a, WATCHES, STREAMS as f64))
        .await
        .unwrap();
    // Stream 0 never reads: its 16 KiB window fills with the first events. 40 events of
    // 4 KiB each (160 KiB) go to every stream.
    const EVENTS: usize = 40;
    let a = addr.clone();
    let writer = tokio::task::spawn_blocking(move || create_configmaps(&a, "cm", EVENTS, 4096));
    let mut readers = Vec::new();
    for mut body in bodies.drain(1..) {
        readers.push(tokio::spawn(async move {
            let mut pending = Vec::new();
            let events = read_events(&mut body, &mut pending, EVENTS).await;
            (events, body)
        }));
    }
    for r in readers {
        let (events, _body) = r.await.unwrap();
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
            .collect();
        let want: Vec<String> = (0..EVENTS).map(|i| format!("cm-{i}")).collect();
        assert_eq!(names, want);
    }
    writer.await.unwrap();
    // The stalled stream got what its window allowed, the first events, in order.
    let mut stalled = bodies.remove(0);
    let mut pending = Vec::new();
    let first = read_events(&mut stalled, &mut pending, 1).await;
    assert_eq!(first[0]["object"]["metadata"]["name"], "cm-0");
    let a = addr.clone();
    let h2 = tokio::task::spawn_blocking(move || metric(&a, H2_REQUESTS))
        .await
        .unwrap();
    assert_eq!(h2, STREAMS as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_with_end_stream_and_a_reset_watch_frees_its_watcher() {
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    let mut client = h2_client(&addr, 1 << 20).await;

    // At its timeout the watch ends cleanly: the data, then END_STREAM, no reset.
    let mut body = get(
        &mut client,
        &addr,
        "/api/v1/namespaces?watch=1&timeoutSeconds=1",
    )
    .await;
    let mut pending = Vec::new();
    let events = read_events(&mut body, &mut pending, 4).await;
    assert!(events.iter().all(|e| e["type"] == "ADDED"));
    // END_STREAM comes on an empty DATA frame after the last event (hyper does not know
    // the body has ended when it sends the last event).
    while let Some(chunk) = tokio::time::timeout(PATIENCE, body.data()).await.unwrap() {
        let chunk = chunk.expect("no reset");
        assert!(chunk.is_empty(), "more after the initial events: {chunk:?}");
    }
    assert!(body.is_end_stream());
    assert!(
        tokio::time::timeout(PATIENCE, body.trailers())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );

    // A watch the client resets (drops: RST_STREAM CANCEL) frees its watcher; the
    // connection goes on serving.
    let body = get(
        &mut client,
        &addr,
        "/api/v1/namespaces/default/configmaps?watch=1",
    )
    .await;
    let a = addr.clone();
    tokio::task::spawn_blocking(move || wait_for_metric(&a, WATCHES, 1.0))
        .await
        .unwrap();
    drop(body);
    let a = addr.clone();
    tokio::task::spawn_blocking(move || wait_for_metric(&a, WATCHES, 0.0))
        .await
        .unwrap();
    let mut list = get(&mut client, &addr, "/api/v1/namespaces").await;
    let mut got = Vec::new();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, list.data()).await.unwrap() {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(
        names_in_list(std::str::from_utf8(&got).unwrap()),
        NAMESPACES
    );
}

/// One HTTP/2 frame: (type, flags, stream, payload).
type Frame = (u8, u8, u32, Vec<u8>);

fn write_frame(s: &mut TcpStream, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    s.write_all(&f).unwrap();
}

fn read_frame(s: &mut TcpStream) -> Frame {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).unwrap();
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).unwrap();
    (head[3], head[4], stream, payload)
}

/// An HPACK header block for `GET http://authority/path` (static-table indexes, literal
/// values without Huffman coding).
fn get_headers(authority: &str, path: &str) -> Vec<u8> {
    let literal = |index: u8, value: &str| {
        let mut v = vec![index, u8::try_from(value.len()).unwrap()];
        assert!(value.len() < 127);
        v.extend_from_slice(value.as_bytes());
        v
    };
    // :method GET, :scheme http (indexed); :authority, :path (literal, indexed name).
    let mut block = vec![0x82, 0x86];
    block.extend(literal(0x01, authority));
    block.extend(literal(0x04, path));
    block
}

#[test]
fn the_stream_past_the_cap_is_refused() {
    // Upstream's default cap, 250: a raw client that ignores the advertised limit opens
    // 251 watch streams at once.
    let server = Server::start(&[]);
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    write_frame(&mut s, 0x4, 0, 0, &[]);
    // The server's SETTINGS come first: they advertise the cap.
    let (kind, flags, _, settings) = read_frame(&mut s);
    assert_eq!((kind, flags), (0x4, 0));
    let advertised = settings
        .chunks_exact(6)
        .find(|p| p[..2] == [0, 3])
        .map(|p| u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
    assert_eq!(advertised, Some(250));
    write_frame(&mut s, 0x4, 0x1, 0, &[]);
    const END_STREAM_AND_HEADERS: u8 = 0x1 | 0x4;
    let block = get_headers(
        &server.addr,
        "/api/v1/namespaces/default/configmaps?watch=1",
    );
    for i in 0..251u32 {
        write_frame(&mut s, 0x1, END_STREAM_AND_HEADERS, 2 * i + 1, &block);
    }
    let mut answered = std::collections::BTreeSet::new();
    let mut refused = None;
    while refused.is_none() || answered.len() < 250 {
        let (kind, _, stream, payload) = read_frame(&mut s);
        match kind {
            0x1 => {
                answered.insert(stream);
            }
            0x3 => {
                let code = u32::from_be_bytes(payload[..4].try_into().unwrap());
                assert_eq!(stream, 501, "only the 251st stream is reset (code {code})");
                refused = Some(code);
            }
            0x7 => panic!("GOAWAY: {payload:?}"),
            _ => {}
        }
    }
    const REFUSED_STREAM: u32 = 0x7;
    assert_eq!(refused, Some(REFUSED_STREAM));
    assert!(!answered.contains(&501));
    assert_eq!(metric(&server.addr, WATCHES), 250.0);
}

#[test]
fn the_stream_cap_follows_its_flag() {
    let server = Server::start(&["--http2-max-streams-per-connection", "3"]);
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    write_frame(&mut s, 0x4, 0, 0, &[]);
    let (_, _, _, settings) = read_frame(&mut s);
    let advertised = settings
        .chunks_exact(6)
        .find(|p| p[..2] == [0, 3])
        .map(|p| u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
    assert_eq!(advertised, Some(3));
    write_frame(&mut s, 0x4, 0x1, 0, &[]);
    let block = get_headers(
        &server.addr,
        "/api/v1/namespaces/default/configmaps?watch=1",
    );
    for i in 0..4u32 {
        write_frame(&mut s, 0x1, 0x5, 2 * i + 1, &block);
    }
    loop {
        let (kind, _, stream, payload) = read_frame(&mut s);
        if kind == 0x3 {
            assert_eq!((stream, &payload[..]), (7, &[0, 0, 0, 7][..]));
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_count_toward_the_clients_watch_limit() {
    // Each stream is a request of the same client: the stream cap does not lift the
    // per-client watch limit.
    let server = Server::start(&["--max-watches-per-client", "5"]);
    let addr = server.addr.clone();
    let mut client = h2_client(&addr, 1 << 20).await;
    let mut open = Vec::new();
    for _ in 0..5 {
        open.push(
            get(
                &mut client,
                &addr,
                "/api/v1/namespaces/default/configmaps?watch=1",
            )
            .await,
        );
    }
    let req = http::Request::get(format!(
        "http://{addr}/api/v1/namespaces/default/configmaps?watch=1"
    ))
    .body(())
    .unwrap();
    let (resp, _) = client
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let resp = tokio::time::timeout(PATIENCE, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_outlives_the_response_deadline_of_a_list_on_its_connection() {
    // The response deadline (--request-timeout) is per stream on HTTP/2: a list answered
    // on the connection does not put a deadline on the watch that shares it.
    let server = Server::start(&["--request-timeout", "2"]);
    let addr = server.addr.clone();
    let mut client = h2_client(&addr, 1 << 20).await;
    let mut watch = get(
        &mut client,
        &addr,
        "/api/v1/namespaces/default/configmaps?watch=1",
    )
    .await;
    let mut list = get(&mut client, &addr, "/api/v1/namespaces").await;
    while let Some(chunk) = tokio::time::timeout(PATIENCE, list.data()).await.unwrap() {
        chunk.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let a = addr.clone();
    tokio::task::spawn_blocking(move || create_configmaps(&a, "late", 1, 10))
        .await
        .unwrap();
    let mut pending = Vec::new();
    let events = read_events(&mut watch, &mut pending, 1).await;
    assert_eq!(events[0]["object"]["metadata"]["name"], "late-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_does_not_take_is_cut_at_its_deadline() {
    // A client that grants no window for a list response holds it at most --request-timeout:
    // then the connection is closed, as on HTTP/1.1.
    let server = Server::start(&["--request-timeout", "2"]);
    let addr = server.addr.clone();
    create_configmaps(&addr, "big", 8, 64 * 1024);
    let mut client = h2_client(&addr, 16 * 1024).await;
    let started = Instant::now();
    let mut list = get(&mut client, &addr, "/api/v1/namespaces/default/configmaps").await;
    // Take the first window's worth, never release it.
    let first = tokio::time::timeout(PATIENCE, list.data()).await.unwrap();
    assert!(first.is_some());
    let end = loop {
        match tokio::time::timeout(PATIENCE, list.data()).await.unwrap() {
            Some(Ok(_)) => {}
            other => break other,
        }
    };
    assert!(matches!(end, Some(Err(_))), "the response was cut: {end:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let a = addr.clone();
    let timeouts = tokio::task::spawn_blocking(move || {
        metric(
            &a,
            "apiserver_connection_timeouts_total{phase=\"response\"}",
        )
    })
    .await
    .unwrap();
    assert_eq!(timeouts, 1.0);
}
