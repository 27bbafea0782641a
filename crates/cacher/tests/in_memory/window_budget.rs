//! A window squeezed by its byte budget (`Config::window_byte_budget`, the apiserver's
//! `--watch-cache-window-bytes`) under watchers: "exactly once or told". A slow watcher whose
//! position left the squeezed window delivers every event up to where it stalled, in order
//! and with no gap, then 410 Expired; a watch from a version squeezed out is Expired at once.
//! The squeeze shows in the metrics, and the accounted history stays within the budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::{fields, next, put};
use listwatch_api::Object;
use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use prometheus_client::registry::Registry;

/// About 4 KiB of JSON per version.
fn big(name: &str, generation: u64) -> Object {
    let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":"ns"},
        "spec":{"nodeName":"n1","generation":generation,"blob":"x".repeat(4096)}});
    Object::from_value(v, &fields()).unwrap()
}

/// The value of the sample `series` (name and labels, as encoded) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

const BUDGET: usize = 64 << 10;
const WRITES: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_behind_a_squeezed_window_gets_every_event_then_expired() {
    let mut registry = Registry::default();
    let metrics = CacherMetrics::register(&mut registry);
    let config = CacherConfig::new("pods")
        .with_metrics(metrics)
        .with_watch_cache(|c| c.with_window_byte_budget(Some(BUDGET)));
    let cacher = Cacher::new(Arc::new(MemStore::new()), config);
    cacher.wait_ready().await;
    let first = put(&cacher, big("p0", 0)).await.resource_version();
    cacher.wait_until_fresh(first).await.unwrap();
    let all = Key::collection("pods", None).unwrap();
    let from = |rv| ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    };
    // Registered now, read only after the writes: its buffer fills, it is detached, and the
    // window is squeezed far past where it stalled.
    let mut slow = cacher.watch(&all, &from(first)).await.unwrap();
    let mut written = Vec::new();
    for i in 1..=WRITES {
        let o = put(&cacher, big(&format!("p{}", i % 8), i)).await;
        written.push(o.resource_version());
    }
    let last = *written.last().unwrap();
    cacher.wait_until_fresh(last).await.unwrap();

    // Exactly once or told: a gap-free prefix of the writes, then Expired, then the end.
    let mut delivered = Vec::new();
    let told = loop {
        match next(&mut slow).await {
            Some(WatchEvent::Error(e)) => break e,
            Some(ev) => delivered.push(ev.resource_version().unwrap()),
            None => panic!("the watch ended untold after {} events", delivered.len()),
        }
    };
    assert!(told.is_expired(), "{told:?}");
    assert!(
        delivered.len() < written.len(),
        "the squeeze did not reach the slow watcher"
    );
    assert_eq!(
        delivered,
        written[..delivered.len()],
        "the slow watcher's events are not the writes' prefix"
    );
    assert!(next(&mut slow).await.is_none(), "events after Expired");

    // A watch from a version squeezed out is Expired (at once, or as its first event).
    match cacher.watch(&all, &from(first)).await {
        Err(e) => assert!(e.is_expired(), "{e:?}"),
        Ok(mut w) => match next(&mut w).await {
            Some(WatchEvent::Error(e)) => assert!(e.is_expired(), "{e:?}"),
            other => panic!("a watch from {first} got {other:?}"),
        },
    }
    // From the newest version it is served.
    let mut current = cacher.watch(&all, &from(last)).await.unwrap();
    let o = put(&cacher, big("p0", WRITES + 1)).await;
    match next(&mut current).await {
        Some(WatchEvent::Modified { object, .. }) => {
            assert_eq!(object.resource_version(), o.resource_version());
        }
        other => panic!("{other:?}"),
    }

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let window = sample(
        &text,
        r#"listwatch_watch_cache_memory_bytes{resource="pods",part="window"}"#,
    );
    let snapshots = sample(
        &text,
        r#"listwatch_watch_cache_memory_bytes{resource="pods",part="snapshots"}"#,
    );
    assert!(
        window + snapshots <= BUDGET as f64,
        "history {window} + {snapshots} B over {BUDGET}"
    );
    let squeezed = sample(
        &text,
        r#"listwatch_watch_cache_events_evicted_total{resource="pods",reason="budget"}"#,
    );
    assert!(squeezed > 0.0, "{text}");
    assert_eq!(
        sample(
            &text,
            r#"listwatch_watch_cache_window_budget_bytes{resource="pods"}"#
        ),
        BUDGET as f64
    );
}
