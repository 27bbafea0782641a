//! Recovery under test: a workload run against the in-memory recording file layer, the
//! history it wrote, and the check that a recovered store holds a revision-prefix of it.
//! Shared by the crash-state harness and fault injection (`crashtest`, `cargo test`), the
//! property test of recovery over damaged directories, and the `wal_recover` fuzz target
//! (feature `fuzzing`).
//!
//! Invariants: [`check`] accepts a recovery only if the store's revision is at least the
//! newest acknowledged one and at most the newest written, and every key holds exactly what
//! the history says at that revision (nothing lost, nothing resurrected, no revision reused);
//! a refused start must name a file (its offset is part of the error).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, Storage};

use crate::wal::simfs::{Image, Rng, SimFs};
use crate::{MemStore, MemStoreConfig, OpenError};

/// One write of a history: revision, object name, value (`None`: deleted).
#[derive(Debug, Clone)]
pub struct Write {
    /// Its revision.
    pub rev: u64,
    /// The object's name.
    pub name: String,
    /// Its value (`None`: a delete).
    pub value: Option<String>,
}

/// A directory's files: name → bytes.
pub type Files = Vec<(String, Vec<u8>)>;

/// What a workload wrote.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The revision of the empty store.
    pub start: u64,
    /// Every write, acknowledged or not, in revision order.
    pub writes: Vec<Write>,
    /// Acknowledged revisions, each with the number of file operations recorded when its
    /// acknowledgement was seen (a crash at or after that operation must keep it).
    pub acked: Vec<(u64, usize)>,
}

impl History {
    /// The newest revision acknowledged before operation `k`.
    pub fn acked_before(&self, k: usize) -> u64 {
        self.acked
            .iter()
            .filter(|(_, at)| *at <= k)
            .map(|(r, _)| *r)
            .max()
            .unwrap_or(0)
    }
}

/// The directory the tests use in the in-memory file system.
pub fn dir() -> PathBuf {
    PathBuf::from("/data/store")
}

/// A store configuration with tiny segments and eager snapshots, so that short workloads
/// roll segments and write snapshots; no automatic compaction.
pub fn config() -> MemStoreConfig {
    MemStoreConfig {
        segment_bytes: 4096,
        snapshot_min_log_bytes: 1,
        initial_revision: Some(1000),
        compaction_check_every: u64::MAX,
        retain_bytes: u64::MAX,
        ..MemStoreConfig::default()
    }
}

fn key(name: &str) -> Result<Key, String> {
    Key::object("configmaps", Some("ns"), name).map_err(|e| e.to_string())
}

fn object(name: &str, value: &str) -> Result<Object, String> {
    let json =
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"v":"{value}"}}}}"#);
    Object::from_json(json.as_bytes(), &SelectableFields::none()).map_err(|e| e.to_string())
}

/// A current-thread runtime (the store needs none, but its async methods need polling).
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())
}

/// Opens the store in `dir` through `fs`.
pub(crate) fn open(fs: &SimFs, dir: &Path) -> Result<MemStore, OpenError> {
    MemStore::open_with(dir, config(), Arc::new(fs.clone()))
}

/// Runs `n` rounds of writes by `writers` concurrent writers (creates, updates, deletes of
/// their own objects; writer 0 also compacts now and then) on `store`, appending to
/// `history`. Writes fail once the store failed; the first failure ends the workload.
pub(crate) async fn workload(
    store: &MemStore,
    fs: &SimFs,
    seed: u64,
    writers: usize,
    n: usize,
    history: &mut History,
) -> Result<(), String> {
    let tasks = (0..writers).map(|w| {
        let store = store.clone();
        let fs = fs.clone();
        async move {
            let mut rng = Rng::new(seed.wrapping_add(w as u64 * 7919));
            let mut live: Vec<String> = Vec::new();
            let mut out: Vec<(Write, usize)> = Vec::new();
            for i in 0..n {
                let pad = "x".repeat(rng.below(700) as usize);
                let value = format!("w{w}-{i}-{pad}");
                let choice = rng.below(10);
                let res = if choice < 4 || live.is_empty() {
                    let name = format!("o{:x}-{w}-{i}", seed % 0xFFFF);
                    let o = object(&name, &value)?;
                    let r = store.create(&key(&name)?, o, None).await;
                    if r.is_ok() {
                        live.push(name.clone());
                    }
                    r.map(|o| (name, Some(value), o.resource_version()))
                } else {
                    let at = rng.below(live.len() as u64) as usize;
                    let name = live[at].clone();
                    if choice < 8 {
                        let o = object(&name, &value)?;
                        let mut update = |_: Option<&Object>| Ok(o.clone().into());
                        store
                            .guaranteed_update(&key(&name)?, None, false, &mut update, None)
                            .await
                            .map(|o| (name, Some(value), o.resource_version()))
                    } else {
                        live.swap_remove(at);
                        store
                            .delete(&key(&name)?, None, listwatch_storage::no_validation(), None)
                            .await
                            .map(|o| (name, None, o.resource_version()))
                    }
                };
                match res {
                    Ok((name, value, rev)) => out.push((Write { rev, name, value }, fs.ops())),
                    Err(_) => break,
                }
                if w == 0 && rng.chance(6) {
                    let c = store.current_revision().saturating_sub(rng.below(4));
                    if c > store.compacted_revision() {
                        let _ = store.compact(c);
                    }
                }
            }
            Ok::<_, String>(out)
        }
    });
    let mut all = Vec::new();
    for r in futures::future::join_all(tasks).await {
        all.extend(r?);
    }
    all.sort_by_key(|(w, _)| w.rev);
    for (w, at) in all {
        history.acked.push((w.rev, at));
        history.writes.push(w);
    }
    Ok(())
}

