//! Escalation prevention on writes of roles and bindings, as upstream's
//! `rbac/registry` policy-based storage: a user may only grant what it holds.
//!
//! - writing a Role/ClusterRole is allowed to `system:masters`, to a user allowed the
//!   `escalate` verb on it, or when the user's own rules (in the role's namespace) cover
//!   every rule of the role;
//! - writing a ClusterRole whose new **or stored** version has an `aggregationRule` (with at
//!   least one selector) additionally needs full authority, `*` on everything and on every
//!   non-resource URL, unless the user is `system:masters` or may `escalate` it: a selector
//!   gathers the rules of any ClusterRole, so it grants what no single rule names
//!   (upstream's `clusterrole/policybased` storage). Changing a *member's* labels is an
//!   ordinary role write: the member's rules must be held, so aggregation only ever
//!   gathers rules somebody allowed to grant them wrote;
//! - writing a RoleBinding/ClusterRoleBinding is allowed to `system:masters`, to a user
//!   allowed the `bind` verb on the referenced role, or when the user's own rules cover the
//!   referenced role's rules.

use crate::authz::{Attributes, Authorizer};
use crate::rbac::{GROUP, PolicyRule, Rbac, Role, RoleRef, rules};
use crate::user::{SYSTEM_MASTERS, UserInfo};

/// A refused write: the 403 message (upstream's wording) without the resource prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EscalationError(pub String);

fn not_held(user: &UserInfo, missing: &[PolicyRule], errors: &[String]) -> EscalationError {
    let groups = user
        .groups
        .iter()
        .map(|g| format!("{g:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    let rules = missing
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    let mut msg = format!(
        "user {:?} (groups=[{groups}]) is attempting to grant RBAC permissions not currently held:\n{rules}",
        user.name
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", errors.join(", ")));
    }
    EscalationError(msg)
}

fn confirm_no_escalation(
    authz: &dyn Authorizer,
    user: &UserInfo,
    namespace: &str,
    wanted: &[PolicyRule],
) -> Result<(), EscalationError> {
    let held = authz.rules_for(user, namespace);
    let mut owner = held.resource_rules;
    owner.extend(held.non_resource_rules);
    let (ok, missing) = rules::covers(&owner, wanted);
    if ok {
        Ok(())
    } else {
        Err(not_held(user, &missing, &held.errors))
    }
}

/// Upstream's `fullAuthority`: what a user must hold to write an aggregating ClusterRole.
pub fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resources(["*"], ["*"], ["*"]),
        PolicyRule::non_resource(["*"], ["*"]),
    ]
}

/// The refusal of an aggregating ClusterRole write by a user without full authority
/// (upstream's message).
pub const AGGREGATION_NEEDS_FULL_AUTHORITY: &str =
    "must have cluster-admin privileges to use the aggregationRule";

/// Whether a ClusterRole counts as aggregating for the write check: an `aggregationRule`
/// with at least one selector (upstream's `hasAggregationRule`; no selector gathers
/// nothing).
pub fn has_aggregation_rule(role: &Role) -> bool {
    role.aggregation_rule
        .as_ref()
        .is_some_and(|a| !a.cluster_role_selectors.is_empty())
}

/// Checks a create or update of a Role (`namespace` set) or ClusterRole (`namespace`
/// empty) named `name` holding `wanted`. `aggregating`: the new or the stored version
/// of the ClusterRole has an aggregation rule ([`has_aggregation_rule`]); such a write
/// needs full authority besides the rules.
pub fn check_role_write(
    authz: &dyn Authorizer,
    user: &UserInfo,
    namespace: &str,
    name: &str,
    wanted: &[PolicyRule],
    aggregating: bool,
) -> Result<(), EscalationError> {
    if user.in_group(SYSTEM_MASTERS) {
        return Ok(());
    }
    let resource = if namespace.is_empty() {
        "clusterroles"
    } else {
        "roles"
    };
    let escalate = Attributes::resource("escalate", GROUP, resource, namespace).named(name);
    if authz.authorize(user, &escalate).allowed() {
        return Ok(());
    }
    confirm_no_escalation(authz, user, namespace, wanted)?;
    if aggregating && confirm_no_escalation(authz, user, namespace, &full_authority()).is_err() {
        return Err(EscalationError(AGGREGATION_NEEDS_FULL_AUTHORITY.to_owned()));
    }
    Ok(())
}

