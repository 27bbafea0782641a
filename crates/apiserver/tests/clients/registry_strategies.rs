//! Per-kind registry behaviour that clients can tell apart, against the built binary (issue
//! 29 items 5, 6, 8 and 14): field selectors read unset fields as upstream's
//! `*ToSelectableFields` do (kubectl, curl, a watch), DELETE answers a Status or the object
//! as upstream's `ReturnDeletedObject` says (kube-rs's `Either`, curl), `metadata.generation`
//! only where the kind's strategy keeps one, and a pod's `/status` keeps label changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::{PATIENCE, Server, run_ok};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// `curl -s -X METHOD URL [-d BODY]` with a JSON (or merge patch) body: the status code and
/// the body as JSON (`Null` when it is not JSON).
fn curl(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "--max-time",
        "60",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ]);
    if let Some(b) = body {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        c.args(["-H", &format!("Content-Type: {ct}"), "-d", &b.to_string()]);
    }
    c.arg(format!("{}{path}", server.url));
    let out = run_ok(&mut c);
    let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
    (
        code.trim().parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn ok(server: &Server, method: &str, path: &str, body: Option<Value>) -> Value {
    let (code, v) = curl(server, method, path, body);
    assert!((200..300).contains(&code), "{method} {path}: {code} {v}");
    v
}

/// A server with the namespace `e2e`.
fn server_with_e2e() -> Server {
    let server = Server::start(&[]);
    ok(
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"e2e"}})),
    );
    server
}

fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    n.sort();
    n
}

/// Before: `spec.unschedulable=false` matched no node that left the field unset (every
/// schedulable node a kubelet registers), though upstream reads it with
/// `strconv.FormatBool`. Now an unset field reads as its upstream value — in lists from the
/// watch cache and from storage, and in a watch's old/new transitions.
#[test]
#[ignore = "needs kubectl and curl"]
fn kubectl_selects_schedulable_nodes_that_leave_unschedulable_unset() {
    common::require("kubectl");
    common::require("curl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    ok(
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata":{"name":"free"}})),
    );
    ok(
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata":{"name":"cordoned"},"spec":{"unschedulable":true}})),
    );
    let free = run_ok(k().args([
        "get",
        "nodes",
        "--field-selector",
        "spec.unschedulable=false",
        "-o",
        "name",
    ]));
    assert_eq!(free.trim(), "node/free");
    let not_cordoned = run_ok(k().args([
        "get",
        "nodes",
        "--field-selector",
        "spec.unschedulable!=true",
        "-o",
        "name",
    ]));
    assert_eq!(not_cordoned.trim(), "node/free");
    let cordoned = run_ok(k().args([
        "get",
        "nodes",
        "--field-selector",
        "spec.unschedulable==true",
        "-o",
        "name",
    ]));
    assert_eq!(cordoned.trim(), "node/cordoned");
    // From storage (resourceVersion unset on a consistent list goes past the cache too).
    let l = ok(
        &server,
        "GET",
        "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse&resourceVersion=0",
        None,
    );
    assert_eq!(names(&l), ["free"]);
    let l = ok(
        &server,
        "GET",
        "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse&limit=1",
        None,
    );
    assert_eq!(names(&l), ["free"]);

    // A watch sees a node leave the selection when cordoned and come back when the field
    // is removed again.
    let rv = l["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut events = common::WatchEvents::new(
        common::open_stream(
            &server.addr,
            &format!(
                "/api/v1/nodes?watch=true&fieldSelector=spec.unschedulable%3Dfalse&resourceVersion={rv}"
            ),
        )
        .0,
    );
    ok(
        &server,
        "PATCH",
        "/api/v1/nodes/free",
        Some(json!({"spec":{"unschedulable":true}})),
    );
    ok(
        &server,
        "PATCH",
        "/api/v1/nodes/free",
        Some(json!({"spec":{"unschedulable":null}})),
    );
    ok(
        &server,
        "PATCH",
        "/api/v1/nodes/cordoned",
        Some(json!({"spec":{"unschedulable":false}})),
    );
    let seen: Vec<(String, String)> = (0..3)
        .map(|_| {
            let e = events.next().expect("a watch event in time");
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("DELETED".to_owned(), "free".to_owned()),
            ("ADDED".to_owned(), "free".to_owned()),
            ("ADDED".to_owned(), "cordoned".to_owned()),
        ]
    );
}

