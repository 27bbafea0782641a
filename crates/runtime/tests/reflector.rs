//! The reflector and informer against an in-process lister-watcher over listwatch-memstore,
//! with scripted faults, under tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use listwatch_api::{LabelSelector, Object};
use listwatch_memstore::MemStore;
use listwatch_runtime::{
    Config, Delta, Error, Event, EventHandler, Informer, InformerConfig, Store, Writer, reflector,
    watcher,
};
use listwatch_storage::Storage;
use tokio::time::Instant;

fn config() -> Config {
    Config::default().page_size(2)
}

/// Runs a reflector in a task; returns its store and a log of its errors.
fn spawn_reflector(
    lw: StorageLw,
    config: Config,
) -> (Store<Object>, Arc<std::sync::Mutex<Vec<String>>>) {
    let writer = Writer::default();
    let store = writer.store();
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let errs = Arc::clone(&errors);
    tokio::spawn(reflector(writer, watcher(lw, config)).for_each(move |d| {
        if let Err(e) = d {
            errs.lock().unwrap().push(e.to_string());
        }
        async {}
    }));
    (store, errors)
}

async fn seeded(n: usize) -> MemStore {
    let store = MemStore::new();
    for i in 0..n {
        create(&store, &format!("p{i}"), "v0").await;
    }
    store
}

#[tokio::test(start_paused = true)]
async fn first_list_pages_at_rv_zero_then_watches_from_the_list_version_with_bookmarks() {
    let backend = seeded(5).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert_eq!(store_state(&store), backend_state(&backend).await);
    let lists = lw.lists();
    assert_eq!(lists[0].resource_version.as_deref(), Some("0"));
    assert_eq!(lists[0].limit, Some(2));
    assert_eq!(lists.len(), 3, "5 objects in pages of 2");
    assert!(
        lists[1..]
            .iter()
            .all(|l| l.continue_token.is_some() && l.resource_version.is_none())
    );
    assert!(eventually(Duration::from_secs(1), || !lw.watches().is_empty()).await);
    let (_, w) = &lw.watches()[0];
    assert_eq!(
        w.resource_version,
        Some(backend.current_revision().to_string())
    );
    assert!(w.allow_bookmarks && !w.send_initial_events);
    let t = w.timeout_seconds.unwrap();
    assert!(
        (300..600).contains(&t),
        "timeout {t} outside [5, 10) minutes"
    );

    let created = create(&backend, "late", "v0").await;
    assert!(
        eventually(Duration::from_secs(5), || store
            .get_by_name(Some("ns"), "late")
            .is_some())
        .await
    );
    assert_eq!(
        store.resource_version(),
        created.resource_version().to_string()
    );
}

/// `consistent_first_list`: the first list asks for no version (a consistent read, never a
/// lagging cache's copy), and the watch goes on from the list's version.
#[tokio::test(start_paused = true)]
async fn a_consistent_first_list_asks_for_no_version() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let config = Config {
        consistent_first_list: true,
        ..config()
    };
    let (store, _) = spawn_reflector(lw.clone(), config);
    store.wait_until_synced().await.unwrap();
    assert_eq!(store_state(&store), backend_state(&backend).await);
    let lists = lw.lists();
    assert_eq!(lists[0].resource_version, None, "{lists:?}");
    assert!(eventually(Duration::from_secs(1), || !lw.watches().is_empty()).await);
    assert_eq!(
        lw.watches()[0].1.resource_version,
        Some(backend.current_revision().to_string())
    );
}

#[tokio::test(start_paused = true)]
async fn expired_watch_relists_from_the_last_version_and_reports_vanished_keys_as_unknown() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(lw.clone(), InformerConfig::default().reflector(config()));
    let mut sub = informer.subscribe();
    informer.wait_until_synced().await.unwrap();
    for _ in 0..3 {
        assert!(matches!(
            sub.next().await,
            Some(Delta::Added {
                in_initial_list: true,
                ..
            })
        ));
    }
    let synced_rv = informer.store().resource_version();

    lw.expire_watches();
    delete(&backend, "p1").await;
    update(&backend, "p2", "v1").await;
    backend.compact(backend.current_revision()).unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        match sub.next().await.unwrap() {
            Delta::Deleted {
                object,
                final_state_unknown,
            } => seen.push(format!("deleted {} {final_state_unknown}", object.name())),
            Delta::Updated { new, .. } => seen.push(format!("updated {}", new.name())),
            other => panic!("unexpected {other:?}"),
        }
    }
    seen.sort();
    assert_eq!(seen, ["deleted p1 true", "updated p2"]);
    assert_eq!(
        store_state(&informer.store()),
        backend_state(&backend).await
    );
    let lists = lw.lists();
    let relist = lists
        .iter()
        .skip_while(|l| l.continue_token.is_some() || l.resource_version.as_deref() == Some("0"))
        .find(|l| l.continue_token.is_none());
    assert_eq!(
        relist.unwrap().resource_version,
        Some(synced_rv),
        "relist from the last version"
    );
}

