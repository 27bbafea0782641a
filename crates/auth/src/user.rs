//! Who is making a request: upstream's `user.Info`, and the well-known names and groups.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The user of unauthenticated requests (`--anonymous-auth`).
pub const ANONYMOUS: &str = "system:anonymous";
/// The group every anonymous request is in.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group every authenticated request is in.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// Members are allowed everything (upstream's `SystemPrivilegedGroup`).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The user every request is served as when no authenticator is configured (loopback only,
/// like upstream's old insecure port).
pub const INSECURE_SUPERUSER: &str = "system:unsecured";
/// Prefix of ServiceAccount user names: `system:serviceaccount:NAMESPACE:NAME`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Group of every ServiceAccount.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// An authenticated (or anonymous) identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name, e.g. `alice` or `system:serviceaccount:demo:builder`.
    #[serde(rename = "username", default)]
    pub name: String,
    /// A unique id, when the authenticator knows one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Group names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes (e.g. the ServiceAccount token's id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new<I, S>(name: impl Into<String>, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            name: name.into(),
            uid: String::new(),
            groups: groups.into_iter().map(Into::into).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    /// `system:unsecured` in `system:masters`: every request when nothing authenticates.
    pub fn insecure_superuser() -> Self {
        Self::new(INSECURE_SUPERUSER, [SYSTEM_MASTERS, ALL_AUTHENTICATED])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Adds `system:authenticated` unless the user already is in it or in
    /// `system:unauthenticated` (upstream's `AuthenticatedGroupAdder`).
    #[must_use]
    pub fn with_authenticated_group(mut self) -> Self {
        if !self.in_group(ALL_AUTHENTICATED) && !self.in_group(ALL_UNAUTHENTICATED) {
            self.groups.push(ALL_AUTHENTICATED.to_owned());
        }
        self
    }

    /// `(namespace, name)` when this is a ServiceAccount's user name.
    pub fn service_account(&self) -> Option<(&str, &str)> {
        split_service_account(&self.name)
    }

    /// The user as a metric label, from a small fixed set so that label cardinality stays
    /// bounded (upstream's `compressUsername`, with this server's own identities): well-known
    /// `system:` users verbatim, `serviceaccount`, `email_id` for names with `@`, else
    /// `other`.
    pub fn metric_label(&self) -> &'static str {
        match self.name.as_str() {
            ANONYMOUS => ANONYMOUS,
            INSECURE_SUPERUSER => INSECURE_SUPERUSER,
            "system:admin" => "system:admin",
            "kubernetes-admin" => "kubernetes-admin",
            n if n.starts_with(SERVICE_ACCOUNT_PREFIX) => "serviceaccount",
            n if n.contains('@') => "email_id",
            _ => "other",
        }
    }
}

/// `system:serviceaccount:NS:NAME` → `(NS, NAME)`.
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// The user name of a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once_and_never_to_anonymous() {
        let u = UserInfo::new("alice", ["dev"]).with_authenticated_group();
        assert_eq!(u.groups, ["dev", ALL_AUTHENTICATED]);
        let u = u.with_authenticated_group();
        assert_eq!(u.groups.len(), 2);
        let a = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(a.groups, [ALL_UNAUTHENTICATED]);
    }

    #[test]
    fn service_account_names_split() {
        assert_eq!(
            split_service_account("system:serviceaccount:demo:builder"),
            Some(("demo", "builder"))
        );
        assert_eq!(split_service_account("system:serviceaccount:demo"), None);
        assert_eq!(split_service_account("system:serviceaccount::x"), None);
        assert_eq!(split_service_account("system:serviceaccount:a:b:c"), None);
        assert_eq!(split_service_account("alice"), None);
    }

    #[test]
    fn metric_labels_are_a_fixed_set() {
        assert_eq!(UserInfo::new("alice", [""; 0]).metric_label(), "other");
        assert_eq!(UserInfo::new("a@b.c", [""; 0]).metric_label(), "email_id");
        assert_eq!(
            UserInfo::new(service_account_user("x", "y"), [""; 0]).metric_label(),
            "serviceaccount"
        );
        assert_eq!(UserInfo::anonymous().metric_label(), ANONYMOUS);
    }
}
