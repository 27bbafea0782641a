//! The namespace lifecycle as a user meets it with kubectl (issue 29 items 8, 9, 10, 14):
//! a namespace held by a finalizer besides `kubernetes` is released with `kubectl replace
//! --raw /api/v1/namespaces/<n>/finalize -f -` (also after a restart with `--data-dir`);
//! a terminating namespace shows upstream's conditions in `kubectl get ns -o yaml`; the
//! namespace controller comes back to a stuck namespace every 8 s whatever DELETEs arrive;
//! namespaces carry `kubernetes.io/metadata.name`; a second DELETE changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http, run_ok};
use serde_json::{Value, json};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

/// Runs `cmd` with `input` on its stdin; its stdout, or a panic with its stderr.
fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn get_ns(s: &Server, name: &str) -> (u16, Value) {
    let r = http(
        &s.addr,
        "GET",
        &format!("/api/v1/namespaces/{name}"),
        &[],
        b"",
    );
    let v = if r.status == 200 {
        r.json()
    } else {
        Value::Null
    };
    (r.status, v)
}

fn create(s: &Server, path: &str, body: &Value) {
    let r = http(&s.addr, "POST", path, &JSON, body.to_string().as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Polls until `f` holds (at most [`PATIENCE`]).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 29 item 9, the "Done when": a namespace held by `example.com/hold` in its
/// `spec.finalizers` stays Terminating (also across a restart with `--data-dir`) until
/// `kubectl replace --raw .../finalize` removes the finalizer; then it goes.
#[test]
#[ignore = "needs kubectl"]
fn kubectl_replace_raw_finalize_releases_a_stuck_namespace_after_a_restart() {
    common::require("kubectl");
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    // A directory the server creates (0700): it refuses one others may read.
    let dir = data.path().join("data").to_str().unwrap().to_owned();
    let flags = ["--data-dir", dir.as_str()];
    let s = Server::start(&flags);
    let k = |s: &Server| s.kubectl(cache.path());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "stuck"}, "spec": {"finalizers": ["example.com/hold"]}});
    run_with_stdin(k(&s).args(["create", "-f", "-"]), ns.to_string().as_bytes());
    let out = run_ok(k(&s).args(["delete", "namespace", "stuck", "--wait=false"]));
    assert!(out.contains("namespace \"stuck\" deleted"), "{out}");
    // The controller empties it and removes `kubernetes`; `example.com/hold` holds it.
    eventually("the controller removes its finalizer", || {
        get_ns(&s, "stuck").1["spec"]["finalizers"] == json!(["example.com/hold"])
    });
    let addr = s.addr.clone();
    drop(s);
    let s = Server::start_at(&addr, &flags);
    let (code, v) = get_ns(&s, "stuck");
    assert_eq!(code, 200, "the namespace survives the restart");
    assert_eq!(v["status"]["phase"], "Terminating");
    // A plain update cannot change `spec.finalizers` (upstream's PrepareForUpdate).
    let mut updated = v.clone();
    updated["spec"]["finalizers"] = json!([]);
    run_with_stdin(
        k(&s).args(["replace", "-f", "-"]),
        updated.to_string().as_bytes(),
    );
    assert_eq!(
        get_ns(&s, "stuck").1["spec"]["finalizers"],
        json!(["example.com/hold"])
    );
    // What an operator does on a real cluster.
    let json = run_ok(k(&s).args(["get", "namespace", "stuck", "-o", "json"]));
    let mut v: Value = serde_json::from_str(&json).unwrap();
    v["spec"]["finalizers"] = json!([]);
    run_with_stdin(
        k(&s).args([
            "replace",
            "--raw",
            "/api/v1/namespaces/stuck/finalize",
            "-f",
            "-",
        ]),
        v.to_string().as_bytes(),
    );
    eventually("the namespace goes", || get_ns(&s, "stuck").0 == 404);
}

