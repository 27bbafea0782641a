//! Property tests against a naive model: random lists, events, bookmarks, compactions and
//! clock moves; after each step, for every resource version around the window, the cache
//! must agree with a plain replay of the history and a plain ring buffer with upstream's
//! sizing rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use listwatch_api::fields::Fields;
use listwatch_api::{EventType, FieldSelector, Object, SelectableFields};
use listwatch_storage::{Error, Key, ListOptions, ResourceVersionMatch, WatchEvent};
use listwatch_watchcache::{CacheView, Config, Index, ManualClock, WatchCache};
use proptest::prelude::*;

const MIN: usize = 2;
const MAX: usize = 8;
const FRESH: Duration = Duration::from_secs(75);

#[derive(Debug, Clone)]
enum Op {
    Put {
        ns: u8,
        name: u8,
        node: u8,
        gap: u64,
    },
    Delete {
        ns: u8,
        name: u8,
        gap: u64,
    },
    Progress {
        gap: u64,
    },
    Wait {
        secs: u64,
    },
    Compact {
        back: u64,
    },
    Relist {
        gap: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2u8, 0..4u8, 0..3u8, 1..3u64).prop_map(|(ns, name, node, gap)| Op::Put { ns, name, node, gap }),
        2 => (0..2u8, 0..4u8, 1..3u64).prop_map(|(ns, name, gap)| Op::Delete { ns, name, gap }),
        1 => (1..4u64).prop_map(|gap| Op::Progress { gap }),
        2 => prop_oneof![Just(0u64), 1..40u64, 70..80u64].prop_map(|secs| Op::Wait { secs }),
        1 => (0..6u64).prop_map(|back| Op::Compact { back }),
        1 => (1..3u64).prop_map(|gap| Op::Relist { gap }),
    ]
}

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

fn pod(ns: u8, name: u8, node: u8, rv: u64) -> Object {
    let json = serde_json::json!({
        "kind": "Pod",
        "metadata": {"name": format!("p{name}"), "namespace": format!("ns{ns}")},
        "spec": {"nodeName": format!("n{node}")},
    });
    Object::from_value(json, &fields())
        .unwrap()
        .with_resource_version(rv)
}

fn key(o: &Object) -> String {
    format!("/pods/{}/{}", o.namespace().unwrap_or_default(), o.name())
}

/// The naive model.
struct Model {
    /// The state at the last list.
    base: BTreeMap<String, Object>,
    /// Every event since the last list: (rv, key, object after, or None when deleted).
    history: Vec<(u64, String, Option<Object>)>,
    list_rv: u64,
    rv: u64,
    /// The window as (rv, received second); a plain ring buffer with upstream's rule.
    window: VecDeque<(u64, Duration)>,
    capacity: usize,
    evicted: bool,
    last_evicted: u64,
    compacted: u64,
    now: Duration,
}

impl Model {
    fn state_at(&self, rv: u64) -> BTreeMap<String, Object> {
        let mut s = self.base.clone();
        for (_, k, o) in self.history.iter().take_while(|(erv, ..)| *erv <= rv) {
            match o {
                Some(o) => s.insert(k.clone(), o.clone()),
                None => s.remove(k),
            };
        }
        s
    }

    fn push_event(&mut self, rv: u64, key: String, after: Option<Object>) {
        let age = |t: Duration, now: Duration| now.saturating_sub(t);
        if self.window.len() == self.capacity {
            if age(self.window[0].1, self.now) < FRESH {
                self.capacity = (self.capacity * 2).min(MAX);
            } else if age(
                self.window[(self.window.len() - self.capacity / 4) % self.capacity].1,
                self.now,
            ) > FRESH
            {
                let smaller = (self.capacity / 2).max(MIN);
                while self.window.len() > smaller {
                    self.evict();
                }
                self.capacity = smaller;
            }
        }
        if self.window.len() == self.capacity {
            self.evict();
        }
        self.window.push_back((rv, self.now));
        self.history.push((rv, key, after));
        self.rv = rv;
    }

    fn evict(&mut self) {
        let (rv, _) = self.window.pop_front().unwrap();
        self.evicted = true;
        self.last_evicted = rv;
    }
}

