//! The escalation property test (issue 23): random Roles, ClusterRoles (with random labels
//! and aggregation selectors), RoleBindings and ClusterRoleBindings, created, updated and
//! deleted by random users who each hold random bindings. After every accepted write, and
//! after the aggregation reconciler has settled, no user may do anything it could not do
//! before unless the writer could (it granted only what it held), or the writer went
//! through `escalate` (a role it may write with any rules) or `bind` (then only what the
//! bound role allows). Upstream's `ConfirmNoEscalation`, the escalate/bind verbs and the
//! aggregationRule rule are the model; the checks run are the production ones.
//!
//! Why in process is the HTTP path: a write over HTTP is (1) authorized for its verb by the
//! authorizer chain — here [`Rbac`] itself, as no generated user is `system:masters`; (2)
//! turned into the object as it will be stored (decoding, patch, apply, defaulting — the
//! through-binary tests in `apiserver/tests/api/authz_escalation.rs` cover every such path
//! reaching the admission hook with the final object); (3) checked by the RBAC admission
//! hook, which is [`validate_role`]/[`validate_binding`] then [`check_role_object`] /
//! [`check_binding_write`] with the stored version; (4) stored, and seen by the informer
//! stores the authorizer reads — here the same [`Writer`]s; (5) gathered by the aggregation
//! reconciler, whose pass is [`aggregation_pass`]. Steps 1, 3, 4 and 5 are called here as
//! the server calls them.

use std::cell::RefCell;

use listwatch_runtime::Event;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::testing::{Fixture, binding, role};
use super::*;
use crate::authz::{Attributes, Authorizer};

const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];
const NAMESPACES: [&str; 2] = ["a", "b"];
/// Names of the roles and bindings written (the grants of the initial policy among them,
/// so that users rewrite each other's grants).
const CLUSTER_ROLE_NAMES: [&str; 5] = ["r0", "r1", "grant-u0", "grant-u1", "team"];
const ROLE_NAMES: [&str; 2] = ["r0", "r1"];
const BINDING_NAMES: [&str; 3] = ["b0", "b1", "grant-u2"];
const LABEL: &str = "example.com/aggregate";

fn user(name: &str) -> UserInfo {
    let n: usize = name.trim_start_matches('u').parse().unwrap_or(0);
    UserInfo::new(name, [format!("g{}", n % 2), "system:authenticated".into()])
}

fn rule() -> impl Strategy<Value = PolicyRule> {
    let verbs = prop::sample::subsequence(
        vec![
            "get", "list", "create", "update", "patch", "delete", "escalate", "bind", "*",
        ],
        1..=3,
    );
    let target = prop::sample::select(vec![
        ("", "pods"),
        ("", "secrets"),
        (GROUP, "roles"),
        (GROUP, "clusterroles"),
        (GROUP, "rolebindings"),
        (GROUP, "clusterrolebindings"),
        ("*", "*"),
        (GROUP, "*"),
    ]);
    let names = prop::option::weighted(0.2, prop::sample::select(vec!["r0", "team", "b0"]));
    let resource = (verbs.clone(), target, names).prop_map(|(verbs, (g, r), name)| {
        let rule = PolicyRule::resources(verbs, [g], [r]);
        match name {
            Some(n) => rule.names([n]),
            None => rule,
        }
    });
    let non_resource = (
        prop::sample::select(vec!["get", "*"]),
        prop::sample::select(vec!["/healthz", "*"]),
    )
        .prop_map(|(v, u)| PolicyRule::non_resource([v], [u]));
    prop_oneof![9 => resource, 1 => non_resource]
}

/// What a user may write RBAC objects with: the grants lean towards these so that writes
/// are often allowed by their verb and reach the escalation checks.
fn writer_rule() -> impl Strategy<Value = PolicyRule> {
    (
        prop::sample::subsequence(vec!["create", "update", "delete", "bind"], 2..=3),
        prop::sample::select(vec![
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
            "*",
        ]),
    )
        .prop_map(|(verbs, r)| PolicyRule::resources(verbs, [GROUP], [r]))
}

fn full_authority_rules() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resources(["*"], ["*"], ["*"]),
        PolicyRule::non_resource(["*"], ["*"]),
    ]
}