/// Checks a create (`old` `None`) or update of the Role (`namespace` set) or ClusterRole
/// (`namespace` empty) object `new`, as it will be stored; `old` is the stored version on
/// update. The admission hook's check: the rules must be held, and a ClusterRole whose
/// new or old version aggregates needs full authority ([`check_role_write`]).
///
/// `request_name` is the name in the request's URL, not the object's: as upstream's
/// `RoleEscalationAuthorized` (which reads `RequestInfo.Name`), `escalate` limited by
/// `resourceNames` covers a PUT or PATCH of that role, never a POST (whose URL names none).
pub fn check_role_object(
    authz: &dyn Authorizer,
    user: &UserInfo,
    namespace: &str,
    request_name: &str,
    new: &Role,
    old: Option<&Role>,
) -> Result<(), EscalationError> {
    let name = request_name;
    let aggregating = namespace.is_empty()
        && (has_aggregation_rule(new) || old.is_some_and(has_aggregation_rule));
    check_role_write(authz, user, namespace, name, &new.rules, aggregating)
}

/// Checks a create or update of a RoleBinding (`namespace` set) or ClusterRoleBinding
/// (`namespace` empty) referring to `role_ref`.
pub fn check_binding_write(
    rbac: &Rbac,
    authz: &dyn Authorizer,
    user: &UserInfo,
    namespace: &str,
    role_ref: &RoleRef,
) -> Result<(), EscalationError> {
    if user.in_group(SYSTEM_MASTERS) {
        return Ok(());
    }
    let resource = if role_ref.kind == "ClusterRole" {
        "clusterroles"
    } else {
        "roles"
    };
    let bind = Attributes::resource("bind", GROUP, resource, namespace).named(&role_ref.name);
    if authz.authorize(user, &bind).allowed() {
        return Ok(());
    }
    let role = rbac
        .role_rules(role_ref, namespace)
        .map_err(EscalationError)?;
    confirm_no_escalation(authz, user, namespace, &role.rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::testing::*;
    use crate::rbac::{Role, RoleBinding, Subject};
    use listwatch_runtime::Event;

    #[test]
    fn a_user_grants_only_what_it_holds() {
        let mut f = Fixture::new();
        let pods = PolicyRule::resources(["get", "list"], [""], ["pods"]);
        let secrets = PolicyRule::resources(["get"], [""], ["secrets"]);
        f.cluster_roles
            .apply(Event::Apply(role(None, "pod-reader", vec![pods.clone()])));
        f.cluster_roles.apply(Event::Apply(role(
            None,
            "secret-reader",
            vec![secrets.clone()],
        )));
        let rbac_rule =
            PolicyRule::resources(["create", "update"], [GROUP], ["roles", "rolebindings"]);
        f.roles.apply(Event::Apply(role(
            Some("demo"),
            "lead",
            vec![pods.clone(), rbac_rule],
        )));
        f.role_bindings.apply(Event::Apply(binding(
            Some("demo"),
            "alice-lead",
            RoleRef::role("lead"),
            vec![Subject::user("alice")],
        )));
        let rbac = f.rbac();
        let alice = UserInfo::new("alice", ["system:authenticated"]);
        assert!(
            check_role_write(
                &rbac,
                &alice,
                "demo",
                "r",
                std::slice::from_ref(&pods),
                false
            )
            .is_ok()
        );
        let err = check_role_write(
            &rbac,
            &alice,
            "demo",
            "r",
            std::slice::from_ref(&secrets),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            "user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
        );
        assert!(
            check_binding_write(
                &rbac,
                &rbac,
                &alice,
                "demo",
                &RoleRef::cluster_role("pod-reader")
            )
            .is_ok()
        );
        assert!(
            check_binding_write(
                &rbac,
                &rbac,
                &alice,
                "demo",
                &RoleRef::cluster_role("secret-reader")
            )
            .is_err()
        );
        // not in another namespace, and not cluster-wide
        assert!(
            check_role_write(
                &rbac,
                &alice,
                "other",
                "r",
                std::slice::from_ref(&pods),
                false
            )
            .is_err()
        );
        assert!(check_role_write(&rbac, &alice, "", "r", &[pods], false).is_err());
        // the bind verb on the role lets a user bind it without holding it
        f.roles.apply(Event::Apply(Role {
            rules: vec![
                PolicyRule::resources(["bind"], [GROUP], ["clusterroles"]).names(["secret-reader"]),
            ],
            ..role(Some("demo"), "binder", vec![])
        }));
        f.role_bindings.apply(Event::Apply(RoleBinding {
            ..binding(
                Some("demo"),
                "alice-binder",
                RoleRef::role("binder"),
                vec![Subject::user("alice")],
            )
        }));
        assert!(
            check_binding_write(
                &rbac,
                &rbac,
                &alice,
                "demo",
                &RoleRef::cluster_role("secret-reader")
            )
            .is_ok()
        );
        let root = UserInfo::new("root", [SYSTEM_MASTERS]);
        assert!(check_role_write(&rbac, &root, "", "x", &[secrets], false).is_ok());
    }
}