#[tokio::test(start_paused = true)]
async fn a_list_expired_at_the_last_version_is_retried_at_once_as_a_consistent_read() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(1), || lw.watches().len() == 1).await);
    let last = store.resource_version();
    // The watch dies with 410; the relist at the last version also gets 410.
    lw.fail_lists([Fault::Status(status(410))]);
    lw.expire_watches();
    create(&backend, "new", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 3).await);
    let log = lw.log();
    let lists: Vec<_> = log
        .iter()
        .filter_map(|(t, c)| {
            if let Call::List(l) = c {
                Some((*t, l.clone()))
            } else {
                None
            }
        })
        .collect();
    let i = lists
        .iter()
        .position(|(_, l)| l.resource_version.as_deref() == Some(last.as_str()))
        .unwrap();
    assert_eq!(
        lists[i + 1].1.resource_version,
        None,
        "then a consistent read"
    );
    assert_eq!(lists[i + 1].0, lists[i].0, "at once, no backoff");
    assert!(errors.lock().unwrap().iter().any(|e| e.contains("410")));
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_and_refused_watches_back_off_exponentially_without_relisting() {
    let backend = seeded(1).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([
        Fault::Status(status(429)),
        Fault::Status(status(429)),
        Fault::Refused,
    ]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(60), || lw.watches().len() == 4).await);
    create(&backend, "after", "v").await;
    assert!(eventually(Duration::from_secs(5), || store.len() == 2).await);
    assert_eq!(lw.lists().len(), 1, "no relist");
    let times: Vec<Instant> = lw.watches().iter().map(|(t, _)| *t).collect();
    for (i, base_ms) in [800u64, 1600, 3200].into_iter().enumerate() {
        let gap = times[i + 1] - times[i];
        let base = Duration::from_millis(base_ms);
        // The delay is base × [1, 2); the timer wheel rounds a sleep up to whole
        // milliseconds, so a delay just under 2 × base wakes at 2 × base.
        assert!(
            gap >= base && gap <= base * 2,
            "gap {i} = {gap:?}, base {base:?}"
        );
    }
    assert_eq!(errors.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_watch_closing_at_once_with_no_events_is_an_error_and_relists_after_backoff() {
    let backend = seeded(1).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::EndAfter(0)]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(10), || lw.lists().len() == 2).await);
    assert!(errors.lock().unwrap()[0].contains("very short watch"));
    let log = lw.log();
    let (t_watch, t_relist) = (log[1].0, log[2].0);
    assert!(
        t_relist - t_watch >= Duration::from_millis(800),
        "relist waits for the backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_ending_normally_is_reopened_from_the_last_version_without_relisting() {
    let backend = seeded(1).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::EndAfter(1)]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let o = update(&backend, "p0", "v1").await;
    assert!(eventually(Duration::from_secs(5), || lw.watches().len() == 2).await);
    assert_eq!(
        lw.watches()[1].1.resource_version,
        Some(o.resource_version().to_string())
    );
    assert_eq!(lw.lists().len(), 1);
    let o2 = update(&backend, "p0", "v2").await;
    assert!(
        eventually(Duration::from_secs(5), || store.resource_version()
            == o2.resource_version().to_string())
        .await
    );
    assert!(errors.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_410_on_a_continuation_page_falls_back_to_one_unpaginated_list_at_a_consistent_read() {
    let backend = seeded(5).await;
    let lw = StorageLw::new(backend.clone());
    // Every continuation expires, as when a full walk outlasts the compaction window:
    // restarting the walk would never finish.
    lw.expire_continuations();
    let (store, errors) = spawn_reflector(lw.clone(), config());
    // (Restarting the walk instead loops without a pause until StorageLw's runaway guard
    // stops the reflector, and the store never syncs.)
    store.wait_until_synced().await.unwrap();
    let lists = lw.lists();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists[1].continue_token.is_some());
    assert_eq!(
        (
            lists[2].resource_version.clone(),
            lists[2].limit,
            &lists[2].continue_token
        ),
        (lists[0].resource_version.clone(), None, &None),
        "one unpaginated list at the version the relist asked for"
    );
    assert_eq!(store_state(&store), backend_state(&backend).await);
    assert!(
        errors.lock().unwrap().is_empty(),
        "recovered inside the relist"
    );
}

