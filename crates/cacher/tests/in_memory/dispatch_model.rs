//! Property test: random watchers (selectors, scopes, start versions, stalled consumers) over
//! random writes; every watcher receives exactly the ground truth derived from the backend's
//! history (each change once, in order, with ADDED/DELETED for entering/leaving its
//! selection), or — only a stalled watcher, whose consumer reads nothing until every write
//! is done — a prefix of it followed by 410 Expired.
//!
//! Eager watchers (drained while the writes happen) watch a second cacher over the same
//! backend whose window holds every write of a run: even when one is detached for being
//! slower than the dispatcher, it resumes within the window, so a 410 there is a bug and
//! fails the model (before issue 26 every watcher could end with "prefix then 410", so a
//! spurious 410 to a watcher that kept up passed).
//!
//! The cacher runs as the apiserver configures it for pods (the `spec.nodeName` trigger on),
//! pods have a node, an empty node or none at all, and the window is small enough for the
//! writes to push stalled watchers out of it. The test asserts afterwards that every branch
//! it claims to check was reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::fields::Fields;
use listwatch_api::{EventType, FieldSelector, LabelSelector, Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, SelectionPredicate, Storage, WatchEvent, WatchStream};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

const NAMESPACES: [&str; 2] = ["a", "b"];

/// A pod's `spec.nodeName`: two nodes, empty, and absent (which selectors read as empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    N1,
    N2,
    Empty,
    Absent,
}

/// A watcher's node selector: none, `spec.nodeName=n1` and `spec.nodeName=` (both reach the
/// dispatcher's trigger index), and `spec.nodeName!=n1` (not a trigger).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeSel {
    Any,
    N1,
    Empty,
    NotN1,
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        ns: usize,
        name: usize,
        tier: bool,
        node: Node,
    },
    Delete {
        ns: usize,
        name: usize,
    },
}

#[derive(Debug, Clone)]
struct WatcherSpec {
    namespace: Option<usize>,
    tier_x: bool,
    node: NodeSel,
    /// Index of the write to start after (`None`: initial events with an end bookmark).
    from: Option<usize>,
    stalled: bool,
}

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        Just(Node::N1),
        Just(Node::N2),
        Just(Node::Empty),
        Just(Node::Absent)
    ]
}

fn node_sel() -> impl Strategy<Value = NodeSel> {
    prop_oneof![
        Just(NodeSel::Any),
        Just(NodeSel::N1),
        Just(NodeSel::Empty),
        Just(NodeSel::NotN1)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..4usize, any::<bool>(), node())
            .prop_map(|(ns, name, tier, node)| Op::Put { ns, name, tier, node }),
        1 => (0..2usize, 0..4usize).prop_map(|(ns, name)| Op::Delete { ns, name }),
    ]
}

fn watcher_spec() -> impl Strategy<Value = WatcherSpec> {
    (
        prop::option::of(0..2usize),
        any::<bool>(),
        node_sel(),
        prop::option::of(0..40usize),
        any::<bool>(),
    )
        .prop_map(|(namespace, tier_x, node, from, stalled)| WatcherSpec {
            namespace,
            tier_x,
            node,
            from,
            stalled,
        })
}

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

fn pod(ns: &str, name: &str, tier: bool, node: Node) -> Object {
    let mut v = serde_json::json!({"kind":"Pod","apiVersion":"v1",
        "metadata":{"name":name,"namespace":ns,"labels":{"tier": if tier {"x"} else {"y"}}},
        "spec":{"restartPolicy":"Always"}});
    let value = match node {
        Node::N1 => Some("n1"),
        Node::N2 => Some("n2"),
        Node::Empty => Some(""),
        Node::Absent => None,
    };
    if let Some(value) = value {
        v["spec"]["nodeName"] = value.into();
    }
    Object::from_value(v, &fields()).unwrap()
}

/// One applied write, as the backend reported it.
#[derive(Debug, Clone)]
struct Write {
    rv: u64,
    key: (String, String),
    object: Option<Object>,
    prev: Option<Object>,
}

fn predicate(spec: &WatcherSpec) -> SelectionPredicate {
    SelectionPredicate {
        label: if spec.tier_x {
            LabelSelector::parse("tier=x").unwrap()
        } else {
            LabelSelector::everything()
        },
        field: match spec.node {
            NodeSel::Any => FieldSelector::everything(),
            NodeSel::N1 => FieldSelector::equals("spec.nodeName", "n1"),
            NodeSel::Empty => FieldSelector::equals("spec.nodeName", ""),
            NodeSel::NotN1 => FieldSelector::parse("spec.nodeName!=n1").unwrap(),
        },
        ..SelectionPredicate::default()
    }
}

type Seen = (EventType, String, u64);