/// Item 9: the finalize route only changes `spec.finalizers` (not the status; the name must
/// match), validates finalizer names, and answers other methods 405; discovery lists it.
#[test]
fn finalize_changes_finalizers_only_and_validates_them() {
    let s = Server::start(&[]);
    let a = s.addr.as_str();
    create(
        &s,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "f"},
        "spec": {"finalizers": ["a.example.com/x"]}}),
    );
    let (_, mut cur) = get_ns(&s, "f");
    assert_eq!(
        cur["spec"]["finalizers"],
        json!(["a.example.com/x", "kubernetes"])
    );
    // Unconditional writes (no resourceVersion), as `kubectl replace --raw` of an edited GET
    // is not.
    cur["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let url = "/api/v1/namespaces/f/finalize";
    let mut body = cur.clone();
    body["spec"]["finalizers"] = json!(["kubernetes"]);
    body["status"] = json!({"phase": "Terminating"});
    let r = http(a, "PUT", url, &JSON, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        v["status"]["phase"], "Active",
        "the status is the stored one"
    );
    // Names: qualified, or standard without a slash; each cause names its index.
    for (bad, detail) in [
        (
            "mine",
            "name is neither a standard finalizer name nor is it fully qualified",
        ),
        ("a/b/c", "a qualified name must consist of"),
        ("é.io/x", "prefix part a lowercase RFC 1123 subdomain"),
    ] {
        let mut body = cur.clone();
        body["spec"]["finalizers"] = json!(["kubernetes", bad]);
        let r = http(a, "PUT", url, &JSON, body.to_string().as_bytes());
        assert_eq!(r.status, 422, "{bad}: {}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        let causes = v["details"]["causes"].as_array().unwrap();
        assert!(
            causes.iter().any(|c| c["field"] == "spec.finalizers[1]"
                && c["message"].as_str().unwrap().contains(detail)),
            "{bad}: {v}"
        );
    }
    let long = format!("{}.io/x", "a".repeat(300));
    let mut body = cur.clone();
    body["spec"]["finalizers"] = json!([long]);
    assert_eq!(
        http(a, "PUT", url, &JSON, body.to_string().as_bytes()).status,
        422
    );
    // A create validates them too.
    let r = http(
        a,
        "POST",
        "/api/v1/namespaces",
        &JSON,
        br#"{"metadata":{"name":"g"},"spec":{"finalizers":["mine"]}}"#,
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    // Another name: 400.
    let mut body = cur.clone();
    body["metadata"]["name"] = json!("other");
    assert_eq!(
        http(a, "PUT", url, &JSON, body.to_string().as_bytes()).status,
        400
    );
    // PUT only.
    assert_eq!(http(a, "GET", url, &[], b"").status, 405);
    let merge = [("Content-Type", "application/merge-patch+json")];
    assert_eq!(http(a, "PATCH", url, &merge, b"{}").status, 405);
    // Not a subresource of other resources.
    let r = http(a, "PUT", "/api/v1/nodes/n/finalize", &JSON, b"{}");
    assert_eq!(r.status, 404);
    // Discovery lists it as upstream: update only.
    let list = http(a, "GET", "/api/v1", &[], b"").json();
    let entry = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces/finalize")
        .cloned()
        .expect("namespaces/finalize in discovery");
    assert_eq!(entry["verbs"], json!(["update"]));
    assert_eq!(entry["kind"], "Namespace");
    // And OpenAPI: `replaceCoreV1NamespaceFinalize`, PUT only.
    let doc = http(a, "GET", "/openapi/v3/api/v1", &[], b"").json();
    let ops = &doc["paths"]["/api/v1/namespaces/{name}/finalize"];
    assert_eq!(ops["put"]["operationId"], "replaceCoreV1NamespaceFinalize");
    assert!(
        ops.get("get").is_none() && ops.get("patch").is_none(),
        "{ops}"
    );
}

/// Item 8: every namespace carries `kubernetes.io/metadata.name` (also a generated name);
/// an update cannot change or remove it.
#[test]
fn namespaces_carry_their_metadata_name_label() {
    let s = Server::start(&[]);
    let a = s.addr.as_str();
    create(
        &s,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "l",
        "labels": {"kubernetes.io/metadata.name": "other", "team": "a"}}}),
    );
    let (_, v) = get_ns(&s, "l");
    assert_eq!(
        v["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "l", "team": "a"})
    );
    let r = http(
        a,
        "POST",
        "/api/v1/namespaces",
        &JSON,
        br#"{"metadata":{"generateName":"gen-"}}"#,
    );
    assert_eq!(r.status, 201);
    let v = r.json();
    assert_eq!(
        v["metadata"]["labels"]["kubernetes.io/metadata.name"],
        v["metadata"]["name"]
    );
    let merge = [("Content-Type", "application/merge-patch+json")];
    let r = http(
        a,
        "PATCH",
        "/api/v1/namespaces/l",
        &merge,
        br#"{"metadata":{"labels":{"kubernetes.io/metadata.name":null,"team":"b"}}}"#,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "l", "team": "b"})
    );
    let r = http(
        a,
        "PATCH",
        "/api/v1/namespaces/l",
        &merge,
        br#"{"metadata":{"labels":{"kubernetes.io/metadata.name":"x"}}}"#,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "l"
    );
    // Selectable by it, as on a real cluster.
    let r = http(
        a,
        "GET",
        "/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Dl",
        &[],
        b"",
    );
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 1);
}

