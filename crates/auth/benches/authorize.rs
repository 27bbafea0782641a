//! Authentication + authorization per request, with 10 000 bindings.
//!
//! The world: 10 000 RoleBindings (1 000 namespaces × 10 users) and 100
//! ClusterRoleBindings, each to a role of 4 rules, plus upstream's bootstrap policy.
//! Measured per request: RBAC decisions (allowed in a namespace, denied), the static token
//! lookup, a cached ServiceAccount token (claims cached, account looked up, expiry checked),
//! and the whole of authentication + authorization for a static-token and a ServiceAccount
//! request.
//!
//! Two ways: criterion's groups (wall-clock), and rounds (`rounds …` lines: 21 rounds per
//! case, median [lowest–highest] of the per-call wall-clock *and* thread CPU time, the
//! latter being the cost without the wait for a core on a shared machine), beside two
//! baselines measured in the same run: the floor (one hash look-up of the user's name) and
//! the peer (upstream's RBAC algorithm, every ClusterRoleBinding and every RoleBinding of
//! the namespace, over the same stores).
//!
//! `cargo bench -p listwatch-auth --bench authorize` (everything), or
//! `cargo bench -p listwatch-auth --bench authorize -- none` (only the rounds; criterion's
//! groups are filtered out). `AUTHORIZE_ROUNDS=SUBSTRING` keeps only the matching rounds
//! (to profile one).

#![allow(clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_api::ObjectMeta;
use listwatch_auth::authn::{
    Account, ServiceAccountLookup, ServiceAccountTokens, TokenFile, TokenIssuer, TokenRequestSpec,
    service_account::verification_keys,
};
use listwatch_auth::authz::{Chain, PrivilegedGroups};
use listwatch_auth::rbac::{
    PolicyRule, Rbac, RbacStores, Role, RoleBinding, RoleRef, Subject, bootstrap, rules,
    subject_applies, subject_index,
};
use listwatch_auth::{Attributes, Authentication, Authorizer, Credentials, UserInfo};
use listwatch_runtime::store::{NAMESPACE_INDEX, namespace_index};
use listwatch_runtime::{Event, Writer};
use std::sync::Arc;

fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        ..ObjectMeta::default()
    }
}

fn synced<K: listwatch_runtime::Resource>(w: &mut Writer<K>, items: Vec<K>) {
    w.apply(Event::Init);
    for i in items {
        w.apply(Event::InitApply(i));
    }
    w.apply(Event::InitDone {
        resource_version: "1".into(),
    });
}

struct World {
    _writers: (
        Writer<Role>,
        Writer<Role>,
        Writer<RoleBinding>,
        Writer<RoleBinding>,
    ),
    rbac: Rbac,
}

fn world() -> World {
    let rules = vec![
        PolicyRule::resources(["get", "list", "watch"], [""], ["pods", "configmaps"]),
        PolicyRule::resources(["get"], [""], ["pods/log"]),
        PolicyRule::resources(["create", "update"], ["apps"], ["deployments"]),
        PolicyRule::resources(["get"], [""], ["secrets"]).names(["app"]),
    ];
    let mut roles = Vec::new();
    let mut rbs = Vec::new();
    for n in 0..1000 {
        let ns = format!("ns{n}");
        roles.push(Role {
            metadata: meta(Some(&ns), "dev"),
            rules: rules.clone(),
            aggregation_rule: None,
        });
        for u in 0..10 {
            let user = format!("user{}", (n * 10 + u) % 1000);
            rbs.push(RoleBinding {
                metadata: meta(Some(&ns), &format!("dev-{u}")),
                subjects: vec![
                    Subject::user(&user),
                    Subject::service_account(&ns, &format!("sa{u}")),
                ],
                role_ref: RoleRef::role("dev"),
            });
        }
    }
    let mut cluster_roles = bootstrap::cluster_roles();
    let mut crbs = bootstrap::cluster_role_bindings();
    for i in 0..100 {
        cluster_roles.push(Role {
            metadata: meta(None, &format!("team{i}")),
            rules: rules.clone(),
            aggregation_rule: None,
        });
        crbs.push(RoleBinding {
            metadata: meta(None, &format!("team{i}")),
            subjects: vec![Subject::group(&format!("team{i}"))],
            role_ref: RoleRef::cluster_role(&format!("team{i}")),
        });
    }
    let mut w_roles = Writer::default();
    let mut w_cluster_roles = Writer::default();
    let mut w_rbs = Writer::new(vec![subject_index()]);
    let mut w_crbs = Writer::new(vec![subject_index()]);
    synced(&mut w_roles, roles);
    synced(&mut w_cluster_roles, cluster_roles);
    synced(&mut w_rbs, rbs);
    synced(&mut w_crbs, crbs);
    let rbac = Rbac::new(RbacStores {
        roles: w_roles.store(),
        cluster_roles: w_cluster_roles.store(),
        role_bindings: w_rbs.store(),
        cluster_role_bindings: w_crbs.store(),
    });
    World {
        _writers: (w_roles, w_cluster_roles, w_rbs, w_crbs),
        rbac,
    }
}

