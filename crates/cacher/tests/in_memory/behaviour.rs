//! Cacher behaviour beyond the storage contract: slow watchers, triggers, scale.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{fields, next, pod, put};
use futures::StreamExt;
use listwatch_api::{FieldSelector, Object};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, SelectionPredicate, Storage, WatchEvent};

async fn slow_watcher_case(stall_resume: bool) -> (Vec<u64>, bool) {
    let mut config = CacherConfig::new("pods").with_stall_resume(stall_resume);
    config.max_dispatch_budget = Duration::from_millis(1);
    let cacher = Cacher::new(Arc::new(MemStore::new()), config);
    cacher.wait_ready().await;
    let start = put(&cacher, pod("ns", "a", "n1", 0)).await;
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(start.resource_version()),
        ..ListOptions::recursive()
    };
    let mut slow = cacher.watch(&all, &opts).await.unwrap();
    let mut fast = cacher.watch(&all, &opts).await.unwrap();
    let mut last = 0;
    for i in 1..=60 {
        last = put(&cacher, pod("ns", "a", "n1", i))
            .await
            .resource_version();
        // The fast watcher keeps up.
        assert!(matches!(
            next(&mut fast).await,
            Some(WatchEvent::Modified { .. })
        ));
    }
    let mut got = Vec::new();
    let mut ended = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), slow.next()).await {
            Ok(Some(ev)) => {
                got.push(ev.resource_version().unwrap());
                if got.last() == Some(&last) {
                    break;
                }
            }
            Ok(None) => {
                ended = true;
                break;
            }
            Err(_) => break,
        }
    }
    (got, ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_is_detached_and_catches_up_from_the_window() {
    let (got, ended) = slow_watcher_case(true).await;
    assert!(!ended);
    assert_eq!(got.len(), 60, "every event once: {got:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stall_resume_a_slow_watcher_is_closed_after_what_it_buffered() {
    let (got, ended) = slow_watcher_case(false).await;
    assert!(ended, "the slow watcher was not closed");
    assert!(got.len() < 60);
    // What it did get is a gap-free run from its start.
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_kubelet_watchers_each_see_only_their_node() {
    const NODES: usize = 10_000;
    let cacher = Cacher::new(
        Arc::new(MemStore::new()),
        CacherConfig::new("pods").with_trigger("spec.nodeName"),
    );
    cacher.wait_ready().await;
    let start = cacher.current_resource_version().await.unwrap();
    let all = Key::collection("pods", None).unwrap();
    let mut watchers = Vec::with_capacity(NODES);
    for n in 0..NODES {
        let opts = ListOptions {
            resource_version: Some(start),
            predicate: SelectionPredicate {
                field: FieldSelector::equals("spec.nodeName", &format!("node-{n}")),
                ..Default::default()
            },
            ..ListOptions::recursive()
        };
        watchers.push(cacher.watch(&all, &opts).await.unwrap());
    }
    assert_eq!(cacher.watcher_count(), NODES);
    // Two pods per node for a sample of nodes, then one moves to another node.
    let sample: Vec<usize> = (0..NODES).step_by(97).collect();
    for &n in &sample {
        for p in 0..2 {
            put(
                &cacher,
                pod("ns", &format!("p-{n}-{p}"), &format!("node-{n}"), 0),
            )
            .await;
        }
    }
    let moved = put(&cacher, pod("ns", "p-0-0", "node-1", 1)).await;
    for &n in &sample {
        let w = &mut watchers[n];
        let mut names = Vec::new();
        for _ in 0..2 {
            match next(w).await {
                Some(WatchEvent::Added(o)) => names.push(o.name().to_owned()),
                other => panic!("node-{n}: {other:?}"),
            }
        }
        assert_eq!(names, [format!("p-{n}-0"), format!("p-{n}-1")]);
    }
    // The move leaves node-0 (DELETED there) and enters node-1 (ADDED there), via the
    // previous and current trigger values.
    match next(&mut watchers[0]).await {
        Some(WatchEvent::Deleted(o)) => assert_eq!(
            (o.name(), o.resource_version()),
            ("p-0-0", moved.resource_version())
        ),
        other => panic!("node-0: {other:?}"),
    }
    match next(&mut watchers[1]).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.name(), "p-0-0"),
        other => panic!("node-1: {other:?}"),
    }
    // A node with no pods got nothing.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), watchers[2].next())
            .await
            .is_err()
    );
}

