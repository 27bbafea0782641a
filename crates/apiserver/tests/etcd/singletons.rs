//! What must happen once across replicas happens once (issue 18, item 2), with replicas of
//! `listwatch-apiserver` over one three-member etcd cluster:
//! - the compactors of two replicas compact once per interval between them (upstream's
//!   protocol on `compact_rev_key`), and the survivor keeps compacting when one dies;
//! - replicas starting at once create the default namespaces and the bootstrap RBAC policy
//!   without errors, and neither they nor a replica joining later rewrite any of it;
//! - the namespace controller and the garbage collector run on one replica, the holder of
//!   the Lease `kube-system/listwatch-controllers`; when it is killed with SIGKILL another
//!   takes the Lease over and runs them, and when that one is stopped with SIGTERM it
//!   releases the Lease for the next. The takeover times are printed (`--nocapture`).
//!
//! Needs Debian's `etcd-server` and kubectl; `cargo xtask test` runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::replicas::Replicas;
use common::{PATIENCE, http};
use listwatch_etcd::{DEFAULT_COMPACT_KEY, EtcdClient, compaction_time};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/listwatch-controllers";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn two_replicas_compact_once_per_interval() {
    let interval = 2u64;
    let started = Instant::now();
    let mut replicas = Replicas::start(2, &["--etcd-compaction-interval", "2"]).await;
    let etcd = EtcdClient::new(replicas.etcd.config()).unwrap();
    let wait_for = |want: i64| {
        let etcd = etcd.clone();
        async move {
            let deadline = Instant::now() + PATIENCE;
            loop {
                // The coordination key's version: one per round a compactor won.
                let v = compaction_time(&etcd, DEFAULT_COMPACT_KEY).await.unwrap();
                if v >= want {
                    return v;
                }
                assert!(
                    Instant::now() < deadline,
                    "the compaction key stayed at {v}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let rounds = wait_for(8).await;
    let elapsed = started.elapsed().as_secs();
    // Each compactor has had at most elapsed / interval rounds. Won rounds are at least an
    // interval apart (a winner's next round is an interval later; another compactor's win
    // needs a lost round after it, to learn the new time, and then its next round), so
    // together they won at most one more than one compactor's rounds — not two per interval
    // as two compactors unaware of each other would. A slow machine only makes fewer rounds.
    assert!(
        rounds <= i64::try_from(elapsed / interval).unwrap() + 2,
        "{rounds} compactions in {elapsed} s at one per {interval} s"
    );
    println!(
        "{rounds} compaction rounds won in {elapsed} s by two replicas compacting every {interval} s"
    );
    // The first replica dies: the other keeps compacting.
    replicas.kill(0);
    wait_for(rounds + 2).await;
}

/// Every object of a list, by name: (uid, resourceVersion).
fn by_name(list: &Value) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (
                m["name"].as_str().unwrap().to_owned(),
                m["uid"].as_str().unwrap().to_owned(),
                m["resourceVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn get_json(addr: &str, path: &str) -> Value {
    let resp = http(addr, "GET", path, &[ADMIN], b"");
    assert_eq!(
        resp.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp.json()
}

/// The bearer token of an administrator (`system:masters`) in [`token_file`].
const ADMIN: (&str, &str) = ("Authorization", "Bearer admin-token");

/// A static token file with [`ADMIN`]'s token.
fn token_file(dir: &std::path::Path) -> String {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, "admin-token,admin,1,\"system:masters\"\n").unwrap();
    path.to_str().unwrap().to_owned()
}

const BOOTSTRAPPED: [&str; 3] = [
    "/api/v1/namespaces",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
];

/// The events of watches on everything bootstrapped, from `rv`, for `seconds`.
fn changes_since(addr: &str, rv: &str, seconds: u32) -> Vec<Value> {
    let watches: Vec<_> = BOOTSTRAPPED
        .iter()
        .map(|path| {
            let (addr, path) = (addr.to_owned(), (*path).to_owned());
            let rv = rv.to_owned();
            std::thread::spawn(move || {
                let q = format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds={seconds}");
                let resp = http(&addr, "GET", &q, &[ADMIN], b"");
                assert_eq!(resp.status, 200);
                resp.lines()
            })
        })
        .collect();
    watches
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .filter(|e| e["type"] != "BOOKMARK")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn replicas_starting_at_once_bootstrap_once_and_do_not_fight() {
    // Three replicas at once, each reconciling the bootstrap RBAC policy as it starts.
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path());
    let rbac = [
        "--authorization-mode",
        "RBAC",
        "--token-auth-file",
        tokens.as_str(),
    ];
    let replicas = Replicas::start(3, &rbac).await;
    let addrs: Vec<String> = (0..3).map(|i| replicas.replica(i).addr.clone()).collect();
    let joiner = {
        let addrs = addrs.clone();
        tokio::task::spawn_blocking(move || {
            let lists: Vec<Vec<Value>> = addrs
                .iter()
                .map(|a| BOOTSTRAPPED.iter().map(|p| get_json(a, p)).collect())
                .collect();
            // The same objects (uids and versions) on every replica.
            for (i, l) in lists.iter().enumerate() {
                for (j, list) in l.iter().enumerate() {
                    assert_eq!(
                        by_name(list),
                        by_name(&lists[0][j]),
                        "replica {i}: {}",
                        BOOTSTRAPPED[j]
                    );
                }
            }
            let namespaces: Vec<String> = by_name(&lists[0][0]).into_iter().map(|n| n.0).collect();
            assert_eq!(
                namespaces,
                ["default", "kube-node-lease", "kube-public", "kube-system"]
            );
            let roles = by_name(&lists[0][1]);
            assert!(roles.iter().any(|r| r.0 == "cluster-admin"), "{roles:?}");
            assert!(roles.iter().any(|r| r.0 == "admin"), "{roles:?}");
            assert!(by_name(&lists[0][2]).iter().any(|b| b.0 == "cluster-admin"));
            // Settled: nothing rewrites any of it.
            let rv = lists[0]
                .iter()
                .map(|l| {
                    l["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse::<u64>()
                        .unwrap()
                })
                .max()
                .unwrap()
                .to_string();
            let changes = changes_since(&addrs[0], &rv, 4);
            assert!(
                changes.is_empty(),
                "the replicas kept writing: {changes:#?}"
            );
            (lists, rv)
        })
    };
    let (lists, rv) = joiner.await.unwrap();
    // A fourth replica joins: it finds everything in place and writes none of it.
    let late = replicas.start_replicas(1, &rbac).await;
    let late_addr = late[0].addr.clone();
    let first = addrs[0].clone();
    tokio::task::spawn_blocking(move || {
        for (p, before) in BOOTSTRAPPED.iter().zip(&lists[0]) {
            assert_eq!(by_name(&get_json(&late_addr, p)), by_name(before), "{p}");
        }
        // Watched on a replica whose cache reaches back to `rv` (the new one's begins at its
        // start, and answers 410 below it, as upstream's).
        let changes = changes_since(&first, &rv, 3);
        assert!(
            changes.is_empty(),
            "a joining replica rewrote: {changes:#?}"
        );
    })
    .await
    .unwrap();
}

/// Which replicas say they lead (`leader_election_master_status` 1 on `/metrics`).
fn leaders(replicas: &Replicas) -> Vec<usize> {
    (0..replicas.servers.len())
        .filter(|i| {
            let Some(s) = &replicas.servers[*i] else {
                return false;
            };
            let resp = http(&s.addr, "GET", "/metrics", &[], b"");
            String::from_utf8_lossy(&resp.body)
                .lines()
                .any(|l| l == "leader_election_master_status{name=\"listwatch-controllers\"} 1")
        })
        .collect()
}

/// Waits until exactly one replica leads, other than `not`; returns it.
fn wait_for_one_leader(replicas: &Replicas, not: Option<usize>) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let l = leaders(replicas);
        assert!(l.len() <= 1, "two replicas lead at once: {l:?}");
        if let [one] = l[..]
            && Some(one) != not
        {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader: {l:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lease(addr: &str) -> Value {
    get_json(addr, LEASE)
}

/// Deletes a namespace holding a ConfigMap through `via`, and waits until it is gone (the
/// namespace controller emptied it and let it go).
fn namespace_is_cleaned_up(via: &str, name: &str) {
    let ns = json!({"metadata":{"name":name}}).to_string();
    assert_eq!(
        http(via, "POST", "/api/v1/namespaces", &[JSON], ns.as_bytes()).status,
        201
    );
    let cm = json!({"metadata":{"name":"c"}}).to_string();
    let path = format!("/api/v1/namespaces/{name}/configmaps");
    assert_eq!(http(via, "POST", &path, &[JSON], cm.as_bytes()).status, 201);
    let resp = http(
        via,
        "DELETE",
        &format!("/api/v1/namespaces/{name}"),
        &[],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let deadline = Instant::now() + PATIENCE;
    while http(via, "GET", &format!("/api/v1/namespaces/{name}"), &[], b"").status != 404 {
        assert!(Instant::now() < deadline, "namespace {name} never went");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Deletes through `via` a ConfigMap that owns another (created through `via` too) and waits
/// until the garbage collector (on whichever replica leads) has deleted the dependent.
fn garbage_is_collected(via: &str, tag: &str) {
    let path = "/api/v1/namespaces/default/configmaps";
    let owner = json!({"metadata":{"name":format!("owner-{tag}")}}).to_string();
    let r = http(via, "POST", path, &[JSON], owner.as_bytes());
    assert_eq!(r.status, 201);
    let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_owned();
    let dep = json!({"metadata":{"name":format!("dep-{tag}"),"ownerReferences":[
        {"apiVersion":"v1","kind":"ConfigMap","name":format!("owner-{tag}"),"uid":uid}]}})
    .to_string();
    assert_eq!(http(via, "POST", path, &[JSON], dep.as_bytes()).status, 201);
    let r = http(via, "DELETE", &format!("{path}/owner-{tag}"), &[], b"");
    assert_eq!(r.status, 200);
    let deadline = Instant::now() + PATIENCE;
    while http(via, "GET", &format!("{path}/dep-{tag}"), &[], b"").status != 404 {
        assert!(Instant::now() < deadline, "dep-{tag} never collected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd and kubectl"]
async fn one_replica_runs_the_namespace_controller_and_another_takes_over() {
    common::require("kubectl");
    let mut replicas = Replicas::start(3, &[]).await;
    let replicas = tokio::task::spawn_blocking(move || {
        let first = wait_for_one_leader(&replicas, None);
        let other = (first + 1) % 3;
        let other_addr = replicas.replica(other).addr.clone();
        // kubectl reads the Lease as upstream's.
        let dir = tempfile::tempdir().unwrap();
        let out = common::run_ok(replicas.replica(other).kubectl(dir.path()).args([
            "get", "lease", "-n", "kube-system", "listwatch-controllers", "-o", "json",
        ]));
        let held: Value = serde_json::from_str(&out).unwrap();
        let holder = held["spec"]["holderIdentity"].as_str().unwrap().to_owned();
        assert_eq!(held["spec"]["leaseDurationSeconds"], 15);
        assert_eq!(held["spec"]["leaseTransitions"], 0);
        assert!(held["spec"]["acquireTime"].is_string() && held["spec"]["renewTime"].is_string());
        // The controller runs (on the leader) for a namespace deleted through another replica.
        namespace_is_cleaned_up(&other_addr, "doomed-1");
        garbage_is_collected(&other_addr, "1");

        // kill -9 the leader: another takes the lease over.
        let killed = Instant::now();
        replicas.kill(first);
        let second = wait_for_one_leader(&replicas, Some(first));
        let takeover = killed.elapsed();
        let now = lease(&replicas.replica(second).addr);
        assert_ne!(now["spec"]["holderIdentity"].as_str().unwrap(), holder);
        assert_eq!(now["spec"]["leaseTransitions"], 1);
        println!("takeover after kill -9 of the leader: {:.1} s (lease duration 15 s, renew deadline 10 s, retry period 2 s)", takeover.as_secs_f64());
        let third = (0..3).find(|i| *i != first && *i != second).unwrap();
        namespace_is_cleaned_up(&replicas.replica(third).addr.clone(), "doomed-2");
        garbage_is_collected(&replicas.replica(third).addr.clone(), "2");

        // SIGTERM the new leader: it releases the lease, the last replica takes it at its next try.
        let stopping = replicas.servers[second].take().unwrap();
        let stopped = Instant::now();
        assert!(stopping.terminate());
        let last = wait_for_one_leader(&replicas, Some(second));
        assert_eq!(last, third);
        println!("takeover after SIGTERM of the leader (lease released): {:.1} s", stopped.elapsed().as_secs_f64());
        assert_eq!(lease(&replicas.replica(third).addr)["spec"]["leaseTransitions"], 2);
        namespace_is_cleaned_up(&replicas.replica(third).addr.clone(), "doomed-3");
        garbage_is_collected(&replicas.replica(third).addr.clone(), "3");
        replicas
    })
    .await
    .unwrap();
    drop(replicas);
}

/// The server the other tests start has the default lease flags; a replica refuses flags
/// that would let two leaders overlap.
#[test]
fn lease_flags_that_break_the_election_are_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .args([
            "--bind",
            "127.0.0.1:0",
            "--storage",
            "etcd",
            "--etcd-servers",
            "http://127.0.0.1:1",
            "--leader-elect-lease-duration",
            "10",
            "--leader-elect-renew-deadline",
            "10",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("renew deadline"), "{stderr}");
}

/// The client's elector over HTTP (`HttpLeaseLock`), as a controller outside the server
/// would use it: two candidates on one Lease through two different replicas; one leads, and
/// when it stops (releasing the lease) the other leads. The Lease's record is upstream's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn candidates_elect_over_http_through_different_replicas() {
    use listwatch_client::leaderelection::{HttpLeaseLock, LeaderElectionConfig, LeaderElector};
    use listwatch_client::{HttpClient, HttpConfig};

    let replicas = Replicas::start(2, &[]).await;
    let candidate = |i: usize, id: &str| {
        let client =
            HttpClient::new(HttpConfig::new(replicas.replica(i).url.clone()).unwrap()).unwrap();
        let lock = HttpLeaseLock::new(client, "default", "external-controller").unwrap();
        let mut config = LeaderElectionConfig::new(id);
        // Short enough for a test; the invariant checks still hold (4 > 3 > 1.2 × 1).
        config.lease_duration = Duration::from_secs(4);
        config.renew_deadline = Duration::from_secs(3);
        config.retry_period = Duration::from_secs(1);
        let elector = LeaderElector::new(lock, config).unwrap();
        let leading = elector.leading();
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let stopped = std::sync::Arc::clone(&stop);
        let task = tokio::spawn(async move {
            elector
                .run(std::future::pending::<()>, stopped.notified())
                .await;
        });
        (leading, stop, task)
    };
    let mut cands = [candidate(0, "candidate-a"), candidate(1, "candidate-b")];
    let ids = ["candidate-a", "candidate-b"];
    let first = tokio::time::timeout(PATIENCE, async {
        let [(a, ..), (b, ..)] = &mut cands;
        tokio::select! {
            r = a.wait_for(|l| *l) => { r.unwrap(); 0 }
            r = b.wait_for(|l| *l) => { r.unwrap(); 1 }
        }
    })
    .await
    .expect("somebody leads");
    let other = 1 - first;
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/external-controller";
    let addr = replicas.replica(1).addr.clone();
    let read = |addr: String| tokio::task::spawn_blocking(move || get_json(&addr, path));
    let lease = read(addr.clone()).await.unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], ids[first]);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 4);
    assert!(!*cands[other].0.borrow());
    // The leader stops and releases the lease: the other candidate takes it.
    cands[first].1.notify_one();
    (&mut cands[first].2).await.unwrap();
    tokio::time::timeout(PATIENCE, cands[other].0.wait_for(|l| *l))
        .await
        .expect("the other candidate takes over")
        .unwrap();
    let lease = read(addr).await.unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], ids[other]);
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}
