//! Unit tests of the writer, the views and the readers.

use std::sync::Mutex;
use std::time::Duration;

use listwatch_api::{FieldSelector, LabelSelector, SelectableFields};
use listwatch_storage::{
    Bookmark, GetOptions, ListOptions, ObjectList, ResourceVersionMatch, SelectionPredicate,
    decode_continue,
};
use tokio::time::Instant;

use super::*;
use crate::config::{CacheMetrics, Index, ManualClock};
use crate::event::Events;

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

fn rvs(e: &Events) -> Vec<u64> {
    e.iter().map(|e| e.resource_version).collect()
}

fn names(l: &ObjectList) -> Vec<&str> {
    l.items.iter().map(Object::name).collect()
}

fn exact(rv: u64) -> ListOptions {
    ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact))
}

#[test]
fn reads_before_the_first_list_are_not_ready() {
    let c = WatchCache::new(config());
    let v = c.reader().view();
    assert!(matches!(v.events_since(1), Err(Error::NotReady { .. })));
    assert!(matches!(
        v.list(&all(), &ListOptions::recursive()),
        Err(Error::NotReady { .. })
    ));
}

#[test]
fn a_watch_from_the_list_version_is_served_and_older_ones_expire() {
    let mut c = cache_at_10();
    c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
    let v = c.reader().view();
    assert_eq!(rvs(&v.events_since(10).unwrap()), [12]);
    assert_eq!(rvs(&v.events_since(11).unwrap()), [12]);
    assert!(v.events_since(12).unwrap().is_empty());
    let err = v.events_since(9).unwrap_err();
    assert_eq!(err.to_string(), "too old resource version: 9 (10)");
    assert_eq!(err.to_status().code, 410);
}

#[test]
fn after_an_eviction_the_oldest_buffered_event_sets_the_limit() {
    let mut c = cache_at_10();
    // Stale events (the manual clock never moves, but capacity 4 at min 4 with the
    // freshness rule doubling: push enough to evict under the max of 16).
    for rv in 11..=40 {
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
            .unwrap();
    }
    let v = c.reader().view();
    assert_eq!(v.capacity(), 16);
    assert_eq!(v.window().len(), 16);
    let oldest = v.window().get(0).unwrap().resource_version;
    assert_eq!(oldest, 25);
    assert!(v.events_since(24).is_ok(), "oldest − 1 is still complete");
    assert_eq!(
        v.events_since(23).unwrap_err().to_string(),
        "too old resource version: 23 (24)"
    );
    assert!(
        v.events_since(10).unwrap_err().is_expired(),
        "the list version no longer counts"
    );
}

#[test]
fn a_relist_empties_the_window_and_restarts_the_rule() {
    let mut c = cache_at_10();
    for rv in 11..=40 {
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
            .unwrap();
    }
    c.replace(vec![pod("a", "x", "n1", 5)], 50).unwrap();
    let v = c.reader().view();
    assert!(v.window().is_empty());
    assert!(v.events_since(50).unwrap().is_empty());
    assert_eq!(
        v.events_since(48).unwrap_err().to_string(),
        "too old resource version: 48 (50)"
    );
    assert_eq!(v.len(), 1);
}

#[test]
fn progress_advances_the_version_without_an_event() {
    let mut c = cache_at_10();
    c.apply(WatchEvent::Bookmark(Bookmark {
        resource_version: 20,
        initial_events_end: false,
    }))
    .unwrap();
    c.progress(15);
    let v = c.reader().view();
    assert_eq!(v.resource_version(), 20);
    assert!(v.events_since(20).unwrap().is_empty());
    assert!(matches!(
        v.events_since(21),
        Err(Error::TooLargeResourceVersion {
            requested: 21,
            current: 20
        })
    ));
    // The state at 20 is the list's state.
    assert_eq!(names(&v.list(&all(), &exact(20)).unwrap()), ["x", "y"]);
}

#[test]
fn out_of_order_and_error_events_are_refused_and_change_nothing() {
    let mut c = cache_at_10();
    assert!(matches!(
        c.apply(WatchEvent::Added(pod("a", "z", "n1", 10))),
        Err(Error::Internal { .. })
    ));
    assert!(matches!(
        c.apply(WatchEvent::Error(Error::internal("x"))),
        Err(Error::BadRequest { .. })
    ));
    assert!(
        c.apply(WatchEvent::Added(pod("a", "", "n1", 11))).is_err(),
        "objects need a name"
    );
    let v = c.reader().view();
    assert_eq!(v.resource_version(), 10);
    assert!(v.window().is_empty());
}