#[tokio::test(start_paused = true)]
async fn relists_at_the_last_version_are_unpaginated_so_a_watch_cache_can_serve_them() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), Config::default());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(1), || lw.watches().len() == 1).await);
    let synced = store.resource_version();
    lw.expire_watches();
    create(&backend, "p3", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 4).await);
    let lists = lw.lists();
    assert_eq!(
        (lists[0].resource_version.clone(), lists[0].limit),
        (Some("0".to_owned()), Some(500))
    );
    assert_eq!(
        (lists[1].resource_version.clone(), lists[1].limit),
        (Some(synced), None),
        "a relist at a version carries no limit"
    );
}

#[tokio::test(start_paused = true)]
async fn relists_keep_their_pages_when_the_first_list_came_back_paginated_or_a_size_is_set() {
    // 501 objects: the first list at "0" returns a continue token, so the server has no
    // watch cache for this resource (client-go's paginatedResult).
    let backend = seeded(501).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), Config::default());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(1), || lw.watches().len() == 1).await);
    lw.expire_watches();
    create(&backend, "late", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 502).await);
    let relist = lw
        .lists()
        .into_iter()
        .find(|l| l.resource_version.as_deref().is_some_and(|v| v != "0"));
    assert_eq!(relist.unwrap().limit, Some(500));

    // An explicit size (what the cacher sets) pages every list.
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(1), || lw.watches().len() == 1).await);
    lw.expire_watches();
    create(&backend, "late", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 4).await);
    assert!(lw.lists().iter().all(|l| l.limit == Some(2)));
}

#[tokio::test(start_paused = true)]
async fn an_error_event_with_429_backs_off_and_re_watches_without_relisting() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::ErrorAfter(0, status(429))]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    create(&backend, "after", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 3).await);
    let w = lw.watches();
    assert_eq!(w.len(), 2);
    assert!(
        w[1].0 - w[0].0 >= Duration::from_millis(800),
        "after a backoff"
    );
    assert_eq!(
        w[1].1.resource_version, w[0].1.resource_version,
        "from the last version"
    );
    assert_eq!(lw.lists().len(), 1, "no relist");
    assert_eq!(errors.lock().unwrap().len(), 1);
}

/// Red-team C1 of issue 32's work: a watch that delivers an event and then a frame that does
/// not decode must not be reopened at once — the same frame comes back from the same version,
/// and the reflector re-watched ~640 times a second. client-go's StreamWatcher turns such a
/// frame into an ERROR event, which ends ListAndWatch and waits its backoff.
#[tokio::test(start_paused = true)]
async fn a_watch_ending_in_a_frame_that_does_not_decode_re_watches_after_a_backoff() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    // The first two watches each deliver one event, then a frame that does not decode.
    lw.fail_watches([Fault::GarbledAfter(1), Fault::GarbledAfter(1)]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    for name in ["a", "b", "c"] {
        create(&backend, name, "v").await;
    }
    assert!(eventually(Duration::from_secs(120), || store.len() == 5).await);
    let w = lw.watches();
    assert_eq!(
        w.len(),
        3,
        "two garbled watches and the one that delivers the rest"
    );
    for i in [1, 2] {
        let gap = w[i].0 - w[i - 1].0;
        assert!(
            gap >= Duration::from_millis(800),
            "watch {i} was opened {gap:?} after the previous one ended in garbage"
        );
        assert_ne!(
            w[i].1.resource_version,
            w[i - 1].1.resource_version,
            "from the version of the event delivered before the garbage"
        );
    }
    assert_eq!(lw.lists().len(), 1, "no relist");
    let garbled = errors
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.contains("scripted garbage"))
        .count();
    assert_eq!(garbled, 2);
}

