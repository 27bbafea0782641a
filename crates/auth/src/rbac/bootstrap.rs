//! The bootstrap policy: upstream's default ClusterRoles and ClusterRoleBindings that
//! matter to this server, and their reconciliation.
//!
//! Every object carries upstream's label `kubernetes.io/bootstrapping: rbac-defaults` and
//! annotation `rbac.authorization.kubernetes.io/autoupdate: "true"`. Reconciling (at start
//! and whenever one of them changes) adds back what was edited away — missing rules,
//! subjects, labels — and recreates deleted ones; an object whose autoupdate annotation is
//! `"false"` is left alone, as upstream.

use std::collections::BTreeMap;

use crate::rbac::{
    AggregationRule, LabelSelector, PolicyRule, Role, RoleBinding, RoleRef, Subject, rules,
};
use crate::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, SYSTEM_MASTERS};

/// Annotation that opts an object out of reconciliation when `"false"`.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// Label of the bootstrap objects.
pub const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";

fn meta(name: &str, extra_labels: &[(&str, &str)]) -> listwatch_api::ObjectMeta {
    let mut labels: BTreeMap<String, String> =
        [(BOOTSTRAPPING.to_owned(), "rbac-defaults".to_owned())].into();
    for (k, v) in extra_labels {
        labels.insert((*k).to_owned(), (*v).to_owned());
    }
    listwatch_api::ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels),
        annotations: Some([(AUTOUPDATE.to_owned(), "true".to_owned())].into()),
        ..Default::default()
    }
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: meta(name, labels),
        rules,
        aggregation_rule: None,
    }
}

fn aggregated(name: &str, labels: &[(&str, &str)], selects: &[&str]) -> Role {
    Role {
        metadata: meta(name, labels),
        rules: Vec::new(),
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: selects
                .iter()
                .map(|l| LabelSelector {
                    match_labels: [((*l).to_owned(), "true".to_owned())].into(),
                    ..LabelSelector::default()
                })
                .collect(),
        }),
    }
}

