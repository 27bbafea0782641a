//! Service type changes through the binary with kubectl (red team rt3 finding 2): an update
//! that changes `type` drops what the new type does not use and the user left as stored
//! (upstream's `dropTypeDependentFields`) and the allocator releases it, so a
//! ClusterIP → ExternalName → ClusterIP round trip never leaves two Services one address,
//! a NodePort → ClusterIP change frees the node port, a ClusterIP Service may not ask for a
//! node port, TCP and UDP of one port number share a node port, and a restart over the same
//! data rebuilds the same allocations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server};
use serde_json::{Value, json};

const NS: &str = "default";

/// Runs kubectl with `args` (and `stdin`, if any): whether it succeeded, and its output.
fn kubectl(server: &Server, cache: &Path, args: &[&str], stdin: Option<&Value>) -> (bool, String) {
    let mut cmd = server.kubectl(cache);
    cmd.args(["-n", NS])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(body) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.to_string().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn create(server: &Server, cache: &Path, name: &str, spec: Value) -> (bool, String) {
    let body =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    kubectl(server, cache, &["create", "-f", "-"], Some(&body))
}

/// Creates until it succeeds: what an update released is free once the allocator has seen
/// the update stored (its observer), which a client may outrun by a moment.
fn create_once_free(server: &Server, cache: &Path, name: &str, spec: Value) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (ok, out) = create(server, cache, name, spec.clone());
        if ok {
            return;
        }
        assert!(out.contains("already allocated"), "{out}");
        assert!(Instant::now() < deadline, "never freed: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn get(server: &Server, cache: &Path, name: &str) -> Value {
    let (ok, out) = kubectl(server, cache, &["get", "svc", name, "-o", "json"], None);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap()
}

fn patch(server: &Server, cache: &Path, name: &str, body: Value) -> (bool, String) {
    let body = body.to_string();
    kubectl(
        server,
        cache,
        &["patch", "svc", name, "--type=merge", "-p", &body],
        None,
    )
}

#[test]
fn type_changes_release_what_the_new_type_does_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cache = dir.path().join("cache");
    let flags = ["--data-dir", data.to_str().unwrap()];
    let server = Server::start(&flags);

    // ClusterIP → ExternalName → ClusterIP while another Service takes the address.
    assert!(create(&server, &cache, "b", json!({"ports": [{"port": 80}]})).0);
    let ip = get(&server, &cache, "b")["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    let (ok, out) = patch(
        &server,
        &cache,
        "b",
        json!({"spec": {"type": "ExternalName", "externalName": "x.example.com"}}),
    );
    assert!(ok, "{out}");
    let spec = get(&server, &cache, "b")["spec"].clone();
    for gone in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "ipFamilyPolicy",
        "internalTrafficPolicy",
    ] {
        assert!(spec.get(gone).is_none(), "{gone} kept: {spec}");
    }
    create_once_free(
        &server,
        &cache,
        "e",
        json!({"clusterIP": ip, "ports": [{"port": 80}]}),
    );
    let (ok, out) = patch(
        &server,
        &cache,
        "b",
        json!({"spec": {"type": "ClusterIP", "externalName": null}}),
    );
    assert!(ok, "{out}");
    let b_ip = get(&server, &cache, "b")["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(b_ip, ip, "two Services share {ip}");

    // NodePort → ClusterIP: the node port leaves the spec and is free again.
    let np = json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30300}]});
    assert!(create(&server, &cache, "a", np.clone()).0);
    let (ok, out) = patch(&server, &cache, "a", json!({"spec": {"type": "ClusterIP"}}));
    assert!(ok, "{out}");
    let ports = get(&server, &cache, "a")["spec"]["ports"].clone();
    assert!(ports[0].get("nodePort").is_none(), "{ports}");
    create_once_free(&server, &cache, "c", np);

    // A ClusterIP Service may not ask for a node port.
    let (ok, out) = create(
        &server,
        &cache,
        "d",
        json!({"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30091}]}),
    );
    assert!(!ok);
    assert!(
        out.contains(
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        ),
        "{out}"
    );

    // TCP and UDP of one port number share one node port.
    let dns = json!({"type": "NodePort", "ports": [
        {"name": "t", "port": 53, "protocol": "TCP"}, {"name": "u", "port": 53, "protocol": "UDP"}]});
    assert!(create(&server, &cache, "n4", dns).0);
    let ports = get(&server, &cache, "n4")["spec"]["ports"].clone();
    assert!(ports[0]["nodePort"].is_u64(), "{ports}");
    assert_eq!(ports[0]["nodePort"], ports[1]["nodePort"]);
    let shared = ports[0]["nodePort"].as_u64().unwrap().to_string();
    drop(server);

    // Restarted over the same data: the addresses and ports in use are held, no other.
    let server = Server::start(&flags);
    for taken in [&ip, &b_ip] {
        let (ok, out) = create(
            &server,
            &cache,
            "x",
            json!({"clusterIP": taken, "ports": [{"port": 80}]}),
        );
        assert!(
            !ok && out.contains("provided IP is already allocated"),
            "{out}"
        );
    }
    for taken in ["30300", &shared] {
        let n: u64 = taken.parse().unwrap();
        let (ok, out) = create(
            &server,
            &cache,
            "y",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": n}]}),
        );
        assert!(
            !ok && out.contains("provided port is already allocated"),
            "{out}"
        );
    }
}