#[tokio::test(start_paused = true)]
async fn error_events_with_500_re_watch_until_they_persist_past_the_retry_window_then_relist() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches((0..6).map(|_| Fault::ErrorAfter(0, status(500))));
    let cfg = config().max_internal_error_retry(Duration::from_secs(10));
    let (store, errors) = spawn_reflector(lw.clone(), cfg);
    store.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(300), || lw.watches().len() >= 7).await);
    let log = lw.log();
    // Watches follow each other without a list while the 500s are younger than 10 s;
    // then one relist, then watching resumes.
    let first_watch = log
        .iter()
        .position(|(_, c)| matches!(c, Call::Watch(_)))
        .unwrap();
    let relist = log
        .iter()
        .skip(first_watch)
        .position(|(_, c)| matches!(c, Call::List(_)))
        .map(|i| i + first_watch)
        .expect("a relist once the errors outlast the window");
    let rewatches = log[first_watch..relist]
        .iter()
        .filter(|(_, c)| matches!(c, Call::Watch(_)))
        .count();
    assert!(rewatches >= 2, "re-watched before relisting: {rewatches}");
    assert!(log[relist].0 - log[first_watch].0 >= Duration::from_secs(10));
    create(&backend, "after", "v").await;
    assert!(eventually(Duration::from_secs(300), || store.len() == 3).await);
    assert_eq!(errors.lock().unwrap().len(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_refused_with_410_is_retried_at_once_at_a_consistent_read() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), config().streaming_list(true));
    store.wait_until_synced().await.unwrap();
    // The watch expires; the streaming relist at the last version is refused with 410.
    lw.fail_watches([Fault::Status(status(410))]);
    lw.expire_watches();
    create(&backend, "p2", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 3).await);
    let w = lw.watches();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w[1].1.send_initial_events && w[1].1.resource_version.is_some());
    assert!(w[2].1.send_initial_events, "still a streaming list");
    assert_eq!(w[2].1.resource_version, None, "at \"\"");
    assert_eq!(w[2].0, w[1].0, "at once");
    assert!(lw.lists().is_empty(), "no fallback to a paged list");
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_failing_in_stream_with_410_is_retried_at_once_at_a_consistent_read() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), config().streaming_list(true));
    store.wait_until_synced().await.unwrap();
    // kube-apiserver's cacher opens the watch and sends ERROR 410 for a too-old version.
    lw.fail_watches([Fault::ErrorAfter(0, status(410))]);
    lw.expire_watches();
    create(&backend, "p2", "v").await;
    assert!(eventually(Duration::from_secs(60), || store.len() == 3).await);
    let w = lw.watches();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w[1].1.send_initial_events && w[1].1.resource_version.is_some());
    assert!(w[2].1.send_initial_events, "still a streaming list");
    assert_eq!(w[2].1.resource_version, None, "at \"\"");
    assert_eq!(w[2].0, w[1].0, "at once");
    assert!(lw.lists().is_empty(), "no fallback to a paged list");
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_refused_with_429_backs_off_and_streams_again() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::Status(status(429))]);
    let (store, _) = spawn_reflector(lw.clone(), config().streaming_list(true));
    store.wait_until_synced().await.unwrap();
    let w = lw.watches();
    assert_eq!(w.len(), 2);
    assert!(w.iter().all(|(_, r)| r.send_initial_events));
    assert!(w[1].0 - w[0].0 >= Duration::from_millis(800));
    assert!(lw.lists().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_slow_server_delays_the_sync_but_loses_nothing() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_lists([Fault::Slow(Duration::from_secs(30))]);
    lw.fail_watches([Fault::Slow(Duration::from_secs(30))]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    let start = Instant::now();
    store.wait_until_synced().await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(30));
    update(&backend, "p0", "during the slow watch open").await;
    assert!(
        eventually(Duration::from_secs(60), || store_state(&store)
            .iter()
            .any(|(k, rv)| k == "ns/p0" && *rv == backend.current_revision()))
        .await
    );
    assert!(errors.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_version_without_touching_the_store() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let cfg = config().labels(LabelSelector::parse("app=web").unwrap());
    let mut events = std::pin::pin!(watcher(lw.clone(), cfg));
    let mut got = Vec::new();
    while !matches!(got.last(), Some(Event::InitDone { .. })) {
        got.push(events.next().await.unwrap().unwrap());
    }
    // A write outside the selection: only a bookmark can tell the reflector about it.
    backend
        .create(&key("db"), pod("db", &[("app", "db")], "x"), None)
        .await
        .unwrap();
    let current = backend.current_revision();
    loop {
        match events.next().await.unwrap().unwrap() {
            Event::Bookmark { resource_version } if resource_version == current.to_string() => {
                break;
            }
            Event::Bookmark { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn streaming_list_fills_the_store_and_goes_on_watching_on_the_same_stream() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let (store, _) = spawn_reflector(lw.clone(), config().streaming_list(true));
    store.wait_until_synced().await.unwrap();
    assert_eq!(store_state(&store), backend_state(&backend).await);
    create(&backend, "later", "v").await;
    assert!(eventually(Duration::from_secs(5), || store.len() == 4).await);
    assert!(lw.lists().is_empty());
    let w = lw.watches();
    assert_eq!(w.len(), 1);
    assert!(w[0].1.send_initial_events && w[0].1.allow_bookmarks);
    assert_eq!(
        w[0].1.resource_version_match,
        Some(listwatch_runtime::VersionMatch::NotOlderThan)
    );
}

#[tokio::test(start_paused = true)]
async fn streaming_list_failure_falls_back_to_a_paginated_list() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::Status(status(500))]);
    let (store, errors) = spawn_reflector(lw.clone(), config().streaming_list(true));
    store.wait_until_synced().await.unwrap();
    assert_eq!(store_state(&store), backend_state(&backend).await);
    assert_eq!(lw.lists()[0].resource_version.as_deref(), Some("0"));
    assert_eq!(errors.lock().unwrap().len(), 1);
}

#[derive(Default, Clone)]
struct Recorder(Arc<std::sync::Mutex<Vec<String>>>);

impl EventHandler<Object> for Recorder {
    fn on_add(&mut self, o: &Arc<Object>, initial: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("add {} {initial}", o.name()));
    }
    fn on_update(&mut self, old: &Arc<Object>, new: &Arc<Object>) {
        let what = if Arc::ptr_eq(old, new) {
            "sync"
        } else {
            "update"
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("{what} {}", new.name()));
    }
    fn on_delete(&mut self, o: &Arc<Object>, unknown: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("delete {} {unknown}", o.name()));
    }
}