/// The rules of one user's initial grant.
fn grant() -> impl Strategy<Value = Vec<PolicyRule>> {
    prop_oneof![
        12 => (
            prop::collection::vec(rule(), 0..3),
            prop::collection::vec(writer_rule(), 1..4),
            prop::option::weighted(0.2, prop::sample::select(vec!["roles", "clusterroles"])),
        )
            .prop_map(|(mut a, b, escalate)| {
                a.extend(b);
                a.extend(escalate.map(|r| PolicyRule::resources(["escalate"], [GROUP], [r])));
                a
            }),
        1 => Just(full_authority_rules()),
    ]
}

fn labels() -> impl Strategy<Value = Option<&'static str>> {
    prop::option::weighted(0.4, prop::sample::select(vec!["x", "y"]))
}

fn aggregation() -> impl Strategy<Value = Option<AggregationRule>> {
    let selector = |v: Option<&str>| LabelSelector {
        match_labels: v
            .map(|v| [(LABEL.to_owned(), v.to_owned())].into_iter().collect())
            .unwrap_or_default(),
        ..LabelSelector::default()
    };
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(AggregationRule::default())),
        1 => Just(Some(AggregationRule { cluster_role_selectors: vec![selector(None)] })),
        2 => prop::sample::select(vec!["x", "y"])
            .prop_map(move |v| Some(AggregationRule { cluster_role_selectors: vec![selector(Some(v))] })),
    ]
}

fn subjects() -> impl Strategy<Value = Vec<Subject>> {
    prop::collection::vec(
        prop::sample::select(vec!["u0", "u1", "u2", "u3", "g0", "g1"]).prop_map(|s| {
            if s.starts_with('g') {
                Subject::group(s)
            } else {
                Subject::user(s)
            }
        }),
        1..3,
    )
}

#[derive(Debug, Clone)]
enum Op {
    ClusterRole {
        actor: &'static str,
        name: &'static str,
        rules: Vec<PolicyRule>,
        label: Option<&'static str>,
        aggregation: Option<AggregationRule>,
    },
    Role {
        actor: &'static str,
        namespace: &'static str,
        name: &'static str,
        rules: Vec<PolicyRule>,
    },
    Binding {
        actor: &'static str,
        /// `None`: a ClusterRoleBinding.
        namespace: Option<&'static str>,
        name: &'static str,
        role_ref: RoleRef,
        subjects: Vec<Subject>,
    },
    Delete {
        actor: &'static str,
        plural: &'static str,
        namespace: Option<&'static str>,
        name: &'static str,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let actor = prop::sample::select(USERS.to_vec());
    let ns = prop::sample::select(NAMESPACES.to_vec());
    let cluster_role = (
        actor.clone(),
        prop::sample::select(CLUSTER_ROLE_NAMES.to_vec()),
        prop::collection::vec(rule(), 0..3),
        labels(),
        aggregation(),
    )
        .prop_map(|(actor, name, rules, label, aggregation)| Op::ClusterRole {
            actor,
            name,
            rules,
            label,
            aggregation,
        });
    let ns_role = (
        actor.clone(),
        ns.clone(),
        prop::sample::select(ROLE_NAMES.to_vec()),
        prop::collection::vec(rule(), 0..3),
    )
        .prop_map(|(actor, namespace, name, rules)| Op::Role {
            actor,
            namespace,
            name,
            rules,
        });
    let role_ref = prop_oneof![
        prop::sample::select(CLUSTER_ROLE_NAMES.to_vec()).prop_map(RoleRef::cluster_role),
        prop::sample::select(ROLE_NAMES.to_vec()).prop_map(RoleRef::role),
    ];
    let bind = (
        actor.clone(),
        prop::option::weighted(0.5, ns.clone()),
        prop::sample::select(BINDING_NAMES.to_vec()),
        role_ref,
        subjects(),
    )
        .prop_map(|(actor, namespace, name, role_ref, subjects)| {
            // A ClusterRoleBinding refers to ClusterRoles only.
            let role_ref = if namespace.is_none() && role_ref.kind == "Role" {
                RoleRef::cluster_role(&role_ref.name)
            } else {
                role_ref
            };
            Op::Binding {
                actor,
                namespace,
                name,
                role_ref,
                subjects,
            }
        });
    let delete = (
        actor,
        prop::sample::select(vec![
            ("clusterroles", None),
            ("roles", Some("a")),
            ("rolebindings", Some("a")),
            ("clusterrolebindings", None),
        ]),
        prop::sample::select(vec!["r0", "team", "grant-u0", "b0", "grant-u2"]),
    )
        .prop_map(|(actor, (plural, namespace), name)| Op::Delete {
            actor,
            plural,
            namespace,
            name,
        });
    prop_oneof![5 => cluster_role, 2 => ns_role, 4 => bind, 1 => delete]
}

/// The initial policy, written by an administrator: each user's grant, bound to it by a
/// ClusterRoleBinding (u2's by a RoleBinding in `a` as well), and an aggregate `team`
/// over the `x` label bound to group `g0`.
#[derive(Debug, Clone)]
struct Setup {
    grants: Vec<Vec<PolicyRule>>,
    member_labels: Vec<Option<&'static str>>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::collection::vec(grant(), USERS.len()),
        prop::collection::vec(labels(), USERS.len()),
    )
        .prop_map(|(grants, member_labels)| Setup {
            grants,
            member_labels,
        })
}

