//! The watch cache in the running binary: what it answers depends on the backend's state as
//! upstream's does (compaction, ...), driven over raw HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, http};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post(addr: &str, path: &str, body: &serde_json::Value) -> common::Response {
    let resp = http(addr, "POST", path, &[JSON], body.to_string().as_bytes());
    assert_eq!(
        resp.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The embedded store compacts its history as it goes (here: all but the last 20 revisions).
/// The pods cache still holds the state and events at an early version, but the backend no
/// longer does: a watch and an Exact list from there get 410 Expired, as they would from the
/// backend, while a watch from a retained version is served.
#[test]
fn watches_and_exact_lists_below_the_backends_compaction_are_expired() {
    let server = Server::start(&[
        "--embedded-retain-revisions",
        "20",
        "--embedded-retain-window",
        "0",
    ]);
    let a = server.addr.as_str();
    post(a, "/api/v1/namespaces", &json!({"metadata":{"name":"e2e"}}));
    let pods = "/api/v1/namespaces/e2e/pods";
    let pod = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let early = rv_of(&post(a, pods, &pod).json());
    // Writes to another resource move the global revision; the pods cache sees none of them
    // as events, so its window still reaches back to `early`.
    let mut last = 0;
    for i in 0..60 {
        let cm = json!({"metadata":{"name":format!("c{i}")}});
        last = rv_of(&post(a, "/api/v1/namespaces/e2e/configmaps", &cm).json());
    }
    assert!(last > early + 40);

    let watch = http(
        a,
        "GET",
        &format!("{pods}?watch=1&resourceVersion={early}&timeoutSeconds=5"),
        &[],
        b"",
    );
    assert_eq!(watch.status, 200);
    let lines = watch.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "ERROR", "{lines:?}");
    assert_eq!(lines[0]["object"]["code"], 410, "{lines:?}");
    assert_eq!(lines[0]["object"]["reason"], "Expired", "{lines:?}");

    let exact = http(
        a,
        "GET",
        &format!("{pods}?resourceVersion={early}&resourceVersionMatch=Exact"),
        &[],
        b"",
    );
    assert_eq!(
        exact.status,
        410,
        "{}",
        String::from_utf8_lossy(&exact.body)
    );
    assert_eq!(exact.json()["reason"], "Expired");

    // From a retained version: served, and the next pod arrives.
    let (mut stream, status) = common::open_stream(
        a,
        &format!("{pods}?watch=1&resourceVersion={last}&timeoutSeconds=10"),
    );
    assert_eq!(status, 200);
    let second = json!({"metadata":{"name":"q"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let created = rv_of(&post(a, pods, &second).json());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"ADDED\"") {
        let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
        assert!(n > 0, "the watch ended: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains(&format!("\"resourceVersion\":\"{created}\"")),
        "{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");
}