/// Runs `ops` on a cache and the model, checking after each step. With a byte budget the
/// window's contents depend on byte accounting, which the model does not follow: it then
/// checks that the window is the tail of the history, that memory stays within the budget
/// (or the window is empty), and everything else against that window.
fn run(ops: Vec<Op>, snapshots: bool, budget: Option<usize>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let config = Config::new("pods")
        .with_capacity(MIN, MIN, MAX)
        .with_event_freshness(FRESH)
        .with_index(Index::field("spec.nodeName"))
        .with_snapshots(snapshots)
        .with_byte_budget(budget)
        .with_clock(Arc::new(clock.clone()));
    let mut cache = WatchCache::new(config);
    let reader = cache.reader();
    let initial = vec![pod(0, 0, 0, 2), pod(1, 1, 1, 3)];
    cache.replace(initial.clone(), 5).unwrap();
    let mut m = Model {
        base: initial.into_iter().map(|o| (key(&o), o)).collect(),
        history: Vec::new(),
        list_rv: 5,
        rv: 5,
        window: VecDeque::new(),
        capacity: MIN,
        evicted: false,
        last_evicted: 0,
        compacted: 0,
        now: Duration::ZERO,
    };
    for op in ops {
        match op {
            Op::Put {
                ns,
                name,
                node,
                gap,
            } => {
                let o = pod(ns, name, node, m.rv + gap);
                let k = key(&o);
                let ev = if m.state_at(m.rv).contains_key(&k) {
                    WatchEvent::Modified {
                        object: o.clone(),
                        prev: None,
                    }
                } else {
                    WatchEvent::Added(o.clone())
                };
                cache.apply(ev).unwrap();
                m.push_event(m.rv + gap, k, Some(o));
            }
            Op::Delete { ns, name, gap } => {
                let o = pod(ns, name, 0, m.rv + gap);
                cache.apply(WatchEvent::Deleted(o.clone())).unwrap();
                m.push_event(m.rv + gap, key(&o), None);
            }
            Op::Progress { gap } => {
                cache.progress(m.rv + gap);
                m.rv += gap;
            }
            Op::Wait { secs } => {
                clock.advance(Duration::from_secs(secs));
                m.now += Duration::from_secs(secs);
            }
            Op::Compact { back } => {
                let c = m.rv.saturating_sub(back).max(1);
                cache.compact(c);
                m.compacted = m.compacted.max(c);
            }
            Op::Relist { gap } => {
                let state = m.state_at(m.rv);
                let rv = m.rv + gap;
                cache
                    .replace(state.values().cloned().collect(), rv)
                    .unwrap();
                m.base = state;
                m.history.clear();
                m.list_rv = rv;
                m.rv = rv;
                m.window.clear();
                m.evicted = false;
            }
        }
        let view = reader.view();
        if budget.is_some() {
            follow_squeezed_window(&view, &mut m)?;
        }
        check(&view, &m, snapshots)?;
    }
    check_pagination(&reader.view(), &m)
}

/// Takes the cache's window as the model's after checking it is the tail of the history and
/// that the budget holds.
fn follow_squeezed_window(view: &CacheView, m: &mut Model) -> Result<(), TestCaseError> {
    let usage = view.memory();
    prop_assert!(
        usage.total() <= usage.budget.unwrap_or(usize::MAX) || view.window().is_empty(),
        "{usage:?}"
    );
    let window: Vec<u64> = view.window().iter().map(|e| e.resource_version).collect();
    let tail: Vec<u64> = m.history[m.history.len() - window.len().min(m.history.len())..]
        .iter()
        .map(|(rv, ..)| *rv)
        .collect();
    prop_assert_eq!(
        &window,
        &tail,
        "the window is the newest part of the history"
    );
    let dropped = m.history.len() - window.len();
    if dropped > 0 {
        m.evicted = true;
        m.last_evicted = m.history[dropped - 1].0;
    }
    m.window = window.iter().map(|rv| (*rv, m.now)).collect();
    m.capacity = view.capacity();
    Ok(())
}

