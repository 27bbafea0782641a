//! Authorization: what a request asks to do ([`Attributes`]), the [`Authorizer`] interface,
//! the chain of `--authorization-mode`, and upstream's 403 message.
//!
//! Invariants (upstream's union authorizer):
//! - the chain asks each authorizer in order; the first `Allow` or `Deny` decides;
//! - when every authorizer has no opinion, the request is forbidden;
//! - members of `system:masters` are allowed everything ([`PrivilegedGroups`], first in
//!   every chain the server builds).

use std::sync::Arc;

use listwatch_api::echo::echo;
use listwatch_api::status::{Status, StatusDetails};

use crate::rbac::PolicyRule;
use crate::user::{SYSTEM_MASTERS, UserInfo};

/// What a request asks to do, as upstream's `authorizer.Attributes` (less the user).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get list watch create update patch delete deletecollection` for resources; the
    /// lower-case HTTP method for other paths.
    pub verb: String,
    /// Whether this is a request for an API resource (else a non-resource path).
    pub resource_request: bool,
    /// The namespace, `""` for cluster-scoped requests.
    pub namespace: String,
    /// The API group, `""` for the core group.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The object name, when the request names one.
    pub name: String,
    /// The request path (used for non-resource requests).
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub fn resource(verb: &str, api_group: &str, resource: &str, namespace: &str) -> Self {
        Self {
            verb: verb.into(),
            resource_request: true,
            namespace: namespace.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            ..Self::default()
        }
    }

    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Self {
            verb: verb.into(),
            path: path.into(),
            ..Self::default()
        }
    }

    /// Sets the object name.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the subresource.
    #[must_use]
    pub fn with_subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.into();
        self
    }

    /// `resource` or `resource/subresource`, as RBAC rules name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// Why an authorizer decided as it did. Formatted only when someone reads it (a 403, an
/// audit annotation), so that deciding allocates nothing for it.
#[derive(Clone, Default)]
pub struct Reason(Repr);

#[derive(Clone, Default)]
enum Repr {
    #[default]
    Empty,
    Text(String),
    Shown(Arc<dyn std::fmt::Display + Send + Sync>),
}

impl Reason {
    /// A reason computed when shown.
    pub fn lazy(d: Arc<dyn std::fmt::Display + Send + Sync>) -> Self {
        Self(Repr::Shown(d))
    }

    /// Whether there is no reason.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Repr::Empty => true,
            Repr::Text(t) => t.is_empty(),
            Repr::Shown(_) => false,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Empty => Ok(()),
            Repr::Text(t) => f.write_str(t),
            Repr::Shown(d) => d.fmt(f),
        }
    }
}

impl std::fmt::Debug for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Reason {}

impl From<String> for Reason {
    fn from(s: String) -> Self {
        Self(Repr::Text(s))
    }
}

impl From<&str> for Reason {
    fn from(s: &str) -> Self {
        Self(Repr::Text(s.to_owned()))
    }
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, with why.
    Allow(Reason),
    /// Explicitly denied: later authorizers are not asked.
    Deny(Reason),
    /// No opinion: the next authorizer is asked.
    NoOpinion(Reason),
}

impl Decision {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// The reason given.
    pub fn reason(&self) -> &Reason {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }
}

/// The rules a user holds in a namespace (upstream's `RuleResolver.RulesFor`), for
/// `SelfSubjectRulesReview`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Rules on resources.
    pub resource_rules: Vec<PolicyRule>,
    /// Rules on non-resource paths.
    pub non_resource_rules: Vec<PolicyRule>,
    /// Whether the list may be missing rules (an authorizer cannot enumerate).
    pub incomplete: bool,
    /// Errors met while collecting (e.g. a binding to a missing role).
    pub errors: Vec<String>,
}

impl Rules {
    /// Every permission.
    pub fn everything() -> Self {
        Self {
            resource_rules: vec![PolicyRule::resources(["*"], ["*"], ["*"])],
            non_resource_rules: vec![PolicyRule::non_resource(["*"], ["*"])],
            incomplete: false,
            errors: Vec::new(),
        }
    }
}

/// Decides whether a user may do something.
pub trait Authorizer: Send + Sync {
    /// The decision for `user` doing `attrs`.
    fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision;

    /// The rules `user` holds in `namespace` (`""`: cluster-wide rules only).
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules;
}

/// Allows everything (`--authorization-mode=AlwaysAllow`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &UserInfo, _: &Attributes) -> Decision {
        Decision::Allow(Reason::default())
    }

    fn rules_for(&self, _: &UserInfo, _: &str) -> Rules {
        Rules::everything()
    }
}

/// Denies everything (`--authorization-mode=AlwaysDeny`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysDeny;

impl Authorizer for AlwaysDeny {
    fn authorize(&self, _: &UserInfo, _: &Attributes) -> Decision {
        Decision::Deny("Everything is forbidden.".into())
    }

    fn rules_for(&self, _: &UserInfo, _: &str) -> Rules {
        Rules::default()
    }
}

/// Allows members of the given groups everything (upstream's privileged-groups
/// authorizer for `system:masters`).
#[derive(Debug, Clone)]
pub struct PrivilegedGroups(pub Vec<String>);

impl Default for PrivilegedGroups {
    fn default() -> Self {
        Self(vec![SYSTEM_MASTERS.to_owned()])
    }
}

impl PrivilegedGroups {
    fn applies(&self, user: &UserInfo) -> bool {
        self.0.iter().any(|g| user.in_group(g))
    }
}

impl Authorizer for PrivilegedGroups {
    fn authorize(&self, user: &UserInfo, _: &Attributes) -> Decision {
        if self.applies(user) {
            Decision::Allow(Reason::default())
        } else {
            Decision::NoOpinion(Reason::default())
        }
    }

