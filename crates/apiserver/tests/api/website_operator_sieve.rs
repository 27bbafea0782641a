//! Stale-view testing of the reference operator (`crates/client/examples/website_operator.rs`)
//! in the style of Sieve (OSDI'22): the operator runs against the built server through a
//! view proxy (`common::view_proxy`) that perturbs what it sees, and every perturbed run must
//! end in the state of an unperturbed run of the same script, with a write history that
//! keeps the operator's promises. Three perturbations:
//!
//! - (a) **stale view after a restart**: `alpha` deleted and cleaned up, then the operator
//!   killed and started again against a lagging view that still serves `alpha` as it was
//!   before the deletion (live, with its finalizer) on every read a lagging server may
//!   answer from its cache; once the new replica has reconciled, the view is made fresh
//!   (watches ended, the next watch answered 410, so the informers relist);
//! - (b) **an unobserved state**: `beta`'s watch events dropped from its first change on
//!   until its second, so the operator sees only the later spec;
//! - (c) **a crash after each write**: for every k up to the number of writes of an
//!   unperturbed run, the operator killed right after its k-th successful write (the server
//!   has it, the operator never sees the answer) and started again.
//!
//! The checks, after each run: the snapshot of `website_operator::snapshot_of` (Websites'
//! specs, finalizers, status, children with their owner references, Events, the registry)
//! equals the unperturbed run's, and the history of the operator's writes (the proxy's log,
//! Lease writes aside) keeps these promises:
//! - every child is created once (a create answered 201 per ConfigMap or Deployment), as in
//!   the unperturbed run;
//! - the operator deletes nothing (the garbage collector removes children);
//! - a Website's registry record is written only after its finalizer was added, removed
//!   before its finalizer is removed, and never written again after that.
//!
//! Deadlines only bound hangs ([`PATIENCE`] per step).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::website_operator::{
    Impl, NS, Replica, SYSTEM, call, get, gone, live, server, snapshot_of, website,
};
use crate::common::PATIENCE;
use crate::common::view_proxy::{ObjectRef, ViewProxy, Write};

const IDENTITY: &str = "sieve";
const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/website-system/leases/website-operator";

/// One server, one proxy, one replica of the operator behind it.
struct Run {
    _dir: tempfile::TempDir,
    server: crate::common::Server,
    proxy: Arc<ViewProxy>,
    replica: Option<Replica>,
    reconciles: Arc<AtomicU64>,
}

impl Run {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data").to_str().unwrap().to_owned();
        let server = server(Impl::Listwatch, &data).await;
        let proxy = Arc::new(ViewProxy::start(&server.addr).await);
        let reconciles = Arc::new(AtomicU64::new(0));
        let replica = Some(Replica::start(
            Impl::Listwatch,
            proxy.url(),
            IDENTITY,
            Arc::clone(&reconciles),
        ));
        Self {
            _dir: dir,
            server,
            proxy,
            replica,
            reconciles,
        }
    }

    fn addr(&self) -> &str {
        &self.server.addr
    }

    /// Kills the replica (no lease release, nothing finished), and starts a new one with
    /// a fresh reconcile count. The dead replica's Lease is deleted so that the new one
    /// leads at once (leader election is `website_operator`'s `LeaseLost`).
    async fn crash_and_restart(&mut self) {
        if let Some(r) = self.replica.take() {
            r.killed().await;
        }
        let r = call(self.addr(), "DELETE", LEASE_PATH.into(), Value::Null).await;
        assert!(r.status == 200 || r.status == 404, "{}", r.status);
        self.reconciles = Arc::new(AtomicU64::new(0));
        self.replica = Some(Replica::start(
            Impl::Listwatch,
            self.proxy.url(),
            IDENTITY,
            Arc::clone(&self.reconciles),
        ));
    }

    /// Stops the replica gracefully (its reconciles in flight finish), so that the end
    /// state and the history read next hold every write it will make.
    async fn stop(&mut self) {
        if let Some(r) = self.replica.take() {
            r.stop().await;
        }
    }
}

/// The state of `names` and the registry (an empty registry as `{}`).
async fn state(addr: &str, names: &[&str]) -> Value {
    let mut s = snapshot_of(addr, names).await;
    if s["registry"].is_null() {
        s["registry"] = json!({});
    }
    s
}