#[test]
fn events_carry_the_previous_state_from_the_cache() {
    let mut c = cache_at_10();
    let returned = c
        .apply(WatchEvent::Modified {
            object: pod("a", "x", "n9", 11),
            prev: None,
        })
        .unwrap()
        .unwrap();
    c.apply(WatchEvent::Deleted(pod("a", "x", "n9", 12)))
        .unwrap();
    let events = c.reader().view().events_since(10).unwrap();
    assert!(
        Arc::ptr_eq(&returned, events.get(0).unwrap()),
        "one shared entry"
    );
    let (m, d) = (events.get(0).unwrap(), events.get(1).unwrap());
    assert_eq!(m.event_type, EventType::Modified);
    assert_eq!(
        m.prev_object.as_ref().map(Object::resource_version),
        Some(5)
    );
    assert_eq!(&*m.key, "/pods/a/x");
    assert_eq!(d.event_type, EventType::Deleted);
    assert_eq!(
        d.prev_object.as_ref().map(Object::resource_version),
        Some(11)
    );
    assert_eq!(d.object.resource_version(), 12);
    assert_eq!(
        d.to_watch_event(),
        WatchEvent::Deleted(pod("a", "x", "n9", 12))
    );
}

#[test]
fn exact_lists_read_snapshots_and_other_versions_read_the_current_state() {
    let mut c = cache_at_10();
    c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
    c.apply(WatchEvent::Deleted(pod("a", "x", "n1", 14)))
        .unwrap();
    let v = c.reader().view();
    assert_eq!(names(&v.list(&all(), &exact(10)).unwrap()), ["x", "y"]);
    assert_eq!(names(&v.list(&all(), &exact(13)).unwrap()), ["x", "z", "y"]);
    assert_eq!(v.list(&all(), &exact(13)).unwrap().resource_version, 13);
    assert_eq!(names(&v.list(&all(), &exact(14)).unwrap()), ["z", "y"]);
    assert!(v.list(&all(), &exact(9)).unwrap_err().is_expired());
    assert!(matches!(
        v.list(&all(), &exact(15)),
        Err(Error::TooLargeResourceVersion { .. })
    ));
    let not_older = ListOptions::recursive().at(Some(12), Some(ResourceVersionMatch::NotOlderThan));
    let l = v.list(&all(), &not_older).unwrap();
    assert_eq!((names(&l), l.resource_version), (vec!["z", "y"], 14));
    let l = v
        .list(
            &Key::collection("pods", Some("a")).unwrap(),
            &ListOptions::recursive(),
        )
        .unwrap();
    assert_eq!(names(&l), ["z"]);
}

#[test]
fn without_snapshots_only_versions_since_the_last_change_are_exact() {
    let mut c = WatchCache::new(config().with_snapshots(false));
    c.replace(vec![pod("a", "x", "n1", 5)], 10).unwrap();
    c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
    c.progress(20);
    let v = c.reader().view();
    assert_eq!(names(&v.list(&all(), &exact(15)).unwrap()), ["x", "z"]);
    assert!(v.list(&all(), &exact(11)).unwrap_err().is_expired());
    assert_eq!(v.snapshot_range(), Some((12, 20)));
}

#[test]
fn compaction_expires_older_exact_reads_but_keeps_the_state_at_the_revision() {
    let mut c = cache_at_10();
    for rv in [12, 14, 16] {
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
            .unwrap();
    }
    c.compact(15);
    let v = c.reader().view();
    assert_eq!(
        names(&v.list(&all(), &exact(15)).unwrap()),
        ["p12", "p14", "x", "y"]
    );
    assert_eq!(
        v.list(&all(), &exact(14)).unwrap_err().to_string(),
        "too old resource version: 14 (15)"
    );
    assert_eq!(v.snapshot_range(), Some((15, 16)));
    assert!(
        v.events_since(10).is_ok(),
        "compaction does not shorten the window"
    );
}

