//! Property test: the indexed RBAC authorizer against a naive evaluation that scans every
//! binding and re-implements upstream's matching rules independently, over random rule
//! sets, bindings and requests.

use std::collections::BTreeMap;

use listwatch_runtime::Event;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

use super::testing::*;
use super::*;
use crate::authz::{Attributes, Authorizer};
use crate::user::UserInfo;

const VERBS: &[&str] = &["get", "list", "create", "*"];
const GROUPS: &[&str] = &["", "apps", "*"];
const RESOURCES: &[&str] = &[
    "pods",
    "pods/status",
    "deployments",
    "*",
    "*/status",
    "deployments/scale",
];
const NAMES: &[&str] = &["a", "b"];
const URLS: &[&str] = &["/healthz", "/api/*", "*", "/api"];
const NAMESPACES: &[&str] = &["n0", "n1"];
const USERS: &[&str] = &[
    "u0",
    "u1",
    "system:serviceaccount:n0:sa",
    "system:serviceaccount:n1:sa",
];
const UGROUPS: &[&str] = &["g0", "g1", "g2"];

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(list).prop_map(str::to_owned)
}

fn some(list: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(list, 1..=2)
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn rule() -> impl Strategy<Value = PolicyRule> {
    prop_oneof![
        4 => (some(VERBS), some(GROUPS), some(RESOURCES), proptest::option::weighted(0.3, some(NAMES)))
            .prop_map(|(v, g, r, n)| PolicyRule {
                verbs: v,
                api_groups: g,
                resources: r,
                resource_names: n.unwrap_or_default(),
                non_resource_urls: vec![],
            }),
        1 => (some(VERBS), some(URLS)).prop_map(|(v, u)| PolicyRule {
            verbs: v,
            non_resource_urls: u,
            ..PolicyRule::default()
        }),
    ]
}

fn subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        pick(&["u0", "u1"]).prop_map(|n| Subject::user(&n)),
        pick(UGROUPS).prop_map(|n| Subject::group(&n)),
        (pick(&["", "n0", "n1"])).prop_map(|ns| Subject::service_account(&ns, "sa")),
    ]
}

#[derive(Debug, Clone)]
struct World {
    cluster_roles: Vec<(String, Vec<PolicyRule>)>,
    roles: Vec<(String, String, Vec<PolicyRule>)>,
    crbs: Vec<(String, RoleRef, Vec<Subject>)>,
    rbs: Vec<(String, String, RoleRef, Vec<Subject>)>,
}

fn role_ref() -> impl Strategy<Value = RoleRef> {
    prop_oneof![
        pick(&["c0", "c1", "c2", "missing"]).prop_map(|n| RoleRef::cluster_role(&n)),
        pick(&["r0", "r1", "missing"]).prop_map(|n| RoleRef::role(&n)),
    ]
}

fn world() -> impl Strategy<Value = World> {
    (
        proptest::collection::vec(proptest::collection::vec(rule(), 0..3), 3),
        proptest::collection::vec(
            (
                pick(NAMESPACES),
                pick(&["r0", "r1"]),
                proptest::collection::vec(rule(), 0..3),
            ),
            0..4,
        ),
        proptest::collection::vec(
            (role_ref(), proptest::collection::vec(subject(), 1..3)),
            0..4,
        ),
        proptest::collection::vec(
            (
                pick(NAMESPACES),
                role_ref(),
                proptest::collection::vec(subject(), 1..3),
            ),
            0..5,
        ),
    )
        .prop_map(|(crs, roles, crbs, rbs)| World {
            cluster_roles: crs
                .into_iter()
                .enumerate()
                .map(|(i, r)| (format!("c{i}"), r))
                .collect(),
            roles,
            crbs: crbs
                .into_iter()
                .enumerate()
                .map(|(i, (r, s))| (format!("crb{i}"), r, s))
                .collect(),
            rbs: rbs
                .into_iter()
                .enumerate()
                .map(|(i, (ns, r, s))| (ns, format!("rb{i}"), r, s))
                .collect(),
        })
}

fn request() -> impl Strategy<Value = (UserInfo, Attributes)> {
    let user = (pick(USERS), proptest::sample::subsequence(UGROUPS, 0..=2))
        .prop_map(|(n, g)| UserInfo::new(n, g));
    let attrs = prop_oneof![
        4 => (pick(&["get", "list", "create", "delete"]), pick(&["", "apps", "batch"]),
              pick(&["pods", "deployments", "secrets"]), pick(&["", "status", "scale"]),
              pick(&["", "a", "c"]), pick(&["", "n0", "n1"]))
            .prop_map(|(v, g, r, s, n, ns)| Attributes::resource(&v, &g, &r, &ns).with_subresource(&s).named(&n)),
        1 => (pick(&["get", "post"]), pick(&["/healthz", "/api", "/api/v1", "/metrics"]))
            .prop_map(|(v, p)| Attributes::non_resource(&v, &p)),
    ];
    (user, attrs)
}

// ---- the naive reference: upstream's helpers, written out plainly ----

fn naive_rule_allows(r: &PolicyRule, a: &Attributes) -> bool {
    let verb = r.verbs.iter().any(|v| v == "*" || *v == a.verb);
    if !a.resource_request {
        let url = r.non_resource_urls.iter().any(|u| {
            u == "*"
                || *u == a.path
                || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*')))
        });
        return verb && url;
    }
    let group = r.api_groups.iter().any(|g| g == "*" || *g == a.api_group);
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource = r.resources.iter().any(|x| {
        x == "*"
            || *x == combined
            || (!a.subresource.is_empty() && *x == format!("*/{}", a.subresource))
    });
    let name = r.resource_names.is_empty() || r.resource_names.contains(&a.name);
    verb && group && resource && name
}

