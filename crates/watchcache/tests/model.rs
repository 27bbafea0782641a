//! Property tests against a naive model: random lists, events, bookmarks, compactions and
//! clock moves; after each step, for every resource version around the window, the cache
//! must agree with a plain replay of the history and a plain ring buffer with upstream's
//! sizing rule. Paginated walks at random versions (current or Exact) are interleaved with
//! the writes, compactions and relists: every page served is the replayed state at the
//! walk's version, and a walk is cut short (`Expired`, with a fresh token) only where the
//! window can no longer rebuild that state or a relist or compaction dropped it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

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
    /// Starts a paginated walk: of the current state (`back` 0) or Exact at `rv − back`.
    Walk {
        back: u64,
        limit: u8,
    },
    /// The next page of one open walk.
    Step {
        which: u8,
    },
}

/// A paginated walk in progress.
struct Walk {
    rv: u64,
    limit: u64,
    token: String,
    /// What the pages gave so far: (key, object version).
    got: Vec<(String, u64)>,
    /// The replayed state at `rv` when the walk started.
    want: Vec<(String, u64)>,
    /// Relists before the walk started.
    relists: u64,
}

thread_local! {
    /// Which walk branches this thread's cases reached (see `walks_reach_every_branch`).
    static REACHED: std::cell::RefCell<BTreeMap<&'static str, usize>> = Default::default();
}

fn reached(branch: &'static str) {
    REACHED.with(|r| *r.borrow_mut().entry(branch).or_default() += 1);
}

/// At most this many pins (small, so the count cap is reached), and their TTL (a few Wait
/// steps reach it).
const PINS: usize = 3;
const PIN_TTL: Duration = Duration::from_secs(100);

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2u8, 0..4u8, 0..3u8, 1..3u64).prop_map(|(ns, name, node, gap)| Op::Put { ns, name, node, gap }),
        2 => (0..2u8, 0..4u8, 1..3u64).prop_map(|(ns, name, gap)| Op::Delete { ns, name, gap }),
        1 => (1..4u64).prop_map(|gap| Op::Progress { gap }),
        2 => prop_oneof![Just(0u64), 1..40u64, 70..80u64].prop_map(|secs| Op::Wait { secs }),
        1 => (0..6u64).prop_map(|back| Op::Compact { back }),
        1 => (1..3u64).prop_map(|gap| Op::Relist { gap }),
        2 => (prop_oneof![Just(0u64), 1..12u64], 1..4u8).prop_map(|(back, limit)| Op::Walk { back, limit }),
        4 => any::<u8>().prop_map(|which| Op::Step { which }),
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
    relists: u64,
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
        .with_snapshot_limits(PINS, PIN_TTL)
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
        relists: 0,
    };
    let mut walks: Vec<Walk> = Vec::new();
    let mut pages = 0;
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
                m.relists += 1;
            }
            Op::Walk { back, limit } => {
                let view = reader.view();
                if let Some(walk) = start_walk(&view, &m, back, limit.into(), snapshots)? {
                    walks.push(walk);
                }
                pages += 1;
            }
            Op::Step { which } => {
                if !walks.is_empty() {
                    let i = usize::from(which) % walks.len();
                    if !step_walk(&reader.view(), &m, &mut walks[i], snapshots)? {
                        walks.swap_remove(i);
                    }
                    pages += 1;
                }
            }
        }
        prop_assert!(reader.view().pinned_snapshots() <= PINS);
        let view = reader.view();
        if budget.is_some() {
            follow_squeezed_window(&view, &mut m)?;
        }
        check(&view, &m, snapshots)?;
    }
    // Finish the open walks at the end, as the writer stopped.
    for mut walk in walks {
        while step_walk(&reader.view(), &m, &mut walk, snapshots)? {}
    }
    let _ = pages;
    check_pagination(&reader.view(), &m)
}

/// The oldest version whose state the cache must still be able to serve (rebuild) from the
/// window, by the model: the newest evicted event's, else the list's; without snapshots,
/// the last change's.
fn floor(m: &Model, snapshots: bool) -> u64 {
    match (snapshots, m.evicted) {
        (true, true) => m.last_evicted,
        (true, false) => m.list_rv,
        (false, _) => last_change(m),
    }
}

fn keys_and_versions(items: &[Object]) -> Vec<(String, u64)> {
    items
        .iter()
        .map(|o| (key(o), o.resource_version()))
        .collect()
}

/// The first page of a walk; the walk when more pages follow.
fn start_walk(
    view: &CacheView,
    m: &Model,
    back: u64,
    limit: u64,
    snapshots: bool,
) -> Result<Option<Walk>, TestCaseError> {
    let all = Key::collection("pods", None).unwrap();
    let mut opts = ListOptions {
        limit: Some(limit),
        ..ListOptions::recursive()
    };
    let rv = if back == 0 {
        m.rv
    } else {
        let rv = m.rv.saturating_sub(back).max(1);
        opts = opts.at(Some(rv), Some(ResourceVersionMatch::Exact));
        rv
    };
    match view.list(&all, &opts) {
        Ok(page) => {
            prop_assert_eq!(page.resource_version, rv);
            prop_assert!(page.items.len() as u64 <= limit);
            if rv < floor(m, snapshots) {
                reached("first page below the floor (pinned)");
            } else if back > 0 && rv < last_change(m) {
                reached("first page rebuilt");
            }
            let want = keys_and_versions(&m.state_at(rv).into_values().collect::<Vec<_>>());
            let got = keys_and_versions(&page.items);
            prop_assert_eq!(&got[..], &want[..got.len().min(want.len())]);
            match page.continue_token {
                Some(token) => Ok(Some(Walk {
                    rv,
                    limit,
                    token,
                    got,
                    want,
                    relists: m.relists,
                })),
                None => {
                    prop_assert_eq!(got, want);
                    Ok(None)
                }
            }
        }
        Err(e) => {
            prop_assert!(e.is_expired(), "{e}");
            reached("first page expired");
            prop_assert!(
                back > 0 && (rv < m.compacted || rv < floor(m, snapshots) || rv < m.list_rv),
                "expired {rv} (floor {}, compacted {}): {e}",
                floor(m, snapshots),
                m.compacted
            );
            Ok(None)
        }
    }
}