/// Waits until the state of `names` is `want`; the last state seen after [`PATIENCE`].
async fn converge(addr: &str, names: &[&str], want: &Value) -> Result<(), Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = state(addr, names).await;
        if &got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(got);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn must_converge(addr: &str, names: &[&str], want: &Value, what: &str) {
    if let Err(got) = converge(addr, names, want).await {
        panic!(
            "{what}: never converged; last state {}\nwanted {}",
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(want).unwrap()
        );
    }
}

async fn create(addr: &str, name: &str, content: &str, replicas: i32) {
    let r = call(
        addr,
        "POST",
        format!("/apis/example.com/v1/namespaces/{NS}/websites"),
        website(name, content, replicas),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

async fn change(addr: &str, name: &str, content: &str, replicas: i32) {
    let r = call(
        addr,
        "PATCH",
        format!("/apis/example.com/v1/namespaces/{NS}/websites/{name}"),
        json!({"spec": {"content": content, "replicas": replicas}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

async fn delete(addr: &str, name: &str) {
    let r = call(
        addr,
        "DELETE",
        format!("/apis/example.com/v1/namespaces/{NS}/websites/{name}"),
        Value::Null,
    )
    .await;
    assert!(r.status == 200 || r.status == 202, "{}", r.status);
}

fn website_ref(name: &str) -> ObjectRef {
    ObjectRef::new("websites", Some(NS), name)
}

/// What the history checks look at in one write.
enum Kind {
    /// A create of a child (ConfigMap or Deployment) at this path.
    ChildCreated(String),
    FinalizerAdded(String),
    FinalizerRemoved(String),
    /// A registry write: the record key and whether it sets (true) or removes it.
    Record(String, bool),
    Delete(String),
    Other,
}

fn kind_of(w: &Write) -> Vec<Kind> {
    let ok = w.status < 300;
    let registry = w
        .path
        .starts_with(&format!("/api/v1/namespaces/{SYSTEM}/configmaps"));
    if ok && registry {
        return w.body["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| Kind::Record(k.clone(), !v.is_null()))
            .collect();
    }
    if w.method == "DELETE" {
        return vec![Kind::Delete(w.path.clone())];
    }
    let website = w
        .path
        .strip_prefix(&format!("/apis/example.com/v1/namespaces/{NS}/websites/"))
        .filter(|n| !n.contains('/'));
    if let (true, Some(name), Some(ops)) = (ok, website, w.body.as_array()) {
        let on_finalizers = |op: &str| {
            ops.iter().any(|o| {
                o["op"] == op
                    && o["path"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("/metadata/finalizers"))
            })
        };
        if on_finalizers("remove") {
            return vec![Kind::FinalizerRemoved(name.to_owned())];
        }
        if on_finalizers("add") {
            return vec![Kind::FinalizerAdded(name.to_owned())];
        }
    }
    let child = w.path.contains("/configmaps/") || w.path.contains("/deployments/");
    if w.status == 201 && child && !registry {
        return vec![Kind::ChildCreated(w.path.clone())];
    }
    vec![Kind::Other]
}

/// The history's promises (module doc), as a list of violations, and the creates per child.
fn history(writes: &[Write]) -> (Vec<String>, std::collections::BTreeMap<String, u32>) {
    let mut violations = Vec::new();
    let mut created = std::collections::BTreeMap::new();
    let mut finalized = std::collections::HashSet::new();
    let mut released = std::collections::HashSet::new();
    let mut recorded = std::collections::HashMap::new();
    for (i, w) in writes.iter().enumerate() {
        for k in kind_of(w) {
            match k {
                Kind::ChildCreated(path) => *created.entry(path).or_insert(0) += 1,
                Kind::FinalizerAdded(name) => {
                    finalized.insert(name);
                }
                Kind::FinalizerRemoved(name) => {
                    if recorded.get(&format!("{NS}.{name}")) == Some(&true) {
                        violations.push(format!(
                            "write {i}: {name}'s finalizer removed while its record exists"
                        ));
                    }
                    released.insert(name);
                }
                Kind::Record(key, set) => {
                    let name = key.split_once('.').map_or(key.as_str(), |(_, n)| n);
                    if set && !finalized.contains(name) {
                        violations.push(format!(
                            "write {i}: {key} recorded before its finalizer was added"
                        ));
                    }
                    if set && released.contains(name) {
                        violations.push(format!(
                            "write {i}: {key} recorded after its finalizer was removed"
                        ));
                    }
                    recorded.insert(key, set);
                }
                Kind::Delete(path) => violations.push(format!("write {i}: DELETE {path}")),
                Kind::Other => {}
            }
        }
    }
    for (path, n) in &created {
        if *n != 1 {
            violations.push(format!("{path} created {n} times"));
        }
    }
    (violations, created)
}

/// Checks the history of `run` against the promises and the unperturbed run's creates.
fn check_history(what: &str, writes: &[Write], reference: &[Write]) {
    let (violations, created) = history(writes);
    let (reference_violations, reference_created) = history(reference);
    assert!(
        reference_violations.is_empty(),
        "the unperturbed run: {reference_violations:?}"
    );
    assert!(
        !reference_created.is_empty(),
        "the unperturbed run created no child: the history sees no creates"
    );
    assert!(
        violations.is_empty(),
        "{what}: {violations:#?}\nwrites: {:#?}",
        writes
            .iter()
            .map(|w| format!("{} {} {} {}", w.status, w.method, w.path, w.body))
            .collect::<Vec<_>>()
    );
    assert_eq!(created, reference_created, "{what}: children created");
}

// ---------------------------------------------------------------------------------------
// (a) and (b): two Websites.

const AB: &[&str] = &["alpha", "beta"];

fn registry(entries: &[(&str, i32)]) -> Value {
    let mut m = serde_json::Map::new();
    for (name, replicas) in entries {
        m.insert(
            format!("{NS}.{name}"),
            json!(format!("replicas={replicas}")),
        );
    }
    Value::Object(m)
}

fn two(alpha: Value, beta: Value, reg: Value) -> Value {
    json!({"alpha": alpha, "beta": beta, "registry": reg})
}

/// (a)'s script unperturbed: alpha and beta created, alpha deleted; its final state and
/// the history.
async fn stale_script(perturb: bool) -> (Value, Vec<Write>) {
    let mut run = Run::start().await;
    let addr = run.addr().to_owned();
    create(&addr, "alpha", "alpha", 1).await;
    create(&addr, "beta", "beta", 2).await;
    let both = two(
        live("alpha", "alpha", 1),
        live("beta", "beta", 2),
        registry(&[("alpha", 1), ("beta", 2)]),
    );
    must_converge(&addr, AB, &both, "created").await;
    // The lagging server's copy: alpha as it was right before the change.
    let before = get(
        &addr,
        format!("/apis/example.com/v1/namespaces/{NS}/websites/alpha"),
    )
    .await
    .unwrap();
    delete(&addr, "alpha").await;
    let after = two(gone(), live("beta", "beta", 2), registry(&[("beta", 2)]));
    must_converge(&addr, AB, &after, "alpha deleted").await;
    if perturb {
        run.proxy.freeze(website_ref("alpha"), before);
        run.crash_and_restart().await;
        // The new replica has reconciled what its first view held (every term reconciles
        // every Website it lists: beta, and alpha too if the view was stale).
        let deadline = Instant::now() + PATIENCE;
        while run
            .proxy
            .listed("websites")
            .is_none_or(|n| run.reconciles.load(Ordering::Relaxed) < n as u64)
        {
            assert!(
                Instant::now() < deadline,
                "the restarted operator never reconciled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        run.proxy.thaw();
    }
    must_converge(&addr, AB, &after, "after the stale view").await;
    run.stop().await;
    let end = state(&addr, AB).await;
    let writes = run.proxy.writes();
    (end, writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_view_after_restart_changes_nothing() {
    let (reference, reference_writes) = stale_script(false).await;
    let (end, writes) = stale_script(true).await;
    assert_eq!(end, reference, "end state");
    check_history("stale view after restart", &writes, &reference_writes);
}

/// (b)'s script: alpha and beta created, beta changed twice; with `pause`, beta's events
/// are dropped from the first change until the second.
async fn unobserved_script(pause: bool) -> (Value, Vec<Write>) {
    let mut run = Run::start().await;
    let addr = run.addr().to_owned();
    create(&addr, "alpha", "alpha", 1).await;
    create(&addr, "beta", "beta", 2).await;
    let both = two(
        live("alpha", "alpha", 1),
        live("beta", "beta", 2),
        registry(&[("alpha", 1), ("beta", 2)]),
    );
    must_converge(&addr, AB, &both, "created").await;
    if pause {
        run.proxy.pause(website_ref("beta"));
    }
    change(&addr, "beta", "beta v2", 5).await;
    if pause {
        let deadline = Instant::now() + PATIENCE;
        while run.proxy.dropped() == 0 {
            assert!(Instant::now() < deadline, "beta's change never came");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        run.proxy.deliver_next(&website_ref("beta"));
    } else {
        let v2 = two(
            live("alpha", "alpha", 1),
            live("beta", "beta v2", 5),
            registry(&[("alpha", 1), ("beta", 5)]),
        );
        must_converge(&addr, AB, &v2, "beta v2").await;
    }
    change(&addr, "beta", "beta v3", 4).await;
    let v3 = two(
        live("alpha", "alpha", 1),
        live("beta", "beta v3", 4),
        registry(&[("alpha", 1), ("beta", 4)]),
    );
    must_converge(&addr, AB, &v3, "beta v3").await;
    run.stop().await;
    let end = state(&addr, AB).await;
    let writes = run.proxy.writes();
    (end, writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unobserved_intermediate_spec_changes_nothing() {
    let (reference, reference_writes) = unobserved_script(false).await;
    let (end, writes) = unobserved_script(true).await;
    assert_eq!(end, reference, "end state");
    check_history("beta's first change unobserved", &writes, &reference_writes);
}

// ---------------------------------------------------------------------------------------
// (c): one Website created, changed, deleted; a crash after each write.

/// The script; with `kill_after`, the operator is killed right after that write and
/// restarted. Its end state, history, and whether the kill happened.
async fn crash_script(kill_after: Option<u64>) -> (Value, Vec<Write>, bool) {
    let mut run = Run::start().await;
    if let Some(k) = kill_after {
        run.proxy.kill_after_write(k);
    }
    let addr = run.addr().to_owned();
    let proxy = Arc::clone(&run.proxy);
    let script = async {
        create(&addr, "alpha", "alpha", 1).await;
        let v1 = json!({"alpha": live("alpha", "alpha", 1), "registry": registry(&[("alpha", 1)])});
        if let Err(got) = converge(&addr, &["alpha"], &v1).await {
            return Err(("created", got));
        }
        change(&addr, "alpha", "alpha v2", 2).await;
        let v2 =
            json!({"alpha": live("alpha", "alpha v2", 2), "registry": registry(&[("alpha", 2)])});
        if let Err(got) = converge(&addr, &["alpha"], &v2).await {
            return Err(("changed", got));
        }
        delete(&addr, "alpha").await;
        let v3 = json!({"alpha": gone(), "registry": {}});
        converge(&addr, &["alpha"], &v3)
            .await
            .map_err(|got| ("deleted", got))
    };
    tokio::pin!(script);
    let outcome = if kill_after.is_some() {
        tokio::select! {
            hit = proxy.killed() => {
                if hit {
                    run.crash_and_restart().await;
                }
                script.await
            }
            outcome = &mut script => outcome,
        }
    } else {
        script.await
    };
    if let Err((step, got)) = outcome {
        panic!(
            "kill after write {kill_after:?}: step {step:?} never converged; last state {}",
            serde_json::to_string_pretty(&got).unwrap()
        );
    }
    run.stop().await;
    let end = state(&addr, &["alpha"]).await;
    let writes = run.proxy.writes();
    let killed = run.proxy.hit();
    (end, writes, killed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_any_write_changes_nothing() {
    let (reference, reference_writes, _) = crash_script(None).await;
    let n = reference_writes.iter().filter(|w| w.status < 300).count() as u64;
    assert!(n > 0, "the unperturbed run wrote nothing");
    let mut not_reached = Vec::new();
    for k in 1..=n {
        let (end, writes, killed) = crash_script(Some(k)).await;
        if !killed {
            not_reached.push(k);
        }
        assert_eq!(end, reference, "kill after write {k}: end state");
        check_history(&format!("kill after write {k}"), &writes, &reference_writes);
    }
    eprintln!(
        "sieve-crash: {n} writes in the unperturbed run; a kill after each; \
         fewer writes than k (no kill) for k in {not_reached:?}"
    );
}
