//! Pods' `/ephemeralcontainers` subresource through kube-rs (`Api<Pod>`'s
//! `get_ephemeral_containers`, `replace_ephemeral_containers`, `patch_ephemeral_containers`),
//! as kube-rs's own cluster test `can_operate_on_ephemeral_containers` drives it: a write
//! there adds ephemeral containers and changes nothing else of the pod; existing ones may not
//! be changed or removed (422 with upstream's causes); discovery lists the subresource.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};
use k8s_openapi::api::core::v1::{EphemeralContainer, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_are_added_through_their_subresource_only() {
    let server = Server::start(&[]);
    let client = Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "eph", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let got = pods.get_ephemeral_containers("eph").await.unwrap();
    assert_eq!(got.spec.unwrap().ephemeral_containers, None);

    // PUT: the body's other fields (labels, containers) are not written.
    let first: EphemeralContainer =
        serde_json::from_value(json!({"name": "debug1", "image": "busybox", "command": ["sh"]}))
            .unwrap();
    let body: Pod = serde_json::from_value(json!({
        "metadata": {"name": "eph", "labels": {"other": "y"}},
        "spec": {"containers": [], "ephemeralContainers": [first]},
    }))
    .unwrap();
    let put = pods
        .replace_ephemeral_containers("eph", &PostParams::default(), &body)
        .await
        .unwrap();
    let spec = put.spec.as_ref().unwrap();
    assert_eq!(
        spec.ephemeral_containers.as_ref().unwrap()[0].name,
        "debug1"
    );
    assert_eq!(spec.containers[0].name, "main");
    assert_eq!(put.labels().get("app").map(String::as_str), Some("x"));
    assert!(!put.labels().contains_key("other"));

    // A strategic merge patch adds by name (upstream's order: the patch's new items first,
    // then the server's own, `mergeSortedSlice`).
    let second = json!({"name": "debug2", "image": "busybox", "command": ["sh", "-c", "sleep 1"]});
    let patched = pods
        .patch_ephemeral_containers(
            "eph",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [second]}})),
        )
        .await
        .unwrap();
    let names: Vec<&str> = patched
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["debug2", "debug1"]);
    let managers: Vec<(String, String)> = patched
        .managed_fields()
        .iter()
        .map(|m| {
            (
                m.operation.clone().unwrap_or_default(),
                m.subresource.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("Update".into(), "ephemeralcontainers".into())),
        "{managers:?}"
    );

    // Existing ones may neither change nor go; a new one needs an image and no ports.
    let path = "/api/v1/namespaces/default/pods/eph/ephemeralcontainers";
    let strategic = "application/strategic-merge-patch+json";
    for (patch, content_type, cause) in [
        (
            json!({"spec": {"ephemeralContainers": [{"name": "debug1", "image": "other"}]}}),
            strategic,
            "spec.ephemeralContainers[debug1]",
        ),
        (
            json!({"spec": {"ephemeralContainers": [{"name": "d3", "ports": [{"containerPort": 1}]}]}}),
            strategic,
            // The new item comes first, as above.
            "spec.ephemeralContainers[0].image",
        ),
        (
            json!({"spec": {"ephemeralContainers": null}}),
            "application/merge-patch+json",
            "spec.ephemeralContainers",
        ),
    ] {
        let resp = http(
            &server.addr,
            "PATCH",
            path,
            &[("Content-Type", content_type)],
            patch.to_string().as_bytes(),
        );
        assert_eq!(resp.status, 422, "{}", String::from_utf8_lossy(&resp.body));
        let causes = resp.json()["details"]["causes"].clone();
        assert!(
            causes
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["field"] == cause),
            "{patch}: {causes}"
        );
    }

    // The main resource is untouched by all this, and discovery names the subresource.
    let resp = http(&server.addr, "GET", "/api/v1", &[], b"");
    let listed = resp.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "pods/ephemeralcontainers" && r["kind"] == "Pod");
    assert!(listed, "pods/ephemeralcontainers not in /api/v1");
    let resp = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/pods/eph",
        &[],
        b"",
    );
    assert_eq!(
        resp.json()["spec"]["ephemeralContainers"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

/// The managedFields entry of `manager` (its `fieldsV1`), if any.
fn fields_of(pod: &serde_json::Value, manager: &str) -> Option<serde_json::Value> {
    pod["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| m["manager"] == manager)
        .map(|m| m["fieldsV1"].clone())
}

#[test]
fn writes_of_the_pod_itself_keep_its_ephemeral_containers_and_the_subresource_owns_only_them() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let pod = "/api/v1/namespaces/default/pods/keep";
    let create = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "keep"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/pods",
        &[("Content-Type", "application/json")],
        create.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // An apply through the subresource, naming other fields too: only the ephemeral
    // containers change, and only they are owned by its manager.
    let apply = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "keep", "labels": {"x": "y"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}],
            "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}});
    let r = http(
        addr,
        "PATCH",
        &format!("{pod}/ephemeralcontainers?fieldManager=debugger"),
        &[("Content-Type", "application/apply-patch+yaml")],
        apply.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = r.json();
    assert_eq!(got["spec"]["ephemeralContainers"][0]["name"], "dbg");
    assert_eq!(got["metadata"].get("labels"), None);
    let owned = fields_of(&got, "debugger").unwrap();
    assert_eq!(
        owned,
        json!({"f:spec": {"f:ephemeralContainers": {"k:{\"name\":\"dbg\"}": {".": {}, "f:image": {}, "f:name": {}}}}}),
        "{owned}"
    );

    // Writes of the pod itself (PUT, merge patch, strategic merge, apply) cannot change
    // them: the stored list stays, and is never owned through the pod.
    let mut put = got.clone();
    put["spec"]["ephemeralContainers"] = json!([{"name": "other", "image": "x"}]);
    put["metadata"]["labels"] = json!({"put": "1"});
    let r = http(
        addr,
        "PUT",
        pod,
        &[("Content-Type", "application/json")],
        put.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["labels"]["put"], "1");
    for (ct, body) in [
        (
            "application/merge-patch+json",
            json!({"spec": {"ephemeralContainers": null}}),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"spec": {"ephemeralContainers": [{"name": "more", "image": "x"}]}}),
        ),
        (
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "keep"},
                "spec": {"ephemeralContainers": [{"name": "applied", "image": "x"}]}}),
        ),
    ] {
        let r = http(
            addr,
            "PATCH",
            &format!("{pod}?fieldManager=owner"),
            &[("Content-Type", ct)],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{ct}: {}", String::from_utf8_lossy(&r.body));
    }
    let got = http(addr, "GET", pod, &[], b"").json();
    let names: Vec<&str> = got["spec"]["ephemeralContainers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["dbg"], "{}", got["spec"]);
    assert_eq!(got["spec"]["ephemeralContainers"][0]["image"], "busybox");
    let owner = fields_of(&got, "owner").unwrap_or_default();
    assert!(
        owner["f:spec"].get("f:ephemeralContainers").is_none(),
        "{owner}"
    );
}
