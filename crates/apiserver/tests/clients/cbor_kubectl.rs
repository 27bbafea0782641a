//! Issue 33 item 3, "done when": kubectl and a CBOR client (raw HTTP and listwatch-cbor,
//! `Accept: application/cbor`) read and watch the same objects. kubectl writes some, the
//! CBOR client others; each reads what the other wrote, and both watch the same stretch of
//! history (kubectl's `get --raw` watch as JSON lines, the CBOR client's as an
//! `application/cbor-seq` stream) and see the same events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http, run_ok};
use serde_json::{Value, json};

const NS: &str = "cbk";
const ACCEPT_CBOR: (&str, &str) = ("Accept", "application/cbor");

fn cbor(r: &common::Response) -> Value {
    assert!(
        listwatch_cbor::is_self_described(&r.body),
        "{}: {:?}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    listwatch_cbor::decode(&r.body).unwrap()
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_and_a_cbor_client_read_and_watch_the_same_objects() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let addr = server.addr.as_str();
    let cms = format!("/api/v1/namespaces/{NS}/configmaps");
    run_ok(k().args(["create", "namespace", NS]));
    let rv0 = http(addr, "GET", &cms, &[], b"").json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // kubectl writes one; the CBOR client writes another and updates kubectl's.
    run_ok(k().args([
        "create",
        "configmap",
        "by-kubectl",
        "-n",
        NS,
        "--from-literal=greeting=hello",
    ]));
    let mine = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "by-cbor", "namespace": NS, "labels": {"client": "cbor"}},
        "data": {"greeting": "hallo", "unicode": "漢字 ✓"},
    });
    let r = http(
        addr,
        "POST",
        &cms,
        &[("Content-Type", "application/cbor"), ACCEPT_CBOR],
        &listwatch_cbor::encode(&mine),
    );
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
    let r = http(
        addr,
        "GET",
        &format!("{cms}/by-kubectl"),
        &[ACCEPT_CBOR],
        b"",
    );
    let mut theirs = cbor(&r);
    assert_eq!(theirs["data"]["greeting"], "hello");
    theirs["data"]["greeting"] = json!("hello from cbor");
    let r = http(
        addr,
        "PUT",
        &format!("{cms}/by-kubectl"),
        &[("Content-Type", "application/cbor"), ACCEPT_CBOR],
        &listwatch_cbor::encode(&theirs),
    );
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    run_ok(k().args(["label", "configmap", "by-cbor", "-n", NS, "seen-by=kubectl"]));

    // Reads: kubectl's JSON and the CBOR client's CBOR are the same objects.
    let by_kubectl: Value = serde_json::from_str(&run_ok(k().args([
        "get",
        "configmaps",
        "-n",
        NS,
        "-o",
        "json",
        // kubectl hides them by default; the CBOR client sees them.
        "--show-managed-fields",
    ])))
    .unwrap();
    let r = http(addr, "GET", &cms, &[ACCEPT_CBOR], b"");
    assert_eq!(r.header("content-type"), Some("application/cbor"));
    let by_cbor = cbor(&r);
    assert_eq!(by_cbor["items"], by_kubectl["items"]);
    let names: Vec<&str> = by_cbor["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["by-cbor", "by-kubectl"]);
    let one: Value = serde_json::from_str(&run_ok(k().args([
        "get",
        "configmap",
        "by-cbor",
        "-n",
        NS,
        "-o",
        "json",
    ])))
    .unwrap();
    assert_eq!(one["data"]["unicode"], "漢字 ✓");
    assert_eq!(one["metadata"]["labels"]["seen-by"], "kubectl");

    // Watches of the same history: kubectl's (JSON lines) and the CBOR client's
    // (a CBOR sequence), from before the first write until their timeout.
    let watch = format!("{cms}?watch=1&resourceVersion={rv0}&timeoutSeconds=2");
    let mut kubectl_cmd = k();
    kubectl_cmd.args(["get", "--raw", &watch]);
    let (kubectl_watch, cbor_watch) = std::thread::scope(|s| {
        let a = s.spawn(move || run_ok(&mut kubectl_cmd));
        let b = s.spawn(|| http(addr, "GET", &watch, &[ACCEPT_CBOR], b""));
        (a.join().unwrap(), b.join().unwrap())
    });
    let json_events: Vec<Value> = kubectl_watch
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        cbor_watch.header("content-type"),
        Some("application/cbor-seq")
    );
    let cbor_events = listwatch_cbor::decode_sequence(&cbor_watch.body, 100).unwrap();
    let seen: Vec<(String, String)> = cbor_events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "by-kubectl".into()),
            ("ADDED".into(), "by-cbor".into()),
            ("MODIFIED".into(), "by-kubectl".into()),
            ("MODIFIED".into(), "by-cbor".into()),
        ]
    );
    assert_eq!(cbor_events, json_events);
    println!(
        "CBOR vs JSON watch: {} bytes for {} events as CBOR, {} as JSON",
        cbor_watch.body.len(),
        cbor_events.len(),
        kubectl_watch.len()
    );
}
