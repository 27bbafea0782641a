//! Past states (see the crate's `snapshots` module): pinned by the pages that hand out
//! continue tokens, bounded in number and age, dropped by relists and compactions and over
//! the byte budget; rebuilt from the window otherwise, and `Expired` (with a fresh token for
//! a continuation) once neither is possible.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::{FieldSelector, Object, SelectableFields};
use listwatch_storage::{
    Error, Key, ListOptions, ObjectList, ResourceVersionMatch, WatchEvent, decode_continue,
};
use listwatch_watchcache::{
    CacheView, Config, DEFAULT_SNAPSHOT_TTL, Index, ManualClock, WatchCache,
};

fn pod(ns: &str, name: &str, node: &str, rv: u64) -> Object {
    let json = serde_json::json!({
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"nodeName": node},
    });
    Object::from_value(json, &SelectableFields::new(["spec.nodeName"]))
        .unwrap()
        .with_resource_version(rv)
}

fn config() -> Config {
    Config::new("pods")
        .with_index(Index::field("spec.nodeName"))
        .with_capacity(4, 4, 16)
        .with_clock(Arc::new(ManualClock::new()))
}

fn cache_at_10() -> WatchCache {
    let mut c = WatchCache::new(config());
    c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
        .unwrap();
    c
}

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

fn names(l: &ObjectList) -> Vec<&str> {
    l.items.iter().map(Object::name).collect()
}

fn exact(rv: u64) -> ListOptions {
    ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact))
}

/// A cache whose clock the test moves, listed at 10 with pods x (ns a) and y (ns b).
fn clocked_cache_at_10(limits: Option<(usize, Duration)>) -> (WatchCache, ManualClock) {
    let clock = ManualClock::new();
    let mut config = config().with_clock(Arc::new(clock.clone()));
    if let Some((count, ttl)) = limits {
        config = config.with_snapshot_limits(count, ttl);
    }
    let mut c = WatchCache::new(config);
    c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
        .unwrap();
    (c, clock)
}

fn one_by_one(token: Option<String>) -> ListOptions {
    ListOptions {
        limit: Some(1),
        continue_token: token,
        ..ListOptions::recursive()
    }
}

fn added(c: &mut WatchCache, rvs: std::ops::RangeInclusive<u64>) {
    for rv in rvs {
        c.apply(WatchEvent::Added(pod("b", &format!("p{rv}"), "n1", rv)))
            .unwrap();
    }
}

#[test]
fn a_pinned_state_outlives_the_window_while_it_is_used() {
    let (mut c, clock) = clocked_cache_at_10(None);
    let first = c.reader().view().list(&all(), &one_by_one(None)).unwrap();
    assert_eq!(names(&first), ["x"]);
    assert_eq!(c.view().pinned_snapshots(), 1, "the token pinned the state");
    // 30 events: the window (at most 16) no longer reaches back to 10.
    added(&mut c, 11..=40);
    let v = c.reader().view();
    assert!(v.events_since(10).unwrap_err().is_expired());
    assert!(v.list(&all(), &exact(10)).is_ok(), "pinned at 10");
    let next = v.list(&all(), &one_by_one(first.continue_token)).unwrap();
    assert_eq!((names(&next), next.resource_version), (vec!["y"], 10));
    assert!(next.continue_token.is_none());
    // Used now, so it lives for another TTL from here.
    clock.advance(DEFAULT_SNAPSHOT_TTL - Duration::from_secs(1));
    added(&mut c, 41..=41);
    assert_eq!(c.view().pinned_snapshots(), 1);
}

/// Regression for the expiry path: a pin unused for its TTL is dropped by the writer, and
/// a continuation the window can no longer rebuild is `Expired` with a token that
/// continues at the current version (what etcd answers below its compaction), so the
/// cacher asks the backend.
#[test]
fn a_continue_token_past_its_pin_and_the_window_expires_with_a_fresh_token() {
    let (mut c, clock) = clocked_cache_at_10(None);
    let opts = one_by_one(None);
    let first = c.reader().view().list(&all(), &opts).unwrap();
    added(&mut c, 11..=40);
    clock.advance(DEFAULT_SNAPSHOT_TTL);
    added(&mut c, 41..=41);
    assert_eq!(c.view().pinned_snapshots(), 0, "expired by age");
    let next = one_by_one(first.continue_token);
    let err = c.reader().view().list(&all(), &next).unwrap_err();
    let Error::Expired {
        continue_token: Some(fresh),
        message,
    } = err
    else {
        panic!("{err:?}")
    };
    assert!(message.starts_with("The provided continue parameter is too old"));
    assert_eq!(
        decode_continue(&fresh, "/pods/").unwrap(),
        ("/pods/a/x\0".to_owned(), 41)
    );
    let resumed = ListOptions {
        continue_token: Some(fresh),
        ..opts
    };
    assert_eq!(
        names(&c.reader().view().list(&all(), &resumed).unwrap()),
        ["p11"],
        "namespace b, in key order"
    );
    // An Exact list there too; a watch from 10 the same.
    let v = c.reader().view();
    let (floor, _) = v.snapshot_range().unwrap();
    assert_eq!(
        v.list(&all(), &exact(10)).unwrap_err().to_string(),
        format!("too old resource version: 10 ({floor})")
    );
    assert!(v.list(&all(), &exact(floor)).is_ok());
}

