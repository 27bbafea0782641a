//! The other escalation paths: `AlwaysAllow` and anonymous requests, updates of only the
//! garbage collector's fields, a recreated bootstrap binding, `escalate` limited by
//! resource names, a field selector on namespaces, and binding subjects defaulted.

use super::*;

/// Issue 23 item 4: `AlwaysAllow` anywhere in `--authorization-mode` turns anonymous
/// requests off (upstream's `ApplyAuthorization`); before, `RBAC,AlwaysAllow` let every
/// anonymous client list Secrets.
#[test]
fn always_allow_anywhere_in_the_modes_turns_anonymous_off() {
    for modes in ["RBAC,AlwaysAllow", "AlwaysDeny,RBAC,AlwaysAllow"] {
        let c = Cluster::start(&["--authorization-mode", modes]);
        let r = c.json(None, "GET", "/api/v1/secrets", &Value::Null);
        assert_eq!(r.status, 401, "{modes}: anonymous got {}", r.json());
        let r = c.json(Some("root-token"), "GET", "/api/v1/secrets", &Value::Null);
        assert_eq!(r.status, 200, "{modes}: {}", r.json());
    }
    // Anonymous stays on without AlwaysAllow (and is then only what RBAC grants it).
    let c = Cluster::start(&["--authorization-mode", "RBAC"]);
    let r = c.json(None, "GET", "/api/v1/secrets", &Value::Null);
    assert_eq!(r.status, 403, "{}", r.json());
}

/// Upstream's `IsOnlyMutatingGCFields`: an update of only `ownerReferences`/`finalizers`
/// is not checked for escalation, so a user who may delete and patch an administrator's
/// aggregating ClusterRole can finish deleting it (remove its finalizer) without full
/// authority; a patch that also changes anything else is still checked.
#[test]
fn only_the_garbage_collectors_fields_need_no_escalation_check() {
    let c = Cluster::start(&["--authorization-mode", "RBAC"]);
    c.grant(
        "role-writer",
        "mallory",
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "verbs": ["get", "list", "patch", "delete"]}]),
    );
    c.until_allowed("mallory-token", CR);
    let mut held = cluster_role(
        "held",
        json!([]),
        None,
        Some(json!({"clusterRoleSelectors": [{"matchLabels": {"example.com/x": "true"}}]})),
    );
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    c.root("POST", CR, &held);
    let path = format!("{CR}/held");
    let m = Some("mallory-token");
    let r = c.req(m, "DELETE", &path, "application/json", "");
    assert!(r.status == 200 || r.status == 202, "{}", r.json());
    assert!(c.get(&path)["metadata"]["deletionTimestamp"].is_string());
    // A label with the finalizer: checked, refused.
    let r = c.req(
        m,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null, "labels": {"a": "b"}}}).to_string(),
    );
    assert_refused(&r, "finalizer and label", AGG_MESSAGE);
    // The finalizer alone: allowed, and the role is gone.
    let r = c.req(
        m,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null}}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.json());
    let r = c.json(Some("root-token"), "GET", &path, &Value::Null);
    assert_eq!(r.status, 404, "{}", r.json());
}