#[tokio::test(start_paused = true)]
async fn subscribers_share_one_reflector_and_a_late_one_first_gets_the_current_state() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(lw.clone(), InformerConfig::default().reflector(config()));
    let early = Recorder::default();
    informer.add_handler(early.clone());
    informer.wait_until_synced().await.unwrap();
    update(&backend, "p0", "v1").await;
    assert!(
        eventually(Duration::from_secs(5), || early.0.lock().unwrap().len()
            == 3)
        .await
    );

    let late = Recorder::default();
    informer.add_handler(late.clone());
    delete(&backend, "p1").await;
    assert!(eventually(Duration::from_secs(5), || late.0.lock().unwrap().len() == 3).await);
    let mut l = late.0.lock().unwrap().clone();
    l[..2].sort();
    assert_eq!(l, ["add p0 true", "add p1 true", "delete p1 false"]);
    let mut e = early.0.lock().unwrap().clone();
    e[..2].sort();
    assert_eq!(
        e,
        ["add p0 true", "add p1 true", "update p0", "delete p1 false"]
    );
    assert_eq!(lw.lists().len(), 1, "one reflector for both");
}

#[tokio::test(start_paused = true)]
async fn resync_redelivers_every_object_on_its_period() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(
        lw,
        InformerConfig::default()
            .reflector(config())
            .resync_period(Duration::from_secs(30)),
    );
    let rec = Recorder::default();
    informer.add_handler(rec.clone());
    informer.wait_until_synced().await.unwrap();
    let start = Instant::now();
    assert!(
        eventually(Duration::from_secs(120), || rec.0.lock().unwrap().len()
            == 6)
        .await
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(61),
        "{elapsed:?}"
    );
    let r = rec.0.lock().unwrap();
    assert_eq!(
        r.iter().filter(|s| s.starts_with("sync")).count(),
        4,
        "{r:?}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Update(u8),
    Delete(u8),
    Expire,
    Compact,
    FailNextList(u16),
    FailNextWatch(u16),
    RefuseNextWatch,
    DropNextWatchAfter(u8),
    ErrorNextWatchAfter(u8, u16),
    SlowNextList(u8),
    Sleep(u16),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..8).prop_map(Op::Create),
        4 => (0u8..8).prop_map(Op::Update),
        3 => (0u8..8).prop_map(Op::Delete),
        1 => Just(Op::Expire),
        1 => Just(Op::Compact),
        1 => prop::sample::select(vec![410u16, 429, 500, 504]).prop_map(Op::FailNextList),
        1 => prop::sample::select(vec![410u16, 429, 500]).prop_map(Op::FailNextWatch),
        1 => Just(Op::RefuseNextWatch),
        1 => (0u8..4).prop_map(Op::DropNextWatchAfter),
        1 => (0u8..4, prop::sample::select(vec![410u16, 429, 500]))
            .prop_map(|(n, c)| Op::ErrorNextWatchAfter(n, c)),
        1 => (1u8..20).prop_map(Op::SlowNextList),
        2 => (0u16..3000).prop_map(Op::Sleep),
    ]
}