/// The informer view of the accounts; every token of the bench is in it, so storage is
/// never read (the `stored` answer would be a miss).
struct Accounts(HashMap<(String, String), Account>);
impl ServiceAccountLookup for Accounts {
    fn cached(&self, ns: &str, name: &str) -> Option<Account> {
        self.0.get(&(ns.to_owned(), name.to_owned())).cloned()
    }

    fn stored<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> listwatch_auth::authn::BoxFuture<'a, Result<Option<Account>, String>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// Authenticates from memory (every credential of the bench is decided without a read).
fn now<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::FutureExt::now_or_never(f).expect("decided from memory")
}

/// The ServiceAccount authenticator over 10 000 accounts, and a token of `ns42/sa3`.
fn service_accounts() -> (ServiceAccountTokens, String) {
    let iss = "https://kubernetes.default.svc.cluster.local";
    let key = rcgen::KeyPair::generate().expect("key");
    let issuer = TokenIssuer::from_pem(key.serialize_pem().as_bytes(), iss, vec![iss.into()])
        .expect("issuer");
    let mut accounts = HashMap::new();
    for n in 0..1000 {
        for u in 0..10 {
            accounts.insert(
                (format!("ns{n}"), format!("sa{u}")),
                Account::live(format!("uid-{n}-{u}")),
            );
        }
    }
    let (sa_token, _) = issuer
        .issue("ns42", "sa3", "uid-42-3", &TokenRequestSpec::default())
        .expect("token");
    let sa = ServiceAccountTokens::new(
        verification_keys(key.public_key_pem().as_bytes()).expect("keys"),
        vec![iss.into()],
        vec![iss.into()],
        Box::new(Accounts(accounts)),
    );
    (sa, sa_token)
}

fn bench(c: &mut Criterion) {
    let w = world();
    let authz = Chain(vec![
        Arc::new(PrivilegedGroups::default()),
        Arc::new(w.rbac.clone()),
    ]);
    let alice = UserInfo::new("user420", ["system:authenticated"]);
    let list = Attributes::resource("list", "", "pods", "ns42");
    assert!(authz.authorize(&alice, &list).allowed());
    let elsewhere = Attributes::resource("list", "", "pods", "ns43");
    assert!(!authz.authorize(&alice, &elsewhere).allowed());

    let mut g = c.benchmark_group("rbac_10k_bindings");
    g.bench_function("allowed_in_namespace", |b| {
        b.iter(|| black_box(authz.authorize(black_box(&alice), black_box(&list))))
    });
    g.bench_function("denied", |b| {
        b.iter(|| black_box(authz.authorize(black_box(&alice), black_box(&elsewhere))))
    });
    g.finish();

    let (sa, sa_token) = service_accounts();
    let mut csv = String::new();
    for u in 0..1000 {
        csv.push_str(&format!("token-{u:040},user{u},uid{u},\"dev,ops\"\n"));
    }
    let tokens = TokenFile::parse(csv.as_bytes(), "bench").expect("tokens");
    let authn = Authentication {
        x509: None,
        tokens: vec![Arc::new(tokens), Arc::new(sa)],
        anonymous: true,
    };
    let static_token = format!("token-{:040}", 420);
    let creds = |t| Credentials {
        bearer: Some(t),
        client_certs: None,
    };
    assert!(now(authn.authenticate(&creds(&sa_token))).is_ok());

    let mut g = c.benchmark_group("authenticate");
    g.bench_function("static_token", |b| {
        b.iter(|| black_box(now(authn.authenticate(black_box(&creds(&static_token))))))
    });
    g.bench_function("service_account_cached", |b| {
        b.iter(|| black_box(now(authn.authenticate(black_box(&creds(&sa_token))))))
    });
    g.finish();

    let mut g = c.benchmark_group("authn_authz_10k_bindings");
    g.bench_function("service_account_list_pods", |b| {
        b.iter(|| {
            let user = now(authn.authenticate(black_box(&creds(&sa_token)))).expect("user");
            black_box(authz.authorize(&user, black_box(&list)))
        })
    });
    g.bench_function("static_token_list_pods", |b| {
        b.iter(|| {
            let user = now(authn.authenticate(black_box(&creds(&static_token)))).expect("user");
            black_box(authz.authorize(&user, black_box(&list)))
        })
    });
    g.finish();
}