/// Red-team finding F2 (issue 23): the bootstrap reconciler, finding `cluster-admin`'s
/// binding pointing at another role, recreated it with the stored binding's subjects kept —
/// so whoever could delete and create ClusterRoleBindings could recreate `cluster-admin`
/// bound to `system:basic-user` with themselves as subject and become a cluster admin once
/// the reconciler put the role reference back. As upstream's `computeReconciledRoleBinding`:
/// a binding whose roleRef differs is reset completely, and the recreate is a clean create.
#[test]
fn a_recreated_bootstrap_binding_keeps_none_of_the_impostors_subjects() {
    let c = Cluster::start(&[]);
    c.grant(
        "crb-writer",
        "mallory",
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
                "verbs": ["create", "delete", "get"]}]),
    );
    let path = format!("{CRB}/cluster-admin");
    c.until_allowed("mallory-token", &path);
    let impostor = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "cluster-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:basic-user"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "eve"}],
    });
    // The reconciler recreates the deleted binding at once; race it until the impostor lands.
    let start = Instant::now();
    loop {
        let d = c.req(
            Some("mallory-token"),
            "DELETE",
            &path,
            "application/json",
            "",
        );
        assert!(
            d.status == 200 || d.status == 404,
            "{} {}",
            d.status,
            d.json()
        );
        let r = c.json(Some("mallory-token"), "POST", CRB, &impostor);
        if r.status == 201 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "{} {}", r.status, r.json());
    }
    // The reconciler puts the role reference back.
    let start = Instant::now();
    let fixed = loop {
        let r = c.json(Some("root-token"), "GET", &path, &Value::Null);
        if r.status == 200 && r.json()["roleRef"]["name"] == "cluster-admin" {
            break r.json();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never reconciled: {} {}",
            r.status,
            r.json()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        fixed["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]),
        "exactly the bootstrap subjects: {fixed:#}"
    );
    let r = c.json(Some("eve-token"), "GET", "/api/v1/secrets", &Value::Null);
    assert_eq!(r.status, 403, "eve: {}", r.json());
}

/// Red-team finding F3 (issue 23): `escalate` limited by `resourceNames` was checked
/// against the object's name, so it let a POST create role `foo` with rules its author does
/// not hold. As upstream's `RoleEscalationAuthorized`, which reads the request URL's name:
/// it covers a PUT of `foo` (the URL names it) and never a POST (whose URL names none).
#[test]
fn escalate_limited_by_resource_names_covers_no_create() {
    let c = Cluster::start(&[]);
    c.grant(
        "role-writer",
        "pat",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["create", "update", "get"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["escalate"], "resourceNames": ["foo"]},
        ]),
    );
    c.until_allowed("pat-token", &format!("{CR}/role-writer"));
    let all = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    let r = c.json(
        Some("pat-token"),
        "POST",
        CR,
        &cluster_role("foo", all.clone(), None, None),
    );
    assert_refused(
        &r,
        "POST of foo with escalate named foo",
        "not currently held",
    );
    let r = c.json(
        Some("root-token"),
        "GET",
        &format!("{CR}/foo"),
        &Value::Null,
    );
    assert_eq!(r.status, 404, "nothing written: {}", r.json());
    // A PUT names foo in its URL: the named escalate covers it.
    c.root(
        "POST",
        CR,
        &cluster_role(
            "foo",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
            None,
            None,
        ),
    );
    let r = c.json(
        Some("pat-token"),
        "PUT",
        &format!("{CR}/foo"),
        &cluster_role("foo", all, None, None),
    );
    assert_eq!(r.status, 200, "PUT of foo: {}", r.json());
}

/// Red-team finding F4 (issue 23): a list or watch of namespaces whose field selector named
/// `dev` was authorized in namespace `dev`, so a RoleBinding there let it stream every
/// change to that Namespace object. As upstream's RequestInfoFactory: the selector names
/// the request but a collection of namespaces stays cluster-wide (needs cluster-wide
/// rights), and a legacy `/watch/` collection is never named by its selector.
#[test]
fn a_field_selector_does_not_put_a_namespace_list_in_that_namespace() {
    let c = Cluster::start(&[]);
    c.root(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"}}),
    );
    c.root(
        "POST",
        CR,
        &cluster_role(
            "ns-reader",
            json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]),
            None,
            None,
        ),
    );
    c.root(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/dev/rolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "ns-reader", "namespace": "dev"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lisa"}],
        }),
    );
    // Named in the path, the namespace is its own: the RoleBinding in dev covers it.
    c.until_allowed("lisa-token", "/api/v1/namespaces/dev");
    for path in [
        "/api/v1/namespaces?fieldSelector=metadata.name%3Ddev&watch=1&timeoutSeconds=1",
        "/api/v1/namespaces?fieldSelector=metadata.name%3Ddev",
        "/api/v1/watch/namespaces?fieldSelector=metadata.name%3Ddev&timeoutSeconds=1",
    ] {
        let r = c.json(Some("lisa-token"), "GET", path, &Value::Null);
        assert_eq!(
            r.status,
            403,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// A binding whose subjects leave out `apiGroup` (as hand-written and charted RBAC often
/// does) is defaulted as upstream's `SetDefaults_Subject` (User and Group:
/// `rbac.authorization.k8s.io`, ServiceAccount: `""`), stored so, and grants what it names
/// (red team rt3 finding 4: it was refused with 422).
#[test]
fn binding_subjects_without_an_api_group_are_defaulted_and_grant() {
    let c = Cluster::start(&["--authorization-mode", "RBAC"]);
    c.root(
        "POST",
        CR,
        &cluster_role(
            "ns-reader",
            json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]),
            None,
            None,
        ),
    );
    let created = c.until_created(
        Some("root-token"),
        CRB,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "ns-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-reader"},
            "subjects": [
                {"kind": "User", "name": "pat"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "default", "namespace": "default"}
            ],
        }),
    );
    assert_eq!(created.status, 201, "{}", created.json());
    let stored = c.get(&format!("{CRB}/ns-reader"));
    let groups: Vec<_> = stored["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["apiGroup"].clone())
        .collect();
    assert_eq!(
        groups,
        vec![
            json!("rbac.authorization.k8s.io"),
            json!("rbac.authorization.k8s.io"),
            json!("")
        ]
    );
    // pat may now list namespaces (the authorizer's informers see the binding shortly).
    let start = Instant::now();
    loop {
        let r = c.json(Some("pat-token"), "GET", "/api/v1/namespaces", &Value::Null);
        if r.status == 200 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "pat: {} {}", r.status, r.json());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