fn expected_after(spec: &WatcherSpec, writes: &[Write], after: u64) -> Vec<Seen> {
    let pred = predicate(spec);
    writes
        .iter()
        .filter(|w| w.rv > after)
        .filter(|w| spec.namespace.is_none_or(|n| w.key.0 == NAMESPACES[n]))
        .filter_map(|w| {
            let cur = w.object.as_ref().is_some_and(|o| pred.matches(o));
            let old = w.prev.as_ref().is_some_and(|o| pred.matches(o));
            let t = match (cur, old) {
                (true, true) => EventType::Modified,
                (true, false) => EventType::Added,
                (false, true) => EventType::Deleted,
                (false, false) => return None,
            };
            Some((t, format!("{}/{}", w.key.0, w.key.1), w.rv))
        })
        .collect()
}

fn state_at(spec: &WatcherSpec, writes: &[Write], at: u64) -> Vec<Seen> {
    let pred = predicate(spec);
    let mut state: BTreeMap<String, Object> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.rv <= at) {
        let k = format!("{}/{}", w.key.0, w.key.1);
        match &w.object {
            Some(o) => state.insert(k, o.clone()),
            None => state.remove(&k),
        };
    }
    state
        .into_iter()
        .filter(|(k, o)| {
            spec.namespace
                .is_none_or(|n| k.starts_with(&format!("{}/", NAMESPACES[n])))
                && pred.matches(o)
        })
        .map(|(k, o)| (EventType::Added, k, o.resource_version()))
        .collect()
}