/// This thread's time on a CPU, in nanoseconds (the first field of
/// `/proc/thread-self/schedstat`): the cost of the calls without the time spent waiting for
/// a core, which wall-clock figures include on a busy machine.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Median, lowest and highest of a sample.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 0 {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    };
    (median, v[0], v[v.len() - 1])
}

/// Runs `f` in `ROUNDS` rounds of `n` calls and prints the per-call wall-clock and CPU time:
/// median [lowest–highest] over the rounds.
/// `AUTHORIZE_ROUNDS=SUBSTRING` runs only the matching rounds (to profile one of them).
fn rounds<T>(name: &str, n: u32, mut f: impl FnMut() -> T) {
    const ROUNDS: usize = 21;
    if std::env::var("AUTHORIZE_ROUNDS").is_ok_and(|only| !name.contains(&only)) {
        return;
    }
    for _ in 0..n / 10 {
        black_box(f());
    }
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let c0 = thread_cpu_ns();
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            black_box(f());
        }
        let elapsed = t0.elapsed();
        wall.push(elapsed.as_nanos() as f64 / f64::from(n));
        if let (Some(c0), Some(c1)) = (c0, thread_cpu_ns()) {
            cpu.push((c1 - c0) as f64 / f64::from(n));
        }
    }
    let (wm, wl, wh) = spread(wall);
    print!("rounds {name}: wall {wm:.0} ns [{wl:.0}–{wh:.0}]");
    if cpu.len() == ROUNDS {
        let (cm, cl, ch) = spread(cpu);
        print!(", cpu {cm:.0} ns [{cl:.0}–{ch:.0}]");
    }
    println!(" ({ROUNDS} rounds of {n} calls)");
}

/// Upstream's RBAC authorizer's algorithm (`VisitRulesFor`), over the same stores: every
/// ClusterRoleBinding, then every RoleBinding of the request's namespace (a namespace-index
/// look-up, as upstream's lister), each binding's subjects checked, its role fetched and
/// its rules matched — the peer the indexed authorizer is measured against.
struct Upstream {
    rbac: Rbac,
    role_bindings: listwatch_runtime::Store<RoleBinding>,
}

impl Upstream {
    fn allowed(&self, user: &UserInfo, attrs: &Attributes) -> bool {
        let stores = self.rbac.stores();
        let grants = |b: &RoleBinding, ns: &str| {
            b.subjects.iter().any(|s| subject_applies(s, user, ns))
                && self
                    .rbac
                    .role_rules(&b.role_ref, ns)
                    .is_ok_and(|r| r.rules.iter().any(|rule| rules::allows(rule, attrs)))
        };
        if stores
            .cluster_role_bindings
            .list()
            .iter()
            .any(|b| grants(b, ""))
        {
            return true;
        }
        if attrs.namespace.is_empty() {
            return false;
        }
        self.role_bindings
            .by_index(NAMESPACE_INDEX, &attrs.namespace)
            .unwrap_or_default()
            .iter()
            .any(|b| grants(b, &attrs.namespace))
    }
}