fn check(view: &CacheView, m: &Model, snapshots: bool) -> Result<(), TestCaseError> {
    prop_assert_eq!(view.resource_version(), m.rv);
    prop_assert_eq!(view.capacity(), m.capacity);
    let window: Vec<u64> = view.window().iter().map(|e| e.resource_version).collect();
    let model_window: Vec<u64> = m.window.iter().map(|(rv, _)| *rv).collect();
    prop_assert_eq!(&window, &model_window);

    let all = Key::collection("pods", None).unwrap();
    let oldest = match (m.evicted, m.window.front()) {
        (true, Some((rv, _))) => *rv,
        (true, None) => m.rv + 1,
        (false, _) => m.list_rv + 1,
    };
    for rv in m.list_rv.saturating_sub(3).max(1)..=m.rv + 1 {
        // events_since: the naive slice, or Expired exactly by upstream's rule.
        match view.events_since(rv) {
            Ok(events) => {
                prop_assert!(
                    rv <= m.rv && rv >= oldest - 1,
                    "served {rv} (oldest {oldest})"
                );
                let got: Vec<(u64, String, EventType)> = events
                    .iter()
                    .map(|e| (e.resource_version, e.key.to_string(), e.event_type))
                    .collect();
                let want: Vec<(u64, String, EventType)> = m
                    .history
                    .iter()
                    .filter(|(erv, ..)| *erv > rv)
                    .map(|(erv, k, o)| {
                        let t = match o {
                            None => EventType::Deleted,
                            Some(_) if m.state_at(erv - 1).contains_key(k) => EventType::Modified,
                            Some(_) => EventType::Added,
                        };
                        (*erv, k.clone(), t)
                    })
                    .collect();
                prop_assert_eq!(got, want);
            }
            Err(Error::TooLargeResourceVersion { .. }) => prop_assert!(rv > m.rv),
            Err(e) => {
                prop_assert!(
                    rv <= m.rv && rv < oldest - 1,
                    "expired {rv} (oldest {oldest}): {e}"
                );
                prop_assert_eq!(
                    e.to_string(),
                    format!("too old resource version: {rv} ({})", oldest - 1)
                );
            }
        }

        // Exact list: the naive replay, through the index too, or Expired below the snapshots.
        let floor = match (snapshots, m.evicted) {
            (true, true) => m.last_evicted,
            (true, false) => m.list_rv,
            (false, _) => last_change(m),
        };
        let opts = ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact));
        let mut by_node = opts.clone();
        by_node.predicate.field = FieldSelector::equals("spec.nodeName", "n1");
        match view.list(&all, &opts) {
            Ok(list) => {
                prop_assert!(
                    rv <= m.rv && rv >= m.compacted && rv >= floor,
                    "served {rv} (floor {floor})"
                );
                let state = m.state_at(rv);
                let want: Vec<(String, u64)> = state
                    .values()
                    .map(|o| (key(o), o.resource_version()))
                    .collect();
                let got: Vec<(String, u64)> = list
                    .items
                    .iter()
                    .map(|o| (key(o), o.resource_version()))
                    .collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(list.resource_version, rv);
                let indexed = view.list(&all, &by_node).unwrap();
                let want: Vec<String> = state
                    .values()
                    .filter(|o| o.get_field("spec.nodeName") == Some("n1"))
                    .map(key)
                    .collect();
                prop_assert_eq!(indexed.items.iter().map(key).collect::<Vec<_>>(), want);
            }
            Err(Error::TooLargeResourceVersion { .. }) => prop_assert!(rv > m.rv),
            Err(e) => {
                prop_assert!(e.is_expired(), "{e}");
                prop_assert!(
                    rv < m.compacted || rv < floor,
                    "expired {rv} (floor {floor}): {e}"
                );
            }
        }
    }
    Ok(())
}

/// The version of the last change of the state (the list's, or the last event's).
fn last_change(m: &Model) -> u64 {
    m.history.last().map_or(m.list_rv, |(rv, ..)| *rv)
}

fn check_pagination(view: &CacheView, m: &Model) -> Result<(), TestCaseError> {
    let all = Key::collection("pods", None).unwrap();
    let mut opts = ListOptions {
        limit: Some(2),
        ..ListOptions::recursive()
    };
    let mut got = Vec::new();
    loop {
        let page = view.list(&all, &opts).unwrap();
        prop_assert!(page.items.len() <= 2);
        got.extend(page.items.iter().map(key));
        match page.continue_token {
            Some(t) => opts.continue_token = Some(t),
            None => break,
        }
    }
    let want: Vec<String> = m.state_at(m.rv).into_keys().collect();
    prop_assert_eq!(got, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_cache_agrees_with_a_naive_replay(ops in prop::collection::vec(op(), 1..60)) {
        run(ops, true, None)?;
    }

    #[test]
    fn without_snapshots_the_cache_still_agrees_where_it_answers(ops in prop::collection::vec(op(), 1..40)) {
        run(ops, false, None)?;
    }

    #[test]
    fn under_a_byte_budget_the_cache_still_agrees_with_the_replay(
        ops in prop::collection::vec(op(), 1..40),
        budget in 600usize..4000,
        snapshots in any::<bool>(),
    ) {
        run(ops, snapshots, Some(budget))?;
    }
}
