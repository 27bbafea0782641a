//! Chaos: replicas of listwatch-apiserver over a 3-member etcd cluster, 200 watchers with
//! random selectors, a writer at a steady rate, and faults one after another — a replica
//! killed with SIGKILL and restarted, the etcd leader killed and restarted, every replica
//! rolled (drained at the balancer, SIGTERM, started again). Issue 18 item 4.
//!
//! What must hold at the end:
//! - every watcher that never relisted received exactly the history the writes imply for its
//!   selection (ADDED/MODIFIED as `Apply` with the written `data.seq`, DELETED with the last
//!   state, an object leaving the selection as a delete), once each, in order, with
//!   increasing resource versions, and the version each acknowledged write returned;
//! - a watcher that relisted (only a 410 makes listwatch-client relist) holds exactly the
//!   final state of its selection;
//! - no acknowledged write is lost: a consistent list on a replica equals the writer's model.
//!
//! The truth comes from the write responses. A write whose outcome the writer could not see
//! (connection cut, 5xx while etcd elects a leader) is resolved before the next one by a
//! consistent GET of its object (the writer is the only one writing ConfigMaps and is
//! sequential, so the object shows whether that write landed); a write found to have landed
//! later than that GET (an etcd proposal that committed after its request timed out) shows
//! up as a precondition failure on the next write of the object and is then appended.
//!
//! Watchers: three in four go through the testkit's TCP balancer (round-robin over the
//! replicas; a dead replica's connections are reset), one in four uses listwatch-client's own
//! failover (every replica's URL, in a rotated order).
//!
//! Seeded: the seed is printed; `LISTWATCH_CHAOS_SEED=N` runs that seed again. Recovery
//! times (from a fault until the first acknowledged write after it, and until every watcher
//! has received every write up to that one) are printed per fault. Bounded: every wait has a
//! deadline; about a minute of wall time on two cores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server};
use futures::StreamExt;
use listwatch_api::{FieldSelector, LabelSelector};
use listwatch_client::{Config, Event, HttpClient, HttpConfig, watcher};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_testkit::Balancer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const REPLICAS: usize = 2;
const WATCHERS: usize = 200;
const NAMESPACES: usize = 4;
const NAMES: usize = 10;
const APPS: u8 = 4;
/// The writer's pace: one write per tick, 50 a second when writes are faster than that
/// (each waits for the previous one's answer).
const WRITE_EVERY: Duration = Duration::from_millis(20);

/// A key: namespace index, name index.
type Key = (usize, usize);

/// Which objects a watcher selects.
#[derive(Debug, Clone)]
struct Selection {
    namespace: Option<usize>,
    label: Label,
    /// `metadata.name=cm-N`.
    name: Option<usize>,
}

#[derive(Debug, Clone)]
enum Label {
    Any,
    Eq(u8),
    Neq(u8),
    In(u8, u8),
}

impl Selection {
    fn random(rng: &mut StdRng) -> Self {
        let namespace = rng
            .random_bool(0.5)
            .then(|| rng.random_range(0..NAMESPACES));
        let app = |rng: &mut StdRng| rng.random_range(0..APPS);
        let label = match rng.random_range(0..4) {
            0 => Label::Any,
            1 => Label::Eq(app(rng)),
            2 => Label::Neq(app(rng)),
            _ => Label::In(app(rng), app(rng)),
        };
        let name = rng.random_bool(0.25).then(|| rng.random_range(0..NAMES));
        Self {
            namespace,
            label,
            name,
        }
    }

    /// Written independently of the server's and the client's selector code.
    fn matches(&self, (ns, name): Key, app: u8) -> bool {
        self.namespace.is_none_or(|n| n == ns)
            && self.name.is_none_or(|n| n == name)
            && match self.label {
                Label::Any => true,
                Label::Eq(a) => app == a,
                Label::Neq(a) => app != a,
                Label::In(a, b) => app == a || app == b,
            }
    }