async fn apply(store: &Cacher, op: &Op) -> Option<Write> {
    match op {
        Op::Put {
            ns,
            name,
            tier,
            node,
        } => {
            let (ns, name) = (NAMESPACES[*ns], format!("p{name}"));
            let key = Key::object("pods", Some(ns), &name).unwrap();
            let obj = pod(ns, &name, *tier, *node);
            let mut prev = None;
            let mut update = |cur: Option<&Object>| {
                prev = cur.cloned();
                Ok(obj.clone().into())
            };
            let out = store
                .guaranteed_update(&key, None, true, &mut update, None)
                .await
                .unwrap();
            // A no-op write leaves the object (and its version) as it was: nothing happened.
            if prev
                .as_ref()
                .is_some_and(|p| p.resource_version() == out.resource_version())
            {
                return None;
            }
            Some(Write {
                rv: out.resource_version(),
                key: (ns.into(), name),
                object: Some(out),
                prev,
            })
        }
        Op::Delete { ns, name } => {
            let (ns, name) = (NAMESPACES[*ns], format!("p{name}"));
            let key = Key::object("pods", Some(ns), &name).unwrap();
            match store
                .delete(&key, None, listwatch_storage::no_validation(), None)
                .await
            {
                Ok(last) => {
                    let prev = Some(last.clone());
                    Some(Write {
                        rv: last.resource_version(),
                        key: (ns.into(), name),
                        object: None,
                        prev,
                    })
                }
                Err(e) if e.is_not_found() => None,
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// Reads a watcher until the initial-events-end bookmark (`want == None`), or until `want`
/// object events, an error, or nothing more arrives.
async fn read(w: &mut WatchStream, want: Option<usize>) -> (Vec<Seen>, Option<u64>, bool) {
    let mut seen = Vec::new();
    let mut end_bookmark = None;
    let mut expired = false;
    while want.map_or(end_bookmark.is_none(), |n| seen.len() < n) {
        match tokio::time::timeout(Duration::from_secs(10), w.next()).await {
            Ok(Some(WatchEvent::Bookmark(b))) => {
                if b.initial_events_end {
                    end_bookmark = Some(b.resource_version);
                    if want.is_none() {
                        break;
                    }
                }
            }
            Ok(Some(WatchEvent::Error(e))) => {
                assert!(e.is_expired(), "only 410 may end a watch early, got {e:?}");
                expired = true;
                break;
            }
            Ok(Some(ev)) => {
                let t = match &ev {
                    WatchEvent::Added(_) => EventType::Added,
                    WatchEvent::Modified { .. } => EventType::Modified,
                    _ => EventType::Deleted,
                };
                let o = ev.object().unwrap();
                seen.push((
                    t,
                    format!("{}/{}", o.namespace().unwrap_or(""), o.name()),
                    o.resource_version(),
                ));
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    (seen, end_bookmark, expired)
}

/// Which branches of the property the generated cases reached (asserted after the run, so
/// that the property cannot pass by never exercising what it claims to check).
#[derive(Debug, Default)]
struct Reached {
    /// A watcher received its whole, non-empty ground truth.
    complete: AtomicUsize,
    /// A watcher got 410 Expired after a strict prefix of its ground truth (it fell out of
    /// the window while stalled).
    expired_in_stream: AtomicUsize,
    /// A watcher got 410 Expired after its whole ground truth (the window moved past events
    /// it could not know would not have matched). Allowed, not required.
    expired_after_complete: AtomicUsize,
    /// A watch was refused with 410 Expired (its start had left the window).
    expired_at_start: AtomicUsize,
    /// A `spec.nodeName=` watcher (trigger value `""`) received a change of a pod lacking the
    /// field.
    empty_trigger_absent_field: AtomicUsize,
    /// A `spec.nodeName=n1` watcher (trigger value `n1`) received a change.
    value_trigger: AtomicUsize,
    /// A watcher with initial events received its state and end bookmark.
    initial_state: AtomicUsize,
}

static REACHED: Reached = Reached {
    complete: AtomicUsize::new(0),
    expired_in_stream: AtomicUsize::new(0),
    expired_after_complete: AtomicUsize::new(0),
    expired_at_start: AtomicUsize::new(0),
    empty_trigger_absent_field: AtomicUsize::new(0),
    value_trigger: AtomicUsize::new(0),
    initial_state: AtomicUsize::new(0),
};

fn hit(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The window holds at most this many events, so that a run's writes push stalled watchers
/// (and watches from early writes) out of it.
const WINDOW: usize = 24;

fn run(before: Vec<Op>, specs: Vec<WatcherSpec>, after: Vec<Op>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let backend = MemStore::new();
        // The trigger as the apiserver configures it for pods, and a small window.
        let mut config = CacherConfig::new("pods")
            .with_trigger("spec.nodeName")
            .with_watch_cache(|c| c.with_capacity(8, 8, WINDOW));
        // Small budget so that stalled consumers are detached quickly.
        config.max_dispatch_budget = Duration::from_millis(2);
        let backend = Arc::new(backend);
        let cacher = Cacher::new(backend.clone(), config.clone());
        cacher.wait_ready().await;
        // For the eager watchers: the same, with a window no run fills.
        config.watch_cache = config.watch_cache.with_capacity(4096, 4096, 4096);
        let roomy = Cacher::new(backend, config);
        roomy.wait_ready().await;
        let mut writes = Vec::new();
        for op in &before {
            writes.extend(apply(&cacher, op).await);
        }
        let start_rv = cacher.current_resource_version().await.unwrap();
        // The window's rule at a watch's start, on the small window: a watch from the first
        // write needs every later write; it is refused exactly when they no longer fit.
        if let Some(first) = writes.first() {
            cacher
                .wait_until_fresh(start_rv)
                .await
                .map_err(|e| e.to_string())?;
            let all = Key::collection("pods", None).unwrap();
            let from = ListOptions {
                resource_version: Some(first.rv),
                ..ListOptions::recursive()
            };
            let later = writes.len() - 1;
            match cacher.watch(&all, &from).await {
                Err(e) if e.is_expired() && later > WINDOW => hit(&REACHED.expired_at_start),
                Err(e) => {
                    return Err(format!(
                        "watch from {} ({later} writes after): {e}",
                        first.rv
                    ));
                }
                Ok(_) if later > WINDOW => {
                    return Err(format!(
                        "watch from {}: {later} writes after it, accepted",
                        first.rv
                    ));
                }
                Ok(_) => {}
            }
        }
        let mut watchers = Vec::new();
        for spec in &specs {
            let key = match spec.namespace {
                Some(n) => Key::collection("pods", Some(NAMESPACES[n])).unwrap(),
                None => Key::collection("pods", None).unwrap(),
            };
            let mut opts = ListOptions {
                predicate: predicate(spec),
                ..ListOptions::recursive()
            };
            let from = match spec.from {
                Some(i) if !writes.is_empty() => Some(writes[i % writes.len()].rv),
                Some(_) => Some(start_rv),
                None => None,
            };
            match from {
                Some(rv) => opts.resource_version = Some(rv),
                None => {
                    opts.resource_version = Some(start_rv);
                    opts.send_initial_events = Some(true);
                    opts.allow_watch_bookmarks = true;
                }
            }
            let on = if spec.stalled { &cacher } else { &roomy };
            match on.watch(&key, &opts).await {
                Ok(w) => watchers.push((spec.clone(), from, w)),
                Err(e) if e.is_expired() && spec.stalled => {
                    // Only a start older than the window may be refused.
                    let oldest = writes.len().saturating_sub(WINDOW);
                    if from.is_none() || writes.get(oldest).is_some_and(|w| Some(w.rv) > from) {
                        hit(&REACHED.expired_at_start);
                    } else {
                        return Err(format!("{spec:?}: watch from {from:?} refused: {e}"));
                    }
                }
                Err(e) => return Err(format!("{spec:?}: {e}")),
            }
        }
        // Eager consumers drain their streams while the writes happen (into an unbounded
        // buffer of the test's own); stalled ones are not read until every write is done.
        let mut checks = Vec::new();
        let mut stalled = Vec::new();
        for (spec, from, mut w) in watchers {
            if spec.stalled {
                stalled.push((spec, from, w));
                continue;
            }
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(async move {
                while let Some(ev) = w.next().await {
                    if tx.send(ev).is_err() {
                        return;
                    }
                }
            });
            let drained: WatchStream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
            checks.push((spec, from, drained));
        }
        for op in &after {
            writes.extend(apply(&cacher, op).await);
        }
        for (spec, from, mut w) in checks.into_iter().chain(stalled) {
            check(&spec, from, &mut w, &writes).await?;
        }
        Ok(())
    })
}

async fn check(
    spec: &WatcherSpec,
    from: Option<u64>,
    w: &mut WatchStream,
    writes: &[Write],
) -> Result<(), String> {
    let after = match from {
        Some(rv) => rv,
        None => {
            // The initial state is at the end bookmark's version, which only the stream knows.
            let (state, end, expired) = read(w, None).await;
            if expired {
                return Err(format!("{spec:?}: 410 during the initial state"));
            }
            let Some(at) = end else {
                return Err(format!("{spec:?}: no initial-events-end bookmark"));
            };
            let mut got = state;
            got.sort_by(|a, b| (&a.1, a.2).cmp(&(&b.1, b.2)));
            let want = state_at(spec, writes, at);
            if got != want {
                return Err(format!(
                    "{spec:?}: initial state at {at}:\n got  {got:?}\n want {want:?}"
                ));
            }
            hit(&REACHED.initial_state);
            at
        }
    };
    let want = expected_after(spec, writes, after);
    let (got, _, expired) = read(w, Some(want.len())).await;
    if expired && !spec.stalled {
        return Err(format!(
            "{spec:?}: a watcher that kept up got 410 after {got:?}\n want {want:?}"
        ));
    }
    if expired {
        if got.len() >= want.len() || !want.starts_with(&got) {
            return Err(format!(
                "{spec:?}: before 410:\n got  {got:?}\n want a prefix of {want:?}"
            ));
        }
        hit(&REACHED.expired_in_stream);
        return Ok(());
    }
    if got != want {
        return Err(format!(
            "{spec:?} from {after}:\n got  {got:?}\n want {want:?}"
        ));
    }
    // Nothing more: no duplicate arrives once the expected events are in. A 410 may: a
    // watcher detached for being slow (the stalled ones, or an eager one whose drain fell
    // behind) that resumes after the window moved past its version cannot know that none of
    // the events it lost would have matched, and is told to relist.
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_millis(50), w.next()).await {
        match extra {
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) if e.is_expired() && spec.stalled => {
                hit(&REACHED.expired_after_complete);
            }
            _ => return Err(format!("{spec:?}: unexpected extra event {extra:?}")),
        }
    }
    if !want.is_empty() {
        hit(&REACHED.complete);
        match spec.node {
            NodeSel::Empty => {
                let absent = writes.iter().filter(|w| w.rv > after).any(|w| {
                    [&w.object, &w.prev]
                        .into_iter()
                        .flatten()
                        .any(|o| o.get_field("spec.nodeName").is_none())
                        && want.iter().any(|s| s.2 == w.rv)
                });
                if absent {
                    hit(&REACHED.empty_trigger_absent_field);
                }
            }
            NodeSel::N1 => hit(&REACHED.value_trigger),
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn every_watcher_sees_exactly_its_ground_truth_or_a_prefix_then_410() {
    let cases = (
        prop::collection::vec(op(), 0..48),
        prop::collection::vec(watcher_spec(), 1..8),
        prop::collection::vec(op(), 1..60),
    );
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let outcome = runner.run(&cases, |(before, specs, after)| {
        run(before, specs, after).map_err(TestCaseError::fail)
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let r = &REACHED;
    eprintln!(
        "410 after a complete history (allowed): {}",
        r.expired_after_complete.load(Ordering::Relaxed)
    );
    let counts = [
        ("complete", &r.complete),
        ("expired in stream", &r.expired_in_stream),
        ("expired at start", &r.expired_at_start),
        ("empty trigger, absent field", &r.empty_trigger_absent_field),
        ("value trigger", &r.value_trigger),
        ("initial state", &r.initial_state),
    ];
    for (branch, n) in counts {
        let n = n.load(Ordering::Relaxed);
        eprintln!("branch {branch}: reached {n} times");
        assert!(n > 0, "no generated case reached the branch: {branch}");
    }
}