/// The state at revision `rev`: name → (revision, value).
fn state_at(history: &History, rev: u64) -> BTreeMap<String, (u64, String)> {
    let mut m = BTreeMap::new();
    for w in history.writes.iter().take_while(|w| w.rev <= rev) {
        match &w.value {
            Some(v) => {
                m.insert(w.name.clone(), (w.rev, v.clone()));
            }
            None => {
                m.remove(&w.name);
            }
        }
    }
    m
}

/// Checks a recovered store against `history`, given that everything up to `acked` was
/// acknowledged (or served). Returns the store's revision.
pub(crate) async fn check(store: &MemStore, history: &History, acked: u64) -> Result<u64, String> {
    let rev = store.current_revision();
    let newest = history.writes.last().map_or(history.start, |w| w.rev);
    if rev < acked {
        return Err(format!(
            "revision {rev} after recovery, but {acked} was acknowledged (lost writes, or a \
             revision going backwards)"
        ));
    }
    if rev > newest.max(history.start) {
        return Err(format!(
            "revision {rev} after recovery, beyond anything written ({newest})"
        ));
    }
    if store.compacted_revision() > rev {
        return Err(format!(
            "compacted at {} beyond the revision {rev}",
            store.compacted_revision()
        ));
    }
    let want = state_at(history, rev);
    let all = Key::collection("configmaps", None).map_err(|e| e.to_string())?;
    let got = store
        .list(&all, &ListOptions::recursive())
        .await
        .map_err(|e| e.to_string())?;
    let mut have = BTreeMap::new();
    for o in &got.items {
        have.insert(o.name().to_string(), o.clone());
    }
    if have.len() != want.len() {
        return Err(format!(
            "at revision {rev}: {} objects, expected {} (extra: {:?}; missing: {:?})",
            have.len(),
            want.len(),
            have.keys()
                .filter(|k| !want.contains_key(*k))
                .collect::<Vec<_>>(),
            want.keys()
                .filter(|k| !have.contains_key(*k))
                .collect::<Vec<_>>()
        ));
    }
    for (name, (r, v)) in &want {
        let Some(o) = have.get(name) else {
            return Err(format!("at revision {rev}: {name} is missing"));
        };
        let expected = object(name, v)?;
        if o.resource_version() != *r || !o.same_content(&expected) {
            return Err(format!(
                "at revision {rev}: {name} is {} at {}, expected the write of revision {r}",
                String::from_utf8_lossy(o.stored_json()),
                o.resource_version()
            ));
        }
    }
    Ok(rev)
}

/// A store's files after a short workload (the volatile image) and what it wrote: what the
/// recovery property test and the fuzz target damage.
pub fn sample(seed: u64) -> Result<(Files, History), String> {
    let rt = runtime()?;
    let fs = SimFs::default();
    let store = open(&fs, &dir()).map_err(|e| e.to_string())?;
    let mut history = History {
        start: store.current_revision(),
        ..History::default()
    };
    rt.block_on(workload(&store, &fs, seed, 2, 25, &mut history))?;
    drop(store);
    let image = fs.volatile();
    let mut files = Vec::new();
    for p in image.paths() {
        if let (Some(name), Some(bytes)) = (p.file_name(), image.file(&p)) {
            files.push((name.to_string_lossy().into_owned(), bytes.clone()));
        }
    }
    Ok((files, history))
}

/// Damages `files` as `script` says: each 6 bytes pick a file, an offset and an action
/// (flip a bit, zero 64 bytes, zero to the end, copy 64 bytes from elsewhere).
pub fn mutate(files: &mut [(String, Vec<u8>)], script: &[u8]) {
    if files.is_empty() {
        return;
    }
    for c in script.chunks_exact(6) {
        let f = &mut files[usize::from(c[0]) % files.len()].1;
        if f.is_empty() {
            continue;
        }
        let at = u32::from_le_bytes([c[1], c[2], c[3], c[4]]) as usize % f.len();
        let len = f.len();
        match c[5] % 4 {
            0 => f[at] ^= 1 << (c[5] >> 5),
            1 => f[at..(at + 64).min(len)].fill(0),
            2 => f[at..].fill(0),
            _ => {
                let from = (at * 7 + 13) % len;
                let n = 64.min(len - at).min(len - from);
                let piece = f[from..from + n].to_vec();
                f[at..at + n].copy_from_slice(&piece);
            }
        }
    }
}

/// Recovers `files` (names in the store's directory → bytes) and checks the outcome: a
/// refusal naming a file is fine; a recovery must hold a revision-prefix of `history`
/// (damage may drop acknowledged writes only by refusing, except at the very end of the log,
/// which looks like a torn write). Never panics on any input.
pub fn recover(files: &[(String, Vec<u8>)], history: Option<&History>) -> Result<(), String> {
    let fs = SimFs::from_image(Image::with_files(&dir(), files));
    let store = match open(&fs, &dir()) {
        Ok(s) => s,
        Err(OpenError::Corrupt { path, .. })
        | Err(OpenError::OldFormat { path })
        | Err(OpenError::Io { path, .. }) => {
            if path.as_os_str().is_empty() {
                return Err("a refusal that names no file".into());
            }
            return Ok(());
        }
        Err(e) => return Err(format!("unexpected refusal: {e}")),
    };
    let Some(history) = history else {
        return Ok(());
    };
    let rt = runtime()?;
    rt.block_on(check(&store, history, 0)).map(|_| ())
}