/// The other defaulted fields of the audit: a pod's `spec.hostNetwork` (`FormatBool`), its
/// `spec.restartPolicy` and `spec.schedulerName`, a secret's `type`, a service's `spec.type`
/// and a namespace's `status.phase` read as the value upstream's defaulting would have
/// written when the stored object lacks it (here: written by a PUT, which does not default).
#[test]
#[ignore = "needs curl"]
fn unset_selectable_fields_read_as_upstreams_defaults() {
    common::require("curl");
    let server = server_with_e2e();
    let pod = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/pods",
        Some(json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}})),
    );
    // A PUT without the defaulted fields (but the service account, which only a create
    // defaults; a pod update may not change it): defaulted again, as upstream decodes it,
    // and `spec.hostNetwork`, which no default spells, stays unset.
    let mut bare = pod.clone();
    bare["spec"] = json!({"containers":[{"name":"c","image":"i"}],"serviceAccountName":"default"});
    ok(&server, "PUT", "/api/v1/namespaces/e2e/pods/p", Some(bare));
    for sel in [
        "spec.hostNetwork%3Dfalse",
        "spec.restartPolicy%3DAlways",
        "spec.schedulerName%3Ddefault-scheduler",
    ] {
        let l = ok(
            &server,
            "GET",
            &format!("/api/v1/namespaces/e2e/pods?fieldSelector={sel}"),
            None,
        );
        assert_eq!(names(&l), ["p"], "{sel}");
    }
    let l = ok(
        &server,
        "GET",
        "/api/v1/pods?fieldSelector=spec.hostNetwork%3Dtrue",
        None,
    );
    assert_eq!(names(&l), Vec::<String>::new());

    let secret = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/secrets",
        Some(json!({"metadata":{"name":"s"}})),
    );
    let mut untyped = secret.clone();
    untyped.as_object_mut().unwrap().remove("type");
    ok(
        &server,
        "PUT",
        "/api/v1/namespaces/e2e/secrets/s",
        Some(untyped),
    );
    let l = ok(
        &server,
        "GET",
        "/api/v1/namespaces/e2e/secrets?fieldSelector=type%3DOpaque",
        None,
    );
    assert_eq!(names(&l), ["s"]);

    ok(
        &server,
        "PUT",
        "/api/v1/namespaces/e2e/services/svc",
        Some(json!({"metadata":{"name":"svc"},"spec":{"ports":[{"port":80}]}})),
    );
    let l = ok(
        &server,
        "GET",
        "/api/v1/namespaces/e2e/services?fieldSelector=spec.type%3DClusterIP",
        None,
    );
    assert_eq!(names(&l), ["svc"]);

    let l = ok(
        &server,
        "GET",
        "/api/v1/namespaces?fieldSelector=status.phase%3DActive,metadata.name%3De2e",
        None,
    );
    assert_eq!(names(&l), ["e2e"]);
}

async fn client(server: &Server) -> Client {
    Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap()
}