/// Per-call cost in rounds (median and spread, wall-clock and CPU), beside two baselines
/// measured in the same run: the floor (one hash look-up of the user's name in a map of
/// 1 000 users, the least any per-subject index must do) and the peer (upstream's
/// algorithm over the same 10 000 bindings).
fn cpu(_: &mut Criterion) {
    let w = world();
    let authz = Chain(vec![
        Arc::new(PrivilegedGroups::default()),
        Arc::new(w.rbac.clone()),
    ]);
    let alice = UserInfo::new("user420", ["system:authenticated"]);
    let list = Attributes::resource("list", "", "pods", "ns42");
    let elsewhere = Attributes::resource("list", "", "pods", "ns43");
    let n = 200_000;

    let floor: HashMap<String, Arc<UserInfo>, foldhash::fast::RandomState> = (0..1000)
        .map(|u| {
            (
                format!("user{u}"),
                Arc::new(UserInfo::new(format!("user{u}"), [""; 0])),
            )
        })
        .collect();
    rounds("floor/hash_lookup_of_the_user", n, || {
        floor.get(black_box(alice.name.as_str())).cloned()
    });
    let mut ns_rbs = Writer::new(vec![subject_index(), namespace_index()]);
    synced(
        &mut ns_rbs,
        w.rbac
            .stores()
            .role_bindings
            .list()
            .iter()
            .map(|b| RoleBinding::clone(b))
            .collect(),
    );
    let upstream = Upstream {
        rbac: w.rbac.clone(),
        role_bindings: ns_rbs.store(),
    };
    assert!(upstream.allowed(&alice, &list));
    assert!(!upstream.allowed(&alice, &elsewhere));
    rounds(
        "peer/upstream_algorithm/allowed_in_namespace",
        n / 10,
        || upstream.allowed(black_box(&alice), black_box(&list)),
    );
    rounds("peer/upstream_algorithm/denied", n / 10, || {
        upstream.allowed(black_box(&alice), black_box(&elsewhere))
    });
    rounds("rbac_10k_bindings/allowed_in_namespace", n, || {
        authz.authorize(black_box(&alice), black_box(&list))
    });
    rounds("rbac_10k_bindings/denied", n, || {
        authz.authorize(black_box(&alice), black_box(&elsewhere))
    });

    let mut csv = String::new();
    for u in 0..1000 {
        csv.push_str(&format!("token-{u:040},user{u},uid{u},\"dev,ops\"\n"));
    }
    let authn = Authentication {
        x509: None,
        tokens: vec![Arc::new(
            TokenFile::parse(csv.as_bytes(), "bench").expect("tokens"),
        )],
        anonymous: true,
    };
    let token = format!("token-{:040}", 420);
    let creds = Credentials {
        bearer: Some(&token),
        client_certs: None,
    };
    rounds("authenticate/static_token", n, || {
        now(authn.authenticate(black_box(&creds)))
    });
    rounds("authn_authz_10k_bindings/static_token_list_pods", n, || {
        let user = now(authn.authenticate(black_box(&creds))).expect("user");
        authz.authorize(&user, black_box(&list))
    });

    let (sa, sa_token) = service_accounts();
    let sa_authn = Authentication {
        x509: None,
        tokens: vec![Arc::new(sa)],
        anonymous: true,
    };
    let sa_creds = Credentials {
        bearer: Some(&sa_token),
        client_certs: None,
    };
    rounds("authenticate/service_account_cached", n, || {
        now(sa_authn.authenticate(black_box(&sa_creds)))
    });
    rounds(
        "authn_authz_10k_bindings/service_account_list_pods",
        n,
        || {
            let user = now(sa_authn.authenticate(black_box(&sa_creds))).expect("user");
            authz.authorize(&user, black_box(&list))
        },
    );
    drop(ns_rbs);
}

criterion_group!(benches, bench, cpu);
criterion_main!(benches);