fn with_label(mut r: Role, label: Option<&str>) -> Role {
    if let Some(v) = label {
        r.metadata.labels = Some([(LABEL.to_owned(), v.to_owned())].into_iter().collect());
    }
    r
}

/// Every question the property asks the authorizer.
fn probes() -> Vec<Attributes> {
    let mut out = Vec::new();
    let targets = [
        ("", "pods"),
        ("", "secrets"),
        (GROUP, "roles"),
        (GROUP, "clusterroles"),
        (GROUP, "rolebindings"),
        (GROUP, "clusterrolebindings"),
    ];
    for verb in [
        "get", "list", "create", "update", "delete", "escalate", "bind",
    ] {
        for (g, r) in targets {
            for ns in ["", "a", "b"] {
                out.push(Attributes::resource(verb, g, r, ns));
                out.push(Attributes::resource(verb, g, r, ns).named("team"));
            }
        }
    }
    out.push(Attributes::non_resource("get", "/healthz"));
    out.push(Attributes::non_resource("get", "/metrics"));
    out
}

/// What each user may do, one bit per probe.
fn snapshot(rbac: &Rbac, probes: &[Attributes]) -> Vec<Vec<bool>> {
    USERS
        .iter()
        .map(|u| {
            let u = user(u);
            probes
                .iter()
                .map(|p| rbac.authorize(&u, p).allowed())
                .collect()
        })
        .collect()
}

/// Runs the aggregation reconciler until a pass changes nothing; returns whether any
/// pass changed a role.
fn reconcile(f: &mut Fixture) -> bool {
    let mut changed_any = false;
    for _ in 0..10 {
        let changed = aggregation_pass(&f.cluster_roles.store().list());
        if changed.is_empty() {
            return changed_any;
        }
        changed_any = true;
        for r in changed {
            f.cluster_roles.apply(Event::Apply(r));
        }
    }
    panic!("the aggregation reconciler does not settle");
}

#[derive(Debug, Default)]
struct Outcomes {
    denied_by_verb: usize,
    invalid: usize,
    refused_not_held: usize,
    refused_aggregation: usize,
    accepted_held: usize,
    accepted_escalate: usize,
    accepted_bind: usize,
    accepted_aggregating: usize,
    deleted: usize,
    reconciled: usize,
    gained: usize,
}

fn verb_allowed(rbac: &Rbac, u: &UserInfo, verb: &str, plural: &str, ns: &str, name: &str) -> bool {
    rbac.authorize(
        u,
        &Attributes::resource(verb, GROUP, plural, ns).named(name),
    )
    .allowed()
}

/// How an accepted write may have granted: the writer's own rules, anything (escalate),
/// or the bound role's rules (bind).
enum Grant {
    Held,
    Anything,
    Role(Vec<PolicyRule>),
}

