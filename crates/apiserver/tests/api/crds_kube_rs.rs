//! Issue 28 item 1 with kube-rs: a `#[derive(CustomResource)]` type's CRD created through
//! the API (`Api<CustomResourceDefinition>`), waited for until `Established`, then CRUD, a
//! status write and a watch of the custom resource; deleting the CRD ends the watch and the
//! resource (404). Also the 422 causes of an invalid CRD, as raw HTTP sees them, and
//! discovery (legacy and aggregated) before and after.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The custom resource of the test.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "kube.example.com", version = "v1", kind = "Gizmo", namespaced)]
#[kube(status = "GizmoStatus", shortname = "gz")]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
pub struct GizmoSpec {
    size: i64,
}

/// Its status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct GizmoStatus {
    ready: bool,
}

async fn client(server: &Server) -> Client {
    Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap()
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let crd = crds.get(name).await.unwrap();
        let done = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never Established");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_derived_crd_is_created_through_the_api_and_its_resource_served() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Before: 404 (the CRD kind was not served).
    let crd = crds
        .create(&PostParams::default(), &Gizmo::crd())
        .await
        .unwrap();
    assert_eq!(crd.name_any(), "gizmos.kube.example.com");
    assert_eq!(crd.metadata.generation, Some(1));
    established(&crds, "gizmos.kube.example.com").await;
    let crd = crds.get("gizmos.kube.example.com").await.unwrap();
    let status = crd.status.unwrap();
    assert_eq!(status.stored_versions, Some(vec!["v1".to_owned()]));
    assert_eq!(
        status.accepted_names.map(|n| n.kind),
        Some("Gizmo".to_owned())
    );
    // Recorded as the server's own writes.
    let managers: Vec<String> = crd
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == "kube-apiserver"),
        "{managers:?}"
    );

    // Discovery lists it, legacy and aggregated.
    let legacy = http(&server.addr, "GET", "/apis/kube.example.com/v1", &[], b"").json();
    assert_eq!(legacy["resources"][0]["name"], "gizmos");
    let aggregated = http(
        &server.addr,
        "GET",
        "/apis",
        &[(
            "Accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
        b"",
    )
    .json();
    assert!(
        aggregated["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["metadata"]["name"] == "kube.example.com"),
        "{aggregated}"
    );

    let gizmos: Api<Gizmo> = Api::namespaced(client.clone(), "default");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watched = gizmos.clone();
    let watch = tokio::spawn(async move {
        let mut events = watcher(watched, watcher::Config::default()).boxed();
        while let Some(e) = events.next().await {
            if tx.send(e.map_err(|e| e.to_string())).is_err() {
                break;
            }
        }
    });
    let g = gizmos
        .create(
            &PostParams::default(),
            &Gizmo::new("g1", GizmoSpec { size: 3 }),
        )
        .await
        .unwrap();
    assert_eq!(g.spec.size, 3);
    assert_eq!(g.metadata.generation, Some(1));
    // Server-side apply, then the status subresource.
    let applied = gizmos
        .patch(
            "g1",
            &PatchParams::apply("test").force(),
            &Patch::Apply(
                json!({"apiVersion": "kube.example.com/v1", "kind": "Gizmo", "spec": {"size": 5}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.spec.size, 5);
    assert_eq!(applied.metadata.generation, Some(2));
    let with_status = gizmos
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert!(with_status.status.unwrap().ready);
    let listed = gizmos.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    // The watch saw the object with its size and status.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let e = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Event::Apply(g) = e
            && g.status.as_ref().is_some_and(|s| s.ready)
        {
            assert_eq!(g.spec.size, 5);
            break;
        }
        assert!(Instant::now() < deadline);
    }

    // Deleting the CRD deletes the gizmo and then the resource.
    crds.delete("gizmos.kube.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        match crds.get_opt("gizmos.kube.example.com").await.unwrap() {
            None => break,
            Some(_) => {
                assert!(Instant::now() < deadline, "the CRD never went");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let r = http(
        &server.addr,
        "GET",
        "/apis/kube.example.com/v1/namespaces/default/gizmos",
        &[],
        b"",
    );
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    let r = http(&server.addr, "GET", "/apis/kube.example.com/v1", &[], b"");
    assert_eq!(r.status, 404);
    watch.abort();
}

#[test]
fn an_invalid_crd_is_a_422_with_upstreams_causes() {
    let server = Server::start(&[]);
    let body = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "other.example"},
        "spec": {
            "group": "example",
            "scope": "Galaxy",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": false}]
        }
    });
    let r = http(
        &server.addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    let status = r.json();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "CustomResourceDefinition");
    assert_eq!(status["details"]["group"], "apiextensions.k8s.io");
    let causes: Vec<(String, String)> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_owned(),
                c["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for want in [
        ("metadata.name", "FieldValueInvalid"),
        ("spec.group", "FieldValueInvalid"),
        ("spec.scope", "FieldValueNotSupported"),
        ("spec.versions", "FieldValueInvalid"),
    ] {
        assert!(
            causes.iter().any(|(f, r)| f == want.0 && r == want.1),
            "{want:?} not in {causes:?}"
        );
    }
}

/// A server restarted over its data serves the custom resources of its stored CRDs from the
/// moment it announces itself (before: 404 until the CRD controller had caught up with the
/// CRDs it found; with many, the announcement came first).
#[test]
fn a_restarted_server_serves_its_stored_crds_when_it_announces_itself() {
    const CRDS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let json = [("Content-Type", "application/json")];
    let crd = |i: usize| {
        let mut c = serde_json::to_value(Gizmo::crd()).unwrap();
        c["metadata"]["name"] = json!(format!("gizmos.g{i}.example.com"));
        c["spec"]["group"] = json!(format!("g{i}.example.com"));
        c.to_string()
    };
    let last = CRDS - 1;
    let path = format!("/apis/g{last}.example.com/v1/namespaces/default/gizmos");
    let gizmo = json!({"apiVersion": format!("g{last}.example.com/v1"), "kind": "Gizmo",
                       "metadata": {"name": "g1"}, "spec": {"size": 1}});
    {
        let server = Server::start(&["--data-dir", data]);
        for i in 0..CRDS {
            let r = http(
                &server.addr,
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &json,
                crd(i).as_bytes(),
            );
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let r = http(
                &server.addr,
                "POST",
                &path,
                &json,
                gizmo.to_string().as_bytes(),
            );
            if r.status == 201 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}",
                String::from_utf8_lossy(&r.body)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(server.terminate());
    }
    let server = Server::start(&["--data-dir", data]);
    let r = http(&server.addr, "GET", &format!("{path}/g1"), &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// A server stopped while a CRD's cleanup waited for a custom resource's finalizer serves
/// the terminating CRD's resource again when restarted, so the finalizer can be removed and
/// the cleanup finishes (before: the resource was 404 after the restart and the cleanup
/// retried forever on a fresh cache that never got to list, leaving the objects stored).
#[test]
fn a_crd_deleting_when_the_server_stopped_finishes_its_cleanup_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let json = [("Content-Type", "application/json")];
    let merge = [("Content-Type", "application/merge-patch+json")];
    let crd_path =
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.term.example.com";
    let things = "/apis/term.example.com/v1/namespaces/default/things";
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.term.example.com"},
        "spec": {
            "group": "term.example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    let thing = json!({"apiVersion": "term.example.com/v1", "kind": "Thing",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    let wait = |what: &str, mut done: Box<dyn FnMut() -> Result<(), String> + '_>| {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match done() {
                Ok(()) => return,
                Err(e) => assert!(Instant::now() < deadline, "timed out: {what}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    {
        let server = Server::start(&["--data-dir", data]);
        let r = http(
            &server.addr,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &json,
            crd.to_string().as_bytes(),
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        wait(
            "the custom resource created",
            Box::new(|| {
                let r = http(
                    &server.addr,
                    "POST",
                    things,
                    &json,
                    thing.to_string().as_bytes(),
                );
                (r.status == 201)
                    .then_some(())
                    .ok_or_else(|| String::from_utf8_lossy(&r.body).into())
            }),
        );
        let r = http(&server.addr, "DELETE", crd_path, &[], b"");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        wait(
            "the custom resource marked deleted by the CRD's cleanup",
            Box::new(|| {
                let r = http(&server.addr, "GET", &format!("{things}/held"), &[], b"");
                let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
                v.pointer("/metadata/deletionTimestamp")
                    .is_some()
                    .then_some(())
                    .ok_or_else(|| v.to_string())
            }),
        );
        assert!(server.terminate());
    }
    let server = Server::start(&["--data-dir", data]);
    wait(
        "the held custom resource served after the restart, its finalizer removed",
        Box::new(|| {
            let r = http(
                &server.addr,
                "PATCH",
                &format!("{things}/held"),
                &merge,
                br#"{"metadata":{"finalizers":null}}"#,
            );
            (r.status == 200)
                .then_some(())
                .ok_or_else(|| format!("{} {}", r.status, String::from_utf8_lossy(&r.body)))
        }),
    );
    wait(
        "the CRD gone",
        Box::new(|| {
            let r = http(&server.addr, "GET", crd_path, &[], b"");
            (r.status == 404)
                .then_some(())
                .ok_or_else(|| String::from_utf8_lossy(&r.body).into())
        }),
    );
    let r = http(&server.addr, "GET", &format!("{things}/held"), &[], b"");
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
}

/// A CRD in a protected community group (`*.k8s.io`, `*.kubernetes.io`) needs the
/// `api-approved.kubernetes.io` annotation, as upstream's validation requires (before: any
/// insider who may create CRDs added kinds to `rbac.authorization.k8s.io`, or a namespaced
/// `tokenreviews` beside the built-in review in `authentication.k8s.io`'s discovery).
#[test]
fn a_crd_in_a_protected_group_needs_the_api_approval_annotation() {
    let server = Server::start(&[]);
    let json = [("Content-Type", "application/json")];
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let crd = |group: &str, annotation: Option<&str>| {
        let mut c = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("tokenreviews.{group}")},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "tokenreviews", "kind": "TokenReview"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        });
        if let Some(a) = annotation {
            c["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": a});
        }
        c.to_string()
    };
    for (annotation, cause) in [
        (None, "FieldValueRequired"),
        (Some("looks fine to me"), "FieldValueInvalid"),
    ] {
        let r = http(
            &server.addr,
            "POST",
            crds,
            &json,
            crd("authentication.k8s.io", annotation).as_bytes(),
        );
        assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
        let status: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let causes = &status["details"]["causes"];
        assert!(
            causes.as_array().unwrap().iter().any(|c| c["field"]
                == "metadata.annotations[api-approved.kubernetes.io]"
                && c["reason"] == cause),
            "{status}"
        );
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("protected groups must have approval annotation"),
            "{status}"
        );
    }
    let r = http(
        &server.addr,
        "GET",
        "/apis/authentication.k8s.io/v1",
        &[],
        b"",
    );
    assert!(
        !String::from_utf8_lossy(&r.body).contains("\"namespaced\":true"),
        "a refused CRD was served: {}",
        String::from_utf8_lossy(&r.body)
    );
    for (group, annotation) in [
        ("x.k8s.io", Some("unapproved, testing only")),
        (
            "y.k8s.io",
            Some("https://github.com/kubernetes/enhancements/pull/1111"),
        ),
        ("example.com", None),
    ] {
        let r = http(
            &server.addr,
            "POST",
            crds,
            &json,
            crd(group, annotation).as_bytes(),
        );
        assert_eq!(
            r.status,
            201,
            "{group}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// A CRD naming a review resource the server answers outside its kind set (here
/// `tokenreviews.authentication.k8s.io`, approved with an `unapproved` reason) is not
/// served: its names conflict, as with a served built-in kind (before: `Established`, and a
/// namespaced, storable TokenReview in the group's discovery).
#[test]
fn a_crd_naming_a_review_resource_is_not_accepted() {
    let server = Server::start(&[]);
    let json = [("Content-Type", "application/json")];
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "tokenreviews.authentication.k8s.io",
            "annotations": {"api-approved.kubernetes.io": "unapproved, shadowing"}},
        "spec": {
            "group": "authentication.k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "tokenreviews", "kind": "TokenReview"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tokenreviews.authentication.k8s.io";
    let r = http(
        &server.addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &json,
        crd.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    let conditions = loop {
        let r = http(&server.addr, "GET", path, &[], b"");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let c = v.pointer("/status/conditions").cloned().unwrap_or_default();
        if c.as_array().is_some_and(|c| !c.is_empty()) {
            break c;
        }
        assert!(Instant::now() < deadline, "no conditions: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let cond = |t: &str| {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(cond("NamesAccepted")["status"], "False", "{conditions}");
    assert_eq!(
        cond("NamesAccepted")["reason"],
        "PluralConflict",
        "{conditions}"
    );
    assert_eq!(cond("Established")["status"], "False", "{conditions}");
    let r = http(
        &server.addr,
        "GET",
        "/apis/authentication.k8s.io/v1",
        &[],
        b"",
    );
    assert!(
        !String::from_utf8_lossy(&r.body).contains("\"namespaced\":true"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = http(
        &server.addr,
        "POST",
        "/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews",
        &json,
        br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","metadata":{"name":"t"},"spec":{"token":"x"}}"#,
    );
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
}

/// A CRD's versions are listed in upstream's priority, so clients (kubectl) use the
/// preferred one: `v2` over `v1` over `v1beta1` (before: by name, `v1` preferred).
#[test]
fn a_crds_versions_are_discovered_in_upstreams_priority() {
    let server = Server::start(&[]);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.prio.example.com"},
        "spec": {
            "group": "prio.example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false},
                {"name": "v1", "served": true, "storage": true},
                {"name": "v2", "served": true, "storage": false}
            ]
        }
    });
    let r = http(
        &server.addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &[("Content-Type", "application/json")],
        crd.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    let group = loop {
        let r = http(&server.addr, "GET", "/apis/prio.example.com", &[], b"");
        if r.status == 200 {
            let g = r.json();
            if g["versions"].as_array().map(Vec::len) == Some(3) {
                break g;
            }
        }
        assert!(Instant::now() < deadline, "never served");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v2", "v1", "v1beta1"]);
}

/// A custom resource of a terminating CRD cannot be created: upstream's CRD handler answers
/// a create (POST) with 405 `MethodNotAllowed` "create not allowed while custom resource
/// definition is terminating" while the CRD's `Terminating` condition is true; the objects
/// still there are read and written as before (here, the finalizer holding the CRD is
/// removed with a patch), and the CRD goes once they are gone. Before, the create was
/// stored (201) and deleted again by the CRD controller.
#[test]
fn a_create_while_the_crd_is_terminating_is_405_as_upstream() {
    const JSON: (&str, &str) = ("Content-Type", "application/json");
    const CRD: &str =
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/holds.term.example.com";
    const HOLDS: &str = "/apis/term.example.com/v1/namespaces/default/holds";
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "holds.term.example.com"},
        "spec": {
            "group": "term.example.com",
            "scope": "Namespaced",
            "names": {"plural": "holds", "singular": "hold", "kind": "Hold"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    let r = http(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &[JSON],
        crd.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let condition = |kind: &str| {
        let crd = http(addr, "GET", CRD, &[], b"").json();
        crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind)
            .cloned()
    };
    let deadline = Instant::now() + PATIENCE;
    while !condition("Established").is_some_and(|c| c["status"] == "True") {
        assert!(Instant::now() < deadline, "never Established");
        std::thread::sleep(Duration::from_millis(20));
    }
    let hold = |name: &str| {
        json!({"apiVersion": "term.example.com/v1", "kind": "Hold",
            "metadata": {"name": name, "finalizers": ["term.example.com/hold"]}})
        .to_string()
    };
    let r = http(addr, "POST", HOLDS, &[JSON], hold("held").as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    let r = http(addr, "DELETE", CRD, &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The controller has seen the deletion once it writes its own reason.
    let deadline = Instant::now() + PATIENCE;
    while !condition("Terminating").is_some_and(|c| c["reason"] == "InstanceDeletionInProgress") {
        assert!(
            Instant::now() < deadline,
            "never InstanceDeletionInProgress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = http(addr, "POST", HOLDS, &[JSON], hold("late").as_bytes());
    assert_eq!(r.status, 405, "{}", String::from_utf8_lossy(&r.body));
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "MethodNotAllowed");
    assert_eq!(
        status["message"],
        "create not allowed while custom resource definition is terminating"
    );
    assert_eq!(status["details"]["group"], "term.example.com");
    assert_eq!(status["details"]["kind"], "holds");
    // Nothing was stored.
    let r = http(addr, "GET", &format!("{HOLDS}/late"), &[], b"");
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    // A server-side apply that would create is a create too (upstream kubernetes#121490):
    // refused the same way, and nothing is stored to outlive the CRD.
    let r = http(
        addr,
        "PATCH",
        &format!("{HOLDS}/applied?fieldManager=t"),
        &[("Content-Type", "application/apply-patch+yaml")],
        json!({"apiVersion": "term.example.com/v1", "kind": "Hold",
            "metadata": {"name": "applied"}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(r.status, 405, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["message"],
        "create not allowed while custom resource definition is terminating"
    );
    let r = http(addr, "GET", &format!("{HOLDS}/applied"), &[], b"");
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));

    // Other writes are served: the finalizer goes, then the object, then the CRD.
    let r = http(
        addr,
        "PATCH",
        &format!("{HOLDS}/held"),
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"metadata":{"finalizers":null}}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    while http(addr, "GET", CRD, &[], b"").status != 404 {
        assert!(Instant::now() < deadline, "the CRD never went");
        std::thread::sleep(Duration::from_millis(20));
    }
}
