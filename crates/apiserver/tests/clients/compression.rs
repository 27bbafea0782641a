//! Gzip and streamed lists end to end: raw HTTP, kubectl, the Python client and curl get
//! correct lists; a watch-list is gzipped and flushed; hostile `Accept-Encoding` values; a
//! streamed list whose client goes away frees what it held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};

const NS: &str = "gz";
/// Configmaps in the test namespace, ~2 KB each: a ~450 KB list, past the 128 KiB threshold.
const COUNT: usize = 200;

fn create(addr: &str, ns: &str, name: &str, value: &str) {
    let body = serde_json::json!({"metadata": {"name": name}, "data": {"v": value}});
    let r = http(
        addr,
        "POST",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// A server holding `COUNT` configmaps in `NS`.
fn populated() -> Server {
    let server = Server::start(&[]);
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces",
        &[("Content-Type", "application/json")],
        format!(r#"{{"metadata":{{"name":"{NS}"}}}}"#).as_bytes(),
    );
    assert_eq!(r.status, 201);
    for i in 0..COUNT {
        // Varied content, so that compression has something to do.
        let value: String = (0..2000)
            .map(|j| char::from(b'a' + ((i * 7 + j * 13) % 26) as u8))
            .collect();
        create(&server.addr, NS, &format!("cm-{i:04}"), &value);
    }
    server
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .expect("a complete gzip member");
    out
}

fn names(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn expected_names() -> Vec<String> {
    (0..COUNT).map(|i| format!("cm-{i:04}")).collect()
}

/// A sample's value from /metrics (0 when absent).
fn metric(addr: &str, series: &str) -> f64 {
    let body = http(addr, "GET", "/metrics", &[], b"").body;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const GZIPPED_LISTS: &str = "listwatch_gzip_responses_total{kind=\"list\"}";

#[test]
fn large_lists_are_gzipped_for_clients_that_accept_it_and_decode_to_the_same_list() {
    let server = populated();
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let plain = http(&server.addr, "GET", &path, &[], b"");
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(names(&plain.json()), expected_names());

    let gz = http(
        &server.addr,
        "GET",
        &path,
        &[("Accept-Encoding", "gzip")],
        b"",
    );
    assert_eq!(gz.status, 200);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    let decoded: serde_json::Value = serde_json::from_slice(&gunzip(&gz.body)).unwrap();
    assert_eq!(decoded, plain.json(), "the same list, compressed");
    assert!(
        gz.body.len() * 2 < plain.body.len(),
        "{} compressed bytes for {}",
        gz.body.len(),
        plain.body.len()
    );

    // A list under the threshold goes out as is, with its length.
    let small = http(
        &server.addr,
        "GET",
        &format!("{path}?limit=5"),
        &[("Accept-Encoding", "gzip")],
        b"",
    );
    assert_eq!(small.header("content-encoding"), None);
    assert!(small.header("content-length").is_some());
    assert_eq!(small.json()["items"].as_array().unwrap().len(), 5);

    // Tables and metadata-only lists are streamed and compressed the same way.
    let table = http(
        &server.addr,
        "GET",
        &format!("{path}?includeObject=Object"),
        &[
            ("Accept-Encoding", "gzip"),
            ("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
        ],
        b"",
    );
    assert_eq!(table.header("content-encoding"), Some("gzip"));
    let t: serde_json::Value = serde_json::from_slice(&gunzip(&table.body)).unwrap();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["rows"].as_array().unwrap().len(), COUNT);
    assert_eq!(metric(&server.addr, GZIPPED_LISTS), 2.0);
}

#[test]
fn hostile_accept_encodings_are_answered_and_never_gzip_what_was_refused() {
    let server = populated();
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    // 48 KB: under the 64 KiB head bound, far past the element cap.
    let huge_tail = format!("{}gzip", "br, ".repeat(12_000));
    let cases: [(&str, Option<&str>); 7] = [
        ("gzip;q=0", None),
        ("gzip, gzip;q=0", None),
        ("gzip;q=abc", None),
        ("*", None),
        (";;;,,,=gzip", None),
        // Past the element cap: not read.
        (huge_tail.as_str(), None),
        ("deflate, GZIP;q=0.1", Some("gzip")),
    ];
    for (value, want) in cases {
        let r = http(
            &server.addr,
            "GET",
            &path,
            &[("Accept-Encoding", value)],
            b"",
        );
        assert_eq!(r.status, 200, "{}", &value[..value.len().min(40)]);
        assert_eq!(r.header("content-encoding"), want);
        let body = match want {
            Some(_) => gunzip(&r.body),
            None => r.body,
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(names(&v), expected_names());
    }
    // A header larger than the server reads at all is refused before any handler runs.
    let enormous = "a,".repeat(300_000);
    let r = http(
        &server.addr,
        "GET",
        &path,
        &[("Accept-Encoding", &enormous)],
        b"",
    );
    assert_eq!(r.status, 431);
    assert_eq!(
        http(&server.addr, "GET", "/readyz", &[], b"").status,
        200,
        "still serving"
    );
}

/// A chunked gzip response read from a socket as it arrives.
#[derive(Default)]
struct Chunked {
    raw: Vec<u8>,
    head_done: bool,
}

impl Chunked {
    /// Reads chunks from `s`, feeding each to `sink`, until `sink` returns true.
    fn read(&mut self, s: &mut TcpStream, mut sink: impl FnMut(&[u8]) -> bool) {
        let mut buf = [0u8; 16 * 1024];
        let deadline = Instant::now() + PATIENCE;
        loop {
            if !self.head_done
                && let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n")
            {
                let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                assert!(head.contains("content-encoding: gzip"), "{head}");
                self.raw.drain(..end + 4);
                self.head_done = true;
            }
            // Whole chunks only.
            while self.head_done {
                let Some(nl) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                    break;
                };
                let size =
                    usize::from_str_radix(String::from_utf8_lossy(&self.raw[..nl]).trim(), 16)
                        .unwrap();
                assert!(size > 0, "the body ended before what was expected");
                if self.raw.len() < nl + 2 + size + 2 {
                    break;
                }
                let chunk: Vec<u8> = self.raw[nl + 2..nl + 2 + size].to_vec();
                self.raw.drain(..nl + 2 + size + 2);
                if sink(&chunk) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "timed out reading the body");
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the body ended early");
            self.raw.extend_from_slice(&buf[..n]);
        }
    }
}

#[test]
fn a_watch_list_is_gzipped_and_each_burst_is_decodable_as_it_arrives() {
    let server = populated();
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/{NS}/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=60 HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\n\r\n"
    )
    .unwrap();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut body = Chunked::default();
    // The initial events and their closing bookmark, decodable before the watch ends.
    body.read(&mut s, |chunk| {
        decoder.write_all(chunk).unwrap();
        decoder.flush().unwrap();
        String::from_utf8_lossy(decoder.get_ref()).contains("initial-events-end")
    });
    let text = String::from_utf8_lossy(decoder.get_ref()).into_owned();
    let added = text.lines().filter(|l| l.contains("\"ADDED\"")).count();
    assert_eq!(added, COUNT);
    // A live event after them arrives at once too (the stream now sends stored blocks).
    create(&server.addr, NS, "late", "x");
    body.read(&mut s, |chunk| {
        decoder.write_all(chunk).unwrap();
        decoder.flush().unwrap();
        String::from_utf8_lossy(decoder.get_ref()).contains("\"name\":\"late\"")
    });
    assert_eq!(
        metric(
            &server.addr,
            "listwatch_gzip_responses_total{kind=\"watch\"}"
        ),
        1.0
    );
}

/// The sum of the seats read-only requests asked for (`apiserver_flowcontrol_work_estimated_seats`).
fn estimated_read_seats(addr: &str) -> f64 {
    metric(
        addr,
        "apiserver_flowcontrol_work_estimated_seats_sum{priority_level=\"readOnly\"}",
    )
}

/// A list of ~450 KB from the cache takes one seat per 100 KB (upstream's size-based list
/// cost), a GET one, a page of five one; the metric shows each request's estimate.
#[test]
fn a_large_list_costs_seats_by_its_bytes_and_the_metric_shows_them() {
    let server = populated();
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let before = estimated_read_seats(&server.addr);
    assert_eq!(http(&server.addr, "GET", &path, &[], b"").status, 200);
    let list = estimated_read_seats(&server.addr) - before;
    // 200 objects of ~2.3 KB (and the namespaces' few small ones): 5 seats, not 1.
    assert!(
        (4.0..=6.0).contains(&list),
        "a large list asked for {list} seats"
    );
    let before = estimated_read_seats(&server.addr);
    assert_eq!(
        http(&server.addr, "GET", &format!("{path}?limit=5"), &[], b"").status,
        200
    );
    assert_eq!(
        http(&server.addr, "GET", &format!("{path}/cm-0001"), &[], b"").status,
        200
    );
    assert_eq!(estimated_read_seats(&server.addr) - before, 2.0);
}

#[test]
#[ignore = "needs curl"]
fn curl_compressed_reads_a_gzipped_watch_list() {
    common::require("curl");
    let server = populated();
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    let out = common::run_ok(
        Command::new("curl")
            .args(["-sS", "--compressed", "-D"])
            .arg(&headers)
            .arg(format!(
                "{}/api/v1/namespaces/{NS}/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
                server.url
            )),
    );
    let head = std::fs::read_to_string(&headers)
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let added = out.lines().filter(|l| l.contains("\"ADDED\"")).count();
    assert_eq!(added, COUNT);
    assert!(out.contains("initial-events-end"), "the closing bookmark");
}

#[test]
fn a_streamed_list_whose_client_goes_away_frees_its_seat_and_buffers() {
    let server = Server::start(&[]);
    // ~16 MB: more than the socket buffers between us hold, so the list is still being
    // streamed while we hold the connection without reading.
    let value = "x".repeat(1_000_000);
    for i in 0..16 {
        create(&server.addr, "default", &format!("big-{i}"), &value);
    }
    let inflight = "apiserver_current_inflight_requests{request_kind=\"readOnly\"}";
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 4096];
    let n = s.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    // The list holds its seat while it is sent...
    let deadline = Instant::now() + PATIENCE;
    while metric(&server.addr, inflight) != 1.0 {
        assert!(Instant::now() < deadline, "the streamed list holds no seat");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&server.addr, inflight), 1.0, "still streaming");
    // ...and lets everything go when its client does.
    drop(s);
    let deadline = Instant::now() + PATIENCE;
    while metric(&server.addr, inflight) != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the list's body outlived its client"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_gets_large_lists_gzipped() {
    common::require("kubectl");
    let server = populated();
    let dir = tempfile::tempdir().unwrap();
    let before = metric(&server.addr, GZIPPED_LISTS);
    let out = common::run_ok(server.kubectl(dir.path()).args([
        "get",
        "configmaps",
        "-n",
        NS,
        "-o",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(names(&v), expected_names());
    assert!(
        metric(&server.addr, GZIPPED_LISTS) > before,
        "kubectl (Go's transport) asked for gzip and got it"
    );
    // The printed table too (whole or streamed, whichever its size makes it).
    let table = common::run_ok(
        server
            .kubectl(dir.path())
            .args(["get", "configmaps", "-n", NS]),
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("cm-")).count(),
        COUNT
    );
}

#[test]
#[ignore = "needs curl"]
fn curl_compressed_gets_a_gzipped_list() {
    common::require("curl");
    let server = populated();
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    let out = common::run_ok(
        Command::new("curl")
            .args(["-sS", "--compressed", "-D"])
            .arg(&headers)
            .arg(format!("{}/api/v1/namespaces/{NS}/configmaps", server.url)),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(names(&v), expected_names());
    let head = std::fs::read_to_string(&headers)
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_gets_a_gzipped_list() {
    let python = common::python::python();
    let server = populated();
    let script = format!(
        r#"
import sys
from kubernetes import client
cfg = client.Configuration()
cfg.host = {url:?}
api = client.ApiClient(cfg)
api.set_default_header("Accept-Encoding", "gzip")
v1 = client.CoreV1Api(api)
items = v1.list_namespaced_config_map({NS:?}).items
names = [i.metadata.name for i in items]
assert names == ["cm-%04d" % i for i in range({COUNT})], names[:3]
raw = v1.list_namespaced_config_map({NS:?}, _preload_content=False)
assert raw.headers.get("Content-Encoding") == "gzip", dict(raw.headers)
print("python gzip list ok")
"#,
        url = server.url
    );
    let out = Command::new(&python)
        .args(["-c", &script])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python gzip list ok"));
}
