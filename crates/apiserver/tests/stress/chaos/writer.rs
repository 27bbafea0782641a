//! The chaos test's writer and its truth: ConfigMaps created, replaced (with the version it
//! last saw as precondition) and deleted at a steady pace, one at a time, each outcome
//! resolved before the next write.
//!
//! The truth comes from the write responses. A write whose outcome the writer could not see
//! (connection cut, 5xx while etcd elects a leader or a replica shuts down) is resolved
//! before the next one by a consistent GET of its object (the writer is the only one
//! writing ConfigMaps and is sequential, so the object shows whether that write landed); a
//! write found to have landed later than that GET (an etcd proposal that committed after its
//! request timed out) shows up as a precondition failure on the next write of the object
//! and is then appended.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use listwatch_client::HttpClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::chaos::model::{APPS, Key, NAMES, NAMESPACES, Obj, Write};
use crate::common::PATIENCE;

/// The writer's pace: one write per tick, 50 a second when writes are faster than that
/// (each waits for the previous one's answer).
const WRITE_EVERY: Duration = Duration::from_millis(20);

/// The writer's view: what landed, in order, with the time each write was acknowledged.
#[derive(Default)]
pub(crate) struct Truth {
    /// What landed, in order, with when it was sent (`None` for a write found to have
    /// landed late: sent before some writes recorded ahead of it) and when the writer
    /// learnt that it landed.
    pub(crate) writes: Vec<(Write, Option<Instant>, Instant)>,
    /// The writer's model of the store: each object's app, seq and resource version.
    pub(crate) model: BTreeMap<Key, (u8, u64, u64)>,
    /// Writes whose outcome was unknown and found not to have landed, by key: a later
    /// precondition failure may show they landed after all.
    unresolved: BTreeMap<Key, Vec<Option<Obj>>>,
    /// Writes whose outcome was unknown (resolved by a read).
    pub(crate) ambiguous: u64,
    /// Writes found to have landed after the read that resolved them.
    pub(crate) late: u64,
    /// Writes refused (404/409: the model was behind a late landing).
    pub(crate) failed: u64,
    /// What the test is doing (set by it), to tally errors by.
    pub(crate) step: crate::chaos::Step,
    /// The writer's errors (`write: …` and, resolving a write, `read: …`), by step and kind.
    pub(crate) errors: BTreeMap<(String, String), u64>,
}

impl Truth {
    fn tally(&mut self, what: &str, e: &listwatch_client::Error) {
        let key = (
            self.step.get(),
            format!("{what}: {}", crate::chaos::watchers::kind(e)),
        );
        *self.errors.entry(key).or_default() += 1;
    }

    /// The writes that landed so far, in order.
    pub(crate) fn landed(&self) -> Vec<Write> {
        self.writes.iter().map(|(w, _, _)| w.clone()).collect()
    }

    /// The first write sent after `at` that landed: its index and when it was acknowledged.
    pub(crate) fn first_sent_after(&self, at: Instant) -> Option<(usize, Instant)> {
        self.writes
            .iter()
            .position(|(_, sent, _)| sent.is_some_and(|s| s > at))
            .map(|k| (k, self.writes[k].2))
    }
}

pub(crate) fn object_path((ns, name): Key) -> String {
    format!("/api/v1/namespaces/ns-{ns}/configmaps/cm-{name}")
}

fn rv_of(v: &Value) -> Option<u64> {
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

pub(crate) fn seq_and_app(v: &Value) -> (u64, u8) {
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
async fn read(client: &HttpClient, truth: &Mutex<Truth>, key: Key) -> Option<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match client.get(&object_path(key)).await {
            Ok(v) => return v,
            Err(e) => {
                truth.lock().unwrap().tally("read", &e);
                assert!(Instant::now() < deadline, "cannot read {key:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn record(
    truth: &Mutex<Truth>,
    key: Key,
    after: Option<Obj>,
    rv: Option<u64>,
    sent: Option<Instant>,
) {
    let mut t = truth.lock().unwrap();
    match (after, rv) {
        (Some((app, seq)), Some(rv)) => {
            t.model.insert(key, (app, seq, rv));
        }
        _ => {
            t.model.remove(&key);
        }
    }
    t.writes
        .push((Write { key, after, rv }, sent, Instant::now()));
}

/// Sets the model of `key` from the server's state, appending a write found to have landed
/// late; panics when the state matches no write the writer made.
async fn reconcile(client: &HttpClient, truth: &Mutex<Truth>, key: Key) {
    let now = read(client, truth, key).await;
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
    record(truth, key, want, now.map(|(_, _, rv)| rv), None);
}

/// Writes at a steady rate until `stop`; every outcome resolved before the next write.
pub(crate) async fn writer(
    client: HttpClient,
    truth: Arc<Mutex<Truth>>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5752_4954_4552);
    let mut seq = 0u64;
    let mut pace = tokio::time::interval(WRITE_EVERY);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        pace.tick().await;
        let key = (rng.random_range(0..NAMESPACES), rng.random_range(0..NAMES));
        seq += 1;
        let sent = Instant::now();
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
        if let Err(e) = &result {
            truth.lock().unwrap().tally("write", e);
        }
        match result {
            Ok(rv) => record(&truth, key, after, rv, Some(sent)),
            Err(e) if matches!(e.code(), Some(404 | 409)) => {
                // The model is behind: an earlier unresolved write landed late. This one did
                // not land.
                truth.lock().unwrap().failed += 1;
                reconcile(&client, &truth, key).await;
            }
            Err(e) => {
                // Unknown outcome: the object says.
                let now = read(&client, &truth, key).await;
                let landed = match (&now, after) {
                    (Some(v), Some((_, s))) => seq_and_app(v).0 == s,
                    (None, None) => true,
                    _ => false,
                };
                truth.lock().unwrap().ambiguous += 1;
                if landed {
                    record(&truth, key, after, now.as_ref().and_then(rv_of), Some(sent));
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