/// Item 14: a second DELETE of a Terminating namespace changes nothing (upstream's
/// namespace registry answers the namespace as it is while `spec.finalizers` hold it):
/// its garbage-collector finalizers are not rewritten.
#[test]
fn a_second_delete_of_a_terminating_namespace_changes_nothing() {
    // Without the garbage collector, which would release `foregroundDeletion` (the
    // namespace has no dependents) at any moment: what is checked is the DELETEs' effect.
    let s = Server::start(&["--enable-garbage-collector=false"]);
    let a = s.addr.as_str();
    create(
        &s,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "twice"},
        "spec": {"finalizers": ["example.com/hold"]}}),
    );
    let first = br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#;
    let r = http(a, "DELETE", "/api/v1/namespaces/twice", &JSON, first);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let (_, before) = get_ns(&s, "twice");
    for policy in ["Orphan", "Background"] {
        let body =
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
        let r = http(
            a,
            "DELETE",
            "/api/v1/namespaces/twice",
            &JSON,
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200);
        let (_, now) = get_ns(&s, "twice");
        assert_eq!(
            now["metadata"]["finalizers"],
            json!(["foregroundDeletion"]),
            "a {policy} DELETE rewrote the finalizers"
        );
        // Written by nobody but the controller (its status conditions).
        assert_eq!(
            now["metadata"]["deletionTimestamp"],
            before["metadata"]["deletionTimestamp"]
        );
    }
}

fn passes(s: &Server) -> f64 {
    let text = common::metrics::plain_metrics(&s.addr);
    common::metrics::sum_of(&text, "listwatch_namespace_controller_passes_total")
}

/// Item 10: a terminating namespace whose content a finalizer holds shows upstream's
/// conditions in `kubectl get ns -o yaml`, and the controller looks at it again after
/// upstream's estimate (15 s for finalizers, so every 8 s), not every second — however many
/// DELETEs of the namespace and of what it holds arrive meanwhile.
#[test]
#[ignore = "needs kubectl"]
fn a_stuck_namespace_shows_upstreams_conditions_and_is_not_busy() {
    common::require("kubectl");
    let s = Server::start(&[]);
    let cache = tempfile::tempdir().unwrap();
    create(
        &s,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "held"}}),
    );
    create(
        &s,
        "/api/v1/namespaces/held/configmaps",
        &json!({"metadata": {"name": "cm",
        "finalizers": ["example.com/hold"]}}),
    );
    let out = run_ok(
        s.kubectl(cache.path())
            .args(["delete", "namespace", "held", "--wait=false"]),
    );
    assert!(out.contains("deleted"), "{out}");
    let mut yaml = String::new();
    eventually("the conditions show", || {
        yaml = run_ok(
            s.kubectl(cache.path())
                .args(["get", "namespace", "held", "-o", "yaml"]),
        );
        yaml.contains("NamespaceFinalizersRemaining")
    });
    for line in [
        "message: 'Some finalizers are remaining: example.com/hold in 1 resource instances'",
        "message: 'Some resources are remaining: configmaps. has 1 resource instances'",
        "reason: SomeFinalizerRemain",
        "reason: SomeResourcesRemain",
        "type: NamespaceContentRemaining",
        "message: All resources successfully discovered",
        "reason: ResourcesDiscovered",
        "type: NamespaceDeletionDiscoveryFailure",
        "message: All legacy kube types successfully parsed",
        "type: NamespaceDeletionGroupVersionParsingFailure",
        "message: All content successfully deleted, may be waiting on finalization",
        "reason: ContentDeleted",
        "type: NamespaceDeletionContentFailure",
    ] {
        assert!(yaml.contains(line), "no {line:?} in\n{yaml}");
    }
    let (_, ns) = get_ns(&s, "held");
    let conds = ns["status"]["conditions"].as_array().unwrap();
    let status_of = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap()["status"].clone();
    assert_eq!(status_of("NamespaceFinalizersRemaining"), "True");
    assert_eq!(status_of("NamespaceContentRemaining"), "True");
    assert_eq!(status_of("NamespaceDeletionContentFailure"), "False");

    // Cheap DELETEs for 12 s: the next pass is due 8 s after the last.
    let before = passes(&s);
    let end = Instant::now() + Duration::from_secs(12);
    let mut sent = 0;
    while Instant::now() < end {
        for path in [
            "/api/v1/namespaces/held",
            "/api/v1/namespaces/held/configmaps/cm",
        ] {
            assert_eq!(http(&s.addr, "DELETE", path, &[], b"").status, 200);
            sent += 1;
        }
    }
    let n = passes(&s) - before;
    eprintln!("{sent} DELETEs in 12 s: {n} passes over the namespace");
    assert!(n <= 2.0, "{n} passes in 12 s (a pass per 8 s expected)");

    // Released: the conditions clear, and the namespace goes.
    let merge = [("Content-Type", "application/merge-patch+json")];
    let r = http(
        &s.addr,
        "PATCH",
        "/api/v1/namespaces/held/configmaps/cm",
        &merge,
        br#"{"metadata":{"finalizers":null}}"#,
    );
    assert_eq!(r.status, 200);
    eventually("the namespace goes", || get_ns(&s, "held").0 == 404);
}
