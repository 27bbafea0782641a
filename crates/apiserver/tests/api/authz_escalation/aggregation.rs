//! An `aggregationRule` needs full authority on every write path, and labelling a member
//! of an aggregate needs the member's rules.

use super::*;

/// Both reproductions of issue 23 item 1, and every write path that can set an
/// aggregationRule: refused with upstream's 403, nothing written, no rights gained.
#[test]
fn an_aggregation_rule_needs_full_authority_on_every_write_path() {
    let c = Cluster::start(&["--authorization-mode", "RBAC"]);
    // mallory may write ClusterRoles and bind them; pat may only patch the one ClusterRole
    // bound to every anonymous client.
    c.grant(
        "role-writer",
        "mallory",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["create", "get", "list", "update", "patch", "delete"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
             "verbs": ["create"]},
        ]),
    );
    c.grant(
        "pip-patcher",
        "pat",
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "resourceNames": ["system:public-info-viewer"], "verbs": ["get", "patch"]}]),
    );
    c.until_allowed("mallory-token", CR);
    c.until_allowed("pat-token", &format!("{CR}/system:public-info-viewer"));

    // Reproduction 1: an empty role (allowed: no rules), bound to herself (allowed), then
    // a selector for the bootstrap policy's roles.
    let mine = format!("{CR}/mine");
    let r = c.json(
        Some("mallory-token"),
        "POST",
        CR,
        &cluster_role("mine", json!([]), None, None),
    );
    assert_eq!(r.status, 201, "{}", r.json());
    // (The binding check reads the role from the authorizer's informers: retried until
    // they have seen it, as a client would.)
    let r = c.until_created(
        Some("mallory-token"),
        CRB,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "mine"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mine"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
        }),
    );
    assert_eq!(r.status, 201, "{}", r.json());
    let defaults = json!({"clusterRoleSelectors": [
        {"matchLabels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}]});
    let merge = json!({"aggregationRule": defaults}).to_string();
    let m = Some("mallory-token");
    let attempts: Vec<(&str, Response)> = vec![
        (
            "merge patch",
            c.req(m, "PATCH", &mine, "application/merge-patch+json", &merge),
        ),
        (
            "merge patch, dry run",
            c.req(
                m,
                "PATCH",
                &format!("{mine}?dryRun=All"),
                "application/merge-patch+json",
                &merge,
            ),
        ),
        (
            "strategic merge patch",
            c.req(
                m,
                "PATCH",
                &mine,
                "application/strategic-merge-patch+json",
                &merge,
            ),
        ),
        (
            "json patch",
            c.req(
                m,
                "PATCH",
                &mine,
                "application/json-patch+json",
                &json!([{"op": "add", "path": "/aggregationRule", "value": defaults}]).to_string(),
            ),
        ),
        (
            "server-side apply",
            c.req(
                m,
                "PATCH",
                &format!("{mine}?fieldManager=mallory&force=true"),
                "application/apply-patch+yaml",
                &cluster_role("mine", json!([]), None, Some(defaults.clone())).to_string(),
            ),
        ),
        (
            "server-side apply that creates",
            c.req(
                m,
                "PATCH",
                &format!("{CR}/applied?fieldManager=mallory"),
                "application/apply-patch+yaml",
                &cluster_role("applied", json!([]), None, Some(defaults.clone())).to_string(),
            ),
        ),
        (
            "PUT",
            c.json(
                m,
                "PUT",
                &mine,
                &cluster_role("mine", json!([]), None, Some(defaults.clone())),
            ),
        ),
        (
            "PUT that creates",
            c.json(
                m,
                "PUT",
                &format!("{CR}/put-created"),
                &cluster_role("put-created", json!([]), None, Some(defaults.clone())),
            ),
        ),
        (
            "POST",
            c.json(
                m,
                "POST",
                CR,
                &cluster_role("posted", json!([]), None, Some(defaults.clone())),
            ),
        ),
        (
            "POST, dry run",
            c.json(
                m,
                "POST",
                &format!("{CR}?dryRun=All"),
                &cluster_role("posted", json!([]), None, Some(defaults.clone())),
            ),
        ),
        (
            "POST of a selector matching every role",
            c.json(
                m,
                "POST",
                CR,
                &cluster_role(
                    "posted",
                    json!([]),
                    None,
                    Some(json!({"clusterRoleSelectors": [{}]})),
                ),
            ),
        ),
    ];
    for (what, r) in &attempts {
        assert_refused(r, what, AGG_MESSAGE);
    }
    // Nothing written: `mine` is as created, the others do not exist.
    let stored = c.get(&mine);
    assert!(stored.get("aggregationRule").is_none(), "{stored}");
    assert_eq!(stored["rules"], json!([]), "{stored}");
    for name in ["applied", "put-created", "posted"] {
        let r = c.json(
            Some("root-token"),
            "GET",
            &format!("{CR}/{name}"),
            &Value::Null,
        );
        assert_eq!(r.status, 404, "{name}: {}", r.json());
    }
    // An empty selector list aggregates nothing: allowed, as upstream.
    let r = c.req(
        m,
        "PATCH",
        &mine,
        "application/merge-patch+json",
        &json!({"aggregationRule": {"clusterRoleSelectors": []}}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.json());
    let r = c.json(m, "GET", "/api/v1/secrets", &Value::Null);
    assert_eq!(r.status, 403, "{}", r.json());

    // Reproduction 2: `patch` on system:public-info-viewer alone.
    let piv = format!("{CR}/system:public-info-viewer");
    let before = c.get(&piv);
    let all = json!({"aggregationRule": {"clusterRoleSelectors": [{}]}}).to_string();
    for (what, ct) in [
        ("merge patch", "application/merge-patch+json"),
        (
            "strategic merge patch",
            "application/strategic-merge-patch+json",
        ),
    ] {
        let r = c.req(Some("pat-token"), "PATCH", &piv, ct, &all);
        assert_refused(&r, what, AGG_MESSAGE);
    }
    let after = c.get(&piv);
    assert!(after.get("aggregationRule").is_none(), "{after}");
    assert_eq!(after["rules"], before["rules"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let r = c.json(None, "GET", "/api/v1/secrets", &Value::Null);
    assert_eq!(r.status, 403, "anonymous lists secrets: {}", r.json());

    // The stored version counts too: an aggregate written by an administrator may not be
    // changed (its selector removed, its rules replaced) by a user without full authority,
    // even to rules the user holds (none here).
    c.root(
        "POST",
        CR,
        &cluster_role("team-agg", json!([]), None, Some(defaults.clone())),
    );
    let team = format!("{CR}/team-agg");
    // Once aggregated, so that emptying its rules is a change (a write that changes
    // nothing is allowed, as upstream).
    let start = Instant::now();
    while c.get(&team)["rules"].as_array().is_none_or(Vec::is_empty) {
        assert!(start.elapsed() < PATIENCE, "team-agg never aggregated");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for (what, body) in [
        (
            "removing the selector",
            json!({"aggregationRule": null, "rules": []}).to_string(),
        ),
        ("emptying the rules", json!({"rules": []}).to_string()),
        (
            "an empty selector list",
            json!({"aggregationRule": {"clusterRoleSelectors": []}, "rules": []}).to_string(),
        ),
    ] {
        let r = c.req(m, "PATCH", &team, "application/merge-patch+json", &body);
        assert_refused(&r, what, AGG_MESSAGE);
    }
    let r = c.req(m, "DELETE", &team, "application/json", "");
    assert_eq!(
        r.status,
        200,
        "a delete needs only the delete verb: {}",
        r.json()
    );

    // `escalate` on clusterroles and system:masters may write aggregation rules.
    c.grant(
        "escalator",
        "erin",
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "verbs": ["create", "get", "patch", "escalate"]}]),
    );
    c.until_allowed("erin-token", &mine);
    let r = c.json(
        Some("erin-token"),
        "POST",
        CR,
        &cluster_role("erins", json!([]), None, Some(defaults.clone())),
    );
    assert_eq!(r.status, 201, "{}", r.json());
    let r = c.json(
        Some("root-token"),
        "POST",
        CR,
        &cluster_role("roots", json!([]), None, Some(defaults)),
    );
    assert_eq!(r.status, 201, "{}", r.json());
}

/// A member role's labels put its rules into an aggregate: only a user who holds those
/// rules (or may `escalate`) can label a role, so the aggregate a user is bound to gains
/// nothing the user did not already hold (upstream's role write check covers labels).
#[test]
fn labelling_a_member_of_an_aggregate_needs_the_members_rules() {
    let c = Cluster::start(&["--authorization-mode", "RBAC"]);
    let label = json!({"example.com/team": "true"});
    // An administrator's aggregate, bound to lisa.
    c.root(
        "POST",
        CR,
        &cluster_role(
            "team",
            json!([]),
            None,
            Some(json!({"clusterRoleSelectors": [{"matchLabels": label}]})),
        ),
    );
    c.root(
        "POST",
        CRB,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "team"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lisa"}],
        }),
    );
    c.root(
        "POST",
        CR,
        &cluster_role(
            "secret-reader",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]),
            None,
            None,
        ),
    );
    c.grant(
        "lisa-writer",
        "lisa",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["create", "get", "update", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
        ]),
    );
    c.until_allowed("lisa-token", "/api/v1/configmaps");
    let l = Some("lisa-token");
    let held_not = "is attempting to grant RBAC permissions not currently held";
    let r = c.req(
        l,
        "PATCH",
        &format!("{CR}/secret-reader"),
        "application/merge-patch+json",
        &json!({"metadata": {"labels": label}}).to_string(),
    );
    assert_refused(&r, "labelling a role with rules not held", held_not);
    let r = c.json(
        l,
        "POST",
        CR,
        &cluster_role(
            "lisas-secrets",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
            Some(label.clone()),
            None,
        ),
    );
    assert_refused(&r, "a labelled role with rules not held", held_not);
    let stored = c.get(&format!("{CR}/secret-reader"));
    assert!(stored["metadata"].get("labels").is_none(), "{stored}");

    // A member with rules she holds is fine, and is aggregated.
    let r = c.json(
        l,
        "POST",
        CR,
        &cluster_role(
            "lisas-configmaps",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
            Some(label),
            None,
        ),
    );
    assert_eq!(r.status, 201, "{}", r.json());
    let start = Instant::now();
    loop {
        let team = c.get(&format!("{CR}/team"));
        if team["rules"].as_array().is_some_and(|r| !r.is_empty()) {
            assert_eq!(
                team["rules"],
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}])
            );
            break;
        }
        assert!(start.elapsed() < PATIENCE, "never aggregated: {team}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = c.json(l, "GET", "/api/v1/secrets", &Value::Null);
    assert_eq!(r.status, 403, "{}", r.json());
}
