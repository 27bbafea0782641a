//! Authentication + authorization per request, with 10 000 bindings.
//!
//! The world: 10 000 RoleBindings (1 000 namespaces × 10 users) and 100
//! ClusterRoleBindings, each to a role of 4 rules, plus upstream's bootstrap policy.
//! Measured per request: RBAC decisions (allowed in a namespace, denied), the static token
//! lookup, a cached ServiceAccount token (claims cached, account looked up, expiry checked),
//! and the whole of authentication + authorization for a ServiceAccount request.
//!
//! `cargo bench -p listwatch-auth --bench authorize`

#![allow(clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_api::ObjectMeta;
use listwatch_auth::authn::{
    ServiceAccountLookup, ServiceAccountTokens, TokenFile, TokenIssuer, TokenRequestSpec,
    service_account::verification_keys,
};
use listwatch_auth::authz::{Chain, PrivilegedGroups};
use listwatch_auth::rbac::{
    PolicyRule, Rbac, RbacStores, Role, RoleBinding, RoleRef, Subject, bootstrap, subject_index,
};
use listwatch_auth::{Attributes, Authentication, Authorizer, Credentials, UserInfo};
use listwatch_client::{Event, Writer};
use std::sync::Arc;

fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        ..ObjectMeta::default()
    }
}

fn synced<K: listwatch_client::Resource>(w: &mut Writer<K>, items: Vec<K>) {
    w.apply(Event::Init);
    for i in items {
        w.apply(Event::InitApply(i));
    }
    w.apply(Event::InitDone {
        resource_version: 1,
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

struct Accounts(HashMap<(String, String), String>);
impl ServiceAccountLookup for Accounts {
    fn uid(&self, ns: &str, name: &str) -> Option<String> {
        self.0.get(&(ns.to_owned(), name.to_owned())).cloned()
    }
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

    let iss = "https://kubernetes.default.svc.cluster.local";
    let key = rcgen::KeyPair::generate().expect("key");
    let issuer = TokenIssuer::from_pem(key.serialize_pem().as_bytes(), iss, vec![iss.into()])
        .expect("issuer");
    let mut accounts = HashMap::new();
    for n in 0..1000 {
        for u in 0..10 {
            accounts.insert((format!("ns{n}"), format!("sa{u}")), format!("uid-{n}-{u}"));
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
    assert!(authn.authenticate(&creds(&sa_token)).is_ok());

    let mut g = c.benchmark_group("authenticate");
    g.bench_function("static_token", |b| {
        b.iter(|| black_box(authn.authenticate(black_box(&creds(&static_token)))))
    });
    g.bench_function("service_account_cached", |b| {
        b.iter(|| black_box(authn.authenticate(black_box(&creds(&sa_token)))))
    });
    g.finish();

    let mut g = c.benchmark_group("authn_authz_10k_bindings");
    g.bench_function("service_account_list_pods", |b| {
        b.iter(|| {
            let user = authn
                .authenticate(black_box(&creds(&sa_token)))
                .expect("user");
            black_box(authz.authorize(&user, black_box(&list)))
        })
    });
    g.bench_function("static_token_list_pods", |b| {
        b.iter(|| {
            let user = authn
                .authenticate(black_box(&creds(&static_token)))
                .expect("user");
            black_box(authz.authorize(&user, black_box(&list)))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
