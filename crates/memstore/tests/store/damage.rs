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

/// Opens `dir`, waiting (bounded) for a stopped store's snapshot thread to let it go.
fn open(dir: &Path, config: MemStoreConfig) -> Result<MemStore, OpenError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match MemStore::open(dir, config.clone()) {
            Err(OpenError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            res => return res,
        }
    }
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
        let (path, _, message) = refused(open(dir.path(), small()));
        assert_eq!(path, stray, "{message}");
        assert!(
            message.contains("above the snapshot's") || message.contains("holds no batch"),
            "{message}"
        );
        let mut after = files(dir.path(), "wal");
        after.retain(|p| *p != stray);
        assert_eq!(after, before, "segments were unlinked");
        // Without the stray file, everything is there.
        std::fs::remove_file(&stray).unwrap();
        let store = open(dir.path(), small()).unwrap();
        assert_eq!(store.current_revision(), rev);
        let all = Key::collection("pods", None).unwrap();
        let list = store.list(&all, &ListOptions::recursive()).await.unwrap();
        assert_eq!(list.items.len(), n);
    }
}

/// A store with 31 acknowledged writes, stopped, started and stopped again (so that the last
/// writes precede the last start); returns its last segment and where its 4th-last batch
/// begins (3 writes and the last start's open batch follow).
async fn written_then_restarted(dir: &Path) -> (PathBuf, usize) {
    {
        let store = open(dir, small()).unwrap();
        for i in 0..31 {
            put(&store, &format!("p{i}"), i, 100).await;
        }
    }
    drop(open(dir, small()).unwrap());
    let seg = files(dir, "wal").pop().unwrap();
    let b = batches(&seg);
    (seg, b[b.len() - 4])
}

/// F2 (a): a segment cut at a batch boundary (a failed copy, a file system repair) read as a
/// clean end: acknowledged writes were lost and revisions went backwards. Segments are
/// preallocated, so a short one is refused, naming it and where it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_cut_at_a_batch_boundary_is_refused() {
    let dir = tempdir();
    let (seg, at) = written_then_restarted(dir.path()).await;
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(at as u64).unwrap();
    drop(f);
    let (path, offset, message) = refused(open(dir.path(), small()));
    assert_eq!((path, offset), (seg, at as u64), "{message}");
    assert!(message.contains("shorter than"), "{message}");
}

/// F2 (c): the log's tail zeroed (lost sectors) read as a clean end, although the batches
/// lost were written before the last start (so never a torn write). The last start
/// recorded where the log reached: a log ending before is refused, naming the segment and
/// where the log now ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zeroed_tail_written_before_the_last_start_is_refused() {
    let dir = tempdir();
    let (seg, at) = written_then_restarted(dir.path()).await;
    let mut data = std::fs::read(&seg).unwrap();
    for b in &mut data[at..at + 8192] {
        *b = 0;
    }
    std::fs::write(&seg, &data).unwrap();
    let (path, offset, message) = refused(open(dir.path(), small()));
    assert_eq!((path, offset), (seg, at as u64), "{message}");
    assert!(message.contains("tail was lost"), "{message}");
}

/// F2 (b): removing the newest segment after a roll lost everything written to it,
/// silently. A roll records that the log reaches the new segment: a start that does not find
/// it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_newest_segment_is_refused() {
    let dir = tempdir();
    {
        let store = open(dir.path(), small()).unwrap();
        let mut i = 0;
        while files(dir.path(), "wal").len() < 3 {
            put(&store, &format!("p{}", i % 10), i, 2000).await;
            i += 1;
            assert!(i < 10_000, "the log never rolled");
        }
        put(&store, "last", 0, 100).await;
    }
    let mut segs = files(dir.path(), "wal");
    let newest = segs.pop().unwrap();
    std::fs::remove_file(&newest).unwrap();
    let (path, _, message) = refused(open(dir.path(), small()));
    assert_eq!(path, segs.pop().unwrap(), "{message}");
    assert!(message.contains("tail was lost"), "{message}");
}

/// F3: a failed-sync marker was honoured unchecked: one naming the middle of a batch (or a
/// batch boundary with acknowledged batches after it) dropped everything from there. The
/// log thread stops at its first failure, so a marker names a batch boundary the log
/// reached with at most the failed batch after it; any other is refused, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_marker_the_log_contradicts_is_refused() {
    let dir = tempdir();
    {
        let store = open(dir.path(), small()).unwrap();
        for i in 0..40 {
            put(&store, &format!("p{i}"), i, 100).await;
        }
    }
    let seg = files(dir.path(), "wal").pop().unwrap();
    let b = batches(&seg);
    let len = std::fs::metadata(&seg).unwrap().len();
    // Not a boundary; past the log's end; a boundary with intact batches after it.
    for (offset, says) in [
        (b[10] as u64 + 8, "not a batch boundary"),
        (len - 8, "not a batch boundary"),
        (b[10] as u64, "intact batches continue the log"),
    ] {
        let marker = dir.path().join(format!("FAILED-0-{offset}"));
        std::fs::write(&marker, b"").unwrap();
        let (path, _, message) = refused(open(dir.path(), small()));
        assert_eq!(path, marker, "{message}");
        assert!(message.contains(says), "{message}");
        std::fs::remove_file(&marker).unwrap();
    }
    // A marker naming the last batch (the failed one) is honoured: only it is dropped.
    let last = *b.last().unwrap();
    std::fs::write(dir.path().join(format!("FAILED-0-{last}")), b"").unwrap();
    let store = open(dir.path(), small()).unwrap();
    let all = Key::collection("pods", None).unwrap();
    let list = store.list(&all, &ListOptions::recursive()).await.unwrap();
    assert_eq!(list.items.len(), 39);
}