#[test]
fn pins_are_capped_in_number_least_recently_used_first() {
    let (mut c, clock) = clocked_cache_at_10(Some((2, Duration::from_secs(600))));
    let mut tokens = Vec::new();
    for rv in [11, 12, 13] {
        added(&mut c, rv..=rv);
        clock.advance(Duration::from_secs(1));
        let page = c.reader().view().list(&all(), &one_by_one(None)).unwrap();
        tokens.push((rv, page.continue_token.unwrap()));
    }
    assert_eq!(c.view().pinned_snapshots(), 2);
    added(&mut c, 14..=60);
    let v = c.reader().view();
    for (rv, token) in tokens {
        let got = v.list(&all(), &one_by_one(Some(token)));
        if rv == 11 {
            assert!(got.unwrap_err().is_expired(), "the oldest pin went first");
        } else {
            assert_eq!(got.unwrap().resource_version, rv);
        }
    }
}

/// A relist (readiness Pending, a new generation) drops every pin: a continue token from
/// before it is not served from the old generation's state, even where the new one could
/// not tell the difference.
#[test]
fn a_relist_drops_every_pin() {
    let (mut c, _clock) = clocked_cache_at_10(None);
    let first = c.reader().view().list(&all(), &one_by_one(None)).unwrap();
    added(&mut c, 11..=12);
    let old_view = c.reader().view();
    c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 50)
        .unwrap();
    assert_eq!(c.view().pinned_snapshots(), 0);
    assert_eq!(c.view().generation(), old_view.generation() + 1);
    let next = one_by_one(first.continue_token.clone());
    let err = c.reader().view().list(&all(), &next).unwrap_err();
    assert!(err.is_expired(), "{err:?}");
    // A view of the old generation still held by a reader can serve itself, but what it
    // pins is never seen by the new generation.
    assert!(old_view.list(&all(), &exact(11)).is_ok());
    assert_eq!(c.view().pinned_snapshots(), 0);
    assert!(c.reader().view().list(&all(), &exact(11)).is_err());
}

