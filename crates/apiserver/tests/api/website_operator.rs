//! The reference operator (`crates/client/examples/website_operator.rs`, listwatch-client)
//! and the same operator on kube-rs's `Controller`
//! (`crates/apiserver/examples/website_operator_kube.rs`) against the built server, each
//! through a fault proxy (`common::fault_proxy`), under the same script and faults:
//!
//! 1. three Websites created (`alpha` 1 replica, `beta` 2, `gamma` 3), converged;
//! 2. `beta` changed (5 replicas, new content), converged;
//! 3. `gamma` deleted, converged: its registry record removed by the finalizer, its children
//!    removed by the garbage collector, the Website gone.
//!
//! "Converged" is one end state, whatever the fault: each Website's ConfigMap and
//! Deployment as its spec says with a `controller: true` owner reference to it, its
//! finalizer, a `Ready` condition and `observedGeneration` equal to its generation, the
//! registry listing exactly the live Websites, and the Events (`ChildrenApplied` for every
//! Website, `RegistryCleaned` for the deleted one). The faults:
//! - `restart`: the server (`--data-dir`, so its state survives) killed with SIGKILL as soon
//!   as the first child exists (the operator mid-reconcile), and again right after the
//!   update; it comes back on another port behind the same proxy;
//! - `watch_cuts`: every connection of the operator cut every 300 ms, 20 times, from the
//!   first write on;
//! - `lease_lost`: two replicas; the leader is partitioned away mid-reconcile (the other
//!   takes over once the lease expires), then the new leader is killed without releasing
//!   the lease and the first one's partition healed.
//!
//! Each run prints one `operator-comparison:` line (converged, reconciles, seconds to
//! converge, when each step converged): figures for docs/client.md, not thresholds.
//! Deadlines only bound hangs. The listwatch operator's tests fail when it does not
//! converge; the kube-rs operator's print it (with the last state seen): it is the peer
//! being measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::fault_proxy::FaultProxy;
use crate::common::{PATIENCE, Server, http};

#[path = "../../../client/examples/website_operator.rs"]
#[allow(dead_code, unreachable_pub)]
pub(super) mod listwatch_operator;

#[path = "../../examples/website_operator_kube.rs"]
#[allow(dead_code, unreachable_pub)]
mod kube_operator;

pub(super) const NS: &str = "web";
pub(super) const SYSTEM: &str = "website-system";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const MERGE: (&str, &str) = ("Content-Type", "application/merge-patch+json");
/// `watch_cuts`: how many cuts, how far apart.
const CUTS: u32 = 20;
const CUT_EVERY: Duration = Duration::from_millis(300);
const LEASE: (Duration, Duration, Duration) = (
    Duration::from_secs(3),
    Duration::from_secs(2),
    Duration::from_millis(500),
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Impl {
    Listwatch,
    KubeRs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Restart,
    WatchCuts,
    LeaseLost,
}

use crate::common;

pub(super) async fn call(
    addr: &str,
    method: &'static str,
    path: String,
    body: Value,
) -> common::Response {
    let addr = addr.to_owned();
    let header = if method == "PATCH" { MERGE } else { JSON };
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    tokio::task::spawn_blocking(move || http(&addr, method, &path, &[header], &body))
        .await
        .unwrap()
}

pub(super) async fn get(addr: &str, path: String) -> Option<Value> {
    let r = call(addr, "GET", path, Value::Null).await;
    (r.status == 200).then(|| r.json())
}

/// One replica of an operator, running in a task of its own.
pub(super) struct Replica {
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Replica {
    pub(super) fn start(
        imp: Impl,
        url: String,
        identity: &str,
        reconciles: Arc<AtomicU64>,
    ) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            stopped.await.ok();
        };
        let identity = identity.to_owned();
        let task = match imp {
            Impl::Listwatch => tokio::spawn(async move {
                let options = listwatch_operator::Options {
                    identity,
                    lease: LEASE,
                    reconciles,
                };
                let config = listwatch_client::HttpConfig::new(url).unwrap();
                listwatch_operator::run(config, options, shutdown)
                    .await
                    .unwrap();
            }),
            Impl::KubeRs => tokio::spawn(async move {
                let options = kube_operator::Options {
                    identity,
                    lease: LEASE,
                    reconciles,
                };
                kube_operator::run(&url, options, shutdown).await.unwrap();
            }),
        };
        Self {
            task,
            stop: Some(stop),
        }
    }

    /// Stops it as a process would be killed: no lease release, nothing finished.
    pub(super) fn kill(&self) {
        self.task.abort();
    }

    /// Kills it ([`kill`](Self::kill)) and waits until its task has ended.
    pub(super) async fn killed(mut self) {
        self.task.abort();
        let _ = tokio::time::timeout(PATIENCE, &mut self.task).await;
    }

    /// Stops it gracefully (the lease released).
    pub(super) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
        let _ = tokio::time::timeout(PATIENCE, &mut self.task).await;
        self.task.abort();
    }
}

