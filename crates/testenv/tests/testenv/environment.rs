//! The environment from a library user's side: a kube-rs `Controller` against it, CRDs from
//! values, files and directories, refused CRDs and flags, drop, and two environments side
//! by side.

use super::*;

/// The reconciler of the example: the Widget's ConfigMap (owned by it, so the garbage
/// collector removes it with the Widget), then its status.
async fn reconcile(w: Arc<Widget>, client: Arc<kube::Client>) -> Result<Action, kube::Error> {
    let ns = w.namespace().unwrap_or_default();
    let owner = w
        .controller_owner_ref(&())
        .expect("a stored widget has a uid");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-color", w.name_any())),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("color".into(), w.spec.color.clone())])),
        ..Default::default()
    };
    let params = PatchParams::apply("widget-controller").force();
    Api::<ConfigMap>::namespaced((*client).clone(), &ns)
        .patch(&cm.name_any(), &params, &Patch::Apply(&cm))
        .await?;
    let status = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "status": {"ready": true}
    });
    Api::<Widget>::namespaced((*client).clone(), &ns)
        .patch_status(&w.name_any(), &params, &Patch::Apply(&status))
        .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<kube::Client>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

/// docs/testing.md's example: a kube-rs controller's integration test against a test
/// environment started with the controller's own CRD.
#[tokio::test]
async fn a_kube_rs_controller_runs_against_the_test_environment() {
    let crd = serde_json::to_value(Widget::crd()).unwrap();
    let env = TestEnv::builder().crd(&crd).start().await.unwrap();
    let client = env.kube_client().unwrap();

    let widgets = Api::<Widget>::namespaced(client.clone(), "default");
    let controller = tokio::spawn(
        Controller::new(widgets.clone(), watcher::Config::default())
            .owns(
                Api::<ConfigMap>::namespaced(client.clone(), "default"),
                watcher::Config::default(),
            )
            .run(reconcile, error_policy, Arc::new(client.clone()))
            .for_each(|_| async {}),
    );

    let w = Widget::new(
        "w1",
        WidgetSpec {
            color: "blue".into(),
        },
    );
    widgets.create(&PostParams::default(), &w).await.unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), "default");
    eventually("the widget's config map", || async {
        configmaps
            .get_opt("w1-color")
            .await
            .unwrap()
            .is_some_and(|cm| {
                cm.data.unwrap_or_default().get("color").map(String::as_str) == Some("blue")
            })
    })
    .await;
    eventually("the widget's status", || async {
        widgets
            .get("w1")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.ready)
    })
    .await;
    let cm = configmaps.get("w1-color").await.unwrap();
    let owners: Vec<OwnerReference> = cm.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "Widget");
    assert_eq!(owners[0].controller, Some(true));

    // The server's garbage collector removes the owned config map with its widget.
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the config map garbage-collected", || async {
        configmaps.get_opt("w1-color").await.unwrap().is_none()
    })
    .await;
    controller.abort();
}

#[tokio::test]
async fn crds_come_from_values_files_and_directories_and_are_served_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let gadget = |kind: &str, plural: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.example.org}}
spec:
  group: example.org
  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
",
            singular = kind.to_ascii_lowercase()
        )
    };
    std::fs::write(dir.path().join("a.yaml"), gadget("Gadget", "gadgets")).unwrap();
    std::fs::write(dir.path().join("b.yml"), gadget("Gizmo", "gizmos")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let env = TestEnv::builder()
        .crds_from(dir.path())
        .crd(&serde_json::to_value(Widget::crd()).unwrap())
        .start()
        .await
        .unwrap();
    let client = env.client().unwrap();
    for path in [
        "/apis/example.org/v1/gadgets",
        "/apis/example.org/v1/gizmos",
        "/apis/example.com/v1/namespaces/default/widgets",
    ] {
        let list = client.get(path).await.unwrap();
        assert!(list.is_some(), "{path} is served");
    }
    let created = client
        .create(
            "/apis/example.org/v1/gadgets",
            &serde_json::json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "x": 1}),
        )
        .await
        .unwrap();
    assert_eq!(created["x"], 1);

    // They are CustomResourceDefinition objects, Established, as on a cluster: an operator
    // that applies its own CRD at start (server-side apply) and waits for it finds it
    // Established, not refused as a conflict with itself.
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(env.kube_client().unwrap());
    let names: Vec<String> = crds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "gadgets.example.org",
            "gizmos.example.org",
            "widgets.example.com"
        ]
    );
    crds.patch(
        "widgets.example.com",
        &kube::api::PatchParams::apply("my-operator").force(),
        &kube::api::Patch::Apply(Widget::crd()),
    )
    .await
    .unwrap();
    let established = tokio::time::timeout(
        Duration::from_secs(30),
        kube::runtime::wait::await_condition(
            crds.clone(),
            "widgets.example.com",
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .expect("Established after the operator's apply")
    .unwrap();
    let conditions = established
        .and_then(|c| c.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "NamesAccepted" && c.status == "True"),
        "{conditions:?}"
    );
}

