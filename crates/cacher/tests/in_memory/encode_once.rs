//! Each event is encoded once per format however many watchers send it: live, and when
//! replayed from the window by watches that start from an old version, together or one
//! after another. This file holds a single test because the encode counter is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields, wire_encode_count};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent, WatchStream};

const WATCHERS: usize = 1000;
const EVENTS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_encode_per_event_and_format_live_and_replayed() {
    live_fan_out_with_a_thousand_watchers().await;
    replays_share_one_encoding_per_event_and_format().await;
    replays_beyond_the_budget_keep_sharing_the_newest_events().await;
    state_replays_share_one_encoding_per_object_and_format().await;
}

async fn live_fan_out_with_a_thousand_watchers() {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let key = Key::object("pods", Some("ns"), "big").unwrap();
    let pod = |i: u64| {
        let v = serde_json::json!({"kind":"Pod","metadata":{"name":"big","namespace":"ns"},"spec":{"i":i}});
        Object::from_value(v, &SelectableFields::none()).unwrap()
    };
    let first = cacher.create(&key, pod(0), None).await.unwrap();
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(first.resource_version()),
        ..ListOptions::recursive()
    };
    let (mut eager, mut stalled) = (Vec::new(), Vec::new());
    // Half the watchers do not read until every write is done: they fill their buffers, are
    // detached and catch up from the window, which must reuse the same encodings.
    let (go, _) = tokio::sync::watch::channel(false);
    for i in 0..WATCHERS {
        let mut w = cacher.watch(&all, &opts).await.unwrap();
        let mut go = go.subscribe();
        let task = tokio::spawn(async move {
            if i % 2 == 0 {
                go.wait_for(|g| *g).await.unwrap();
            }
            let mut bytes = 0usize;
            for _ in 0..EVENTS {
                match tokio::time::timeout(Duration::from_secs(30), w.next()).await {
                    // What the HTTP layer does with each event: take its wire bytes.
                    Ok(Some(WatchEvent::Modified { object, .. })) => {
                        bytes += object.to_json_bytes().len()
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            bytes
        });
        if i % 2 == 0 {
            stalled.push(task)
        } else {
            eager.push(task)
        }
    }
    let before = wire_encode_count();
    for i in 1..=EVENTS {
        let o = pod(i);
        let mut update = |_: Option<&Object>| Ok(o.clone().into());
        cacher
            .guaranteed_update(&key, None, false, &mut update, None)
            .await
            .unwrap();
    }
    // Once the eager half has everything, the dispatcher is past every event: the stalled
    // half has been detached by then and must catch up from the window.
    for t in eager {
        assert!(t.await.unwrap() > 0);
    }
    assert!(cacher.watcher_count() < WATCHERS, "no watcher was detached");
    go.send_replace(true);
    for t in stalled {
        assert!(t.await.unwrap() > 0);
    }
    let encodes = wire_encode_count() - before;
    assert_eq!(
        encodes, EVENTS,
        "{WATCHERS} watchers × {EVENTS} events took {encodes} encodes"
    );
}

/// Events written while nobody watches: more than the dispatcher once kept forms for (1 024).
const BACKLOG: u64 = 3000;
/// Watches replaying the whole backlog at once, then one after another.
const TOGETHER: usize = 20;
const IN_TURN: usize = 3;

/// Encodings of the second format (what the HTTP layer's Table or metadata-only encoders do
/// through `Object::shared_encoding`).
static OTHER_FORMAT: AtomicU64 = AtomicU64::new(0);
const OTHER_FORMAT_KEY: u64 = 7;

/// Reads the whole backlog as the HTTP layer would, in both formats; returns the bytes sent.
async fn replay(mut w: WatchStream) -> usize {
    let mut bytes = 0;
    for _ in 0..BACKLOG {
        match tokio::time::timeout(Duration::from_secs(60), w.next()).await {
            Ok(Some(WatchEvent::Added(object))) => {
                bytes += object.to_json_bytes().len();
                let other = object.shared_encoding(OTHER_FORMAT_KEY, |o| {
                    OTHER_FORMAT.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, ()>(bytes::Bytes::from(o.name().to_owned()))
                });
                bytes += other.unwrap().len();
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    bytes
}

/// A cacher holding the `BACKLOG` configmaps, written while nobody watches, and the version
/// just before them; `budget` bounds the kept encodings (`None`: the default).
async fn backlog(budget: Option<usize>) -> (Cacher, u64) {
    let mut config =
        CacherConfig::new("configmaps").with_watch_cache(|c| c.with_capacity(4096, 4096, 4096));
    if let Some(b) = budget {
        config.replay_encoding_budget = b;
    }
    let cacher = Cacher::new(Arc::new(MemStore::new()), config);
    cacher.wait_ready().await;
    let mut start = 0;
    for i in 0..BACKLOG {
        let key = Key::object("configmaps", Some("ns"), &format!("cm-{i}")).unwrap();
        let v = serde_json::json!({"kind":"ConfigMap","metadata":{"name":format!("cm-{i}"),"namespace":"ns"},"data":{"i":i.to_string()}});
        let o = Object::from_value(v, &SelectableFields::none()).unwrap();
        let created = cacher.create(&key, o, None).await.unwrap();
        if i == 0 {
            start = created.resource_version() - 1;
        }
    }
    (cacher, start)
}

async fn replays_share_one_encoding_per_event_and_format() {
    let (cacher, start) = backlog(None).await;
    let all = Key::collection("configmaps", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(start),
        ..ListOptions::recursive()
    };
    let (json_before, other_before) = (wire_encode_count(), OTHER_FORMAT.load(Ordering::Relaxed));
    let mut together = Vec::new();
    for _ in 0..TOGETHER {
        let w = cacher.watch(&all, &opts).await.unwrap();
        together.push(tokio::spawn(replay(w)));
    }
    for t in together {
        assert!(t.await.unwrap() > 0);
    }
    let json = wire_encode_count() - json_before;
    let other = OTHER_FORMAT.load(Ordering::Relaxed) - other_before;
    // JSON is encoded under a once-cell: exactly once per event. Other formats are lock-free
    // (`Object::shared_encoding`): watches that read an event at the same instant may both
    // encode it and one result is kept (CI saw 3 001 for 3 000 once, under load 19, and a
    // later run 3 371), so the concurrent phase is bounded, not exact: under twice the
    // events, where without sharing it took 12 431.
    assert_eq!(
        json, BACKLOG,
        "{TOGETHER} concurrent replays took {json} JSON encodings"
    );
    assert!(
        (BACKLOG..2 * BACKLOG).contains(&other),
        "{TOGETHER} concurrent replays took {other} other encodings"
    );
    // Replays one after another race with no one: they share everything, exactly.
    let (json_before, other_before) = (wire_encode_count(), OTHER_FORMAT.load(Ordering::Relaxed));
    for _ in 0..IN_TURN {
        let w = cacher.watch(&all, &opts).await.unwrap();
        assert!(replay(w).await > 0);
    }
    let json = wire_encode_count() - json_before;
    let other = OTHER_FORMAT.load(Ordering::Relaxed) - other_before;
    assert_eq!(
        (json, other),
        (0, 0),
        "{IN_TURN} later replays of {BACKLOG} events took {json} JSON and {other} other encodings"
    );
}

/// With a budget that keeps the encodings of only part of the backlog, replays one after
/// another still share that part: each rebuilds only the events older than what is kept.
/// Before the ring kept the newest events first, each replay's rebuilt forms (its oldest
/// events) pushed out the forms of the very events it read next, so every replay encoded
/// all of them again (3 000 of 3 000).
async fn replays_beyond_the_budget_keep_sharing_the_newest_events() {
    // About a third of the backlog's forms (a form is charged ~0.5 KB here).
    let (cacher, start) = backlog(Some(500 << 10)).await;
    let all = Key::collection("configmaps", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(start),
        ..ListOptions::recursive()
    };
    let mut per_replay = Vec::new();
    for _ in 0..IN_TURN {
        let before = wire_encode_count();
        let w = cacher.watch(&all, &opts).await.unwrap();
        assert!(replay(w).await > 0);
        per_replay.push(wire_encode_count() - before);
    }
    // The first replay encodes every event once; the later ones only the part the budget
    // does not keep, the same part each time.
    assert_eq!(per_replay[0], BACKLOG, "{per_replay:?}");
    let later = per_replay[1];
    assert!(
        later > 0 && later <= BACKLOG - BACKLOG / 10,
        "later replays took {per_replay:?} encodings of {BACKLOG} events"
    );
    assert!(
        per_replay[1..].iter().all(|n| *n == later),
        "{per_replay:?}"
    );
}

/// Watches from the cache's state (`resourceVersion=0`) replaying the same objects at once
/// share one encoding per object and format (the stored object's replay encoding, held
/// weakly): before, each watcher encoded each object again (red-team 2a: 400 Table watches
/// of one large object took 400 encodings).
async fn state_replays_share_one_encoding_per_object_and_format() {
    const OBJECTS: u64 = 10;
    const WATCHES: usize = 50;
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("secrets"));
    cacher.wait_ready().await;
    for i in 0..OBJECTS {
        let key = Key::object("secrets", Some("ns"), &format!("s-{i}")).unwrap();
        let v = serde_json::json!({"kind":"Secret","metadata":{"name":format!("s-{i}"),"namespace":"ns"}});
        let o = Object::from_value(v, &SelectableFields::none()).unwrap();
        cacher.create(&key, o, None).await.unwrap();
    }
    let all = Key::collection("secrets", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(0),
        ..ListOptions::recursive()
    };
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        watches.push(cacher.watch(&all, &opts).await.unwrap());
    }
    let (json_before, other_before) = (wire_encode_count(), OTHER_FORMAT.load(Ordering::Relaxed));
    let readers: Vec<_> = watches
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..OBJECTS {
                    match tokio::time::timeout(Duration::from_secs(30), w.next()).await {
                        Ok(Some(WatchEvent::Added(object))) => {
                            let other = object.shared_encoding(OTHER_FORMAT_KEY, |o| {
                                OTHER_FORMAT.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, ()>(bytes::Bytes::from(o.name().to_owned()))
                            });
                            assert!(!object.to_json_bytes().is_empty() && other.is_ok());
                            // Held until every reader is done, as a slow replay would.
                            got.push(object);
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                got
            })
        })
        .collect();
    let mut held = Vec::new();
    for r in readers {
        held.push(r.await.unwrap());
    }
    let json = wire_encode_count() - json_before;
    let other = OTHER_FORMAT.load(Ordering::Relaxed) - other_before;
    eprintln!("state replays: {json} JSON, {other} other encodings");
    // Bounded, not exact: replays that start at the same moment may each attach the
    // replay's shared slot to an object before seeing the other's (a CI run saw 14 JSON
    // encodings for 10 objects); without the sharing it is one per replay per object (500).
    assert!(
        (OBJECTS..3 * OBJECTS).contains(&json),
        "{WATCHES} state replays of {OBJECTS} objects took {json} JSON encodings"
    );
    assert!(
        other < 3 * OBJECTS,
        "{WATCHES} state replays of {OBJECTS} objects took {other} other encodings"
    );
    drop(held);
}