/// The Website CRD, as each operator's kube-rs derive writes it.
fn crd(imp: Impl) -> Value {
    use kube::CustomResourceExt;
    match imp {
        Impl::Listwatch => serde_json::to_value(listwatch_operator::Website::crd()).unwrap(),
        Impl::KubeRs => serde_json::to_value(kube_operator::Website::crd()).unwrap(),
    }
}

/// Starts a server on `dir` with the namespaces and the Website CRD.
pub(super) async fn server(imp: Impl, dir: &str) -> Server {
    let s = Server::start(&["--data-dir", dir]);
    for ns in [NS, SYSTEM] {
        let r = call(
            &s.addr,
            "POST",
            "/api/v1/namespaces".into(),
            json!({"metadata": {"name": ns}}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    let r = call(
        &s.addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
        crd(imp),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    until("the websites resource served", async || {
        get(
            &s.addr,
            format!("/apis/example.com/v1/namespaces/{NS}/websites"),
        )
        .await
        .is_some()
    })
    .await;
    s
}

pub(super) async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn website(name: &str, content: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Website",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"content": content, "replicas": replicas},
    })
}

/// The observable end state, normalized (no uids, versions or times).
async fn snapshot(addr: &str) -> Value {
    snapshot_of(addr, &["alpha", "beta", "gamma"]).await
}

/// The observable state of the Websites `names` (in namespace `web`), their children and
/// Events, and the registry: normalized (no uids, versions or times).
pub(super) async fn snapshot_of(addr: &str, names: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    let events = get(addr, format!("/api/v1/namespaces/{NS}/events"))
        .await
        .unwrap_or_default();
    let reasons = |name: &str| -> Vec<String> {
        let mut r: Vec<String> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == name)
            .filter_map(|e| e["reason"].as_str().map(str::to_owned))
            .collect();
        r.sort();
        r.dedup();
        r
    };
    for &name in names {
        let w = get(
            addr,
            format!("/apis/example.com/v1/namespaces/{NS}/websites/{name}"),
        )
        .await;
        let uid = w.as_ref().map(|w| w["metadata"]["uid"].clone());
        let owner = |child: &Value| {
            let r = &child["metadata"]["ownerReferences"];
            json!({
                "count": r.as_array().map_or(0, Vec::len),
                "kind": r[0]["kind"], "name": r[0]["name"], "controller": r[0]["controller"],
                "uid_matches": Some(r[0]["uid"].clone()) == uid,
            })
        };
        let cm = get(
            addr,
            format!("/api/v1/namespaces/{NS}/configmaps/{name}-content"),
        )
        .await;
        let deploy = get(
            addr,
            format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}"),
        )
        .await;
        let w = w.map(|w| {
            let generation = &w["metadata"]["generation"];
            let conditions = &w["status"]["conditions"];
            json!({
                "spec": w["spec"],
                "finalizers": w["metadata"]["finalizers"],
                "observed_current": &w["status"]["observedGeneration"] == generation,
                "ready": conditions[0]["type"] == "Ready" && conditions[0]["status"] == "True",
                "condition_current": &conditions[0]["observedGeneration"] == generation,
            })
        });
        out.insert(
            name.to_owned(),
            json!({
                "website": w,
                "configmap": cm.as_ref().map(|c| json!({"data": c["data"], "owner": owner(c)})),
                "deployment": deploy.as_ref().map(|d| json!({"replicas": d["spec"]["replicas"], "owner": owner(d)})),
                "events": reasons(name),
            }),
        );
    }
    let registry = get(
        addr,
        format!("/api/v1/namespaces/{SYSTEM}/configmaps/website-registry"),
    )
    .await;
    out.insert(
        "registry".into(),
        registry.map_or(Value::Null, |r| r["data"].clone()),
    );
    Value::Object(out)
}

