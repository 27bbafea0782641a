//! Rule matching and covering, as upstream's `rbac/v1` helpers and `validation.Covers`.
//!
//! - [`allows`]: whether one rule allows a request (verbs, API groups, resources with
//!   `*` and `*/subresource`, resource names, non-resource URLs with a trailing `*`);
//! - [`covers`]: whether a set of rules grants at least everything another set grants,
//!   rule by rule after breaking each rule down into single (verb, group, resource, name)
//!   grants — the escalation check.

use crate::authz::Attributes;
use crate::rbac::PolicyRule;

const ALL: &str = "*";

fn has(list: &[String], item: &str) -> bool {
    list.iter().any(|s| s == item)
}

/// The rule's verbs include `verb` or `*`.
pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

/// The rule's API groups include `group` or `*`.
pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == ALL || g == group)
}

/// The rule's resources include `*`, the combined `resource/subresource`, or
/// `*/subresource`.
pub fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        if r == ALL {
            return true;
        }
        if subresource.is_empty() {
            return r == resource;
        }
        match r.split_once('/') {
            Some((res, sub)) => sub == subresource && (res == resource || res == ALL),
            None => false,
        }
    })
}

/// No resource names in the rule, or the request's name among them.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || (!name.is_empty() && has(&rule.resource_names, name))
}

/// The rule's non-resource URLs include `*`, the path, or a `prefix*` of it.
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|u| url_covers(u, path))
}

fn url_covers(owner: &str, path: &str) -> bool {
    owner == ALL
        || owner == path
        || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Whether `rule` allows the request `attrs`.
pub fn allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if attrs.resource_request {
        verb_matches(rule, &attrs.verb)
            && api_group_matches(rule, &attrs.api_group)
            && resource_matches(rule, &attrs.resource, &attrs.subresource)
            && resource_name_matches(rule, &attrs.name)
    } else {
        verb_matches(rule, &attrs.verb) && non_resource_url_matches(rule, &attrs.path)
    }
}

/// One rule broken into grants of a single verb on a single resource (and name) or URL.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let one = PolicyRule::resources([verb], [group], [resource]);
                if rule.resource_names.is_empty() {
                    out.push(one);
                } else {
                    for name in &rule.resource_names {
                        out.push(one.clone().names([name]));
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule::non_resource([verb], [url]));
        }
    }
    out
}

fn has_all(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(owner, w))
}

fn resource_covers(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) {
        return true;
    }
    wanted.iter().all(|w| {
        if has(owner, w) {
            return true;
        }
        match w.split_once('/') {
            Some((_, sub)) => has(owner, &format!("*/{sub}")),
            None => false,
        }
    })
}

fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resource_covers(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|u| owner.non_resource_urls.iter().any(|o| url_covers(o, u)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && urls && names
}

/// Whether `owner` grants everything `wanted` grants; the second value lists the single
/// grants that are missing (empty when covered).
pub fn covers(owner: &[PolicyRule], wanted: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let mut missing = Vec::new();
    for rule in wanted {
        for sub in breakdown(rule) {
            if !owner.iter().any(|o| rule_covers(o, &sub)) {
                missing.push(sub);
            }
        }
    }
    (missing.is_empty(), missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(verb: &str, group: &str, res: &str, sub: &str, name: &str) -> Attributes {
        Attributes::resource(verb, group, res, "ns")
            .with_subresource(sub)
            .named(name)
    }

    #[test]
    fn resources_and_subresources() {
        let r = PolicyRule::resources(["get"], [""], ["pods"]);
        assert!(allows(&r, &req("get", "", "pods", "", "")));
        assert!(!allows(&r, &req("get", "", "pods", "status", "")));
        assert!(!allows(&r, &req("list", "", "pods", "", "")));
        assert!(!allows(&r, &req("get", "apps", "pods", "", "")));
        let r = PolicyRule::resources(["get"], ["apps"], ["deployments/scale"]);
        assert!(allows(&r, &req("get", "apps", "deployments", "scale", "")));
        assert!(!allows(&r, &req("get", "apps", "deployments", "", "")));
        let r = PolicyRule::resources(["*"], ["*"], ["*/scale"]);
        assert!(allows(
            &r,
            &req("patch", "apps", "deployments", "scale", "")
        ));
        assert!(!allows(
            &r,
            &req("patch", "apps", "deployments", "status", "")
        ));
        let r = PolicyRule::resources(["*"], ["*"], ["*"]);
        assert!(allows(&r, &req("patch", "x", "y", "z", "w")));
    }

    #[test]
    fn names_and_urls() {
        let r = PolicyRule::resources(["get", "update"], [""], ["configmaps"]).names(["a"]);
        assert!(allows(&r, &req("get", "", "configmaps", "", "a")));
        assert!(!allows(&r, &req("get", "", "configmaps", "", "b")));
        assert!(!allows(&r, &req("get", "", "configmaps", "", "")));
        let r = PolicyRule::non_resource(["get"], ["/healthz", "/apis/*"]);
        assert!(allows(&r, &Attributes::non_resource("get", "/healthz")));
        assert!(allows(
            &r,
            &Attributes::non_resource("get", "/apis/apps/v1")
        ));
        assert!(!allows(&r, &Attributes::non_resource("get", "/apis")));
        assert!(!allows(&r, &Attributes::non_resource("post", "/healthz")));
        // a resource rule never allows a path, nor a path rule a resource
        assert!(!allows(
            &PolicyRule::resources(["*"], ["*"], ["*"]),
            &Attributes::non_resource("get", "/x")
        ));
        assert!(!allows(
            &PolicyRule::non_resource(["*"], ["*"]),
            &req("get", "", "pods", "", "")
        ));
    }

    #[test]
    fn covering() {
        let admin = [PolicyRule::resources(["*"], ["*"], ["*"])];
        let want = [PolicyRule::resources(
            ["get", "list"],
            ["", "apps"],
            ["pods", "deployments/scale"],
        )];
        assert!(covers(&admin, &want).0);
        let reader = [PolicyRule::resources(["get"], [""], ["pods"])];
        let (ok, missing) = covers(&reader, &want);
        assert!(!ok);
        assert_eq!(missing.len(), 7);
        let named = [PolicyRule::resources(["get"], [""], ["pods"]).names(["a"])];
        assert!(!covers(&named, &[PolicyRule::resources(["get"], [""], ["pods"])]).0);
        assert!(covers(&reader, &named).0);
        let sub = [PolicyRule::resources(["get"], [""], ["*/status"])];
        assert!(
            covers(
                &sub,
                &[PolicyRule::resources(["get"], [""], ["pods/status"])]
            )
            .0
        );
        let urls = [PolicyRule::non_resource(["get"], ["/apis/*"])];
        assert!(covers(&urls, &[PolicyRule::non_resource(["get"], ["/apis/apps"])]).0);
        assert!(!covers(&urls, &[PolicyRule::non_resource(["get"], ["/metrics"])]).0);
    }
}
