//! Damage to a data directory that no crash can cause, which a start must refuse (naming the
//! file) rather than silently drop acknowledged history: a stray segment file past a gap,
//! a lost log tail (cut, zeroed, or its newest segment removed), a failed-sync marker that
//! does not name a place the log reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig, OpenError};
use listwatch_storage::{Key, ListOptions, Storage};

fn pod(name: &str, n: u64, pad: usize) -> Object {
    let v = serde_json::json!({"metadata":{"name":name,"namespace":"ns"},
        "spec":{"n":n,"pad":"x".repeat(pad)}});
    Object::from_value(v, &SelectableFields::none()).unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

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

async fn put(store: &MemStore, name: &str, n: u64, pad: usize) -> u64 {
    let obj = pod(name, n, pad);
    let mut update = |_: Option<&Object>| Ok(obj.clone().into());
    store
        .guaranteed_update(&key(name), None, true, &mut update, None)
        .await
        .unwrap()
        .resource_version()
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// Offsets of the batches of a segment, in order (`LWB2` headers back to back).
fn batches(path: &Path) -> Vec<usize> {
    let d = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut out = Vec::new();
    while d.get(at..at + 4) == Some(&b"LWB2"[..]) {
        out.push(at);
        let len = u64::from_le_bytes(d[at + 8..at + 16].try_into().unwrap()) as usize;
        at += (40 + len).div_ceil(8) * 8;
    }
    out
}

fn refused(res: Result<MemStore, OpenError>) -> (PathBuf, u64, String) {
    match res {
        Err(OpenError::Corrupt {
            path,
            offset,
            message,
        }) => (path, offset, message),
        Err(e) => panic!("refused, but not as damage: {e}"),
        Ok(s) => panic!(
            "the start was accepted (at revision {}), dropping acknowledged history",
            s.current_revision()
        ),
    }
}

/// A store with a snapshot and several segments after it, stopped cleanly; returns its
/// revision and how many pods it holds.
async fn with_snapshot(dir: &Path) -> (u64, usize) {
    let config = MemStoreConfig {
        retain_revisions: 20,
        retain_window: Duration::ZERO,
        compaction_check_every: 10,
        ..small()
    };
    let store = MemStore::open(dir, config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while files(dir, "snap").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no snapshot was written after {i} writes: {:?} compacted {}",
            files(dir, "wal"),
            store.compacted_revision()
        );
        put(&store, &format!("p{}", i % 30), i, 2000).await;
        i += 1;
    }
    // Two more segments' worth after the snapshot.
    for j in 0..70 {
        put(&store, &format!("q{j}"), j, 2000).await;
    }
    let all = Key::collection("pods", None).unwrap();
    let n = store
        .list(&all, &ListOptions::recursive())
        .await
        .unwrap()
        .items
        .len();
    (store.current_revision(), n)
}

/// F1: with a snapshot, one stray segment file numbered past a gap (empty, or garbage) made
/// every real segment count as covered by the snapshot: they were unlinked and the store
/// opened at the snapshot, silently. It is refused, naming the stray file, and nothing is
/// unlinked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_segment_past_a_gap_is_refused_and_deletes_nothing() {
    for content in [&b""[..], b"garbage"] {
        let dir = tempdir();
        let (rev, n) = with_snapshot(dir.path()).await;
        let before = files(dir.path(), "wal");
        assert!(before.len() >= 2, "{before:?}");
        let stray = dir.path().join("0000000000000099.wal");
        std::fs::write(&stray, content).unwrap();
        let (path, _, message) = refused(MemStore::open(dir.path(), small()));
        assert_eq!(path, stray, "{message}");
        let mut after = files(dir.path(), "wal");
        after.retain(|p| *p != stray);
        assert_eq!(after, before, "segments were unlinked");
        // Without the stray file, everything is there.
        std::fs::remove_file(&stray).unwrap();
        let store = MemStore::open(dir.path(), small()).unwrap();
        assert_eq!(store.current_revision(), rev);
        let all = Key::collection("pods", None).unwrap();
        let list = store.list(&all, &ListOptions::recursive()).await.unwrap();
        assert_eq!(list.items.len(), n);
    }
}
