//! The data directory on a real file system: who may open it (one process, even after
//! `rm LOCK`; nobody else may read it), what a start of an older log format says, and that
//! keys with a TTL expire after a restart without waiting for a write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig, OpenError};
use listwatch_storage::{GetOptions, Key, Storage};

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn cm(name: &str) -> (Key, Object) {
    let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"a":"b"}}}}"#);
    (
        Key::object("configmaps", Some("ns"), name).unwrap(),
        Object::from_json(json.as_bytes(), &SelectableFields::none()).unwrap(),
    )
}

/// The lock is on the directory itself: removing `LOCK` does not let a second store in
/// (before, it did, and the two logs overwrote each other).
#[test]
fn removing_lock_does_not_let_a_second_store_in() {
    let dir = tempdir();
    let _store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
    std::fs::remove_file(dir.path().join("LOCK")).unwrap();
    match MemStore::open(dir.path(), MemStoreConfig::default()) {
        Err(OpenError::Locked { .. }) => {}
        other => panic!("a second store opened the directory: {other:?}"),
    }
}

/// A new data directory (and its missing parent) is created 0700, its files 0600; an
/// existing directory that group or others may read is refused with the fix in the message.
#[test]
fn the_data_is_readable_by_its_owner_only() {
    let base = tempdir();
    let dir = base.path().join("parent").join("data");
    {
        let _store = MemStore::open(&dir, MemStoreConfig::default()).unwrap();
    }
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(dir.parent().unwrap()), 0o700);
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    match MemStore::open(&dir, MemStoreConfig::default()) {
        Err(e @ OpenError::Permissions { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("chmod 700") && msg.contains("0755"), "{msg}");
        }
        other => panic!("a world-readable directory was adopted: {other:?}"),
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    assert!(matches!(
        MemStore::open(&dir, MemStoreConfig::default()),
        Err(OpenError::Permissions { .. })
    ));
}

/// A log of format 1 (bare frames, no batch headers) is refused, naming the format.
#[test]
fn a_log_of_the_older_format_is_refused_by_name() {
    let dir = tempdir();
    // Format 1's first record: `len | crc(len, payload) | kind 4 (start), rev`.
    let mut payload = vec![4u8];
    payload.extend_from_slice(&1000u64.to_le_bytes());
    let len = (payload.len() as u32).to_le_bytes();
    let mut h = crc32fast::Hasher::new();
    h.update(&len);
    h.update(&payload);
    let mut seg = len.to_vec();
    seg.extend_from_slice(&h.finalize().to_le_bytes());
    seg.extend_from_slice(&payload);
    seg.resize(4096, 0);
    std::fs::write(dir.path().join("0000000000000000.wal"), seg).unwrap();
    match MemStore::open(dir.path(), MemStoreConfig::default()) {
        Err(e @ OpenError::OldFormat { .. }) => {
            assert!(e.to_string().contains("log format 1"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

/// Keys recovered with a TTL expire even if nothing is written after the restart (the reaper
/// used to start only on a write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_expire_after_a_restart_without_a_write() {
    let dir = tempdir();
    let (key, obj) = cm("short");
    {
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        store
            .create(&key, obj, Some(Duration::from_millis(300)))
            .await
            .unwrap();
    }
    let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match store.get(&key, &GetOptions::default()).await {
            Ok(Some(_)) => {}
            Err(listwatch_storage::Error::NotFound { .. }) | Ok(None) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the TTL never expired after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
