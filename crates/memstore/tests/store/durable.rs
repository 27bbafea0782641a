//! The durable store (`MemStore::open`): restarts keep revisions and history; damage a crash
//! can cause (a torn or truncated last record) is dropped, other damage refuses to start; a
//! full disk stops writes without losing or exposing anything; fresh stores never reuse
//! versions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig, OpenError};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, Storage, WatchEvent};

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

fn pod(name: &str, n: u64, pad: usize) -> Object {
    let v = serde_json::json!({"metadata":{"name":name,"namespace":"ns"},
        "spec":{"nodeName":format!("node-{n}"),"pad":"x".repeat(pad)}});
    Object::from_value(v, &fields()).unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

/// A temporary directory with the mode a data directory needs (others: no access).
fn tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn small() -> MemStoreConfig {
    MemStoreConfig {
        segment_bytes: 64 << 10,
        snapshot_min_log_bytes: 64 << 10,
        ..MemStoreConfig::default()
    }
}

async fn put(store: &MemStore, name: &str, n: u64) -> u64 {
    let obj = pod(name, n, 100);
    let mut update = |_: Option<&Object>| Ok(obj.clone().into());
    store
        .guaranteed_update(&key(name), None, true, &mut update, None)
        .await
        .unwrap()
        .resource_version()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// Offset just past the last non-zero byte of a file.
fn data_end(path: &Path) -> usize {
    let data = std::fs::read(path).unwrap();
    data.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_revisions_history_and_selectable_fields() {
    let dir = tempdir();
    let (revs, first) = {
        let store = MemStore::open(dir.path(), small()).unwrap();
        assert!(store.is_durable());
        let first = store.current_revision();
        let mut revs = Vec::new();
        for i in 0..50 {
            revs.push(put(&store, &format!("p{}", i % 10), i).await);
        }
        store
            .delete(&key("p3"), None, listwatch_storage::no_validation(), None)
            .await
            .unwrap();
        (revs, first)
    };
    let store = MemStore::open(dir.path(), small()).unwrap();
    let last = *revs.last().unwrap() + 1;
    assert_eq!(store.current_revision(), last, "revision after restart");
    assert_eq!(store.compacted_revision(), first);
    let all = Key::collection("pods", None).unwrap();
    let now = store.list(&all, &ListOptions::recursive()).await.unwrap();
    assert_eq!(now.items.len(), 9);
    // History: the state at an old revision, and a watch replaying from it.
    let at = revs[12];
    let then = store
        .list(
            &all,
            &ListOptions::recursive().at(Some(at), Some(ResourceVersionMatch::Exact)),
        )
        .await
        .unwrap();
    assert_eq!(then.items.len(), 10);
    let by_node = ListOptions {
        predicate: listwatch_storage::SelectionPredicate {
            field: "spec.nodeName=node-49".parse().unwrap(),
            ..Default::default()
        },
        ..ListOptions::recursive()
    };
    assert_eq!(store.list(&all, &by_node).await.unwrap().items.len(), 1);
    let mut w = store
        .watch(&all, &ListOptions::recursive().at(Some(at), None))
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < revs.len() - 13 + 1 {
        let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .unwrap()
            .unwrap();
        got.push(ev.resource_version().unwrap());
    }
    let mut want: Vec<u64> = revs[13..].to_vec();
    want.push(last);
    assert_eq!(got, want);
    // New writes continue the numbering.
    assert_eq!(put(&store, "new", 0).await, last + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_bound_the_log_and_restore_the_same_state() {
    let dir = tempdir();
    let config = MemStoreConfig {
        retain_revisions: 50,
        retain_window: Duration::ZERO,
        compaction_check_every: 10,
        ..small()
    };
    let (revision, compacted) = {
        let store = MemStore::open(dir.path(), config.clone()).unwrap();
        for i in 0..3000 {
            put(&store, &format!("p{}", i % 100), i).await;
        }
        // Let the snapshot thread finish.
        tokio::time::sleep(Duration::from_millis(500)).await;
        (store.current_revision(), store.compacted_revision())
    };
    let snaps = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .count();
    assert_eq!(snaps, 1, "one snapshot kept");
    assert!(segments(dir.path()).len() < 10, "old segments deleted");
    let store = MemStore::open(dir.path(), config).unwrap();
    assert_eq!(store.current_revision(), revision);
    assert!(store.compacted_revision() >= compacted);
    let all = Key::collection("pods", None).unwrap();
    let list = store.list(&all, &ListOptions::recursive()).await.unwrap();
    assert_eq!(list.items.len(), 100);
    assert!(
        list.items
            .iter()
            .all(|o| o.resource_version() > revision - 100)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_record_is_dropped_and_writes_resume() {
    let dir = tempdir();
    let last = {
        let store = MemStore::open(dir.path(), small()).unwrap();
        for i in 0..5 {
            put(&store, &format!("p{i}"), i).await;
        }
        store.current_revision()
    };
    // A crash mid-write: the last batch's tail never reached the disk.
    let seg = segments(dir.path()).pop().unwrap();
    let end = data_end(&seg);
    let mut data = std::fs::read(&seg).unwrap();
    for b in &mut data[end - 40..end] {
        *b = 0;
    }
    std::fs::write(&seg, &data).unwrap();
    let store = MemStore::open(dir.path(), small()).unwrap();
    assert_eq!(
        store.current_revision(),
        last - 1,
        "only the torn write is gone"
    );
    assert_eq!(put(&store, "after", 0).await, last);
    drop(store);
    let store = MemStore::open(dir.path(), small()).unwrap();
    assert_eq!(store.current_revision(), last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_log_file_is_refused() {
    let dir = tempdir();
    let last = {
        let store = MemStore::open(dir.path(), small()).unwrap();
        for i in 0..5 {
            put(&store, &format!("p{i}"), i).await;
        }
        store.current_revision()
    };
    let seg = segments(dir.path()).pop().unwrap();
    let end = data_end(&seg);
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len((end - 7) as u64).unwrap();
    drop(f);
    // Segments are preallocated (and synced) before use: no crash makes one shorter, so a
    // cut one lost its end, acknowledged writes perhaps with it.
    match MemStore::open(dir.path(), small()) {
        Err(OpenError::Corrupt { path, offset, .. }) => {
            assert_eq!((path, offset), (seg, (end - 7) as u64));
        }
        Err(e) => panic!("{e}"),
        Ok(s) => panic!(
            "a cut segment was accepted at {} (last {last})",
            s.current_revision()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_in_the_middle_refuses_to_start() {
    let dir = tempdir();
    {
        let store = MemStore::open(dir.path(), small()).unwrap();
        for i in 0..20 {
            put(&store, &format!("p{i}"), i).await;
        }
    }
    let seg = segments(dir.path()).pop().unwrap();
    let mut data = std::fs::read(&seg).unwrap();
    // Flip one bit inside the third record's JSON (records are ~250 bytes here).
    data[700] ^= 0x04;
    std::fs::write(&seg, &data).unwrap();
    match MemStore::open(dir.path(), small()) {
        Err(e @ OpenError::Corrupt { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(".wal") && msg.contains("refusing to start"),
                "{msg}"
            );
        }
        other => panic!("a corrupt log opened: {other:?}"),
    }
    // Damage in the very last batch cannot be told from a torn write (nothing follows it):
    // it is dropped, and its bytes are kept aside for the operator.
    data[700] ^= 0x04;
    let end = data_end(&seg);
    data[end - 5] ^= 0x01;
    std::fs::write(&seg, &data).unwrap();
    let store = MemStore::open(dir.path(), small()).unwrap();
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("torn-"))
        .collect();
    assert_eq!(aside.len(), 1, "the dropped batch is copied aside");
    drop(store);
    // Once a start has appended its own batch, that batch is no longer the last: damage to
    // it refuses.
    let mut data = std::fs::read(&seg).unwrap();
    let end = data_end(&seg);
    let mut tail = end - 200;
    while data[tail] == 0 {
        tail += 1;
    }
    data[tail] ^= 0x01;
    std::fs::write(&seg, &data).unwrap();
    assert!(matches!(
        MemStore::open(dir.path(), small()),
        Err(OpenError::Corrupt { .. })
    ));
}

/// Regression (issue 25, item 2): a compact record ends in a zero byte, and a frame whose
/// last byte was zero counted as a torn write, so one flipped bit in a compact record in the
/// middle of the log dropped everything after it and the revision went backwards. Damage
/// with acknowledged data after it refuses to start, whatever the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_compact_record_in_the_middle_refuses_to_start() {
    let dir = tempdir();
    let compacted = {
        let store = MemStore::open(dir.path(), small()).unwrap();
        for i in 0..10 {
            put(&store, &format!("p{i}"), i).await;
        }
        let at = store.current_revision();
        store.compact(at).unwrap();
        for i in 10..40 {
            put(&store, &format!("p{i}"), i).await;
        }
        at
    };
    let seg = segments(dir.path()).pop().unwrap();
    let mut data = std::fs::read(&seg).unwrap();
    // The compact record: kind 3, then the revision.
    let mut pattern = vec![3u8];
    pattern.extend_from_slice(&compacted.to_le_bytes());
    let at = data
        .windows(pattern.len())
        .position(|w| w == pattern.as_slice())
        .expect("no compact record in the log");
    data[at + 1] ^= 0x01;
    std::fs::write(&seg, &data).unwrap();
    match MemStore::open(dir.path(), small()) {
        Err(e @ OpenError::Corrupt { .. }) => {
            assert!(e.to_string().contains(".wal"), "{e}");
        }
        Ok(store) => panic!(
            "a damaged log opened at revision {} (40 writes were acknowledged)",
            store.current_revision()
        ),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_cannot_open_the_same_directory() {
    let dir = tempdir();
    let _store = MemStore::open(dir.path(), small()).unwrap();
    assert!(matches!(
        MemStore::open(dir.path(), small()),
        Err(OpenError::Locked { .. })
    ));
}

/// A full disk: the next segment is the kernel's `/dev/full`, whose writes fail with ENOSPC.
/// Writes are refused from then on, nothing unacknowledged is ever visible, and a restart
/// once space is back has every acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_writes_and_loses_nothing_acknowledged() {
    let dir = tempdir();
    let config = MemStoreConfig {
        segment_bytes: 8 << 10,
        ..small()
    };
    let store = MemStore::open(dir.path(), config.clone()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let next = loop {
        let tmp = std::fs::read_dir(dir.path()).unwrap().flatten().find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("0000000000000001.wal.") && n.ends_with(".tmp")
        });
        if let Some(e) = tmp.filter(|e| e.metadata().map(|m| m.len()).unwrap_or(0) >= 8 << 10) {
            break e.path();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "next segment never prepared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The prepared segment is synced before the file reaches its full size is not
    // guaranteed; wait a little more for the preparing thread to finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::remove_file(&next).unwrap();
    std::os::unix::fs::symlink("/dev/full", &next).unwrap();
    let mut acked = Vec::new();
    let mut failed = None;
    for i in 0..200 {
        let obj = pod(&format!("p{i}"), i, 1000);
        match store.create(&key(&format!("p{i}")), obj, None).await {
            Ok(o) => acked.push(o.resource_version()),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("writes kept succeeding on a full disk");
    assert!(e.to_string().contains("No space left"), "{e}");
    assert!(store.readiness().await.is_err());
    assert_eq!(store.current_revision(), *acked.last().unwrap());
    let more = store.create(&key("later"), pod("later", 0, 10), None).await;
    assert!(more.is_err(), "a write after the failure was accepted");
    drop(store);
    // The failed batch's marker names where the unacknowledged log begins: the restart drops
    // what follows (here, the broken segment) by itself.
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("FAILED-0-")),
        "no failed-sync marker"
    );
    let store = MemStore::open(dir.path(), config).unwrap();
    assert!(!dir.path().join("0000000000000001.wal").exists());
    assert_eq!(store.current_revision(), *acked.last().unwrap());
    let all = Key::collection("pods", None).unwrap();
    let list = store.list(&all, &ListOptions::recursive()).await.unwrap();
    assert_eq!(list.items.len(), acked.len());
}

#[tokio::test]
async fn fresh_stores_start_above_every_earlier_revision_and_expire_older_ones() {
    let a = MemStore::new();
    let mut last = 0;
    for i in 0..100 {
        last = put(&a, &format!("p{i}"), i).await;
    }
    drop(a);
    // A restart of an in-memory store (or a wiped data directory).
    let b = MemStore::new();
    assert!(
        b.current_revision() > last,
        "revision reused after a restart"
    );
    let all = Key::collection("pods", None).unwrap();
    let mut w = b
        .watch(&all, &ListOptions::recursive().at(Some(last), None))
        .await
        .map(|_| ())
        .err();
    if w.is_none() {
        let mut s = b
            .watch(&all, &ListOptions::recursive().at(Some(last), None))
            .await
            .unwrap();
        match s.next().await {
            Some(WatchEvent::Error(e)) => w = Some(e),
            other => panic!("a watch from the old history was accepted: {other:?}"),
        }
    }
    assert!(w.unwrap().is_expired());
    let exact = ListOptions::recursive().at(Some(last), Some(ResourceVersionMatch::Exact));
    assert!(b.list(&all, &exact).await.unwrap_err().is_expired());
}

/// Regression: with per-resource wake-ups, a caught-up watcher of pods was not woken by
/// writes to other resources, and compaction they caused ended it with 410 although it had
/// missed nothing (the watch cache then relisted). An etcd watcher that is caught up survives
/// compaction; so does ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_up_watcher_survives_compaction_caused_by_other_resources() {
    let store = MemStore::new();
    let first = put(&store, "p", 0).await;
    let all = Key::collection("pods", None).unwrap();
    let mut w = store
        .watch(&all, &ListOptions::recursive().at(Some(first), None))
        .await
        .unwrap();
    let mut last = 0;
    for i in 0..50 {
        let k = Key::object("configmaps", Some("ns"), &format!("c{i}")).unwrap();
        last = store
            .create(&k, pod(&format!("c{i}"), i, 10), None)
            .await
            .unwrap()
            .resource_version();
    }
    store.compact(last).unwrap();
    let next = put(&store, "p", 1).await;
    let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&ev, WatchEvent::Modified { object, .. } if object.resource_version() == next),
        "{ev:?}"
    );
}
