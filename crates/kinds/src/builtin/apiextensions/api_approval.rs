//! Upstream's API approval rule for CRDs in the Kubernetes community's groups
//! (apiextensions-apiserver `validateAPIApproval`, KEP 1111): a CRD whose group is `k8s.io`,
//! `kubernetes.io` or a subdomain of either must carry the `api-approved.kubernetes.io`
//! annotation, with the URL of its approval or a reason starting with `unapproved`.
//!
//! Without it an insider who may create CRDs could add kinds beside the built-in ones in
//! `rbac.authorization.k8s.io`, `authorization.k8s.io` and the other protected groups
//! (where names of review kinds the server answers are not in its kind set), which
//! upstream refuses. An update that leaves the annotation's state as it was (even missing,
//! for CRDs stored before the rule) is not refused, as upstream ratchets.

use serde_json::Value;

use crate::FieldError;

/// The annotation recording a protected group's API approval.
pub const ANNOTATION: &str = "api-approved.kubernetes.io";

/// A reference to the approval process, in upstream's messages.
const KEP: &str = "see https://github.com/kubernetes/enhancements/pull/1111";

/// Upstream's `IsProtectedCommunityGroup`.
pub fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// The state of the annotation (upstream's `APIApprovalState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Missing,
    Bypassed,
    Approved,
    Invalid,
}

/// Whether `v` parses as Go's `url.ParseRequestURI` with a scheme and a host: an absolute
/// URL `scheme://host[...]`.
fn is_approval_url(v: &str) -> bool {
    let Some((scheme, rest)) = v.split_once("://") else {
        return false;
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    scheme_ok && !host.is_empty() && !v.chars().any(|c| c.is_control() || c == ' ')
}

fn state(crd: &Value) -> State {
    let v = crd
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("");
    if v.is_empty() {
        State::Missing
    } else if v.starts_with("unapproved") {
        State::Bypassed
    } else if is_approval_url(v) {
        State::Approved
    } else {
        State::Invalid
    }
}

/// The approval errors of `new` (`old`: the stored CRD, on update), in upstream's words.
pub fn validate(new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let group = new
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !is_protected_group(group) {
        return Vec::new();
    }
    let now = state(new);
    if old.is_some_and(|o| state(o) == now) {
        return Vec::new();
    }
    let field = format!("metadata.annotations[{ANNOTATION}]");
    match now {
        State::Approved | State::Bypassed => Vec::new(),
        State::Missing => vec![FieldError::required(
            &field,
            format!("protected groups must have approval annotation {ANNOTATION:?}, {KEP}"),
        )],
        State::Invalid => {
            let value = new
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(ANNOTATION))
                .cloned()
                .unwrap_or(Value::Null);
            vec![FieldError::invalid(
                &field,
                &value,
                format!(
                    "protected groups must have approval annotation {ANNOTATION:?} with either a URL or a reason starting with \"unapproved\", {KEP}"
                ),
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn crd(group: &str, approval: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": format!("things.{group}")},
            "spec": {"group": group}});
        if let Some(a) = approval {
            c["metadata"]["annotations"] = json!({ANNOTATION: a});
        }
        c
    }

    #[test]
    fn protected_groups_need_a_url_or_an_unapproved_reason() {
        for g in [
            "k8s.io",
            "rbac.authorization.k8s.io",
            "kubernetes.io",
            "x.kubernetes.io",
        ] {
            let e = validate(&crd(g, None), None);
            assert_eq!(e.len(), 1, "{g}");
            assert_eq!(
                e[0].field,
                "metadata.annotations[api-approved.kubernetes.io]"
            );
            assert!(
                validate(
                    &crd(g, Some("https://github.com/kubernetes/kubernetes/pull/1")),
                    None
                )
                .is_empty()
            );
            assert!(validate(&crd(g, Some("unapproved, experimental")), None).is_empty());
            assert_eq!(validate(&crd(g, Some("yes please")), None).len(), 1);
            assert_eq!(validate(&crd(g, Some("https://")), None).len(), 1);
        }
        for g in ["example.com", "k8s.io.example.com", "notk8s.io"] {
            assert!(validate(&crd(g, None), None).is_empty(), "{g}");
        }
    }

    #[test]
    fn an_update_keeping_the_state_is_not_refused() {
        let old = crd("x.k8s.io", None);
        assert!(validate(&crd("x.k8s.io", None), Some(&old)).is_empty());
        assert_eq!(
            validate(&crd("x.k8s.io", Some("nope")), Some(&old)).len(),
            1
        );
        let approved = crd("x.k8s.io", Some("unapproved"));
        assert_eq!(validate(&crd("x.k8s.io", None), Some(&approved)).len(), 1);
    }
}