/// A Role (`namespace` set) or ClusterRole write as the server does it; `None` when
/// refused (nothing written).
#[allow(clippy::too_many_arguments)]
fn write_role(
    f: &mut Fixture,
    actor: &str,
    namespace: &str,
    name: &str,
    rules: &[PolicyRule],
    label: Option<&str>,
    aggregation: Option<&AggregationRule>,
    out: &mut Outcomes,
) -> Option<Grant> {
    let rbac = f.rbac();
    let (plural, ns_opt) = if namespace.is_empty() {
        ("clusterroles", None)
    } else {
        ("roles", Some(namespace))
    };
    let u = user(actor);
    let old = if namespace.is_empty() {
        f.cluster_roles.store().get_by_name(None, name)
    } else {
        f.roles.store().get_by_name(ns_opt, name)
    };
    let verb = if old.is_some() { "update" } else { "create" };
    // A create is a POST: its URL names no object (an update's PUT names it).
    let request_name = if old.is_some() { name } else { "" };
    if !verb_allowed(&rbac, &u, verb, plural, namespace, name) {
        out.denied_by_verb += 1;
        return None;
    }
    let mut new = with_label(role(ns_opt, name, rules.to_vec()), label);
    new.aggregation_rule = aggregation.cloned();
    if !validate_role(&new, !namespace.is_empty()).is_empty() {
        out.invalid += 1;
        return None;
    }
    match check_role_object(&rbac, &u, namespace, request_name, &new, old.as_deref()) {
        Ok(()) => {}
        Err(e) if e.0 == AGGREGATION_NEEDS_FULL_AUTHORITY => {
            out.refused_aggregation += 1;
            return None;
        }
        Err(_) => {
            out.refused_not_held += 1;
            return None;
        }
    }
    if namespace.is_empty()
        && (has_aggregation_rule(&new) || old.as_deref().is_some_and(has_aggregation_rule))
    {
        out.accepted_aggregating += 1;
    }
    let escalate = verb_allowed(&rbac, &u, "escalate", plural, namespace, name);
    if namespace.is_empty() {
        f.cluster_roles.apply(Event::Apply(new));
    } else {
        f.roles.apply(Event::Apply(new));
    }
    if escalate {
        out.accepted_escalate += 1;
        Some(Grant::Anything)
    } else {
        out.accepted_held += 1;
        Some(Grant::Held)
    }
}

/// One write as the server does it; `None` when refused (nothing written).
fn write(f: &mut Fixture, op: &Op, out: &mut Outcomes) -> Option<Grant> {
    let rbac = f.rbac();
    match op {
        Op::ClusterRole {
            actor,
            name,
            rules,
            label,
            aggregation,
        } => write_role(f, actor, "", name, rules, *label, aggregation.as_ref(), out),
        Op::Role {
            actor,
            namespace,
            name,
            rules,
        } => write_role(f, actor, namespace, name, rules, None, None, out),
        Op::Binding {
            actor,
            namespace,
            name,
            role_ref,
            subjects,
        } => {
            let u = user(actor);
            let ns = namespace.unwrap_or("");
            let (plural, store) = match namespace {
                Some(_) => ("rolebindings", &f.role_bindings),
                None => ("clusterrolebindings", &f.cluster_role_bindings),
            };
            let old = store.store().get_by_name(*namespace, name);
            let verb = if old.is_some() { "update" } else { "create" };
            if !verb_allowed(&rbac, &u, verb, plural, ns, name) {
                out.denied_by_verb += 1;
                return None;
            }
            let new = binding(*namespace, name, role_ref.clone(), subjects.clone());
            let old_ref = old.as_ref().map(|o| o.role_ref.clone());
            if !validate_binding(&new, namespace.is_some(), old_ref.as_ref()).is_empty() {
                out.invalid += 1;
                return None;
            }
            if check_binding_write(&rbac, &rbac, &u, ns, role_ref).is_err() {
                out.refused_not_held += 1;
                return None;
            }
            let resource = if role_ref.kind == "ClusterRole" {
                "clusterroles"
            } else {
                "roles"
            };
            let bind = verb_allowed(&rbac, &u, "bind", resource, ns, &role_ref.name);
            let bound = rbac
                .role_rules(role_ref, ns)
                .map(|r| r.rules.clone())
                .unwrap_or_default();
            match namespace {
                Some(_) => f.role_bindings.apply(Event::Apply(new)),
                None => f.cluster_role_bindings.apply(Event::Apply(new)),
            };
            if bind {
                out.accepted_bind += 1;
                Some(Grant::Role(bound))
            } else {
                out.accepted_held += 1;
                Some(Grant::Held)
            }
        }
        Op::Delete {
            actor,
            plural,
            namespace,
            name,
        } => {
            let u = user(actor);
            if !verb_allowed(&rbac, &u, "delete", plural, namespace.unwrap_or(""), name) {
                out.denied_by_verb += 1;
                return None;
            }
            match *plural {
                "clusterroles" | "roles" => {
                    let w = if *plural == "roles" {
                        &mut f.roles
                    } else {
                        &mut f.cluster_roles
                    };
                    let old = w.store().get_by_name(*namespace, name)?;
                    w.apply(Event::Delete(Role::clone(&old)));
                }
                _ => {
                    let w = if *plural == "rolebindings" {
                        &mut f.role_bindings
                    } else {
                        &mut f.cluster_role_bindings
                    };
                    let old = w.store().get_by_name(*namespace, name)?;
                    w.apply(Event::Delete(RoleBinding::clone(&old)));
                }
            }
            out.deleted += 1;
            Some(Grant::Held)
        }
    }
}