fn r<V, G, R>(verbs: V, groups: G, resources: R) -> PolicyRule
where
    V: IntoIterator<Item = &'static str>,
    G: IntoIterator<Item = &'static str>,
    R: IntoIterator<Item = &'static str>,
{
    PolicyRule::resources(verbs, groups, resources)
}

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];
const AGG_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGG_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGG_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// The bootstrap ClusterRoles: `cluster-admin`, `admin`, `edit`, `view` (aggregated from
/// `system:aggregate-to-*`), `system:discovery`, `system:basic-user`,
/// `system:public-info-viewer`.
pub fn cluster_roles() -> Vec<Role> {
    let core_read = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "pods",
        "pods/log",
        "pods/status",
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "replicationcontrollers/status",
        "serviceaccounts",
        "services",
        "services/status",
        "bindings",
        "events",
        "limitranges",
        "namespaces/status",
        "resourcequotas",
        "resourcequotas/status",
    ];
    let apps = [
        "controllerrevisions",
        "daemonsets",
        "daemonsets/status",
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "replicasets/status",
        "statefulsets",
        "statefulsets/scale",
        "statefulsets/status",
    ];
    let core_write = [
        "pods",
        "pods/attach",
        "pods/exec",
        "pods/portforward",
        "pods/proxy",
        "configmaps",
        // Not "endpoints": upstream removed Endpoints writes from edit in 1.22
        // (kubernetes#103704, CVE-2021-25740); `view` still reads them.
        "persistentvolumeclaims",
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "secrets",
        "serviceaccounts",
        "services",
        "services/proxy",
    ];
    let apps_write = [
        "daemonsets",
        "deployments",
        "deployments/rollback",
        "deployments/scale",
        "replicasets",
        "replicasets/scale",
        "statefulsets",
        "statefulsets/scale",
    ];
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![
                r(["*"], ["*"], ["*"]),
                PolicyRule::non_resource(["*"], ["*"]),
            ],
        ),
        aggregated("admin", &[], &[AGG_ADMIN]),
        aggregated("edit", &[(AGG_ADMIN, "true")], &[AGG_EDIT]),
        aggregated("view", &[(AGG_EDIT, "true")], &[AGG_VIEW]),
        cluster_role(
            "system:aggregate-to-admin",
            &[(AGG_ADMIN, "true")],
            vec![
                r(
                    ["create"],
                    ["authorization.k8s.io"],
                    ["localsubjectaccessreviews"],
                ),
                r(
                    READ.into_iter().chain(WRITE),
                    ["rbac.authorization.k8s.io"],
                    ["rolebindings", "roles"],
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[(AGG_EDIT, "true")],
            vec![
                r(WRITE, [""], core_write),
                r(
                    READ,
                    [""],
                    [
                        "secrets",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "services/proxy",
                    ],
                ),
                r(["create"], [""], ["serviceaccounts/token"]),
                r(["create"], [""], ["pods/eviction"]),
                r(["impersonate"], [""], ["serviceaccounts"]),
                r(WRITE, ["apps"], apps_write),
                r(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
                r(WRITE, ["batch"], ["cronjobs", "jobs"]),
                r(WRITE, ["coordination.k8s.io"], ["leases"]),
                r(
                    WRITE,
                    ["networking.k8s.io"],
                    ["ingresses", "networkpolicies"],
                ),
                r(WRITE, ["policy"], ["poddisruptionbudgets"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[(AGG_VIEW, "true")],
            vec![
                r(READ, [""], core_read),
                r(READ, [""], ["namespaces"]),
                r(READ, ["apps"], apps),
                r(
                    READ,
                    ["autoscaling"],
                    [
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                r(
                    READ,
                    ["batch"],
                    ["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                r(READ, ["coordination.k8s.io"], ["leases"]),
                r(READ, ["discovery.k8s.io"], ["endpointslices"]),
                r(
                    READ,
                    ["networking.k8s.io"],
                    ["ingresses", "ingresses/status", "networkpolicies"],
                ),
                r(
                    READ,
                    ["policy"],
                    ["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![PolicyRule::non_resource(
                ["get"],
                [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                r(
                    ["create"],
                    ["authentication.k8s.io"],
                    ["selfsubjectreviews"],
                ),
                r(
                    ["create"],
                    ["authorization.k8s.io"],
                    ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
            ],
        ),
        // Upstream's role for delegated authentication and authorization (aggregated API
        // servers, kube-rbac-proxy): TokenReviews and SubjectAccessReviews.
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                r(
                    ["create"],
                    ["authorization.k8s.io"],
                    ["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![PolicyRule::non_resource(
                ["get"],
                ["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
    ]
}

fn cluster_binding(name: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(name, &[]),
        subjects,
        role_ref: RoleRef::cluster_role(role),
    }
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<RoleBinding> {
    vec![
        cluster_binding(
            "cluster-admin",
            "cluster-admin",
            vec![Subject::group(SYSTEM_MASTERS)],
        ),
        cluster_binding(
            "system:discovery",
            "system:discovery",
            vec![Subject::group(ALL_AUTHENTICATED)],
        ),
        cluster_binding(
            "system:basic-user",
            "system:basic-user",
            vec![Subject::group(ALL_AUTHENTICATED)],
        ),
        cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            vec![
                Subject::group(ALL_AUTHENTICATED),
                Subject::group(ALL_UNAUTHENTICATED),
            ],
        ),
    ]
}

fn opted_out(meta: &listwatch_api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(AUTOUPDATE))
        .is_some_and(|v| v == "false")
}

fn merge_meta(have: &mut listwatch_api::ObjectMeta, want: &listwatch_api::ObjectMeta) -> bool {
    let mut changed = false;
    for (mine, theirs) in [
        (&mut have.labels, &want.labels),
        (&mut have.annotations, &want.annotations),
    ] {
        for (k, v) in theirs.iter().flatten() {
            let m = mine.get_or_insert_with(BTreeMap::new);
            if !m.contains_key(k) {
                m.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

/// What reconciling one bootstrap object asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconcile<T> {
    /// Nothing to do.
    Keep,
    /// Create this object.
    Create(T),
    /// Replace the stored object with this one.
    Update(T),
    /// Delete the stored object and create this one (a binding's role reference cannot
    /// change).
    Recreate(T),
}

/// Reconciles a bootstrap ClusterRole against the stored one.
pub fn reconcile_role(have: Option<&Role>, want: &Role) -> Reconcile<Role> {
    let Some(have) = have else {
        return Reconcile::Create(want.clone());
    };
    if opted_out(&have.metadata) {
        return Reconcile::Keep;
    }
    let mut out = have.clone();
    let mut changed = merge_meta(&mut out.metadata, &want.metadata);
    if let Some(agg) = &want.aggregation_rule {
        let selectors = &mut out
            .aggregation_rule
            .get_or_insert_with(AggregationRule::default)
            .cluster_role_selectors;
        for s in &agg.cluster_role_selectors {
            if !selectors.contains(s) {
                selectors.push(s.clone());
                changed = true;
            }
        }
    } else {
        let (_, missing) = rules::covers(&have.rules, &want.rules);
        if !missing.is_empty() {
            for rule in &want.rules {
                if !rules::covers(&out.rules, std::slice::from_ref(rule)).0 {
                    out.rules.push(rule.clone());
                }
            }
            changed = true;
        }
    }
    if changed {
        Reconcile::Update(out)
    } else {
        Reconcile::Keep
    }
}

/// Reconciles a bootstrap ClusterRoleBinding against the stored one.
pub fn reconcile_binding(have: Option<&RoleBinding>, want: &RoleBinding) -> Reconcile<RoleBinding> {
    let Some(have) = have else {
        return Reconcile::Create(want.clone());
    };
    if opted_out(&have.metadata) {
        return Reconcile::Keep;
    }
    // A binding whose role reference differs is reset completely, as upstream's
    // `computeReconciledRoleBinding` does: none of its subjects may survive onto the
    // bootstrap role (someone who recreated `cluster-admin` pointing elsewhere must not
    // become a cluster admin once the reference is put back).
    if have.role_ref != want.role_ref {
        return Reconcile::Recreate(want.clone());
    }
    let mut out = have.clone();
    let mut changed = merge_meta(&mut out.metadata, &want.metadata);
    for s in &want.subjects {
        if !out.subjects.contains(s) {
            out.subjects.push(s.clone());
            changed = true;
        }
    }
    if changed {
        Reconcile::Update(out)
    } else {
        Reconcile::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_has_the_roles_the_issue_names() {
        let names: Vec<_> = cluster_roles()
            .into_iter()
            .map(|r| r.metadata.name.unwrap_or_default())
            .collect();
        for n in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:discovery",
            "system:basic-user",
            "system:auth-delegator",
            "system:public-info-viewer",
        ] {
            assert!(names.iter().any(|x| x == n), "{n}");
        }
        for r in cluster_roles() {
            assert!(crate::rbac::validate_role(&r, false).is_empty(), "{r:?}");
        }
        for b in cluster_role_bindings() {
            assert!(
                crate::rbac::validate_binding(&b, false, None).is_empty(),
                "{b:?}"
            );
        }
    }

    /// Upstream removed Endpoints writes from `system:aggregate-to-edit` in 1.22
    /// (kubernetes#103704, CVE-2021-25740: Endpoints and EndpointSlice writes let a
    /// namespace editor forward a Service to any address). `edit` (and `admin`, which
    /// aggregates it) may read Endpoints and EndpointSlices (through `view`), not write them.
    #[test]
    fn edit_does_not_write_endpoints_as_upstream_since_1_22() {
        let roles = cluster_roles();
        let rules_of = |name: &str| {
            roles
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(name))
                .map(|r| r.rules.clone())
                .unwrap_or_default()
        };
        let edit = rules_of("system:aggregate-to-edit");
        for verb in ["create", "update", "patch", "delete"] {
            let write = [
                PolicyRule::resources([verb], [""], ["endpoints"]),
                PolicyRule::resources([verb], ["discovery.k8s.io"], ["endpointslices"]),
            ];
            for w in write {
                assert!(
                    !rules::covers(&edit, std::slice::from_ref(&w)).0,
                    "edit grants {w:?}"
                );
            }
        }
        let view = rules_of("system:aggregate-to-view");
        let read = [
            PolicyRule::resources(["get", "list", "watch"], [""], ["endpoints"]),
            PolicyRule::resources(
                ["get", "list", "watch"],
                ["discovery.k8s.io"],
                ["endpointslices"],
            ),
        ];
        assert!(rules::covers(&view, &read).0, "view must still read them");
    }

    #[test]
    fn edits_are_reconciled_unless_opted_out() {
        let want = &cluster_roles()[0];
        assert_eq!(reconcile_role(None, want), Reconcile::Create(want.clone()));
        assert_eq!(reconcile_role(Some(want), want), Reconcile::Keep);
        let mut edited = want.clone();
        edited.rules.truncate(1);
        edited
            .rules
            .push(PolicyRule::resources(["get"], ["x"], ["y"]));
        let Reconcile::Update(fixed) = reconcile_role(Some(&edited), want) else {
            panic!("not reconciled")
        };
        assert!(rules::covers(&fixed.rules, &want.rules).0);
        assert_eq!(fixed.rules.len(), 3, "extra rules are kept");
        let mut opted = edited.clone();
        opted
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(AUTOUPDATE.into(), "false".into());
        assert_eq!(reconcile_role(Some(&opted), want), Reconcile::Keep);

        let want = &cluster_role_bindings()[0];
        let mut edited = want.clone();
        edited.subjects.clear();
        assert_eq!(
            reconcile_binding(Some(&edited), want),
            Reconcile::Update(want.clone())
        );
        edited.role_ref.name = "other".into();
        edited.subjects.push(Subject::user("eve"));
        edited.metadata.resource_version = Some("7".into());
        assert_eq!(
            reconcile_binding(Some(&edited), want),
            Reconcile::Recreate(want.clone()),
            "a binding to another role is reset completely"
        );
    }
}