/// A pod with no `spec.nodeName` at all (pending, unscheduled).
fn unscheduled(ns: &str, name: &str, generation: u64) -> Object {
    let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":ns},
        "spec":{"generation":generation}});
    Object::from_value(v, &fields()).unwrap()
}

/// Schedulers watch `fieldSelector=spec.nodeName=`: pods whose node is unset. With the trigger
/// on, such a watcher sits under the trigger value `""`, and a pod that lacks the field must
/// reach it exactly as a list selects it (an absent field reads as `""`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_node_selector_sees_pods_without_the_field() {
    let cacher = Cacher::new(
        Arc::new(MemStore::new()),
        CacherConfig::new("pods").with_trigger("spec.nodeName"),
    );
    cacher.wait_ready().await;
    let start = cacher.current_resource_version().await.unwrap();
    let all = Key::collection("pods", None).unwrap();
    let pending = SelectionPredicate {
        field: FieldSelector::equals("spec.nodeName", ""),
        ..Default::default()
    };
    let opts = ListOptions {
        resource_version: Some(start),
        predicate: pending.clone(),
        ..ListOptions::recursive()
    };
    let mut w = cacher.watch(&all, &opts).await.unwrap();
    let absent = put(&cacher, unscheduled("ns", "absent", 0)).await;
    let empty = put(&cacher, pod("ns", "empty", "", 0)).await;
    // Scheduling the pod makes it leave the selection.
    let bound = put(&cacher, pod("ns", "absent", "n1", 1)).await;
    let listed = cacher
        .list(
            &all,
            &ListOptions {
                predicate: pending,
                ..ListOptions::recursive()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        listed.items.iter().map(|o| o.name()).collect::<Vec<_>>(),
        ["empty"]
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(match next(&mut w).await {
            Some(WatchEvent::Added(o)) => ("ADDED", o.name().to_owned(), o.resource_version()),
            Some(WatchEvent::Deleted(o)) => ("DELETED", o.name().to_owned(), o.resource_version()),
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(
        got,
        [
            ("ADDED", "absent".to_owned(), absent.resource_version()),
            ("ADDED", "empty".to_owned(), empty.resource_version()),
            ("DELETED", "absent".to_owned(), bound.resource_version()),
        ]
    );
}

/// With stall-and-resume on, a watcher whose buffer is full is detached at once: the
/// dispatcher never waits for it (no budget is spent), the others get every event with no
/// delay, and the stalled one later gets every event too, from the window. The clock is
/// tokio's paused one, so "no delay" is exact: a budget wait would move it.
#[tokio::test(start_paused = true)]
async fn a_full_buffer_detaches_at_once_and_costs_the_others_nothing() {
    let mut config = CacherConfig::new("pods");
    config.max_dispatch_budget = Duration::from_secs(10);
    let cacher = Cacher::new(Arc::new(MemStore::new()), config);
    cacher.wait_ready().await;
    let start = put(&cacher, pod("ns", "a", "n1", 0)).await;
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(start.resource_version()),
        ..ListOptions::recursive()
    };
    let mut stalled = cacher.watch(&all, &opts).await.unwrap();
    let mut healthy = cacher.watch(&all, &opts).await.unwrap();
    let t = tokio::time::Instant::now();
    let mut last = 0;
    for i in 1..=300 {
        last = put(&cacher, pod("ns", "a", "n1", i))
            .await
            .resource_version();
        match next(&mut healthy).await {
            Some(WatchEvent::Modified { object, .. }) => {
                assert_eq!(object.resource_version(), last);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(t.elapsed(), Duration::ZERO, "the dispatcher waited");
    let mut got = Vec::new();
    while got.last() != Some(&last) {
        match next(&mut stalled).await {
            Some(WatchEvent::Modified { object, .. }) => got.push(object.resource_version()),
            other => panic!("after {} events: {other:?}", got.len()),
        }
    }
    assert_eq!(got.len(), 300);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
}