async fn run_ops(ops: Vec<Op>, streaming: bool) {
    let backend = MemStore::new();
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(
        lw.clone(),
        InformerConfig::default().reflector(config().streaming_list(streaming)),
    );
    let mut sub = informer.subscribe();
    let mut model = BTreeMap::new();
    for op in ops {
        match op {
            Op::Create(i) => {
                let _ = backend
                    .create(
                        &key(&format!("k{i}")),
                        pod(&format!("k{i}"), &[], "0"),
                        None,
                    )
                    .await;
            }
            Op::Update(i) => {
                let name = format!("k{i}");
                let new = pod(&name, &[], &format!("{}", backend.current_revision()));
                let _ = backend
                    .guaranteed_update(
                        &key(&name),
                        None,
                        false,
                        &mut |_| Ok(new.clone().into()),
                        None,
                    )
                    .await;
            }
            Op::Delete(i) => {
                let _ = backend
                    .delete(
                        &key(&format!("k{i}")),
                        None,
                        listwatch_storage::no_validation(),
                        None,
                    )
                    .await;
            }
            Op::Expire => lw.expire_watches(),
            Op::Compact => backend.compact(backend.current_revision()).unwrap(),
            Op::FailNextList(code) => lw.fail_lists([Fault::Status(status(code))]),
            Op::FailNextWatch(code) => lw.fail_watches([Fault::Status(status(code))]),
            Op::RefuseNextWatch => lw.fail_watches([Fault::Refused]),
            Op::DropNextWatchAfter(n) => lw.fail_watches([Fault::EndAfter(n.into())]),
            Op::ErrorNextWatchAfter(n, code) => {
                lw.fail_watches([Fault::ErrorAfter(n.into(), status(code))]);
            }
            Op::SlowNextList(s) => lw.fail_lists([Fault::Slow(Duration::from_secs(s.into()))]),
            Op::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms.into())).await,
        }
        // Drain what the informer delivered so far.
        while let Some(Some(d)) = futures::FutureExt::now_or_never(sub.next()) {
            replay(&mut model, &d);
        }
    }
    let want = backend_state(&backend).await;
    let revision = backend.current_revision();
    let store = informer.store();
    // Converged means caught up with the backend's last revision, not merely equal to it:
    // a reflector still behind (in a backoff, before a relist) can hold a state that happens
    // to equal the final one, and then apply the writes it has yet to see.
    let converged = eventually(Duration::from_secs(600), || {
        store.has_synced()
            && store
                .resource_version()
                .parse::<u64>()
                .is_ok_and(|v| v >= revision)
            && store_state(&store) == want
    })
    .await;
    assert!(
        converged,
        "store {:?} at {} != backend {want:?} at {revision}",
        store_state(&store),
        store.resource_version()
    );
    // Every change the store made has been handed to the subscription: drain it until
    // nothing more comes (the runtime is idle when the virtual timeout fires).
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
        replay(&mut model, &d);
    }
    let seen: Vec<(String, u64)> = model.into_iter().collect();
    assert_eq!(
        seen, want,
        "handler sequence does not replay to the backend's state"
    );
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Runs `ops` in both streaming modes, `times` times each: the reflector's jitter, the
/// random watch timeouts and hash-map orders change the interleaving from run to run.
fn run_both_modes(ops: &[Op], times: usize) {
    for streaming in [false, true] {
        for _ in 0..times {
            paused_runtime().block_on(run_ops(ops.to_vec(), streaming));
        }
    }
}

/// The failure of the property test seen on main (its `cc c53f59…` line in
/// reflector.proptest-regressions; this is the whole shrunk case, streaming mode).
/// The streaming-list informer had not yet seen `Create(2)` when the test compared its store
/// with the backend, so the store held the final state by coincidence; the test then took
/// that for convergence, and the handlers' view, read a second later, held `Added k2` with
/// the deletion still to come. Convergence now also requires the backend's last revision.
#[test]
fn regression_a_store_equal_to_the_backend_before_catching_up_is_not_converged() {
    use Op::*;
    run_both_modes(
        &[
            DropNextWatchAfter(3),
            Create(0),
            Sleep(28),
            FailNextWatch(410),
            Create(2),
            Delete(2),
            FailNextList(500),
            SlowNextList(10),
            Update(7),
        ],
        16,
    );
}

/// The same race found again with `PROPTEST_CASES=20000`, shrunk by proptest: the store
/// equalled the final state while k3's creation, update and deletion were still unseen.
#[test]
fn regression_k3_created_updated_and_deleted_behind_a_refused_watch() {
    use Op::*;
    run_both_modes(
        &[
            SlowNextList(15),
            Sleep(1919),
            Expire,
            Compact,
            Update(1),
            Create(6),
            Delete(1),
            Sleep(682),
            Create(2),
            Update(6),
            DropNextWatchAfter(3),
            RefuseNextWatch,
            Sleep(1935),
            DropNextWatchAfter(2),
            Create(3),
            RefuseNextWatch,
            Delete(1),
            Sleep(173),
            Update(7),
            Update(0),
            Update(1),
            Update(3),
            Delete(7),
            Sleep(312),
            Delete(3),
            Update(7),
            FailNextWatch(500),
        ],
        16,
    );
}

proptest::proptest! {
    // Failures are saved beside this file (tests/reflector.proptest-regressions) and re-run
    // first; the default location needs a lib.rs or main.rs, which tests/ does not have.
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..Default::default()
    })]

    #[test]
    fn random_writes_and_faults_end_with_the_store_equal_to_the_backend(
        ops in proptest::collection::vec(op(), 1..60),
        streaming in proptest::bool::ANY,
    ) {
        paused_runtime().block_on(run_ops(ops, streaming));
    }
}