#[test]
fn limits_and_continue_tokens_walk_a_consistent_version() {
    let mut c = cache_at_10();
    for (i, rv) in (11..=15).enumerate() {
        c.apply(WatchEvent::Added(pod("a", &format!("q{i}"), "n1", rv)))
            .unwrap();
    }
    let reader = c.reader();
    let mut opts = ListOptions {
        limit: Some(3),
        ..ListOptions::recursive()
    };
    let first = reader.view().list(&all(), &opts).unwrap();
    assert_eq!(names(&first), ["q0", "q1", "q2"]);
    let token = first.continue_token.clone().unwrap();
    assert_eq!(
        decode_continue(&token, "/pods/").unwrap(),
        ("/pods/a/q2\0".to_owned(), 15)
    );
    // Changes after the first page do not show in the next ones.
    c.apply(WatchEvent::Deleted(pod("a", "q3", "n1", 16)))
        .unwrap();
    opts.continue_token = Some(token);
    let second = reader.view().list(&all(), &opts).unwrap();
    assert_eq!(
        (names(&second), second.resource_version),
        (vec!["q3", "q4", "x"], 15)
    );
    opts.continue_token = second.continue_token.clone();
    let third = reader.view().list(&all(), &opts).unwrap();
    assert_eq!(names(&third), ["y"]);
    assert!(third.continue_token.is_none());
}

#[test]
fn version_zero_ignores_the_limit() {
    let c = cache_at_10();
    let opts = ListOptions {
        limit: Some(1),
        ..ListOptions::recursive().at(Some(0), None)
    };
    let l = c.reader().view().list(&all(), &opts).unwrap();
    assert_eq!(names(&l), ["x", "y"]);
    assert!(l.continue_token.is_none());
}

#[test]
fn selectors_filter_and_indexes_answer_exact_fields() {
    let c = cache_at_10();
    let v = c.reader().view();
    let mut opts = ListOptions::recursive();
    opts.predicate = SelectionPredicate {
        label: LabelSelector::parse("app in (x,y)").unwrap(),
        field: FieldSelector::parse("spec.nodeName=n2").unwrap(),
        ..SelectionPredicate::default()
    };
    assert_eq!(names(&v.list(&all(), &opts).unwrap()), ["y"]);
    opts.predicate.field = FieldSelector::parse("spec.nodeName!=n2").unwrap();
    assert_eq!(names(&v.list(&all(), &opts).unwrap()), ["x"]);
    opts.predicate.field = FieldSelector::parse("spec.nodeName=nowhere").unwrap();
    assert!(v.list(&all(), &opts).unwrap().items.is_empty());
}

/// Issue 12 item 9: the node index through modifications that move pods between nodes,
/// keep them on their node, delete them, and a relist that replaces everything: each
/// list by node returns the current objects at their current versions.
#[test]
fn indexes_follow_moves_deletes_and_relists() {
    let mut c = WatchCache::new(config().with_index(Index::namespace()));
    c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
        .unwrap();
    let by_node = |c: &WatchCache, node: &str| {
        let mut opts = ListOptions::recursive();
        opts.predicate.field = FieldSelector::equals("spec.nodeName", node);
        c.reader()
            .view()
            .list(&all(), &opts)
            .unwrap()
            .items
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version()))
            .collect::<Vec<_>>()
    };
    let check = |c: &WatchCache| c.view().store.check_indexes(&c.shared.config.indexes);
    c.apply(WatchEvent::Modified {
        object: pod("a", "x", "n1", 11),
        prev: Some(pod("a", "x", "n1", 5)),
    })
    .unwrap();
    check(&c);
    assert_eq!(by_node(&c, "n1"), [("x".to_owned(), 11)]);
    c.apply(WatchEvent::Modified {
        object: pod("a", "x", "n2", 12),
        prev: Some(pod("a", "x", "n1", 11)),
    })
    .unwrap();
    check(&c);
    assert!(by_node(&c, "n1").is_empty());
    assert_eq!(
        by_node(&c, "n2"),
        [("x".to_owned(), 12), ("y".to_owned(), 7)]
    );
    c.apply(WatchEvent::Deleted(pod("b", "y", "n2", 13)))
        .unwrap();
    check(&c);
    assert_eq!(by_node(&c, "n2"), [("x".to_owned(), 12)]);
    c.replace(vec![pod("c", "z", "n1", 20), pod("a", "x", "n3", 19)], 30)
        .unwrap();
    check(&c);
    assert_eq!(by_node(&c, "n1"), [("z".to_owned(), 20)]);
    assert!(by_node(&c, "n2").is_empty());
    assert_eq!(by_node(&c, "n3"), [("x".to_owned(), 19)]);
}