/// One more page of `walk`; whether more follow. At the end the pages must be the state.
fn step_walk(
    view: &CacheView,
    m: &Model,
    walk: &mut Walk,
    snapshots: bool,
) -> Result<bool, TestCaseError> {
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        limit: Some(walk.limit),
        continue_token: Some(walk.token.clone()),
        ..ListOptions::recursive()
    };
    match view.list(&all, &opts) {
        Ok(page) => {
            prop_assert_eq!(page.resource_version, walk.rv);
            prop_assert!(!page.items.is_empty() && page.items.len() as u64 <= walk.limit);
            if walk.rv < floor(m, snapshots) {
                reached("continued below the floor (pinned)");
            } else if walk.rv < last_change(m) {
                reached("continued at a past version");
            }
            walk.got.extend(keys_and_versions(&page.items));
            let n = walk.got.len().min(walk.want.len());
            prop_assert_eq!(
                &walk.got[..],
                &walk.want[..n],
                "pages at {} after a relist? {}",
                walk.rv,
                m.relists != walk.relists
            );
            match page.continue_token {
                Some(token) => {
                    walk.token = token;
                    Ok(true)
                }
                None => {
                    reached("walk completed");
                    prop_assert_eq!(&walk.got, &walk.want, "the whole walk at {}", walk.rv);
                    Ok(false)
                }
            }
        }
        Err(Error::Expired {
            continue_token,
            message,
        }) => {
            prop_assert!(continue_token.is_some(), "{message}");
            reached(if m.relists != walk.relists {
                "continue expired after a relist"
            } else if walk.rv < m.compacted {
                "continue expired below the compaction"
            } else {
                "continue expired past its pin and the window"
            });
            // Only where the state may be gone: a relist since, a compaction above it, or
            // the window no longer reaching it (then its pin may have been dropped).
            prop_assert!(
                m.relists != walk.relists || walk.rv < m.compacted || walk.rv < floor(m, snapshots),
                "continue at {} expired (floor {}, compacted {})",
                walk.rv,
                floor(m, snapshots),
                m.compacted
            );
            Ok(false)
        }
        Err(e) => Err(TestCaseError::fail(format!("continue at {}: {e}", walk.rv))),
    }
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
        let floor = floor(m, snapshots);
        let opts = ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact));
        match view.list(&all, &opts) {
            Ok(list) => {
                // Below the floor only from a pin, which a relist drops.
                let lowest = if snapshots { m.list_rv } else { floor };
                prop_assert!(
                    rv <= m.rv && rv >= m.compacted && rv >= lowest,
                    "served {rv} (floor {floor}, list {})",
                    m.list_rv
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
                // Through the node index, the namespace's key range, and both: the same
                // objects at the same versions as the replay (an index holding a stale
                // version of an object that stayed on its node would show here).
                let selectors = [
                    "spec.nodeName=n1",
                    "metadata.namespace=ns1",
                    "metadata.namespace=ns1,spec.nodeName=n1",
                    "spec.nodeName=n1,spec.nodeName=n2",
                ];
                for selector in selectors {
                    let mut selected = opts.clone();
                    selected.predicate.field = FieldSelector::parse(selector).unwrap();
                    let indexed = view.list(&all, &selected).unwrap();
                    let want: Vec<(String, u64)> = state
                        .values()
                        .filter(|o| selected.predicate.matches(o))
                        .map(|o| (key(o), o.resource_version()))
                        .collect();
                    let got: Vec<(String, u64)> = indexed
                        .items
                        .iter()
                        .map(|o| (key(o), o.resource_version()))
                        .collect();
                    prop_assert_eq!(got, want, "{}", selector);
                }
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

/// The walks' property test must reach every branch it claims: pages at past versions
/// rebuilt from the window, pages from pins below the window's reach, and continuations
/// expired by a relist, by a compaction and by a dropped pin.
#[test]
fn walks_reach_every_branch() {
    use proptest::test_runner::{Config as RunnerConfig, TestRng, TestRunner};
    let config = RunnerConfig {
        cases: 512,
        ..RunnerConfig::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&prop::collection::vec(op(), 1..60), |ops| {
            run(ops, true, None)
        })
        .unwrap();
    let reached = REACHED.with(|r| r.borrow().clone());
    eprintln!("{reached:#?}");
    for branch in [
        "first page below the floor (pinned)",
        "first page rebuilt",
        "first page expired",
        "continued below the floor (pinned)",
        "continued at a past version",
        "continue expired after a relist",
        "continue expired below the compaction",
        "continue expired past its pin and the window",
        "walk completed",
    ] {
        assert!(reached.contains_key(branch), "never reached: {branch}");
    }
}