#[test]
fn error_predicates_cover_the_scripted_statuses() {
    assert!(Error::Api(status(410)).is_expired());
    assert!(Error::Api(status(504)).is_too_large_resource_version());
    assert!(Error::Api(status(429)).is_retriable_with_backoff());
}

#[tokio::test(start_paused = true)]
async fn the_reflector_type_runs_into_its_store_until_dropped() {
    let backend = seeded(3).await;
    let lw = StorageLw::new(backend.clone());
    let r = listwatch_runtime::Reflector::new(lw.clone(), config());
    let store = r.store();
    let task = tokio::spawn(r.run());
    store.wait_until_synced().await.unwrap();
    assert_eq!(store_state(&store), backend_state(&backend).await);
    task.abort();
    let _ = task.await;
    update(&backend, "p0", "after stop").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_ne!(
        store_state(&store),
        backend_state(&backend).await,
        "a stopped reflector no longer follows"
    );
}

#[derive(Clone, serde::Deserialize)]
struct MyPod {
    metadata: listwatch_api::ObjectMeta,
    spec: MySpec,
}

#[derive(Clone, serde::Deserialize)]
struct MySpec {
    payload: String,
}

impl listwatch_runtime::HasMetadata for MyPod {
    type Metadata = listwatch_api::ObjectMeta;
    fn metadata(&self) -> &listwatch_api::ObjectMeta {
        &self.metadata
    }
}

#[tokio::test(start_paused = true)]
async fn a_typed_store_follows_the_backend_through_serde() {
    let backend = seeded(2).await;
    let lw = listwatch_runtime::Typed::<_, MyPod>::new(StorageLw::new(backend.clone()));
    let r = listwatch_runtime::Reflector::new(lw, config());
    let pods: Store<MyPod> = r.store();
    tokio::spawn(r.run());
    pods.wait_until_synced().await.unwrap();
    let o = update(&backend, "p1", "typed").await;
    assert!(
        eventually(Duration::from_secs(5), || pods
            .get_by_name(Some("ns"), "p1")
            .is_some_and(|p| p.spec.payload == "typed"))
        .await
    );
    let p1 = pods.get_by_name(Some("ns"), "p1").unwrap();
    assert_eq!(
        p1.metadata.resource_version.as_deref(),
        Some(o.resource_version().to_string().as_str())
    );
}

/// A `Retry-After` (here a day, as a misbehaving proxy might send) is honoured only up to the
/// reflector's own backoff cap (`Config::max_backoff`, 30 s).
#[tokio::test(start_paused = true)]
async fn a_retry_hint_of_a_day_is_capped_at_the_longest_backoff() {
    let backend = seeded(1).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_watches([Fault::Status(Box::new(
        (*status(429)).with_retry_after(86_400),
    ))]);
    let (store, errors) = spawn_reflector(lw.clone(), config());
    store.wait_until_synced().await.unwrap();
    assert!(
        eventually(Duration::from_secs(600), || lw.watches().len() == 2).await,
        "no second watch within 10 minutes of a 429 with retryAfterSeconds=86400"
    );
    let times: Vec<Instant> = lw.watches().iter().map(|(t, _)| *t).collect();
    let gap = times[1] - times[0];
    let cap = Config::default().max_backoff;
    assert!(
        gap >= cap && gap <= cap + Duration::from_millis(1),
        "{gap:?}"
    );
    assert_eq!(errors.lock().unwrap().len(), 1);
}

#[derive(Clone, Debug, serde::Deserialize)]
struct StrictPod {
    metadata: listwatch_api::ObjectMeta,
    #[allow(dead_code)]
    spec: StrictSpec,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct StrictSpec {
    #[allow(dead_code)]
    payload: String,
}

impl listwatch_runtime::HasMetadata for StrictPod {
    type Metadata = listwatch_api::ObjectMeta;
    fn metadata(&self) -> &listwatch_api::ObjectMeta {
        &self.metadata
    }
}

/// A pod whose `spec.payload` is a number: it does not decode into `StrictPod`.
async fn create_undecodable(store: &MemStore, name: &str) {
    let o = Object::from_value(
        serde_json::json!({"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":name,"namespace":"ns"},"spec":{"payload":5}}),
        &listwatch_api::SelectableFields::none(),
    )
    .unwrap();
    store.create(&key(name), o, None).await.unwrap();
}