    fn rules_for(&self, user: &UserInfo, _: &str) -> Rules {
        if self.applies(user) {
            Rules::everything()
        } else {
            Rules::default()
        }
    }
}

/// Authorizers asked in order (upstream's union authorizer).
#[derive(Clone, Default)]
pub struct Chain(pub Vec<Arc<dyn Authorizer>>);

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("authorizers", &self.0.len())
            .finish()
    }
}

impl Authorizer for Chain {
    fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        for a in &self.0 {
            match a.authorize(user, attrs) {
                d @ (Decision::Allow(_) | Decision::Deny(_)) => return d,
                Decision::NoOpinion(r) if !r.is_empty() => reasons.push(r.to_string()),
                Decision::NoOpinion(_) => {}
            }
        }
        if reasons.is_empty() {
            Decision::NoOpinion(Reason::default())
        } else {
            Decision::NoOpinion(reasons.join("\n").into())
        }
    }

    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let mut out = Rules::default();
        for a in &self.0 {
            let r = a.rules_for(user, namespace);
            out.resource_rules.extend(r.resource_rules);
            out.non_resource_rules.extend(r.non_resource_rules);
            out.incomplete |= r.incomplete;
            out.errors.extend(r.errors);
        }
        out
    }
}

/// Upstream's forbidden message, e.g. `User "alice" cannot list resource "pods" in API
/// group "" in the namespace "demo"`.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    if !attrs.resource_request {
        return format!(
            "User {:?} cannot {} path {:?}",
            echo(&user.name),
            echo(&attrs.verb),
            echo(&attrs.path)
        );
    }
    let resource = attrs.combined_resource();
    if attrs.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            echo(&user.name),
            echo(&attrs.verb),
            echo(&resource),
            echo(&attrs.api_group)
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            echo(&user.name),
            echo(&attrs.verb),
            echo(&resource),
            echo(&attrs.api_group),
            echo(&attrs.namespace)
        )
    }
}

/// The 403 `Status` upstream sends for a denied request, e.g. `pods is forbidden: User
/// "alice" cannot list resource "pods" in API group "" in the namespace "demo"`, with the
/// authorizer's reason appended when it gave one.
pub fn forbidden_status(user: &UserInfo, attrs: &Attributes, reason: &Reason) -> Status {
    let mut msg = forbidden_message(user, attrs);
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(&reason.to_string());
    }
    let qualified = if attrs.api_group.is_empty() {
        echo(&attrs.resource).into_owned()
    } else {
        format!("{}.{}", echo(&attrs.resource), echo(&attrs.api_group))
    };
    let message = if !attrs.resource_request || attrs.resource.is_empty() {
        format!("forbidden: {msg}")
    } else if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {msg}")
    } else {
        format!("{qualified} {:?} is forbidden: {msg}", echo(&attrs.name))
    };
    let mut status = Status::failure(403, "Forbidden", message);
    if attrs.resource_request {
        status.details = Some(StatusDetails {
            name: echo(&attrs.name).into_owned(),
            group: echo(&attrs.api_group).into_owned(),
            kind: echo(&attrs.resource).into_owned(),
            ..StatusDetails::default()
        });
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_match_upstream() {
        let alice = UserInfo::new("alice", [""; 0]);
        let s = forbidden_status(
            &alice,
            &Attributes::resource("list", "", "pods", "demo"),
            &Reason::default(),
        );
        assert_eq!(
            s.message,
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "demo""#
        );
        assert_eq!(s.code, 403);
        assert_eq!(s.reason, "Forbidden");
        assert_eq!(s.details.as_ref().map(|d| d.kind.as_str()), Some("pods"));
        let s = forbidden_status(
            &alice,
            &Attributes::resource("get", "apps", "deployments", "")
                .named("web")
                .with_subresource("scale"),
            &Reason::default(),
        );
        assert_eq!(
            s.message,
            r#"deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments/scale" in API group "apps" at the cluster scope"#
        );
        let s = forbidden_status(
            &alice,
            &Attributes::non_resource("get", "/metrics"),
            &Reason::default(),
        );
        assert_eq!(
            s.message,
            r#"forbidden: User "alice" cannot get path "/metrics""#
        );
        assert!(s.details.is_none());
    }

    struct Fixed(Decision);
    impl Authorizer for Fixed {
        fn authorize(&self, _: &UserInfo, _: &Attributes) -> Decision {
            self.0.clone()
        }
        fn rules_for(&self, _: &UserInfo, _: &str) -> Rules {
            Rules::default()
        }
    }

    #[test]
    fn chain_takes_the_first_decision() {
        let u = UserInfo::new("u", [""; 0]);
        let a = Attributes::resource("get", "", "pods", "x");
        let chain = Chain(vec![
            Arc::new(Fixed(Decision::NoOpinion("first".into()))),
            Arc::new(Fixed(Decision::Deny("no".into()))),
            Arc::new(AlwaysAllow),
        ]);
        assert_eq!(chain.authorize(&u, &a), Decision::Deny("no".into()));
        let chain = Chain(vec![
            Arc::new(Fixed(Decision::NoOpinion("first".into()))),
            Arc::new(Fixed(Decision::NoOpinion("second".into()))),
        ]);
        assert_eq!(
            chain.authorize(&u, &a),
            Decision::NoOpinion("first\nsecond".into())
        );
        let masters = UserInfo::new("root", [SYSTEM_MASTERS]);
        let chain = Chain(vec![
            Arc::new(PrivilegedGroups::default()),
            Arc::new(AlwaysDeny),
        ]);
        assert!(chain.authorize(&masters, &a).allowed());
        assert!(!chain.authorize(&u, &a).allowed());
    }
}