fn initial(s: &Setup) -> Fixture {
    let mut f = Fixture::new();
    for (i, u) in USERS.iter().enumerate() {
        let name = format!("grant-{u}");
        let label = s.member_labels.get(i).copied().flatten();
        let rules = s.grants.get(i).cloned().unwrap_or_default();
        f.cluster_roles
            .apply(Event::Apply(with_label(role(None, &name, rules), label)));
        f.cluster_role_bindings.apply(Event::Apply(binding(
            None,
            &name,
            RoleRef::cluster_role(&name),
            vec![Subject::user(u)],
        )));
    }
    f.role_bindings.apply(Event::Apply(binding(
        Some("a"),
        "grant-u2",
        RoleRef::cluster_role("grant-u2"),
        vec![Subject::user("u2")],
    )));
    let mut team = role(None, "team", vec![]);
    team.aggregation_rule = Some(AggregationRule {
        cluster_role_selectors: vec![LabelSelector {
            match_labels: [(LABEL.to_owned(), "x".to_owned())].into_iter().collect(),
            ..LabelSelector::default()
        }],
    });
    f.cluster_roles.apply(Event::Apply(team));
    f.cluster_role_bindings.apply(Event::Apply(binding(
        None,
        "team",
        RoleRef::cluster_role("team"),
        vec![Subject::group("g0")],
    )));
    reconcile(&mut f);
    f
}

#[test]
fn no_write_grants_more_than_its_writer_could() {
    let probes = probes();
    let outcomes = RefCell::new(Outcomes::default());
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(
        &(setup(), prop::collection::vec(op(), 1..24)),
        |(s, ops)| {
            let mut f = initial(&s);
            let mut out = outcomes.borrow_mut();
            let mut before = snapshot(&f.rbac(), &probes);
            for op in &ops {
                let Some(grant) = write(&mut f, op, &mut out) else {
                    // Refused: nothing may have changed.
                    prop_assert_eq!(&snapshot(&f.rbac(), &probes), &before, "{:?}", op);
                    continue;
                };
                if reconcile(&mut f) {
                    out.reconciled += 1;
                }
                let after = snapshot(&f.rbac(), &probes);
                let actor = match op {
                    Op::ClusterRole { actor, .. }
                    | Op::Role { actor, .. }
                    | Op::Binding { actor, .. }
                    | Op::Delete { actor, .. } => *actor,
                };
                let a = USERS.iter().position(|u| *u == actor).unwrap_or(0);
                for (u, (now, was)) in after.iter().zip(&before).enumerate() {
                    for (p, probe) in probes.iter().enumerate() {
                        if !now[p] || was[p] {
                            continue;
                        }
                        out.gained += 1;
                        let allowed = before[a][p]
                            || match &grant {
                                Grant::Held => false,
                                Grant::Anything => true,
                                Grant::Role(rules) => rules.iter().any(|r| rules::allows(r, probe)),
                            };
                        prop_assert!(
                            allowed,
                            "{} gained {:?} by {:?}, which its writer {} could not do",
                            USERS[u],
                            probe,
                            op,
                            actor
                        );
                    }
                }
                before = after;
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    let out = outcomes.into_inner();
    eprintln!("{out:?}");
    // Every branch was reached, so a generator that stops reaching one fails here.
    let reached = [
        ("denied by verb", out.denied_by_verb),
        ("refused: rules not held", out.refused_not_held),
        (
            "refused: aggregation without full authority",
            out.refused_aggregation,
        ),
        ("accepted: rules held", out.accepted_held),
        ("accepted: escalate", out.accepted_escalate),
        ("accepted: bind", out.accepted_bind),
        (
            "accepted: aggregating ClusterRole",
            out.accepted_aggregating,
        ),
        ("deleted", out.deleted),
        ("reconciled", out.reconciled),
        ("gained a permission", out.gained),
    ];
    for (what, n) in reached {
        assert!(n > 0, "never reached: {what} ({out:?})");
    }
}
