//! Property test: random watchers (selectors, scopes, start versions, stalled consumers) over
//! random writes; every watcher receives exactly the ground truth derived from the backend's
//! history (each change once, in order, with ADDED/DELETED for entering/leaving its
//! selection), or a prefix of it followed by 410 Expired.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{EventType, FieldSelector, LabelSelector, Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, SelectionPredicate, Storage, WatchEvent, WatchStream};
use proptest::prelude::*;

const NAMESPACES: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    Put {
        ns: usize,
        name: usize,
        tier: bool,
        node: bool,
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
    node_1: bool,
    /// Index of the write to start after (`None`: initial events with an end bookmark).
    from: Option<usize>,
    stalled: bool,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..4usize, any::<bool>(), any::<bool>())
            .prop_map(|(ns, name, tier, node)| Op::Put { ns, name, tier, node }),
        1 => (0..2usize, 0..4usize).prop_map(|(ns, name)| Op::Delete { ns, name }),
    ]
}

fn watcher_spec() -> impl Strategy<Value = WatcherSpec> {
    (
        prop::option::of(0..2usize),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(0..20usize),
        any::<bool>(),
    )
        .prop_map(|(namespace, tier_x, node_1, from, stalled)| WatcherSpec {
            namespace,
            tier_x,
            node_1,
            from,
            stalled,
        })
}

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

fn pod(ns: &str, name: &str, tier: bool, node: bool) -> Object {
    let v = serde_json::json!({"kind":"Pod","apiVersion":"v1",
        "metadata":{"name":name,"namespace":ns,"labels":{"tier": if tier {"x"} else {"y"}}},
        "spec":{"nodeName": if node {"n1"} else {"n2"}}});
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
        field: if spec.node_1 {
            FieldSelector::equals("spec.nodeName", "n1")
        } else {
            FieldSelector::everything()
        },
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

fn run(before: Vec<Op>, specs: Vec<WatcherSpec>, after: Vec<Op>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let backend = MemStore::new();
        let mut config = CacherConfig::new("pods");
        // Small budget so that stalled consumers are detached quickly.
        config.max_dispatch_budget = Duration::from_millis(2);
        let cacher = Cacher::new(Arc::new(backend), config);
        cacher.wait_ready().await;
        let mut writes = Vec::new();
        for op in &before {
            writes.extend(apply(&cacher, op).await);
        }
        let start_rv = cacher.current_resource_version().await.unwrap();
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
            let w = cacher.watch(&key, &opts).await.unwrap();
            watchers.push((spec.clone(), from, w));
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
        for (spec, from, mut w) in checks {
            check(&spec, from, &mut w, &writes).await.unwrap();
        }
        for (spec, from, mut w) in stalled {
            check(&spec, from, &mut w, &writes).await.unwrap();
        }
    });
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
            let (state, end, _) = read(w, None).await;
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
            at
        }
    };
    let want = expected_after(spec, writes, after);
    let (got, _, expired) = read(w, Some(want.len())).await;
    if expired {
        if !want.starts_with(&got) {
            return Err(format!(
                "{spec:?}: before 410:\n got  {got:?}\n want a prefix of {want:?}"
            ));
        }
        return Ok(());
    }
    if got != want {
        return Err(format!(
            "{spec:?} from {after}:\n got  {got:?}\n want {want:?}"
        ));
    }
    // Nothing more: no duplicate arrives once the expected events are in.
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_millis(50), w.next()).await {
        if !matches!(extra, WatchEvent::Bookmark(_)) {
            return Err(format!("{spec:?}: unexpected extra event {extra:?}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn every_watcher_sees_exactly_its_ground_truth_or_a_prefix_then_410(
        before in prop::collection::vec(op(), 0..20),
        specs in prop::collection::vec(watcher_spec(), 1..8),
        after in prop::collection::vec(op(), 1..60),
    ) {
        run(before, specs, after);
    }
}