/// The converged state of a live Website in [`snapshot_of`].
pub(super) fn live(name: &str, content: &str, replicas: i32) -> Value {
    let owner = json!({"count": 1, "kind": "Website", "name": name, "controller": true, "uid_matches": true});
    json!({
        "website": {
            "spec": {"content": content, "replicas": replicas},
            "finalizers": ["example.com/website-registry"],
            "observed_current": true, "ready": true, "condition_current": true,
        },
        "configmap": {"data": {"index.html": content}, "owner": owner},
        "deployment": {"replicas": replicas, "owner": owner},
        "events": ["ChildrenApplied"],
    })
}

/// The converged state of a deleted Website in [`snapshot_of`].
pub(super) fn gone() -> Value {
    json!({"website": null, "configmap": null, "deployment": null,
           "events": ["ChildrenApplied", "RegistryCleaned"]})
}

/// The state every run must end in after step `step` (1, 2 or 3).
fn expected(step: u8) -> Value {
    let beta = if step >= 2 {
        live("beta", "beta v2", 5)
    } else {
        live("beta", "beta", 2)
    };
    let (gamma, registry) = if step >= 3 {
        (
            gone(),
            json!({"web.alpha": "replicas=1", "web.beta": "replicas=5"}),
        )
    } else {
        (
            live("gamma", "gamma", 3),
            json!({"web.alpha": "replicas=1", "web.beta": format!("replicas={}", if step >= 2 { 5 } else { 2 }), "web.gamma": "replicas=3"}),
        )
    };
    json!({"alpha": live("alpha", "alpha", 1), "beta": beta, "gamma": gamma, "registry": registry})
}