/// Before: every DELETE answered with the object. Now, as upstream's generic registry, a
/// DELETE that removes the object answers `Status{Success, details{name, group, kind:
/// plural, uid}}` unless the resource returns deleted objects (pods, services, service
/// accounts, namespaces); an object only marked for deletion is returned either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_delete_gets_a_status_or_the_object_as_upstream_answers() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":"e2e"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pp = PostParams::default();

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "e2e");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":"c"}})).unwrap();
    let created = cms.create(&pp, &cm).await.unwrap();
    // A dry run answers as the real DELETE would, and leaves the object.
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let s = cms.delete("c", &dry).await.unwrap().right();
    let s = s.expect("a dry-run DELETE of a configmap answers a Status, not the object");
    assert_eq!(s.details.unwrap().kind, "configmaps");
    assert!(cms.get_opt("c").await.unwrap().is_some());
    let s = cms
        .delete("c", &DeleteParams::default())
        .await
        .unwrap()
        .right();
    let s = s.expect("a DELETE of a configmap answers a Status (Right), not the object (Left)");
    assert_eq!(s.status, Some(kube::core::response::StatusSummary::Success));
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("c", "", "configmaps")
    );
    assert_eq!(Some(d.uid), created.metadata.uid);

    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "e2e");
    let d: Deployment = serde_json::from_value(json!({"metadata":{"name":"d"},"spec":{
        "selector":{"matchLabels":{"app":"d"}},
        "template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}))
    .unwrap();
    deploys.create(&pp, &d).await.unwrap();
    let s = deploys
        .delete("d", &DeleteParams::default())
        .await
        .unwrap()
        .right();
    let d = s
        .expect("a DELETE of a deployment answers a Status")
        .details
        .unwrap();
    assert_eq!((d.group.as_str(), d.kind.as_str()), ("apps", "deployments"));

    // A finalizer keeps it: the marked object is the answer.
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata":{"name":"held","finalizers":["e2e.io/hold"]}}))
            .unwrap();
    cms.create(&pp, &held).await.unwrap();
    let o = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left();
    let o = o.expect("a DELETE that only marks answers the object");
    assert!(o.metadata.deletion_timestamp.is_some());

    // Pods return the deleted object (an unscheduled pod goes at once).
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    let p: Pod = serde_json::from_value(
        json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}),
    )
    .unwrap();
    pods.create(&pp, &p).await.unwrap();
    let o = pods
        .delete("p", &DeleteParams::default())
        .await
        .unwrap()
        .left();
    assert_eq!(
        o.expect("a DELETE of a pod answers the pod (Left)")
            .name_any(),
        "p"
    );
    assert!(pods.get_opt("p").await.unwrap().is_none());
}

/// The wire form, byte-level facts clients read: no `code`, `details.kind` the plural, and
/// preconditions still checked before the Status is given.
#[test]
#[ignore = "needs curl"]
fn curl_delete_status_has_upstreams_shape_and_checks_preconditions() {
    common::require("curl");
    let server = server_with_e2e();
    let lease = ok(
        &server,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/e2e/leases",
        Some(json!({"metadata":{"name":"l"}})),
    );
    let uid = lease["metadata"]["uid"].as_str().unwrap().to_owned();
    let (code, v) = curl(
        &server,
        "DELETE",
        "/apis/coordination.k8s.io/v1/namespaces/e2e/leases/l",
        Some(json!({"preconditions":{"uid":"not-it"}})),
    );
    assert_eq!(code, 409, "{v}");
    let (code, v) = curl(
        &server,
        "DELETE",
        "/apis/coordination.k8s.io/v1/namespaces/e2e/leases/l",
        Some(
            json!({"preconditions":{"uid": uid, "resourceVersion": lease["metadata"]["resourceVersion"]}}),
        ),
    );
    assert_eq!(code, 200);
    assert_eq!(
        v,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",
            "details":{"name":"l","group":"coordination.k8s.io","kind":"leases","uid":uid}})
    );
    // A service returns the object.
    ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/services",
        Some(json!({"metadata":{"name":"svc"},"spec":{"ports":[{"port":80}]}})),
    );
    let v = ok(
        &server,
        "DELETE",
        "/api/v1/namespaces/e2e/services/svc",
        None,
    );
    assert_eq!(v["kind"], "Service", "{v}");
}

/// Before: every kind got `generation: 1` and bumps. Now only kinds whose upstream strategy
/// keeps one: pods (spec changes) and deployments (spec or annotation changes); config maps,
/// secrets, services, namespaces … have none.
#[test]
#[ignore = "needs curl"]
fn generation_only_where_upstreams_strategy_keeps_one() {
    common::require("curl");
    let server = Server::start(&[]);
    let ns = ok(
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"e2e"}})),
    );
    assert_eq!(ns["metadata"].get("generation"), None, "{ns}");
    let cm = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/configmaps",
        Some(json!({"metadata":{"name":"c","generation":7},"data":{"a":"1"}})),
    );
    assert_eq!(cm["metadata"].get("generation"), None, "{cm}");
    let cm = ok(
        &server,
        "PATCH",
        "/api/v1/namespaces/e2e/configmaps/c",
        Some(json!({"data":{"a":"2"}})),
    );
    assert_eq!(cm["metadata"].get("generation"), None, "{cm}");
    let secret = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/secrets",
        Some(json!({"metadata":{"name":"s"}})),
    );
    assert_eq!(secret["metadata"].get("generation"), None, "{secret}");

    let d = ok(
        &server,
        "POST",
        "/apis/apps/v1/namespaces/e2e/deployments",
        Some(json!({"metadata":{"name":"d"},"spec":{"replicas":1,
            "selector":{"matchLabels":{"app":"d"}},
            "template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}})),
    );
    assert_eq!(d["metadata"]["generation"], 1);
    let d = ok(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/e2e/deployments/d",
        Some(json!({"metadata":{"annotations":{"a":"b"}}})),
    );
    assert_eq!(
        d["metadata"]["generation"], 2,
        "annotations bump a deployment's"
    );
    let d = ok(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/e2e/deployments/d",
        Some(json!({"metadata":{"labels":{"a":"b"}}})),
    );
    assert_eq!(d["metadata"]["generation"], 2, "labels do not");

    let p = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/pods",
        Some(json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}})),
    );
    assert_eq!(p["metadata"]["generation"], 1);
    let p = ok(
        &server,
        "PATCH",
        "/api/v1/namespaces/e2e/pods/p",
        Some(json!({"metadata":{"annotations":{"a":"b"}}})),
    );
    assert_eq!(
        p["metadata"]["generation"], 1,
        "annotations do not bump a pod's"
    );
    let p = ok(
        &server,
        "PATCH",
        "/api/v1/namespaces/e2e/pods/p",
        Some(json!({"spec":{"activeDeadlineSeconds":30}})),
    );
    assert_eq!(p["metadata"]["generation"], 2, "the spec does");
}