    fn path(&self) -> String {
        match self.namespace {
            Some(ns) => format!("/api/v1/namespaces/ns-{ns}/configmaps"),
            None => "/api/v1/configmaps".to_owned(),
        }
    }

    fn config(&self) -> Config {
        let label = match self.label {
            Label::Any => String::new(),
            Label::Eq(a) => format!("app=a{a}"),
            Label::Neq(a) => format!("app!=a{a}"),
            Label::In(a, b) => format!("app in (a{a},a{b})"),
        };
        let field = self
            .name
            .map(|n| format!("metadata.name=cm-{n}"))
            .unwrap_or_default();
        Config::default()
            .labels(LabelSelector::parse(&label).unwrap())
            .fields(FieldSelector::parse(&field).unwrap())
    }
}

/// One write that landed: the object's state after it (`None`: deleted) and, when the
/// server said, the resource version it got.
#[derive(Debug, Clone)]
struct Write {
    key: Key,
    after: Option<(u8, u64)>,
    rv: Option<u64>,
}

/// An event as a watcher received it (or as the truth predicts it, `rv` then being the
/// write's when known).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    delete: bool,
    key: Key,
    seq: u64,
    rv: u64,
}

/// The events `sel` must receive for `writes` from an empty start, and its final state.
fn expected(sel: &Selection, writes: &[Write]) -> (Vec<Ev>, BTreeMap<Key, u64>) {
    let mut state: BTreeMap<Key, (u8, u64)> = BTreeMap::new();
    let mut out = Vec::new();
    for w in writes {
        let before = state
            .get(&w.key)
            .copied()
            .filter(|(app, _)| sel.matches(w.key, *app));
        let after = w.after.filter(|(app, _)| sel.matches(w.key, *app));
        let rv = w.rv.unwrap_or(0);
        match (before, after) {
            (_, Some((_, seq))) => out.push(Ev {
                delete: false,
                key: w.key,
                seq,
                rv,
            }),
            (Some((_, seq)), None) => out.push(Ev {
                delete: true,
                key: w.key,
                seq,
                rv,
            }),
            (None, None) => {}
        }
        match w.after {
            Some(s) => state.insert(w.key, s),
            None => state.remove(&w.key),
        };
    }
    let fin = state
        .into_iter()
        .filter(|(k, (app, _))| sel.matches(*k, *app))
        .map(|(k, (_, seq))| (k, seq))
        .collect();
    (out, fin)
}

/// What one watcher received.
#[derive(Debug, Default)]
struct Seen {
    synced: bool,
    relisted: bool,
    history: Vec<Ev>,
    /// How many events had arrived when it first relisted: those must still be an exact
    /// prefix of the truth.
    before_relist: usize,
    state: BTreeMap<Key, u64>,
    listing: BTreeMap<Key, u64>,
    errors: u64,
}