/// Waits for the state of `step`; the last state seen when it never comes.
///
/// The deadline is three times the usual patience: after repeated outages within two
/// minutes a client-go-style reflector waits up to its 30 s backoff cap, jittered up to
/// twice that, before it watches again (listwatch-client's default; kube-rs resets its
/// backoff after any event). A deadline only bounds a hang.
async fn converge(addr: &str, step: u8) -> Result<(), Value> {
    let want = expected(step);
    let deadline = Instant::now() + 3 * PATIENCE;
    loop {
        let got = snapshot(addr).await;
        if got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(got);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lease_holder(addr: &str) -> Option<String> {
    get(
        addr,
        format!("/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/website-operator"),
    )
    .await
    .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

/// What one run measured.
#[derive(Debug)]
struct Outcome {
    /// The first step whose state never came, with the last state seen.
    failed: Option<(u8, Value)>,
    reconciles: u64,
    seconds: f64,
}

/// Kills the server (SIGKILL) and starts it again on the same data, on a new port behind
/// the same proxies.
fn restart(server: &mut Option<Server>, data: &str, proxies: &[&FaultProxy]) -> String {
    drop(server.take());
    let s = Server::start(&["--data-dir", data]);
    for p in proxies {
        p.retarget(&s.addr);
    }
    let addr = s.addr.clone();
    *server = Some(s);
    addr
}

/// Runs the script of the module doc with `imp` under `fault`.
async fn run(imp: Impl, fault: Fault) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").to_str().unwrap().to_owned();
    let mut server = Some(server(imp, &data).await);
    let mut addr = server.as_ref().unwrap().addr.clone();
    let reconciles = Arc::new(AtomicU64::new(0));
    let proxy_a = Arc::new(FaultProxy::start(&addr).await);
    let proxy_b = FaultProxy::start(&addr).await;
    let a = Replica::start(imp, proxy_a.url(), "replica-a", Arc::clone(&reconciles));
    let mut b = None;
    if fault == Fault::LeaseLost {
        until("replica-a leads", async || {
            lease_holder(&addr).await.as_deref() == Some("replica-a")
        })
        .await;
        b = Some(Replica::start(
            imp,
            proxy_b.url(),
            "replica-b",
            Arc::clone(&reconciles),
        ));
    }
    let started = Instant::now();
    let cutter = (fault == Fault::WatchCuts).then(|| {
        let p = Arc::clone(&proxy_a);
        tokio::spawn(async move {
            for _ in 0..CUTS {
                tokio::time::sleep(CUT_EVERY).await;
                p.cut();
            }
        })
    });
    for (name, replicas) in [("alpha", 1), ("beta", 2), ("gamma", 3)] {
        let r = call(
            &addr,
            "POST",
            format!("/apis/example.com/v1/namespaces/{NS}/websites"),
            website(name, name, replicas),
        )
        .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    // Mid-reconcile: the first child exists, the rest is under way.
    if matches!(fault, Fault::Restart | Fault::LeaseLost) {
        until("the first child", async || {
            get(
                &addr,
                format!("/api/v1/namespaces/{NS}/configmaps/alpha-content"),
            )
            .await
            .is_some()
        })
        .await;
    }
    match fault {
        Fault::Restart => addr = restart(&mut server, &data, &[&proxy_a, &proxy_b]),
        // The leader cut off: it stops at its renew deadline, the other takes over once
        // the lease expires.
        Fault::LeaseLost => proxy_a.partition(),
        Fault::None | Fault::WatchCuts => {}
    }
    let mut failed = None;
    let mut steps = Vec::new();
    if let Err(state) = converge(&addr, 1).await {
        failed = Some((1, state));
    }
    steps.push(started.elapsed().as_secs_f64());
    if failed.is_none() {
        let r = call(
            &addr,
            "PATCH",
            format!("/apis/example.com/v1/namespaces/{NS}/websites/beta"),
            json!({"spec": {"content": "beta v2", "replicas": 5}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        match fault {
            Fault::Restart => addr = restart(&mut server, &data, &[&proxy_a, &proxy_b]),
            // The new leader dies without releasing the lease; the first comes back.
            Fault::LeaseLost => {
                if let Some(b) = &b {
                    b.kill();
                }
                proxy_a.heal();
            }
            Fault::None | Fault::WatchCuts => {}
        }
        if let Err(state) = converge(&addr, 2).await {
            failed = Some((2, state));
        }
        steps.push(started.elapsed().as_secs_f64());
    }
    if failed.is_none() {
        let r = call(
            &addr,
            "DELETE",
            format!("/apis/example.com/v1/namespaces/{NS}/websites/gamma"),
            Value::Null,
        )
        .await;
        assert!(r.status == 200 || r.status == 202, "{}", r.status);
        if let Err(state) = converge(&addr, 3).await {
            failed = Some((3, state));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(c) = cutter {
        c.abort();
    }
    a.stop().await;
    if let Some(b) = b {
        b.stop().await;
    }
    let outcome = Outcome {
        failed,
        reconciles: reconciles.load(Ordering::Relaxed),
        seconds,
    };
    eprintln!(
        "operator-comparison: impl={imp:?} fault={fault:?} converged={} reconciles={} seconds={:.1} steps_at={steps:.1?} cuts={}",
        outcome.failed.is_none(),
        outcome.reconciles,
        outcome.seconds,
        proxy_a.cuts(),
    );
    outcome
}

/// Runs `imp` under `fault`: the listwatch operator must converge; the kube-rs one is
/// measured (its outcome printed, its non-convergence a figure of the comparison, with the
/// last state seen), since it is the peer being compared, not code of this workspace.
async fn check(imp: Impl, fault: Fault) {
    let outcome = run(imp, fault).await;
    if let Some((step, state)) = &outcome.failed {
        let message = format!(
            "{imp:?} under {fault:?}: step {step} never converged; last state {}\nwanted {}",
            serde_json::to_string_pretty(state).unwrap(),
            serde_json::to_string_pretty(&expected(*step)).unwrap()
        );
        match imp {
            Impl::Listwatch => panic!("{message}"),
            Impl::KubeRs => eprintln!("operator-comparison: {message}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listwatch_operator_unperturbed() {
    check(Impl::Listwatch, Fault::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listwatch_operator_survives_server_restarts_mid_reconcile() {
    check(Impl::Listwatch, Fault::Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listwatch_operator_survives_cut_watches() {
    check(Impl::Listwatch, Fault::WatchCuts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listwatch_operator_survives_lost_leases() {
    check(Impl::Listwatch, Fault::LeaseLost).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_operator_unperturbed() {
    check(Impl::KubeRs, Fault::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_operator_under_server_restarts_mid_reconcile() {
    check(Impl::KubeRs, Fault::Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_operator_under_cut_watches() {
    check(Impl::KubeRs, Fault::WatchCuts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_operator_under_lost_leases() {
    check(Impl::KubeRs, Fault::LeaseLost).await;
}