#[tokio::test]
async fn a_refused_crd_or_flag_is_an_error_not_a_hang() {
    let bad = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.org}
spec:
  group: example.org
  names: {plural: things, kind: Thing}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {$ref: '#/nope'}}}
";
    let err = TestEnv::builder().crd_yaml(bad).start().await.unwrap_err();
    assert!(
        matches!(err, Error::Server(ref m) if m.contains("Thing") && m.contains("$ref")),
        "{err}"
    );

    let err = TestEnv::builder()
        .arg("--no-such-flag")
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Flags(ref m) if m.contains("--no-such-flag")),
        "{err}"
    );

    let missing = TestEnv::builder()
        .crds_from("/nonexistent/crds")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(missing, Error::Manifest { .. }), "{missing}");
}

/// A CRD directory laid out as kubebuilder's (a `kustomization.yaml` and a sample beside the
/// CRDs) is read as envtest reads it: the other kinds' documents are skipped (red team rt3
/// finding 7: it failed to start); a file that is not YAML still fails.
#[tokio::test]
async fn a_crd_directory_skips_documents_of_other_kinds() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources:\n- bases/example.org_gadgets.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("gadgets.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sample}\n---\n\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.org}
spec:
  group: example.org
  names: {plural: gadgets, kind: Gadget}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
",
    )
    .unwrap();
    std::fs::write(dir.path().join("README.md"), "not yaml: [").unwrap();
    let env = TestEnv::builder()
        .crds_from(dir.path())
        .start()
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.kube_client().unwrap());
    let names: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, vec!["gadgets.example.org".to_owned()]);
    drop(env);

    std::fs::write(dir.path().join("broken.yaml"), "a: [").unwrap();
    let err = TestEnv::builder()
        .crds_from(dir.path())
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Server(ref m) if m.contains("broken.yaml")),
        "{err}"
    );
}

#[tokio::test]
async fn drop_stops_the_server_and_removes_its_files() {
    let env = TestEnv::start().await.unwrap();
    let addr = env.addr();
    let kubeconfig = env.kubeconfig_path().to_owned();
    assert!(kubeconfig.exists());
    let client = env.kube_client().unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let names: Vec<String> = ns
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(names.contains(&"default".to_owned()), "{names:?}");
    // An open watch ends when the environment stops, rather than hanging the test.
    let mut watch = watcher(ns, watcher::Config::default()).boxed();
    assert!(watch.next().await.is_some());
    drop(env);
    assert!(!kubeconfig.exists(), "the kubeconfig is removed");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens on {addr} any more"
    );
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = watch.next().await {
            if ev.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch saw the server go");
}

#[tokio::test]
async fn two_environments_run_side_by_side_and_do_not_share_state() {
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.addr(), b.addr());
    let ca = Api::<ConfigMap>::namespaced(a.kube_client().unwrap(), "default");
    let cb = Api::<ConfigMap>::namespaced(b.kube_client().unwrap(), "default");
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "only-a"}})).unwrap();
    ca.create(&PostParams::default(), &cm).await.unwrap();
    assert!(ca.get_opt("only-a").await.unwrap().is_some());
    assert!(cb.get_opt("only-a").await.unwrap().is_none());
}
