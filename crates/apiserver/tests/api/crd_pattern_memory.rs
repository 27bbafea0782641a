//! The compiled patterns of CRD schemas are bounded across the server and returned when a
//! CRD is deleted (red team rt10 finding 6: the budget was per CRD, so N CRDs of heavy
//! Unicode patterns held N times it, and deleting them freed nothing): with
//! `--max-crd-pattern-bytes` room for two CRDs, the third is refused (422, the limit named),
//! `apiserver_crd_pattern_bytes` drops once the first is deleted, and the third is then
//! admitted.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use crate::common;

use std::time::{Duration, Instant};

use common::metrics::{plain_metrics, sum_of};
use common::{PATIENCE, Server, http};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const LIVE: &str = "apiserver_crd_pattern_bytes ";

/// A CRD of four distinct patterns of ~200 KiB of compiled program each (~0.8 MiB): the
/// red team's `^(\pL|\pN){12}x…$`.
fn heavy(name: &str) -> Value {
    let props: serde_json::Map<String, Value> = (0..4)
        .map(|i| {
            let p = format!(r"^(\pL|\pN){{12}}x{name}{i}$");
            (format!("f{i}"), json!({"type": "string", "pattern": p}))
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{name}s.mem.example.com")},
        "spec": {"group": "mem.example.com", "scope": "Namespaced",
            "names": {"plural": format!("{name}s"), "kind": name.to_uppercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": props}}}}}]}})
}

fn live(addr: &str) -> f64 {
    sum_of(&plain_metrics(addr), LIVE)
}

/// Waits until `crd` is served (Established).
fn established(addr: &str, name: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = http(addr, "GET", &format!("{CRDS}/{name}"), &[], b"").json();
        let ok = got["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never Established");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn create(addr: &str, crd: &Value) -> common::Response {
    http(addr, "POST", CRDS, &[JSON], crd.to_string().as_bytes())
}

#[test]
fn a_crd_past_the_servers_pattern_limit_is_refused_until_another_is_deleted() {
    // Each CRD takes ~0.8 MiB: room for two, not three.
    let server = Server::start(&["--max-crd-pattern-bytes", "2Mi"]);
    let addr = server.addr.as_str();
    assert_eq!(live(addr), 0.0);
    for name in ["mema", "memb"] {
        let r = create(addr, &heavy(name));
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        established(addr, &format!("{name}s.mem.example.com"));
    }
    let two = live(addr);
    assert!(two > 1_000_000.0 && two <= 2.0 * 1024.0 * 1024.0, "{two}");
    let r = create(addr, &heavy("memc"));
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("the patterns of the server's CRDs would take more than the limit of 2097152 bytes together"),
        "{body}"
    );

    let r = http(
        addr,
        "DELETE",
        &format!("{CRDS}/memas.mem.example.com"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    while live(addr) > two * 0.75 {
        assert!(
            Instant::now() < deadline,
            "the deleted CRD's patterns are still counted: {} of {two} bytes",
            live(addr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = create(addr, &heavy("memc"));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    established(addr, "memcs.mem.example.com");
}