#[test]
fn compaction_drops_the_pins_below_it() {
    let (mut c, _clock) = clocked_cache_at_10(None);
    let first = c.reader().view().list(&all(), &one_by_one(None)).unwrap();
    added(&mut c, 11..=12);
    c.compact(11);
    assert_eq!(c.view().pinned_snapshots(), 0);
    let err = c
        .reader()
        .view()
        .list(&all(), &one_by_one(first.continue_token))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Expired {
                continue_token: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
}

/// Past states are rebuilt from the nearest base: back from the current state, or from a
/// pin on either side, and every rebuilt state is the replayed history's.
#[test]
fn rebuilt_states_agree_with_the_history_from_any_base() {
    let (mut c, _clock) = clocked_cache_at_10(Some((4, Duration::from_secs(600))));
    // 11..=16: add, modify, delete, re-add, move between nodes.
    c.apply(WatchEvent::Added(pod("a", "z", "n1", 11))).unwrap();
    c.apply(WatchEvent::Modified {
        object: pod("a", "x", "n2", 12),
        prev: None,
    })
    .unwrap();
    c.apply(WatchEvent::Deleted(pod("b", "y", "n2", 13)))
        .unwrap();
    c.apply(WatchEvent::Added(pod("b", "y", "n1", 14))).unwrap();
    c.apply(WatchEvent::Deleted(pod("a", "z", "n1", 15)))
        .unwrap();
    c.apply(WatchEvent::Modified {
        object: pod("a", "x", "n1", 16),
        prev: None,
    })
    .unwrap();
    let want = |rv: u64| -> Vec<(&'static str, u64)> {
        match rv {
            10 => vec![("x", 5), ("y", 7)],
            11 => vec![("x", 5), ("z", 11), ("y", 7)],
            12 => vec![("x", 12), ("z", 11), ("y", 7)],
            13 => vec![("x", 12), ("z", 11)],
            14 => vec![("x", 12), ("z", 11), ("y", 14)],
            15 => vec![("x", 12), ("y", 14)],
            _ => vec![("x", 16), ("y", 14)],
        }
    };
    let got = |v: &CacheView, rv: u64| -> Vec<(String, u64)> {
        let l = v.list(&all(), &exact(rv)).unwrap();
        assert_eq!(l.resource_version, rv);
        l.items
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version()))
            .collect()
    };
    let by_node = |v: &CacheView, rv: u64| -> Vec<String> {
        let mut o = exact(rv);
        o.predicate.field = FieldSelector::equals("spec.nodeName", "n1");
        let l = v.list(&all(), &o).unwrap();
        l.items.iter().map(|o| o.name().to_owned()).collect()
    };
    // In an order that makes every kind of base the nearest one at some point: the
    // current state, a newer pin, an older pin. A first page of one object pins each.
    for rv in [13, 15, 10, 11, 14, 12, 16] {
        let v = c.reader().view();
        let mut first = exact(rv);
        first.limit = Some(1);
        assert!(v.list(&all(), &first).unwrap().continue_token.is_some());
        let want: Vec<(String, u64)> = want(rv).into_iter().map(|(n, r)| (n.into(), r)).collect();
        assert_eq!(got(&v, rv), want, "at {rv}");
        let want_n1: Vec<String> = want
            .iter()
            .filter(|(n, r)| {
                matches!(
                    (n.as_str(), *r),
                    ("x", 5) | ("x", 16) | ("z", _) | ("y", 14)
                )
            })
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(by_node(&v, rv), want_n1, "by node at {rv}");
    }
    assert_eq!(c.view().pinned_snapshots(), 4);
    // A full Exact list pins nothing (it hands out no token).
    let (mut c, _clock) = clocked_cache_at_10(None);
    added(&mut c, 11..=12);
    assert!(c.reader().view().list(&all(), &exact(11)).is_ok());
    assert_eq!(c.view().pinned_snapshots(), 0);
}

/// Rolling back an event whose previous state the backend supplied (the cache had none)
/// removes the key: the cache's own state before it had no object there.
#[test]
fn rolling_back_restores_the_caches_own_state_not_the_backends_prev() {
    let (mut c, _clock) = clocked_cache_at_10(None);
    c.apply(WatchEvent::Modified {
        object: pod("a", "w", "n1", 11),
        prev: Some(pod("a", "w", "n1", 3)),
    })
    .unwrap();
    let v = c.reader().view();
    let events = v.events_since(10).unwrap();
    assert_eq!(
        events
            .get(0)
            .unwrap()
            .prev_object
            .as_ref()
            .map(Object::resource_version),
        Some(3),
        "watchers still get the backend's previous state"
    );
    assert_eq!(names(&v.list(&all(), &exact(10)).unwrap()), ["x", "y"]);
}

#[test]
fn the_budget_counts_pinned_states_and_drops_them_before_events() {
    let run = |pin: bool| {
        let base = cache_at_10().view().memory().state_bytes;
        let budget = base + 4 * 800;
        let mut c = WatchCache::new(config().with_byte_budget(Some(budget)));
        c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
            .unwrap();
        if pin {
            let page = c.reader().view().list(&all(), &one_by_one(None)).unwrap();
            assert!(page.continue_token.is_some());
            assert_eq!(c.view().pinned_snapshots(), 1);
        }
        let mut peak_pinned = 0;
        for rv in 11..=40 {
            c.apply(WatchEvent::Modified {
                object: pod("a", "x", "n1", rv),
                prev: None,
            })
            .unwrap();
            peak_pinned = peak_pinned.max(c.view().memory().snapshot_bytes);
            let v = c.reader().view();
            assert!(v.memory().total() <= budget, "{:?}", v.memory());
        }
        (
            c.view().window().len(),
            peak_pinned,
            c.view().pinned_snapshots(),
        )
    };
    let (without, _, _) = run(false);
    let (with, peak, pinned) = run(true);
    assert!(peak > 0, "the pin was accounted while it lived");
    assert_eq!(pinned, 0, "over the budget, the pin went");
    assert!(
        without < 16,
        "the budget squeezes the window ({without} events)"
    );
    assert_eq!(
        with, without,
        "and the window kept what it keeps without a pin"
    );
}