fn parse(o: &listwatch_api::Object) -> (Key, u64) {
    let ns = o
        .namespace()
        .and_then(|n| n.strip_prefix("ns-"))
        .and_then(|n| n.parse().ok())
        .expect("ns-N");
    let name = o
        .name()
        .strip_prefix("cm-")
        .and_then(|n| n.parse().ok())
        .expect("cm-N");
    let v = o.to_value().unwrap();
    let seq = v["data"]["seq"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    ((ns, name), seq)
}

fn spawn_watcher(client: HttpClient, sel: &Selection, seen: Arc<Mutex<Seen>>) {
    let lw = client.lister_watcher(&sel.path()).unwrap();
    tokio::spawn(watcher(lw, sel.config()).for_each(move |e| {
        let mut s = seen.lock().unwrap();
        match e {
            Ok(Event::Init) => {
                if s.synced && !s.relisted {
                    s.relisted = true;
                    s.before_relist = s.history.len();
                }
                s.listing.clear();
            }
            Ok(Event::InitApply(o)) => {
                let (k, seq) = parse(&o);
                s.listing.insert(k, seq);
            }
            Ok(Event::InitDone { .. }) => {
                s.state = std::mem::take(&mut s.listing);
                s.synced = true;
            }
            Ok(Event::Apply(o)) => {
                let (key, seq) = parse(&o);
                s.state.insert(key, seq);
                s.history.push(Ev {
                    delete: false,
                    key,
                    seq,
                    rv: o.resource_version(),
                });
            }
            Ok(Event::Delete(o)) => {
                let (key, seq) = parse(&o);
                s.state.remove(&key);
                s.history.push(Ev {
                    delete: true,
                    key,
                    seq,
                    rv: o.resource_version(),
                });
            }
            Ok(Event::Bookmark { .. }) => {}
            Err(_) => s.errors += 1,
        }
        async {}
    }));
}

/// The writer's view: what landed, in order, with the time each write was acknowledged.
#[derive(Default)]
struct Truth {
    writes: Vec<(Write, Instant)>,
    model: BTreeMap<Key, (u8, u64, u64)>,
    /// Writes whose outcome was unknown and found not to have landed, by key: a later
    /// precondition failure may show they landed after all.
    unresolved: BTreeMap<Key, Vec<Option<(u8, u64)>>>,
    ambiguous: u64,
    late: u64,
    failed: u64,
}

fn object_path((ns, name): Key) -> String {
    format!("/api/v1/namespaces/ns-{ns}/configmaps/cm-{name}")
}

fn rv_of(v: &Value) -> Option<u64> {
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

fn seq_and_app(v: &Value) -> (u64, u8) {
    let seq = v["data"]["seq"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    let app = v["metadata"]["labels"]["app"]
        .as_str()
        .and_then(|a| a.strip_prefix('a'))
        .and_then(|a| a.parse().ok())
        .unwrap();
    (seq, app)
}

/// A consistent GET of `key`, retried (each try fails over) until it answers.
async fn read(client: &HttpClient, key: Key) -> Option<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match client.get(&object_path(key)).await {
            Ok(v) => return v,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot read {key:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn record(truth: &Mutex<Truth>, key: Key, after: Option<(u8, u64)>, rv: Option<u64>) {
    let mut t = truth.lock().unwrap();
    match (after, rv) {
        (Some((app, seq)), Some(rv)) => {
            t.model.insert(key, (app, seq, rv));
        }
        _ => {
            t.model.remove(&key);
        }
    }
    t.writes.push((Write { key, after, rv }, Instant::now()));
}

/// Sets the model of `key` from the server's state, appending a write found to have landed
/// late; panics when the state matches no write the writer made.
async fn reconcile(client: &HttpClient, truth: &Mutex<Truth>, key: Key) {
    let now = read(client, key).await;
    let now = now.as_ref().map(|v| {
        let (seq, app) = seq_and_app(v);
        (app, seq, rv_of(v).unwrap())
    });
    let want = now.map(|(a, s, _)| (a, s));
    {
        let mut t = truth.lock().unwrap();
        let model = t.model.get(&key).copied();
        if model.map(|(a, s, _)| (a, s)) == want {
            return;
        }
        let pending = t.unresolved.entry(key).or_default();
        let Some(i) = pending.iter().position(|p| *p == want) else {
            panic!("{key:?} is {now:?} on the server, which no write made (model {model:?})");
        };
        pending.remove(i);
        t.late += 1;
    }
    record(truth, key, want, now.map(|(_, _, rv)| rv));
}

/// Writes at a steady rate until `stop`; every outcome resolved before the next write.
async fn writer(client: HttpClient, truth: Arc<Mutex<Truth>>, stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5752_4954_4552);
    let mut seq = 0u64;
    let mut pace = tokio::time::interval(WRITE_EVERY);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        pace.tick().await;
        let key = (rng.random_range(0..NAMESPACES), rng.random_range(0..NAMES));
        seq += 1;
        let current = truth.lock().unwrap().model.get(&key).copied();
        let (ns, name) = key;
        let body = |app: u8, rv: Option<u64>| {
            let mut meta =
                json!({"name": format!("cm-{name}"), "labels": {"app": format!("a{app}")}});
            if let Some(rv) = rv {
                meta["resourceVersion"] = json!(rv.to_string());
            }
            json!({"metadata": meta, "data": {"seq": seq.to_string()}})
        };
        let (after, result) = match current {
            None => {
                let app = rng.random_range(0..APPS);
                let r = client
                    .create(
                        &format!("/api/v1/namespaces/ns-{ns}/configmaps"),
                        &body(app, None),
                    )
                    .await;
                (Some((app, seq)), r.map(|v| rv_of(&v)))
            }
            Some((app, _, rv)) if rng.random_bool(0.75) => {
                let app = if rng.random_bool(0.3) {
                    rng.random_range(0..APPS)
                } else {
                    app
                };
                let r = client
                    .replace(&object_path(key), &body(app, Some(rv)))
                    .await;
                (Some((app, seq)), r.map(|v| rv_of(&v)))
            }
            Some(_) => {
                let r = client.delete(&object_path(key)).await;
                (None, r.map(|_| None))
            }
        };
        match result {
            Ok(rv) => record(&truth, key, after, rv),
            Err(e) if matches!(e.code(), Some(404 | 409)) => {
                // The model is behind: an earlier unresolved write landed late. This one did
                // not land.
                truth.lock().unwrap().failed += 1;
                reconcile(&client, &truth, key).await;
            }
            Err(e) => {
                // Unknown outcome: the object says.
                let now = read(&client, key).await;
                let landed = match (&now, after) {
                    (Some(v), Some((_, s))) => seq_and_app(v).0 == s,
                    (None, None) => true,
                    _ => false,
                };
                truth.lock().unwrap().ambiguous += 1;
                if landed {
                    record(&truth, key, after, now.as_ref().and_then(rv_of));
                } else {
                    {
                        let mut t = truth.lock().unwrap();
                        t.unresolved.entry(key).or_default().push(after);
                    }
                    // The object may have changed meanwhile only through a late landing.
                    reconcile(&client, &truth, key).await;
                }
                tracing::debug!(error = %e, landed, "write outcome resolved");
            }
        }
    }
}

/// Whether every watcher that never relisted has received the events of `writes`.
fn caught_up(sels: &[Selection], seen: &[Arc<Mutex<Seen>>], writes: &[Write]) -> bool {
    sels.iter().zip(seen).all(|(sel, s)| {
        let s = s.lock().unwrap();
        s.relisted || s.history.len() >= expected(sel, writes).0.len()
    })
}

fn flags(etcd: &str) -> Vec<String> {
    [
        "--storage",
        "etcd",
        "--etcd-servers",
        etcd,
        "--shutdown-grace-period",
        "2",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn start_replica(bind: &str, flags: &[String]) -> Server {
    let f: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::start_at(bind, &f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn replicas_etcd_and_watchers_survive_kills_and_rolls_with_nothing_lost_or_repeated() {
    let seed: u64 = std::env::var("LISTWATCH_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("chaos seed {seed} (LISTWATCH_CHAOS_SEED={seed} runs it again)");
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);

    let mut etcd = EtcdCluster::start(3).await.expect("etcd cluster");
    let flags = flags(&etcd.endpoints().join(","));
    let mut replicas: Vec<Option<Server>> = (0..REPLICAS)
        .map(|_| Some(start_replica("127.0.0.1:0", &flags)))
        .collect();
    let binds: Vec<String> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().addr.clone())
        .collect();
    let urls: Vec<String> = binds.iter().map(|b| format!("http://{b}")).collect();
    let lb = Balancer::start(&binds.iter().map(|b| b.parse().unwrap()).collect::<Vec<_>>())
        .await
        .unwrap();
    let writes_client = HttpClient::new(HttpConfig::with_servers(urls.clone()).unwrap()).unwrap();
    for ns in 0..NAMESPACES {
        writes_client
            .create(
                "/api/v1/namespaces",
                &json!({"metadata": {"name": format!("ns-{ns}")}}),
            )
            .await
            .unwrap();
    }

    // Watchers, all synced (on an empty collection) before the first write.
    let sels: Vec<Selection> = (0..WATCHERS).map(|_| Selection::random(&mut rng)).collect();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..WATCHERS).map(|_| Arc::default()).collect();
    for (i, (sel, s)) in sels.iter().zip(&seen).enumerate() {
        let config = if i % 4 == 0 {
            let mut rotated = urls.clone();
            rotated.rotate_left(i / 4 % REPLICAS);
            HttpConfig::with_servers(rotated).unwrap()
        } else {
            HttpConfig::new(lb.url()).unwrap()
        };
        spawn_watcher(HttpClient::new(config).unwrap(), sel, Arc::clone(s));
    }
    let deadline = Instant::now() + PATIENCE;
    while !seen.iter().all(|s| s.lock().unwrap().synced) {
        assert!(Instant::now() < deadline, "watchers never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{WATCHERS} watchers synced after {:.1?}; balancer connections {:?}",
        started.elapsed(),
        lb.connections()
    );

    let truth: Arc<Mutex<Truth>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(
        writes_client.clone(),
        Arc::clone(&truth),
        Arc::clone(&stop),
        seed,
    ));
    let writes = || -> Vec<Write> {
        truth
            .lock()
            .unwrap()
            .writes
            .iter()
            .map(|(w, _)| w.clone())
            .collect()
    };
    let recoveries: Arc<Mutex<Vec<String>>> = Arc::default();
    let faults = AtomicU64::new(0);
    // From a fault: the first write acknowledged after it, and every watcher having it.
    let recover = |what: String, at: Instant| {
        let truth = Arc::clone(&truth);
        let sels = &sels;
        let seen = &seen;
        let recoveries = Arc::clone(&recoveries);
        faults.fetch_add(1, Ordering::Relaxed);
        async move {
            let deadline = Instant::now() + PATIENCE;
            let (k, acked) = loop {
                let found = {
                    let t = truth.lock().unwrap();
                    t.writes
                        .iter()
                        .position(|(_, when)| *when > at)
                        .map(|k| (k, t.writes[k].1))
                };
                if let Some(found) = found {
                    break found;
                }
                assert!(
                    Instant::now() < deadline,
                    "no write acknowledged after {what}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let upto: Vec<Write> = truth.lock().unwrap().writes[..=k]
                .iter()
                .map(|(w, _)| w.clone())
                .collect();
            while !caught_up(sels, seen, &upto) {
                assert!(
                    Instant::now() < deadline,
                    "watchers never caught up after {what}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let relisted = seen.iter().filter(|s| s.lock().unwrap().relisted).count();
            let line = format!(
                "{what}: writes recovered in {} ms, every watcher (but the relisted) in {} ms; \
                 {relisted} relisted so far",
                (acked - at).as_millis(),
                at.elapsed().as_millis()
            );
            eprintln!("{line}");
            recoveries.lock().unwrap().push(line);
        }
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. A replica dies (SIGKILL); the balancer resets its connections.
    let victim = rng.random_range(0..REPLICAS);
    lb.kill(victim);
    drop(replicas[victim].take());
    recover(format!("kill -9 replica {victim}"), Instant::now()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    replicas[victim] = Some(start_replica(&binds[victim], &flags));
    lb.revive(victim, None);
    recover(format!("restart replica {victim}"), Instant::now()).await;

    // 2. The etcd leader dies, and comes back.
    let leader = etcd
        .wait_for_leader(PATIENCE)
        .await
        .expect("an etcd leader");
    let at = Instant::now();
    etcd.member(leader).unwrap().kill();
    recover(format!("kill -9 etcd leader m{leader}"), at).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    etcd.member(leader)
        .unwrap()
        .restart()
        .await
        .expect("etcd restart");
    recover(format!("restart etcd m{leader}"), Instant::now()).await;

    // 3. Roll every replica: drained at the balancer, SIGTERM, started again.
    for i in 0..REPLICAS {
        let at = Instant::now();
        lb.drain(i);
        let old = replicas[i].take().unwrap();
        let clean = tokio::task::spawn_blocking(move || old.terminate())
            .await
            .unwrap();
        assert!(clean, "replica {i} did not exit cleanly on SIGTERM");
        replicas[i] = Some(start_replica(&binds[i], &flags));
        lb.revive(i, None);
        recover(format!("roll replica {i}"), at).await;
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(PATIENCE, writing)
        .await
        .expect("the writer stops")
        .unwrap();

    // Every watcher reaches the end; then the comparison, exact.
    let all = writes();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let done = sels.iter().zip(&seen).all(|(sel, s)| {
            let s = s.lock().unwrap();
            let (events, fin) = expected(sel, &all);
            s.state == fin && (s.relisted || s.history.len() >= events.len())
        });
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut relisted = 0;
    let mut events_checked = 0;
    for (i, (sel, s)) in sels.iter().zip(&seen).enumerate() {
        let s = s.lock().unwrap();
        let (events, fin) = expected(sel, &all);
        assert_eq!(
            s.state, fin,
            "watcher {i} {sel:?}: final state (seed {seed})"
        );
        let exact = if s.relisted {
            relisted += 1;
            s.before_relist
        } else {
            s.history.len()
        };
        let got: Vec<Ev> = s
            .history
            .get(..exact)
            .unwrap_or_default()
            .iter()
            .zip(&events)
            .map(|(g, e)| Ev {
                // A delete's version is not returned to the writer: compare where known.
                rv: if e.rv == 0 { 0 } else { g.rv },
                ..g.clone()
            })
            .collect();
        if let Some(at) = got.iter().zip(&events).position(|(g, e)| g != e) {
            panic!(
                "watcher {i} {sel:?} (seed {seed}): event {at} is {:?}, the truth says {:?}\n\
                 received around it: {:?}",
                s.history[at],
                events[at],
                &s.history[at.saturating_sub(3)..(at + 3).min(s.history.len())]
            );
        }
        assert!(
            exact <= events.len(),
            "watcher {i} {sel:?} (seed {seed}): extra events {:?}",
            s.history.get(events.len()..)
        );
        if !s.relisted {
            assert_eq!(
                exact,
                events.len(),
                "watcher {i} {sel:?} (seed {seed}): events missing from {:?}",
                events.get(exact..)
            );
        }
        assert!(
            s.history.windows(2).all(|w| w[0].rv < w[1].rv),
            "watcher {i}: resource versions not increasing"
        );
        events_checked += exact;
    }

    // No acknowledged write lost: a consistent list on a replica is the writer's model.
    let model: BTreeMap<Key, u64> = truth
        .lock()
        .unwrap()
        .model
        .iter()
        .map(|(k, (_, seq, _))| (*k, *seq))
        .collect();
    let listed = writes_client.lister_watcher("/api/v1/configmaps").unwrap();
    let page = listwatch_client::ListerWatcher::list(&listed, &Default::default())
        .await
        .unwrap();
    let stored: BTreeMap<Key, u64> = page.items.iter().map(parse).collect();
    assert_eq!(
        stored, model,
        "the stored state is the acknowledged writes' (seed {seed})"
    );

    let t = truth.lock().unwrap();
    eprintln!(
        "chaos seed {seed}: {} writes landed ({} with an unknown outcome resolved, {} found late, \
         {} refused), {events_checked} events checked over {} watchers ({relisted} relisted), \
         {} faults, {:.1?} in all",
        t.writes.len(),
        t.ambiguous,
        t.late,
        t.failed,
        WATCHERS,
        faults.load(Ordering::Relaxed),
        started.elapsed()
    );
    for line in recoveries.lock().unwrap().iter() {
        eprintln!("  {line}");
    }
}
