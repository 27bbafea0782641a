//! Validation of RBAC objects on write, as upstream's `rbac/validation`: what a role or
//! binding must hold to be stored. Errors are field errors (422 Invalid).

use crate::rbac::{PolicyRule, Role, RoleBinding, RoleRef};

/// One invalid field: path, and upstream's detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `rules[0].verbs`.
    pub field: String,
    /// e.g. `Required value: verbs must contain at least one value`.
    pub detail: String,
}

fn err(field: String, detail: &str) -> FieldError {
    FieldError {
        field,
        detail: detail.to_owned(),
    }
}

fn validate_rule(i: usize, r: &PolicyRule, namespaced: bool, out: &mut Vec<FieldError>) {
    let at = |f: &str| format!("rules[{i}].{f}");
    if r.verbs.is_empty() {
        out.push(err(
            at("verbs"),
            "Required value: verbs must contain at least one value",
        ));
    }
    if !r.non_resource_urls.is_empty() {
        if namespaced {
            out.push(err(
                at("nonResourceURLs"),
                "Invalid value: namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !r.api_groups.is_empty() || !r.resources.is_empty() || !r.resource_names.is_empty() {
            out.push(err(
                at("nonResourceURLs"),
                "Invalid value: rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if r.api_groups.is_empty() {
        out.push(err(
            at("apiGroups"),
            "Required value: resource rules must supply at least one api group",
        ));
    }
    if r.resources.is_empty() {
        out.push(err(
            at("resources"),
            "Required value: resource rules must supply at least one resource",
        ));
    }
}

/// Checks a Role (`namespaced`) or ClusterRole.
pub fn validate_role(role: &Role, namespaced: bool) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (i, r) in role.rules.iter().enumerate() {
        validate_rule(i, r, namespaced, &mut out);
    }
    if namespaced && role.aggregation_rule.is_some() {
        out.push(err(
            "aggregationRule".into(),
            "Forbidden: only ClusterRoles may aggregate",
        ));
    }
    out
}

/// Upstream's `SetDefaults_Subject`, which runs before validation: a `User` or `Group`
/// subject without `apiGroup` gets `rbac.authorization.k8s.io` (a `ServiceAccount`'s stays
/// `""`). The stored object gets the same from the kind's strategy.
pub fn default_subjects(b: &mut RoleBinding) {
    for s in &mut b.subjects {
        if s.api_group.is_empty() && matches!(s.kind.as_str(), "User" | "Group") {
            crate::rbac::GROUP.clone_into(&mut s.api_group);
        }
    }
}

/// Checks a RoleBinding (`namespaced`) or ClusterRoleBinding; `old_ref` is the stored
/// binding's role reference on update (it may not change).
pub fn validate_binding(
    b: &RoleBinding,
    namespaced: bool,
    old_ref: Option<&RoleRef>,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    let r = &b.role_ref;
    if r.api_group != crate::rbac::GROUP {
        out.push(err(
            "roleRef.apiGroup".into(),
            "Unsupported value: supported values: \"rbac.authorization.k8s.io\"",
        ));
    }
    match (r.kind.as_str(), namespaced) {
        ("ClusterRole", _) | ("Role", true) => {}
        (_, true) => out.push(err(
            "roleRef.kind".into(),
            "Unsupported value: supported values: \"Role\", \"ClusterRole\"",
        )),
        (_, false) => out.push(err(
            "roleRef.kind".into(),
            "Unsupported value: supported values: \"ClusterRole\"",
        )),
    }
    if r.name.is_empty() {
        out.push(err("roleRef.name".into(), "Required value"));
    }
    if let Some(old) = old_ref {
        if old != r {
            out.push(err(
                "roleRef".into(),
                "Invalid value: cannot change roleRef",
            ));
        }
    }
    for (i, s) in b.subjects.iter().enumerate() {
        let at = |f: &str| format!("subjects[{i}].{f}");
        if s.name.is_empty() {
            out.push(err(at("name"), "Required value"));
        }
        match s.kind.as_str() {
            "ServiceAccount" => {
                if !s.api_group.is_empty() {
                    out.push(err(
                        at("apiGroup"),
                        "Unsupported value: supported values: \"\"",
                    ));
                }
                if !namespaced && s.namespace.is_empty() {
                    out.push(err(at("namespace"), "Required value"));
                }
            }
            "User" | "Group" => {
                if s.api_group != crate::rbac::GROUP {
                    out.push(err(
                        at("apiGroup"),
                        "Unsupported value: supported values: \"rbac.authorization.k8s.io\"",
                    ));
                }
            }
            _ => out.push(err(
                at("kind"),
                "Unsupported value: supported values: \"ServiceAccount\", \"User\", \"Group\"",
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::Subject;
    use crate::rbac::testing::*;

    #[test]
    fn bad_rules_and_bindings_are_named() {
        let r = role(
            Some("x"),
            "r",
            vec![
                PolicyRule::non_resource(["get"], ["/x"]),
                PolicyRule::default(),
            ],
        );
        let errs = validate_role(&r, true);
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rules[0].nonResourceURLs",
                "rules[1].verbs",
                "rules[1].apiGroups",
                "rules[1].resources"
            ]
        );
        assert!(
            validate_role(
                &role(None, "c", vec![PolicyRule::non_resource(["get"], ["/x"])]),
                false
            )
            .is_empty()
        );
        let b = binding(
            None,
            "b",
            RoleRef::role("r"),
            vec![Subject::service_account("", "sa")],
        );
        let fields: Vec<_> = validate_binding(&b, false, None)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["roleRef.kind", "subjects[0].namespace"]);
        let b = binding(Some("x"), "b", RoleRef::role("r"), vec![Subject::user("u")]);
        assert!(validate_binding(&b, true, Some(&RoleRef::role("r"))).is_empty());
        assert_eq!(
            validate_binding(&b, true, Some(&RoleRef::role("other")))[0].field,
            "roleRef"
        );
    }
}
