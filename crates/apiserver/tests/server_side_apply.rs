//! Server-side apply with real clients: `kubectl apply --server-side` with two managers
//! (conflict, `--force-conflicts`, removal of a field dropped from the applied file), the
//! upgrade of a client-side-applied object, and kube-rs `Patch::Apply`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, run_err, run_ok};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn configmap(data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: e2e\ndata:\n{data}"
    )
}

/// The object as JSON, managedFields included.
fn get_json(server: &Server, dir: &std::path::Path, what: &[&str]) -> Value {
    let out = run_ok(
        server
            .kubectl(dir)
            .args(["get", "-n", "e2e", "-o", "json", "--show-managed-fields"])
            .args(what),
    );
    serde_json::from_str(&out).unwrap()
}

/// Who owns what: `(manager, operation) → fieldsV1`.
fn owners(obj: &Value) -> Vec<(String, String, Value)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_owned(),
                e["operation"].as_str().unwrap().to_owned(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_server_side_apply_with_two_managers_conflicts_forces_and_removes() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    run_ok(k().args(["create", "namespace", "e2e"]));
    let f = dir.path().join("cm.yaml");

    std::fs::write(&f, configmap("  a: \"1\"\n  b: \"2\"\n")).unwrap();
    let out = run_ok(k().args(["apply", "--server-side", "-f"]).arg(&f));
    assert!(out.contains("configmap/c serverside-applied"), "{out}");

    // A second manager changing a: 409, kubectl shows upstream's message.
    let g = dir.path().join("other.yaml");
    std::fs::write(&g, configmap("  a: \"9\"\n")).unwrap();
    let err = run_err(
        k().args(["apply", "--server-side", "--field-manager=other", "-f"])
            .arg(&g),
    );
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .data.a"#),
        "{err}"
    );
    assert_eq!(
        get_json(&server, dir.path(), &["configmap", "c"])["data"]["a"],
        "1"
    );

    // --force-conflicts takes a.
    run_ok(
        k().args([
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
        ])
        .arg(&g),
    );
    let obj = get_json(&server, dir.path(), &["configmap", "c"]);
    assert_eq!(obj["data"], json!({"a":"9","b":"2"}));
    assert_eq!(
        owners(&obj),
        [
            (
                "kubectl".into(),
                "Apply".into(),
                json!({"f:data":{"f:b":{}}})
            ),
            ("other".into(), "Apply".into(), json!({"f:data":{"f:a":{}}})),
        ]
    );

    // kubectl drops a and b from its file: b goes (only kubectl owned it), a stays
    // (other owns it).
    std::fs::write(&f, configmap("  c: \"3\"\n")).unwrap();
    run_ok(k().args(["apply", "--server-side", "-f"]).arg(&f));
    let obj = get_json(&server, dir.path(), &["configmap", "c"]);
    assert_eq!(obj["data"], json!({"a":"9","c":"3"}));
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_moves_a_client_side_applied_object_to_server_side_apply() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    run_ok(k().args(["create", "namespace", "e2e"]));
    let f = dir.path().join("cm.yaml");
    std::fs::write(&f, configmap("  a: \"1\"\n  b: \"2\"\n")).unwrap();
    run_ok(k().arg("apply").arg("-f").arg(&f));
    let obj = get_json(&server, dir.path(), &["configmap", "c"]);
    assert_eq!(owners(&obj)[0].0, "kubectl-client-side-apply");

    // The same file, changed, applied server-side: no conflict with the client-side
    // manager, kubectl owns the fields as an applier, and the last-applied annotation
    // follows what was applied (so a later client-side apply still works).
    std::fs::write(&f, configmap("  a: \"5\"\n")).unwrap();
    run_ok(k().args(["apply", "--server-side", "-f"]).arg(&f));
    let obj = get_json(&server, dir.path(), &["configmap", "c"]);
    assert_eq!(obj["data"], json!({"a":"5"}), "b was dropped from the file");
    let managers: Vec<(String, String)> =
        owners(&obj).into_iter().map(|(m, o, _)| (m, o)).collect();
    assert!(
        managers.contains(&("kubectl".into(), "Apply".into())),
        "{managers:?}"
    );
    assert!(
        !managers
            .iter()
            .any(|(m, _)| m == "kubectl-client-side-apply"),
        "{managers:?}"
    );
    let last: Value = serde_json::from_str(
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["data"], json!({"a":"5"}));
    std::fs::write(&f, configmap("  a: \"6\"\n")).unwrap();
    run_ok(k().arg("apply").arg("-f").arg(&f));
    assert_eq!(
        get_json(&server, dir.path(), &["configmap", "c"])["data"],
        json!({"a":"6"})
    );
}

async fn client(server: &Server) -> Client {
    let config = kube::Config::new(server.url.parse().unwrap());
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patch_apply_with_two_managers() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":"e2e"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "e2e");
    let deploy = |replicas: i32, containers: Value| {
        json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
            "spec":{"replicas":replicas,"selector":{"matchLabels":{"app":"web"}},
            "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":containers}}}})
    };
    let app = json!([{"name":"app","image":"nginx:1.27","ports":[{"containerPort":80}]}]);
    let created = deploys
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(deploy(2, app.clone())),
        )
        .await
        .unwrap();
    assert_eq!(created.spec.as_ref().unwrap().replicas, Some(2));
    let mf = created.managed_fields();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("alice"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

    // bob adds a container: merged by name, both stay.
    let sidecar = json!([{"name":"sidecar","image":"busybox"}]);
    let both = deploys
        .patch(
            "web",
            &PatchParams::apply("bob"),
            &Patch::Apply(deploy(2, sidecar.clone())),
        )
        .await
        .unwrap();
    let names: Vec<String> = both
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["app", "sidecar"]);

    // bob wanting 5 replicas conflicts with alice...
    let err = deploys
        .patch(
            "web",
            &PatchParams::apply("bob"),
            &Patch::Apply(deploy(5, sidecar.clone())),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "alice": .spec.replicas"#
    );
    // ...unless forced.
    let forced = deploys
        .patch(
            "web",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(deploy(5, sidecar)),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(5));

    // alice stops applying her container: it goes; bob's stays.
    let mut without_app = deploy(5, json!([]));
    without_app["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let after = deploys
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(without_app),
        )
        .await
        .unwrap();
    let names: Vec<String> = after
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["sidecar"]);

    // Typed ConfigMap through kube-rs: an Update (create) then an apply conflicting with it.
    let cms: Api<ConfigMap> = Api::namespaced(client, "e2e");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata":{"name":"c"},"data":{"k":"1"}})).unwrap();
    let created = cms
        .create(
            &PostParams {
                field_manager: Some("maker".into()),
                ..Default::default()
            },
            &cm,
        )
        .await
        .unwrap();
    assert_eq!(
        created.managed_fields()[0].operation.as_deref(),
        Some("Update")
    );
    let err = cms
        .patch(
            "c",
            &PatchParams::apply("alice"),
            &Patch::Apply(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"2"}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"conflict with "maker" using v1: .data.k"#),
        "{err}"
    );
}