/// Before: a pod's `/status` write dropped its label and annotation changes. Upstream's
/// `podStatusStrategy` resets only the spec, `deletionTimestamp` and `ownerReferences`.
#[test]
#[ignore = "needs curl"]
fn a_pod_status_write_keeps_its_label_changes_but_not_owner_references() {
    common::require("curl");
    let server = server_with_e2e();
    let p = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/pods",
        Some(json!({"metadata":{"name":"p","labels":{"app":"a"}},
            "spec":{"containers":[{"name":"c","image":"i"}]}})),
    );
    let mut w = p.clone();
    w["metadata"]["labels"] = json!({"app": "b", "ready": "yes"});
    w["metadata"]["annotations"] = json!({"note": "n"});
    w["metadata"]["ownerReferences"] = json!([{"apiVersion":"v1","kind":"ConfigMap",
        "name":"o","uid":"u-1"}]);
    w["spec"]["activeDeadlineSeconds"] = json!(5);
    w["status"] = json!({"phase": "Running"});
    let got = ok(
        &server,
        "PUT",
        "/api/v1/namespaces/e2e/pods/p/status",
        Some(w),
    );
    assert_eq!(got["status"]["phase"], "Running");
    assert_eq!(
        got["metadata"]["labels"],
        json!({"app": "b", "ready": "yes"})
    );
    assert_eq!(got["metadata"]["annotations"], json!({"note": "n"}));
    assert_eq!(got["metadata"].get("ownerReferences"), None, "{got}");
    assert_eq!(got["spec"].get("activeDeadlineSeconds"), None, "{got}");
    assert_eq!(got["metadata"]["generation"], 1);
    // A strategic merge patch of /status, as kubelets send, too.
    let (code, got) = {
        let out = run_ok(Command::new("curl").args([
            "-s",
            "--max-time",
            &PATIENCE.as_secs().to_string(),
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/strategic-merge-patch+json",
            "-d",
            r#"{"metadata":{"labels":{"patched":"1"}},"status":{"phase":"Succeeded"}}"#,
            "-w",
            "\n%{http_code}",
            &format!("{}/api/v1/namespaces/e2e/pods/p/status", server.url),
        ]));
        let (b, c) = out.trim_end().rsplit_once('\n').unwrap();
        (c.to_owned(), serde_json::from_str::<Value>(b).unwrap())
    };
    assert_eq!(code, "200", "{got}");
    assert_eq!(got["metadata"]["labels"]["patched"], "1");
    assert_eq!(got["status"]["phase"], "Succeeded");
    // Deployments' status strategy keeps the stored labels, not the stored annotations.
    let d = ok(
        &server,
        "POST",
        "/apis/apps/v1/namespaces/e2e/deployments",
        Some(json!({"metadata":{"name":"d","labels":{"app":"d"}},"spec":{
            "selector":{"matchLabels":{"app":"d"}},
            "template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}})),
    );
    let mut w = d.clone();
    w["metadata"]["labels"] = json!({"app": "changed"});
    w["metadata"]["annotations"] = json!({"note": "n"});
    w["status"] = json!({"replicas": 0});
    let got = ok(
        &server,
        "PUT",
        "/apis/apps/v1/namespaces/e2e/deployments/d/status",
        Some(w),
    );
    assert_eq!(got["metadata"]["labels"], json!({"app": "d"}));
    assert_eq!(got["metadata"]["annotations"], json!({"note": "n"}));
    // Services' status strategy resets only the spec.
    let svc = ok(
        &server,
        "POST",
        "/api/v1/namespaces/e2e/services",
        Some(json!({"metadata":{"name":"svc"},"spec":{"ports":[{"port":80}]}})),
    );
    let mut w = svc.clone();
    w["metadata"]["labels"] = json!({"app": "svc"});
    w["spec"]["type"] = json!("NodePort");
    let got = ok(
        &server,
        "PUT",
        "/api/v1/namespaces/e2e/services/svc/status",
        Some(w),
    );
    assert_eq!(got["metadata"]["labels"], json!({"app": "svc"}));
    assert_eq!(got["spec"]["type"], svc["spec"]["type"]);
}

/// Before: `source=kubelet`, the events field selector kubectl users write, was 400 (`field
/// label not supported`). Upstream's `source` reads `source.component`, else
/// `reportingComponent`.
#[test]
#[ignore = "needs kubectl and curl"]
fn kubectl_selects_events_by_source() {
    common::require("kubectl");
    common::require("curl");
    let server = server_with_e2e();
    let dir = tempfile::tempdir().unwrap();
    let event = |name: &str, extra: Value| {
        let mut e = json!({"metadata":{"name":name},"involvedObject":{"kind":"Pod","name":"p","namespace":"e2e"},
            "reason":"R","message":"m","type":"Normal"});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        ok(&server, "POST", "/api/v1/namespaces/e2e/events", Some(e));
    };
    event("old-style", json!({"source":{"component":"kubelet"}}));
    event(
        "new-style",
        json!({"source":{"component":""},"reportingComponent":"kubelet"}),
    );
    event(
        "other",
        json!({"source":{"component":"scheduler"},"reportingComponent":"kubelet"}),
    );
    let got = run_ok(server.kubectl(dir.path()).args([
        "get",
        "events",
        "-n",
        "e2e",
        "--field-selector",
        "source=kubelet",
        "-o",
        "name",
    ]));
    let mut got: Vec<&str> = got.lines().collect();
    got.sort_unstable();
    assert_eq!(got, ["event/new-style", "event/old-style"]);
}

/// Namespaces' and nodes' status strategies reset only the spec (upstream's
/// `namespaceStatusStrategy` and `nodeStatusStrategy`), so a `/status` write keeps its label,
/// annotation and finalizer changes (red-team finding F3 of issue 29: they were dropped);
/// a namespace's `kubernetes.io/metadata.name` label and `spec.finalizers` still cannot be
/// changed that way.
#[test]
#[ignore = "needs curl"]
fn namespace_and_node_status_writes_keep_metadata_changes_but_not_the_spec() {
    common::require("curl");
    let server = Server::start(&[]);
    let ns = ok(
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"st"}})),
    );
    let mut w = ns.clone();
    w["metadata"]["labels"] = json!({"team": "a", "kubernetes.io/metadata.name": "other"});
    w["metadata"]["annotations"] = json!({"note": "n"});
    w["spec"] = json!({"finalizers": []});
    w["status"] = json!({"phase": "Active"});
    let got = ok(&server, "PUT", "/api/v1/namespaces/st/status", Some(w));
    assert_eq!(
        got["metadata"]["labels"],
        json!({"team": "a", "kubernetes.io/metadata.name": "st"}),
        "{got}"
    );
    assert_eq!(got["metadata"]["annotations"], json!({"note": "n"}));
    assert_eq!(got["spec"]["finalizers"], json!(["kubernetes"]), "{got}");

    let node = ok(
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata":{"name":"n1","labels":{"zone":"a"}}})),
    );
    let mut w = node.clone();
    w["metadata"]["labels"] = json!({"zone": "b"});
    w["spec"] = json!({"unschedulable": true});
    w["status"] = json!({"phase": "Running"});
    let got = ok(&server, "PUT", "/api/v1/nodes/n1/status", Some(w));
    assert_eq!(got["metadata"]["labels"], json!({"zone": "b"}), "{got}");
    assert_eq!(got["spec"].get("unschedulable"), None, "{got}");
    assert_eq!(got["status"]["phase"], "Running");
}
