//! RBAC as upstream's `rbac.authorization.k8s.io/v1`: the authorizer, the escalation checks
//! on writes of roles and bindings, the bootstrap policy and ClusterRole aggregation.
//!
//! The authorizer reads four informer [`Store`]s (Roles, ClusterRoles, RoleBindings,
//! ClusterRoleBindings) kept by this project's own client crate; it never reads storage.
//! Bindings are indexed by subject ([`subject_index`]), so a request looks up only the
//! bindings naming its user or one of its groups, whatever the number of bindings.
//!
//! Invariants (tests hold these, including a property test against a naive evaluation of
//! every binding):
//! - a request is allowed iff some rule of some role bound to the user (by name, by group,
//!   or as a ServiceAccount) allows it: ClusterRoleBindings everywhere, RoleBindings in their
//!   namespace only;
//! - RBAC never denies: it allows or has no opinion (the chain then forbids);
//! - a binding to a missing role grants nothing and is reported in the reason.

use std::sync::Arc;

use listwatch_runtime::{IndexFn, Store};

use crate::authz::{Attributes, Authorizer, Decision, Rules};
use crate::user::UserInfo;

mod aggregate;
pub mod bootstrap;
mod escalation;
pub mod rules;
mod types;
mod validate;

#[cfg(test)]
mod escalation_props;
#[cfg(test)]
mod reference;

pub use aggregate::{aggregated_rules, aggregation_pass};
pub use escalation::{
    AGGREGATION_NEEDS_FULL_AUTHORITY, EscalationError, check_binding_write, check_role_object,
    check_role_write, full_authority, has_aggregation_rule,
};
pub use types::{
    AggregationRule, GROUP, LabelSelector, LabelSelectorRequirement, PolicyRule, Role, RoleBinding,
    RoleRef, Subject,
};
pub use validate::{FieldError, default_subjects, validate_binding, validate_role};

/// The name of the subject index every binding store must have ([`subject_index`]).
pub const SUBJECT_INDEX: &str = "subject";

/// Index of bindings by subject: `u:NAME` for users and ServiceAccounts (as their user
/// name), `g:NAME` for groups, prefixed with `NAMESPACE/` for RoleBindings. A ServiceAccount
/// subject without a namespace takes the binding's.
pub fn subject_index() -> (String, IndexFn<RoleBinding>) {
    (
        SUBJECT_INDEX.to_owned(),
        Arc::new(|b: &RoleBinding| {
            let ns = b.metadata.namespace.as_deref().unwrap_or("");
            b.subjects
                .iter()
                .filter_map(|s| subject_key(s, ns))
                .map(|k| {
                    if ns.is_empty() {
                        k
                    } else {
                        format!("{ns}/{k}")
                    }
                })
                .collect()
        }),
    )
}

fn subject_key(s: &Subject, binding_ns: &str) -> Option<String> {
    match s.kind.as_str() {
        "User" => Some(format!("u:{}", s.name)),
        "Group" => Some(format!("g:{}", s.name)),
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() {
                binding_ns
            } else {
                &s.namespace
            };
            Some(format!(
                "u:{}",
                crate::user::service_account_user(ns, &s.name)
            ))
        }
        _ => None,
    }
}

/// Whether a binding's subject names the user (upstream's `appliesToUser`).
pub fn subject_applies(s: &Subject, user: &UserInfo, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => user.name == s.name,
        "Group" => user.in_group(&s.name),
        "ServiceAccount" => subject_key(s, binding_ns).is_some_and(|k| k[2..] == user.name),
        _ => false,
    }
}

/// The four stores the authorizer reads. The binding stores must carry [`subject_index`].
#[derive(Clone)]
pub struct RbacStores {
    /// Roles.
    pub roles: Store<Role>,
    /// ClusterRoles.
    pub cluster_roles: Store<Role>,
    /// RoleBindings.
    pub role_bindings: Store<RoleBinding>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Store<RoleBinding>,
}

/// Where a rule came from, for the reason of a decision.
struct Source<'a> {
    binding: &'a Arc<RoleBinding>,
    subject: usize,
}

/// `RBAC: allowed by …`, formatted when read.
struct AllowedBy {
    binding: Arc<RoleBinding>,
    subject: usize,
}