/// One object that does not decode into the type in the list: the list fails as a whole
/// (as client-go and kube-rs; going on without it would make a relist delete it from the
/// store), is reported by key, and is retried after a backoff; the store never commits a
/// list without it.
#[tokio::test(start_paused = true)]
async fn one_undecodable_object_fails_the_list_as_a_whole_and_is_retried() {
    let backend = seeded(2).await;
    create_undecodable(&backend, "bad").await;
    let lw = StorageLw::new(backend.clone());
    let writer = Writer::<StrictPod>::default();
    let store = writer.store();
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let errs = Arc::clone(&errors);
    tokio::spawn(
        reflector(
            writer,
            watcher(
                listwatch_runtime::Typed::<_, StrictPod>::new(lw.clone()),
                config(),
            ),
        )
        .for_each(move |d| {
            if let Err(e) = d {
                errs.lock().unwrap().push(e.to_string());
            }
            async {}
        }),
    );
    let synced = tokio::time::timeout(
        Duration::from_secs(600),
        store.wait_until_synced_ignoring_failures(),
    )
    .await;
    assert!(synced.is_err(), "a list without ns/bad was committed");
    // Persistent, so the plain wait fails instead of hanging (rtcl2 M1).
    assert!(matches!(
        store.wait_until_synced().await,
        Err(listwatch_runtime::SyncError::Fatal(_))
    ));
    assert_eq!(store.len(), 0);
    let errors = errors.lock().unwrap().clone();
    assert!(errors.len() >= 2, "the list was not retried: {errors:?}");
    assert!(errors.iter().all(|e| e.contains("ns/bad ")), "{errors:?}");
    assert!(lw.lists().len() >= 2, "the list was not retried");
    assert_eq!(lw.watches().len(), 0, "a watch opened after a failed list");
}

/// A server that ignores sendInitialEvents (a plain watch: no state, no bookmark): the first
/// streaming list falls back to a list after `streaming_list_idle`, not after the watch's
/// 5–10 minute idle deadline, and later relists list at once without asking again.
#[tokio::test(start_paused = true)]
async fn a_server_ignoring_send_initial_events_costs_one_short_wait_then_plain_lists() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.ignore_initial_events();
    let start = Instant::now();
    let (store, _errors) = spawn_reflector(lw.clone(), config().streaming_list(true));
    let synced = tokio::time::timeout(Duration::from_secs(3600), store.wait_until_synced()).await;
    assert!(matches!(synced, Ok(Ok(()))));
    let waited = start.elapsed();
    let limit = Config::default().streaming_list_idle;
    assert!(
        waited <= limit + Duration::from_secs(1),
        "synced only after {waited:?} (streaming_list_idle is {limit:?})"
    );
    assert_eq!(store.len(), 2);
    // A relist (the watch expires): a plain list at once, no second streaming list.
    let streaming = |lw: &StorageLw| {
        lw.watches()
            .iter()
            .filter(|(_, w)| w.send_initial_events)
            .count()
    };
    let lists_before = lw.lists().len();
    lw.expire_watches();
    assert!(eventually(Duration::from_secs(60), || lw.lists().len() > lists_before).await);
    assert_eq!(streaming(&lw), 1, "asked for a streaming list again");
}

/// A server that ignores sendInitialEvents on a busy resource: its watch streams changes
/// (MODIFIED) from the start, more often than `streaming_list_idle`, so the idle fallback
/// never fires. A compliant server sends only ADDED before the initial-events-end bookmark, so
/// the first MODIFIED or DELETED there shows the server streams changes, not a list: the
/// reflector lists at once and keeps to plain lists.
#[tokio::test(start_paused = true)]
async fn a_server_ignoring_send_initial_events_under_constant_change_falls_back_at_its_first_change()
 {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.ignore_initial_events();
    // A change every 10 s, a third of streaming_list_idle, until the test ends.
    let writer = {
        let backend = backend.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                tokio::time::sleep(Duration::from_secs(10)).await;
                update(&backend, "p0", &format!("w{i}")).await;
            }
        })
    };
    let start = Instant::now();
    let (store, _errors) = spawn_reflector(lw.clone(), config().streaming_list(true));
    let synced = tokio::time::timeout(Duration::from_secs(3600), store.wait_until_synced()).await;
    let waited = start.elapsed();
    writer.abort();
    assert!(
        matches!(synced, Ok(Ok(()))),
        "not synced within an hour of changes every 10 s ({} watches, {} lists)",
        lw.watches().len(),
        lw.lists().len()
    );
    assert!(
        waited <= Duration::from_secs(11),
        "synced only after {waited:?}: the first change (at 10 s) did not end the streaming list"
    );
    assert_eq!(store.len(), 2);
    let streaming = lw
        .watches()
        .iter()
        .filter(|(_, w)| w.send_initial_events)
        .count();
    assert_eq!(streaming, 1, "asked for a streaming list again");
}
