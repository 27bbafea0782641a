//! Field selectors as upstream's field label conversion functions accept them (issue 28
//! item 2), through kubectl and a watch over raw HTTP: a kind without a registered function
//! (every `apps/v1` one) accepts only `metadata.name` and `metadata.namespace` and answers
//! upstream's default message; nodes refuse `metadata.namespace`; pods accept the legacy
//! `spec.host` and `status.podIPs`; a job's unset `status.succeeded` selects as `0`, from
//! storage, from the watch cache and in a watch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{PATIENCE, Server, http, run_err, run_ok};
use serde_json::{Value, json};

fn send(server: &Server, method: &str, path: &str, body: Value) -> Value {
    let ct = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let r = http(
        &server.addr,
        method,
        path,
        &[("Content-Type", ct)],
        body.to_string().as_bytes(),
    );
    assert!(
        (200..300).contains(&r.status),
        "{method} {path}: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Before: `status.replicas` on replica sets and `metadata.namespace` on nodes were accepted,
/// `spec.host` and `status.podIPs` on pods refused, and a job without `status.succeeded`
/// did not match `status.successful=0`.
#[test]
#[ignore = "needs kubectl"]
fn field_selectors_follow_upstreams_field_label_functions() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    send(
        &server,
        "POST",
        "/api/v1/namespaces",
        json!({"metadata": {"name": "sel"}}),
    );
    let container = json!([{"name": "c", "image": "nginx"}]);
    send(
        &server,
        "POST",
        "/api/v1/namespaces/sel/pods",
        json!({"metadata": {"name": "on-n1"}, "spec": {"nodeName": "n1", "containers": container}}),
    );
    send(
        &server,
        "POST",
        "/api/v1/namespaces/sel/pods",
        json!({"metadata": {"name": "unscheduled"}, "spec": {"containers": container}}),
    );
    send(
        &server,
        "POST",
        "/apis/batch/v1/namespaces/sel/jobs",
        json!({"metadata": {"name": "j1"}, "spec": {"template": {"spec":
            {"restartPolicy": "Never", "containers": container}}}}),
    );

    // No conversion function for apps/v1: upstream's default message.
    let rs = run_err(k().args([
        "get",
        "rs",
        "-n",
        "sel",
        "--field-selector",
        "status.replicas=0",
    ]));
    assert!(
        rs.contains(r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#),
        "{rs}"
    );
    run_ok(k().args([
        "get",
        "rs",
        "-A",
        "--field-selector",
        "metadata.namespace=sel",
    ]));
    // Nodes' function lists metadata.name and spec.unschedulable only.
    let nodes = run_err(k().args(["get", "nodes", "--field-selector", "metadata.namespace="]));
    assert!(
        nodes.contains("field label not supported: metadata.namespace"),
        "{nodes}"
    );
    // Jobs' own message.
    let jobs = run_err(k().args([
        "get",
        "jobs",
        "-n",
        "sel",
        "--field-selector",
        "status.succeeded=0",
    ]));
    assert!(
        jobs.contains(r#"field label "status.succeeded" not supported for batchv1.Job"#),
        "{jobs}"
    );
    // Events: `source` yes, `source.component` no.
    let events = run_err(k().args([
        "get",
        "events",
        "-n",
        "sel",
        "--field-selector",
        "source.component=x",
    ]));
    assert!(
        events.contains("field label not supported: source.component"),
        "{events}"
    );

    // Pods: the legacy spec.host is spec.nodeName; status.podIPs is accepted and reads "".
    let host = run_ok(k().args([
        "get",
        "pods",
        "-n",
        "sel",
        "--field-selector",
        "spec.host=n1",
        "-o",
        "name",
    ]));
    assert_eq!(host.trim(), "pod/on-n1");
    let ips = run_ok(k().args([
        "get",
        "pods",
        "-n",
        "sel",
        "--field-selector",
        "status.podIPs!=x",
        "-o",
        "name",
    ]));
    assert_eq!(ips.lines().count(), 2, "{ips}");

    // A job's unset count selects as 0: from the watch cache (resourceVersion=0), from
    // storage, and through kubectl.
    for rv in ["&resourceVersion=0", ""] {
        let l = http(
            &server.addr,
            "GET",
            &format!("/apis/batch/v1/namespaces/sel/jobs?fieldSelector=status.successful%3D0{rv}"),
            &[],
            b"",
        );
        assert_eq!(l.status, 200);
        assert_eq!(names(&l.json()), ["j1"], "{rv}");
    }
    let j = run_ok(k().args([
        "get",
        "jobs",
        "-n",
        "sel",
        "--field-selector",
        "status.successful=0",
        "-o",
        "name",
    ]));
    assert_eq!(j.trim(), "job.batch/j1");

    // A watch of status.successful=1 sees the job enter the selection when its status says
    // one pod succeeded (an ADDED event for a modification), and leave it again.
    let list = http(
        &server.addr,
        "GET",
        "/apis/batch/v1/namespaces/sel/jobs",
        &[],
        b"",
    )
    .json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (stream, status) = common::open_stream(
        &server.addr,
        &format!(
            "/apis/batch/v1/namespaces/sel/jobs?watch=1&fieldSelector=status.successful%3D1&resourceVersion={rv}"
        ),
    );
    assert_eq!(status, 200);
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut events = common::WatchEvents::new(stream);
    let status_path = "/apis/batch/v1/namespaces/sel/jobs/j1/status";
    send(
        &server,
        "PATCH",
        status_path,
        json!({"status": {"succeeded": 1}}),
    );
    send(
        &server,
        "PATCH",
        status_path,
        json!({"status": {"succeeded": null}}),
    );
    let seen: Vec<String> = (0..2)
        .map(|_| {
            let e = events.next().expect("a watch event in time");
            assert_eq!(e["object"]["metadata"]["name"], "j1");
            e["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(seen, ["ADDED", "DELETED"]);
}