/// A selector fixing the namespace reads the namespace's key range; the empty namespace
/// (cluster-scoped objects) and a namespace that is not a valid key segment are left to
/// the selector.
#[test]
fn a_namespace_selector_narrows_to_the_namespace_range() {
    let mut c = WatchCache::new(config());
    c.replace(
        vec![
            pod("a", "x", "n1", 5),
            pod("ab", "w", "n1", 6),
            pod("b", "y", "n2", 7),
        ],
        10,
    )
    .unwrap();
    let v = c.reader().view();
    let list = |key: &Key, field: &str| {
        let mut opts = ListOptions::recursive();
        opts.predicate.field = FieldSelector::parse(field).unwrap();
        names(&v.list(key, &opts).unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(list(&all(), "metadata.namespace=a"), ["x"]);
    assert_eq!(list(&all(), "metadata.namespace=a,spec.nodeName=n1"), ["x"]);
    assert_eq!(
        list(&all(), "metadata.namespace=b,spec.nodeName=n1"),
        Vec::<String>::new()
    );
    assert_eq!(list(&all(), "metadata.namespace!=a"), ["w", "y"]);
    assert_eq!(list(&all(), "metadata.namespace=a/b"), Vec::<String>::new());
    let ns_a = Key::collection("pods", Some("a")).unwrap();
    assert_eq!(list(&ns_a, "metadata.namespace=b"), Vec::<String>::new());
    // Continue tokens stay those of the key asked for.
    let mut opts = ListOptions::recursive();
    opts.limit = Some(1);
    opts.predicate.field = FieldSelector::parse("metadata.namespace=ab").unwrap();
    let page = v.list(&all(), &opts).unwrap();
    assert_eq!(names(&page), ["w"]);
    assert!(page.continue_token.is_none());
    // Cluster-scoped objects have the empty namespace: all of them match it.
    let node = |name: &str| {
        Object::from_value(
            serde_json::json!({"metadata": {"name": name}}),
            &SelectableFields::new(["spec.nodeName"]),
        )
        .unwrap()
        .with_resource_version(3)
    };
    let mut nodes = WatchCache::new(Config::new("nodes").with_clock(Arc::new(ManualClock::new())));
    nodes.replace(vec![node("n1"), node("n2")], 10).unwrap();
    let v = nodes.reader().view();
    let every = Key::collection("nodes", None).unwrap();
    let mut opts = ListOptions::recursive();
    opts.predicate.field = FieldSelector::parse("metadata.namespace=").unwrap();
    assert_eq!(names(&v.list(&every, &opts).unwrap()), ["n1", "n2"]);
    opts.predicate.field = FieldSelector::parse("metadata.namespace=n1").unwrap();
    assert!(v.list(&every, &opts).unwrap().items.is_empty());
}

#[test]
fn get_reads_the_current_state_with_version_checks() {
    let c = cache_at_10();
    let v = c.reader().view();
    let x = Key::object("pods", Some("a"), "x").unwrap();
    let gone = Key::object("pods", Some("a"), "nope").unwrap();
    assert_eq!(
        v.get(&x, &GetOptions::default())
            .unwrap()
            .map(|o| o.resource_version()),
        Some(5)
    );
    assert!(
        v.get(&gone, &GetOptions::default())
            .unwrap_err()
            .is_not_found()
    );
    assert_eq!(
        v.get(
            &gone,
            &GetOptions {
                ignore_not_found: true,
                ..Default::default()
            }
        )
        .unwrap(),
        None
    );
    let too_new = GetOptions {
        resource_version: Some(11),
        ..Default::default()
    };
    assert!(matches!(
        v.get(&x, &too_new),
        Err(Error::TooLargeResourceVersion { .. })
    ));
    let other = Key::object("nodes", None, "x").unwrap();
    assert!(matches!(
        v.get(&other, &GetOptions::default()),
        Err(Error::BadRequest { .. })
    ));
    let one = v.list(&x, &ListOptions::default()).unwrap();
    assert_eq!(names(&one), ["x"]);
}

#[test]
fn a_view_never_changes_after_it_was_taken() {
    let mut c = cache_at_10();
    let reader = c.reader();
    let before = reader.view();
    c.apply(WatchEvent::Deleted(pod("a", "x", "n1", 11)))
        .unwrap();
    assert_eq!(
        names(&before.list(&all(), &ListOptions::recursive()).unwrap()),
        ["x", "y"]
    );
    assert_eq!(before.resource_version(), 10);
    assert_eq!(reader.view().len(), 1);
    c.view().store.check_indexes(&c.shared.config.indexes);
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_version_times_out_after_three_seconds() {
    let c = cache_at_10();
    let reader = c.reader();
    let started = Instant::now();
    let err = reader.wait_until_fresh(11, None).await.unwrap_err();
    assert_eq!(
        err,
        Error::TooLargeResourceVersion {
            requested: 11,
            current: 10
        }
    );
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(!reader.has_waiters());
    let deadline = Instant::now() + Duration::from_secs(1);
    assert!(reader.wait_until_fresh(11, Some(deadline)).await.is_err());
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(4),
        "an earlier deadline wins"
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_ends_as_soon_as_the_writer_gets_there() {
    let mut c = cache_at_10();
    let reader = c.reader();
    let waiter = tokio::spawn({
        let reader = reader.clone();
        async move {
            reader
                .list(&all(), &ListOptions::recursive().at(Some(12), None))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(reader.has_waiters());
    c.progress(11);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(reader.has_waiters(), "11 is not enough");
    c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
    let l = waiter.await.unwrap().unwrap();
    assert_eq!((names(&l), l.resource_version), (vec!["x", "z", "y"], 12));
    assert!(!reader.has_waiters());
}

#[tokio::test(start_paused = true)]
async fn a_dispatcher_wakes_for_each_newer_view_and_reads_its_events() {
    let mut c = cache_at_10();
    let reader = c.reader();
    let dispatcher = tokio::spawn({
        let reader = reader.clone();
        async move {
            let mut seen = Vec::new();
            let mut last = 10;
            while last < 13 {
                let view = reader.wait_for_change(last).await;
                seen.extend(
                    view.events_since(last)
                        .unwrap()
                        .iter()
                        .map(|e| e.resource_version),
                );
                last = view.resource_version();
            }
            seen
        }
    });
    for rv in 11..=13 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
            .unwrap();
    }
    assert_eq!(dispatcher.await.unwrap(), [11, 12, 13]);
}

#[tokio::test(start_paused = true)]
async fn the_default_clock_follows_tokio_time_for_resizing() {
    let mut c = WatchCache::new(Config::new("pods"));
    c.replace(Vec::new(), 1).unwrap();
    for rv in 2..=101 {
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n", rv)))
            .unwrap();
    }
    assert_eq!(c.view().capacity(), 100);
    c.apply(WatchEvent::Added(pod("a", "p102", "n", 102)))
        .unwrap();
    assert_eq!(
        c.view().capacity(),
        200,
        "a full window of fresh events doubles"
    );
    for rv in 103..=201 {
        c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n", rv)))
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(76)).await;
    c.apply(WatchEvent::Added(pod("a", "p202", "n", 202)))
        .unwrap();
    assert_eq!(
        c.view().capacity(),
        100,
        "a full window of stale events halves"
    );
    assert_eq!(c.view().window().len(), 100);
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl CacheMetrics for Recorder {
    fn capacity_changed(&self, _: &str, old: usize, new: usize) {
        self.0
            .lock()
            .unwrap()
            .push(format!("capacity {old}->{new}"));
    }
    fn events_evicted(&self, _: &str, count: usize, reason: EvictionReason) {
        self.0
            .lock()
            .unwrap()
            .push(format!("evicted {count} {reason:?}"));
    }
}

#[test]
fn over_budget_the_window_shrinks_and_the_state_stays() {
    let metrics = Arc::new(Recorder::default());
    let base = pod("a", "x", "n1", 5);
    let mut c = WatchCache::new(
        config()
            .with_metrics(metrics.clone())
            .with_byte_budget(Some(1)),
    );
    c.replace(vec![base.clone()], 10).unwrap();
    for rv in 11..=14 {
        c.apply(WatchEvent::Modified {
            object: pod("a", "x", "n1", rv),
            prev: None,
        })
        .unwrap();
    }
    let v = c.reader().view();
    assert_eq!(v.len(), 1, "the current state is never dropped");
    assert!(v.window().is_empty());
    assert!(v.memory().window_bytes == 0 && v.memory().state_bytes > 1);
    assert!(v.events_since(13).unwrap_err().is_expired());
    assert!(v.events_since(14).unwrap().is_empty());
    let log = metrics.0.lock().unwrap();
    assert!(log.iter().any(|l| l == "evicted 1 Budget"), "{log:?}");
}

#[test]
fn a_budget_that_fits_keeps_the_window() {
    let mut c = WatchCache::new(config().with_byte_budget(Some(1 << 20)));
    c.replace(vec![pod("a", "x", "n1", 5)], 10).unwrap();
    for rv in 11..=14 {
        c.apply(WatchEvent::Modified {
            object: pod("a", "x", "n1", rv),
            prev: None,
        })
        .unwrap();
    }
    let v = c.reader().view();
    assert_eq!(v.window().len(), 4);
    assert!(v.memory().window_bytes > 4 * pod("a", "x", "n1", 1).size());
}

/// The history's budget counts the window and the pins, not the current state: a state far
/// over it keeps a window, which is squeezed to what fits (issue 24: the apiserver's
/// `--watch-cache-window-bytes`).
#[test]
fn the_window_budget_ignores_the_state_and_squeezes_the_history() {
    let metrics = Arc::new(Recorder::default());
    let one = pod("a", "x", "n1", 1).size() + std::mem::size_of::<CacheEvent>();
    let mut c = WatchCache::new(
        config()
            .with_metrics(metrics.clone())
            .with_window_byte_budget(Some(3 * one)),
    );
    let state: Vec<Object> = (0..50)
        .map(|i| pod("a", &format!("s{i:02}"), "n1", 5))
        .collect();
    c.replace(state, 10).unwrap();
    for rv in 11..=20 {
        c.apply(WatchEvent::Modified {
            object: pod("a", "x", "n1", rv),
            prev: Some(pod("a", "x", "n1", rv - 1)),
        })
        .unwrap();
    }
    let v = c.reader().view();
    let m = v.memory();
    assert!(m.state_bytes > 3 * one, "{m:?}");
    assert!(m.history() <= 3 * one, "{m:?}");
    assert!(!v.window().is_empty() && v.window().len() <= 3, "{m:?}");
    assert!(v.events_since(10).unwrap_err().is_expired());
    let oldest = v.window().first().unwrap().resource_version;
    assert_eq!(
        v.events_since(oldest - 1).unwrap().len(),
        20 - oldest as usize + 1
    );
    let log = metrics.0.lock().unwrap();
    assert!(log.iter().any(|l| l.ends_with("Budget")), "{log:?}");
}

/// A pin whose later events have left the window is the only owner of the bodies those
/// events replaced: it is charged for them (issue 26 item 4). Before, a pin was charged for
/// the maps' nodes only (about 96 B per object), so a paginated walk's pin could keep a
/// whole old state of large objects alive that no budget saw.
#[test]
fn a_pin_past_the_window_is_charged_for_the_bodies_it_alone_keeps() {
    let big = |name: &str, fill: char, rv: u64| {
        let json = serde_json::json!({
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"nodeName": "n1", "blob": fill.to_string().repeat(10_000)},
        });
        Object::from_value(json, &SelectableFields::new(["spec.nodeName"]))
            .unwrap()
            .with_resource_version(rv)
    };
    let mut c = WatchCache::new(config());
    let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    c.replace(names.iter().map(|n| big(n, 'a', 5)).collect(), 10)
        .unwrap();
    // A walk's first page pins the state at 10.
    let page = c
        .view()
        .list(
            &all(),
            &ListOptions {
                limit: Some(2),
                ..ListOptions::recursive()
            },
        )
        .unwrap();
    assert!(page.continue_token.is_some());
    assert_eq!(c.view().pinned_snapshots(), 1);
    // Every object replaced by a new body; the window (16 events at most) lets the first
    // replacements go, so the pin alone keeps their old bodies.
    let mut rv = 10;
    for n in &names {
        rv += 1;
        c.apply(WatchEvent::Modified {
            object: big(n, 'b', rv),
            prev: None,
        })
        .unwrap();
    }
    let view = c.view();
    assert!(
        view.rebuild_floor() > 10,
        "the window let events after the pin go"
    );
    assert_eq!(view.pinned_snapshots(), 1);
    let snapshot = view.memory().snapshot_bytes;
    // At least the 4 old bodies no window event holds any more (the real figure).
    assert!(
        snapshot >= 4 * 10_000,
        "the pin is charged {snapshot} B while it alone keeps 4 × 10 kB of old bodies"
    );
}