fn naive_applies(s: &Subject, u: &UserInfo, ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == u.name,
        "Group" => u.groups.contains(&s.name),
        "ServiceAccount" => {
            let sns = if s.namespace.is_empty() {
                ns
            } else {
                &s.namespace
            };
            u.name == format!("system:serviceaccount:{sns}:{}", s.name)
        }
        _ => false,
    }
}

fn naive(w: &World, u: &UserInfo, a: &Attributes) -> bool {
    let cluster: BTreeMap<&str, &Vec<PolicyRule>> = w
        .cluster_roles
        .iter()
        .map(|(n, r)| (n.as_str(), r))
        .collect();
    let lookup = |r: &RoleRef, ns: &str| -> Option<Vec<PolicyRule>> {
        match r.kind.as_str() {
            "ClusterRole" => cluster.get(r.name.as_str()).map(|x| (*x).clone()),
            _ => w
                .roles
                .iter()
                .rfind(|(rns, n, _)| rns == ns && *n == r.name)
                .map(|(_, _, rules)| rules.clone()),
        }
    };
    for (_, rr, subjects) in &w.crbs {
        if rr.kind != "ClusterRole" || !subjects.iter().any(|s| naive_applies(s, u, "")) {
            continue;
        }
        if lookup(rr, "").is_some_and(|rules| rules.iter().any(|r| naive_rule_allows(r, a))) {
            return true;
        }
    }
    if !a.resource_request || a.namespace.is_empty() {
        return false;
    }
    for (ns, _, rr, subjects) in &w.rbs {
        if *ns != a.namespace || !subjects.iter().any(|s| naive_applies(s, u, ns)) {
            continue;
        }
        if lookup(rr, ns).is_some_and(|rules| rules.iter().any(|r| naive_rule_allows(r, a))) {
            return true;
        }
    }
    false
}

fn build(w: &World) -> (Fixture, Rbac) {
    let mut f = Fixture::new();
    for (n, rules) in &w.cluster_roles {
        f.cluster_roles
            .apply(Event::Apply(role(None, n, rules.clone())));
    }
    for (ns, n, rules) in &w.roles {
        f.roles
            .apply(Event::Apply(role(Some(ns), n, rules.clone())));
    }
    for (n, rr, s) in &w.crbs {
        f.cluster_role_bindings
            .apply(Event::Apply(binding(None, n, rr.clone(), s.clone())));
    }
    for (ns, n, rr, s) in &w.rbs {
        f.role_bindings
            .apply(Event::Apply(binding(Some(ns), n, rr.clone(), s.clone())));
    }
    let rbac = f.rbac();
    (f, rbac)
}

fn case() -> impl Strategy<Value = (World, Vec<(UserInfo, Attributes)>)> {
    (world(), proptest::collection::vec(request(), 32))
}

proptest! {
    #![proptest_config(Config { cases: 512, ..Config::default() })]
    #[test]
    fn indexed_authorizer_agrees_with_naive_evaluation((w, requests) in case()) {
        let (_f, rbac) = build(&w);
        for (u, a) in &requests {
            let got = rbac.authorize(u, a).allowed();
            prop_assert_eq!(got, naive(&w, u, a), "user {:?} attrs {:?}", u, a);
            // rules_for agrees with authorize for resource requests in a namespace
            if a.resource_request && !a.namespace.is_empty() && got {
                let rules = rbac.rules_for(u, &a.namespace);
                prop_assert!(rules.resource_rules.iter().any(|r| rules::allows(r, a)));
            }
        }
    }
}

/// The generator reaches every outcome the property claims: allowed through a
/// ClusterRoleBinding and through a RoleBinding, by user, group and ServiceAccount, on a
/// subresource and a non-resource path, and denied.
#[test]
fn generator_reaches_every_outcome() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeMap::<&str, usize>::new();
    for _ in 0..400 {
        let (w, requests) = case()
            .new_tree(&mut runner)
            .map(|t| t.current())
            .unwrap_or_else(|e| panic!("{e}"));
        let (_f, rbac) = build(&w);
        for (u, a) in &requests {
            let d = rbac.authorize(u, a);
            let reason = d.reason().to_string();
            let mut hit = |k| *seen.entry(k).or_default() += 1;
            if !d.allowed() {
                hit("denied");
                continue;
            }
            hit("allowed");
            if reason.contains("ClusterRoleBinding") {
                hit("cluster binding")
            }
            if reason.contains("by RoleBinding") {
                hit("role binding")
            }
            if reason.contains("to User") {
                hit("user")
            }
            if reason.contains("to Group") {
                hit("group")
            }
            if reason.contains("to ServiceAccount") {
                hit("service account")
            }
            if !a.subresource.is_empty() {
                hit("subresource")
            }
            if !a.resource_request {
                hit("path")
            }
            if !a.name.is_empty() {
                hit("named")
            }
        }
    }
    for k in [
        "denied",
        "allowed",
        "cluster binding",
        "role binding",
        "user",
        "group",
        "service account",
        "subresource",
        "path",
        "named",
    ] {
        assert!(
            seen.get(k).copied().unwrap_or(0) > 0,
            "never reached: {k} ({seen:?})"
        );
    }
}