impl std::fmt::Display for AllowedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.binding;
        let Some(s) = b.subjects.get(self.subject) else {
            return Ok(());
        };
        f.write_str("RBAC: allowed by ")?;
        let name = b.metadata.name.as_deref().unwrap_or("");
        match b.metadata.namespace.as_deref() {
            Some(ns) => write!(f, "RoleBinding \"{name}/{ns}\"")?,
            None => write!(f, "ClusterRoleBinding {name:?}")?,
        }
        write!(f, " of {} {:?} to ", b.role_ref.kind, b.role_ref.name)?;
        if s.kind == "ServiceAccount" {
            write!(f, "ServiceAccount \"{}/{}\"", s.name, s.namespace)
        } else {
            write!(f, "{} {:?}", s.kind, s.name)
        }
    }
}

/// The RBAC authorizer.
#[derive(Clone)]
pub struct Rbac {
    stores: RbacStores,
}

impl std::fmt::Debug for Rbac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rbac")
            .field(
                "cluster_role_bindings",
                &self.stores.cluster_role_bindings.len(),
            )
            .field("role_bindings", &self.stores.role_bindings.len())
            .finish_non_exhaustive()
    }
}

impl Rbac {
    /// An authorizer over the stores.
    pub fn new(stores: RbacStores) -> Self {
        Self { stores }
    }

    /// The stores.
    pub fn stores(&self) -> &RbacStores {
        &self.stores
    }

    /// Whether every store has completed its first list.
    pub fn has_synced(&self) -> bool {
        let s = &self.stores;
        s.roles.has_synced()
            && s.cluster_roles.has_synced()
            && s.role_bindings.has_synced()
            && s.cluster_role_bindings.has_synced()
    }

    /// The rules a role reference grants in `namespace` (upstream's
    /// `GetRoleReferenceRules`), or the not-found error upstream reports.
    pub fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Arc<Role>, String> {
        let (store, ns, resource) = match role_ref.kind.as_str() {
            "ClusterRole" => (&self.stores.cluster_roles, None, "clusterroles"),
            "Role" if !namespace.is_empty() => (&self.stores.roles, Some(namespace), "roles"),
            other => return Err(format!("unsupported role reference kind: {other:?}")),
        };
        store
            .get_by_name(ns, &role_ref.name)
            .ok_or_else(|| format!("{resource}.{GROUP} {:?} not found", role_ref.name))
    }

    /// Visits the rules that apply to `user` in `namespace` (cluster-wide first) until
    /// `visit` returns `true`; returns the errors met (bindings to missing roles).
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        visit: &mut dyn FnMut(&Source<'_>, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let mut seen: Vec<*const RoleBinding> = Vec::new();
        let mut stores = vec![(&self.stores.cluster_role_bindings, "")];
        if !namespace.is_empty() {
            stores.push((&self.stores.role_bindings, namespace));
        }
        let mut key = String::new();
        for (store, ns) in stores {
            let names =
                std::iter::once(("u:", &user.name)).chain(user.groups.iter().map(|g| ("g:", g)));
            for (kind, name) in names {
                key.clear();
                if !ns.is_empty() {
                    key.push_str(ns);
                    key.push('/');
                }
                key.push_str(kind);
                key.push_str(name);
                let bindings = store.by_index(SUBJECT_INDEX, &key).unwrap_or_default();
                for b in &bindings {
                    let bns = b.metadata.namespace.as_deref().unwrap_or("");
                    if bns != ns || seen.contains(&Arc::as_ptr(b)) {
                        continue;
                    }
                    seen.push(Arc::as_ptr(b));
                    let Some(subject) = b
                        .subjects
                        .iter()
                        .position(|s| subject_applies(s, user, bns))
                    else {
                        continue;
                    };
                    if ns.is_empty() && b.role_ref.kind != "ClusterRole" {
                        errors.push(format!(
                            "ClusterRoleBinding {:?} refers to a {}",
                            b.metadata.name.as_deref().unwrap_or(""),
                            b.role_ref.kind
                        ));
                        continue;
                    }
                    let role = match self.role_rules(&b.role_ref, ns) {
                        Ok(r) => r,
                        Err(e) => {
                            errors.push(e);
                            continue;
                        }
                    };
                    let source = Source {
                        binding: b,
                        subject,
                    };
                    for rule in &role.rules {
                        if visit(&source, rule) {
                            return errors;
                        }
                    }
                }
            }
        }
        errors
    }
}

