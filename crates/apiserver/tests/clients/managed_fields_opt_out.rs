//! Issue 33 item 4: the managedFields opt-out (upstream's KEP-5958,
//! `Accept: application/json;drop=metadata.managedFields`) with curl against pods that
//! kubectl wrote with several managers: GET, LIST, PartialObjectMetadata, WATCH and a write's
//! answer leave the field out and are otherwise the same bytes' meaning; the bytes per
//! watched pod both ways are printed (docs/benchmarks.md quotes them). kubectl cannot send
//! an `Accept` parameter (no flag sets it), so curl is the client here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::{Server, run_ok};
use serde_json::Value;

const NS: &str = "mf";
const PODS: usize = 20;
const DROP: &str = "Accept: application/json;drop=metadata.managedFields";

fn pod(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-{i}\n  namespace: {NS}\n  labels:\n    app: web\n    tier: front\nspec:\n  containers:\n  - name: app\n    image: registry.example/web:1.2.{i}\n    ports:\n    - containerPort: 8080\n      name: http\n    env:\n    - name: MODE\n      value: production\n    resources:\n      requests:\n        cpu: 100m\n        memory: 128Mi\n  - name: sidecar\n    image: registry.example/proxy:3.1\n    args: [\"--port=9090\"]\n"
    )
}

fn curl(args: &[&str]) -> String {
    run_ok(Command::new("curl").args(["-sS"]).args(args))
}

fn without_managed_fields(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    v
}

#[test]
#[ignore = "needs kubectl and curl"]
fn curl_drops_managed_fields_from_reads_watches_and_writes() {
    common::require("kubectl");
    common::require("curl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    run_ok(k().args(["create", "namespace", NS]));
    let f = dir.path().join("pods.yaml");
    let all: Vec<String> = (0..PODS).map(pod).collect();
    std::fs::write(&f, all.join("---\n")).unwrap();
    // Three managers on each pod: client-side apply, a label, a server-side apply.
    run_ok(k().args(["apply", "-f"]).arg(&f));
    run_ok(k().args(["label", "pods", "-n", NS, "--all", "owner=team-a"]));
    run_ok(k().args(["annotate", "pods", "-n", NS, "--all", "note=checked"]));
    let base = format!("{}/api/v1/namespaces/{NS}/pods", server.url);

    // GET: the same object without the field.
    let full: Value = serde_json::from_str(&curl(&[&format!("{base}/web-0")])).unwrap();
    assert!(
        full["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|m| m.len() >= 3),
        "{full}"
    );
    let dropped: Value =
        serde_json::from_str(&curl(&["-H", DROP, &format!("{base}/web-0")])).unwrap();
    assert!(
        dropped["metadata"].get("managedFields").is_none(),
        "{dropped}"
    );
    assert_eq!(dropped, without_managed_fields(full.clone()));

    // LIST: every item.
    let list: Value = serde_json::from_str(&curl(&["-H", DROP, &base])).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), PODS);
    assert!(
        items
            .iter()
            .all(|i| i["metadata"].get("managedFields").is_none())
    );
    let full_list: Value = serde_json::from_str(&curl(&[&base])).unwrap();
    assert!(full_list["items"][0]["metadata"]["managedFields"].is_array());

    // Metadata only (a metadata informer's list), with the drop.
    let meta: Value = serde_json::from_str(&curl(&[
        "-H",
        "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1;drop=metadata.managedFields",
        &base,
    ]))
    .unwrap();
    assert_eq!(meta["kind"], "PartialObjectMetadataList");
    assert!(
        meta["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["metadata"].get("managedFields").is_none()
                && i["metadata"]["labels"]["owner"] == "team-a")
    );

    // An unknown drop target is ignored, as upstream's.
    let other: Value = serde_json::from_str(&curl(&[
        "-H",
        "Accept: application/json;drop=spec.someFutureField",
        &format!("{base}/web-0"),
    ]))
    .unwrap();
    assert!(other["metadata"]["managedFields"].is_array());

    // WATCH from "0" (the state as ADDED events, then the timeout): both ways at once.
    let watch = format!("{base}?watch=1&resourceVersion=0&timeoutSeconds=2");
    let (full_w, drop_w) = std::thread::scope(|s| {
        let a = s.spawn(|| curl(&["-N", &watch]));
        let b = s.spawn(|| curl(&["-N", "-H", DROP, &watch]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let frames = |body: &str| -> Vec<Value> {
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (fw, dw) = (frames(&full_w), frames(&drop_w));
    assert_eq!(fw.len(), PODS, "{full_w}");
    assert_eq!(dw.len(), PODS, "{drop_w}");
    for (f, d) in fw.iter().zip(&dw) {
        assert_eq!(d["type"], "ADDED");
        assert!(
            d["object"]["metadata"].get("managedFields").is_none(),
            "{d}"
        );
        assert_eq!(d["object"], without_managed_fields(f["object"].clone()));
    }
    let (fb, db) = (full_w.len() / PODS, drop_w.len() / PODS);
    println!(
        "managedFields opt-out: {fb} bytes per watched pod with managedFields, {db} without ({}% less)",
        100 * (fb - db) / fb
    );
    assert!(db < fb);

    // A write's answer (a merge patch) leaves it out too; the stored object keeps it.
    let patched: Value = serde_json::from_str(&curl(&[
        "-X",
        "PATCH",
        "-H",
        DROP,
        "-H",
        "Content-Type: application/merge-patch+json",
        "-d",
        r#"{"metadata":{"labels":{"patched":"yes"}}}"#,
        &format!("{base}/web-1"),
    ]))
    .unwrap();
    assert_eq!(patched["metadata"]["labels"]["patched"], "yes");
    assert!(
        patched["metadata"].get("managedFields").is_none(),
        "{patched}"
    );
    let stored: Value = serde_json::from_str(&curl(&[&format!("{base}/web-1")])).unwrap();
    assert!(
        stored["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .len()
            >= 4,
        "{stored}"
    );
}