fn aggregate_errors(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        let mut allowed_by = None;
        // Non-resource rules are cluster-wide: only ClusterRoleBindings grant them.
        let ns = if attrs.resource_request {
            attrs.namespace.as_str()
        } else {
            ""
        };
        let errors = self.visit(user, ns, &mut |source, rule| {
            if rules::allows(rule, attrs) {
                allowed_by = Some(AllowedBy {
                    binding: Arc::clone(source.binding),
                    subject: source.subject,
                });
                true
            } else {
                false
            }
        });
        match allowed_by {
            Some(a) => Decision::Allow(crate::authz::Reason::lazy(Arc::new(a))),
            None if errors.is_empty() => Decision::NoOpinion(crate::authz::Reason::default()),
            None => Decision::NoOpinion(format!("RBAC: {}", aggregate_errors(&errors)).into()),
        }
    }

    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let mut out = Rules::default();
        let errors = self.visit(user, namespace, &mut |_, rule| {
            let target = if rule.non_resource_urls.is_empty() {
                &mut out.resource_rules
            } else {
                &mut out.non_resource_rules
            };
            if !target.contains(rule) {
                target.push(rule.clone());
            }
            false
        });
        out.incomplete = !errors.is_empty();
        out.errors = errors;
        out
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Stores filled directly through their writers, for tests and benches.
    use super::*;
    use listwatch_runtime::{Event, Writer};

    /// Writers of the four stores.
    pub(crate) struct Fixture {
        pub roles: Writer<Role>,
        pub cluster_roles: Writer<Role>,
        pub role_bindings: Writer<RoleBinding>,
        pub cluster_role_bindings: Writer<RoleBinding>,
    }

    impl Fixture {
        pub(crate) fn new() -> Self {
            let mut f = Self {
                roles: Writer::default(),
                cluster_roles: Writer::default(),
                role_bindings: Writer::new(vec![subject_index()]),
                cluster_role_bindings: Writer::new(vec![subject_index()]),
            };
            for w in [&mut f.roles, &mut f.cluster_roles] {
                w.apply(Event::Init);
                w.apply(Event::InitDone {
                    resource_version: "1".into(),
                });
            }
            for w in [&mut f.role_bindings, &mut f.cluster_role_bindings] {
                w.apply(Event::Init);
                w.apply(Event::InitDone {
                    resource_version: "1".into(),
                });
            }
            f
        }

        pub(crate) fn rbac(&self) -> Rbac {
            Rbac::new(RbacStores {
                roles: self.roles.store(),
                cluster_roles: self.cluster_roles.store(),
                role_bindings: self.role_bindings.store(),
                cluster_role_bindings: self.cluster_role_bindings.store(),
            })
        }
    }

    pub(crate) fn meta(ns: Option<&str>, name: &str) -> listwatch_api::ObjectMeta {
        listwatch_api::ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..Default::default()
        }
    }

    pub(crate) fn role(ns: Option<&str>, name: &str, rules: Vec<PolicyRule>) -> Role {
        Role {
            metadata: meta(ns, name),
            rules,
            aggregation_rule: None,
        }
    }

    pub(crate) fn binding(
        ns: Option<&str>,
        name: &str,
        role_ref: RoleRef,
        subjects: Vec<Subject>,
    ) -> RoleBinding {
        RoleBinding {
            metadata: meta(ns, name),
            subjects,
            role_ref,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use listwatch_runtime::Event;

    fn alice() -> UserInfo {
        UserInfo::new("alice", ["dev", "system:authenticated"])
    }

    #[test]
    fn namespaced_role_allows_only_in_its_namespace() {
        let mut f = Fixture::new();
        f.roles.apply(Event::Apply(role(
            Some("demo"),
            "reader",
            vec![PolicyRule::resources(
                ["get", "list", "watch"],
                [""],
                ["pods"],
            )],
        )));
        f.role_bindings.apply(Event::Apply(binding(
            Some("demo"),
            "alice-reads",
            RoleRef::role("reader"),
            vec![Subject::user("alice")],
        )));
        let rbac = f.rbac();
        let list = |ns: &str| Attributes::resource("list", "", "pods", ns);
        assert!(rbac.authorize(&alice(), &list("demo")).allowed());
        assert_eq!(
            rbac.authorize(&alice(), &list("demo")).reason().to_string(),
            r#"RBAC: allowed by RoleBinding "alice-reads/demo" of Role "reader" to User "alice""#
        );
        assert!(!rbac.authorize(&alice(), &list("other")).allowed());
        assert!(!rbac.authorize(&alice(), &list("")).allowed());
        let bob = UserInfo::new("bob", ["dev"]);
        assert!(!rbac.authorize(&bob, &list("demo")).allowed());
    }

    #[test]
    fn groups_service_accounts_and_cluster_roles() {
        let mut f = Fixture::new();
        f.cluster_roles.apply(Event::Apply(role(
            None,
            "view",
            vec![PolicyRule::resources(["get", "list"], ["*"], ["*"])],
        )));
        f.cluster_role_bindings.apply(Event::Apply(binding(
            None,
            "devs-view",
            RoleRef::cluster_role("view"),
            vec![Subject::group("dev")],
        )));
        f.role_bindings.apply(Event::Apply(binding(
            Some("ci"),
            "builder-view",
            RoleRef::cluster_role("view"),
            vec![Subject {
                namespace: String::new(),
                ..Subject::service_account("", "builder")
            }],
        )));
        let rbac = f.rbac();
        assert!(
            rbac.authorize(
                &alice(),
                &Attributes::resource("list", "apps", "deployments", "")
            )
            .allowed()
        );
        let sa = UserInfo::new(crate::user::service_account_user("ci", "builder"), [""; 0]);
        assert!(
            rbac.authorize(&sa, &Attributes::resource("get", "", "pods", "ci"))
                .allowed()
        );
        assert!(
            !rbac
                .authorize(&sa, &Attributes::resource("get", "", "pods", "other"))
                .allowed()
        );
        let other_sa = UserInfo::new(crate::user::service_account_user("x", "builder"), [""; 0]);
        assert!(
            !rbac
                .authorize(&other_sa, &Attributes::resource("get", "", "pods", "ci"))
                .allowed()
        );
    }

    #[test]
    fn missing_role_is_reported_and_grants_nothing() {
        let mut f = Fixture::new();
        f.cluster_role_bindings.apply(Event::Apply(binding(
            None,
            "dangling",
            RoleRef::cluster_role("gone"),
            vec![Subject::user("alice")],
        )));
        let d = f
            .rbac()
            .authorize(&alice(), &Attributes::resource("get", "", "pods", "x"));
        assert_eq!(
            d,
            Decision::NoOpinion(
                r#"RBAC: clusterroles.rbac.authorization.k8s.io "gone" not found"#.into()
            )
        );
    }

    #[test]
    fn rules_for_collects_cluster_and_namespace_rules_once() {
        let mut f = Fixture::new();
        let r = PolicyRule::resources(["get"], [""], ["pods"]);
        f.cluster_roles
            .apply(Event::Apply(role(None, "a", vec![r.clone()])));
        f.cluster_roles.apply(Event::Apply(role(
            None,
            "urls",
            vec![PolicyRule::non_resource(["get"], ["/healthz"])],
        )));
        for (ns, name, role) in [
            (None, "c1", "a"),
            (None, "c2", "urls"),
            (Some("demo"), "r1", "a"),
        ] {
            let b = binding(
                ns,
                name,
                RoleRef::cluster_role(role),
                vec![Subject::user("alice"), Subject::group("dev")],
            );
            if ns.is_some() {
                f.role_bindings.apply(Event::Apply(b));
            } else {
                f.cluster_role_bindings.apply(Event::Apply(b));
            }
        }
        let rules = f.rbac().rules_for(&alice(), "demo");
        assert_eq!(rules.resource_rules, vec![r]);
        assert_eq!(rules.non_resource_rules.len(), 1);
        assert!(!rules.incomplete);
    }
}
