//! One resource's slice of the store: its key histories and its event log, behind its own
//! lock, so that writes to one resource never wait for a list of another.
//!
//! Invariants (kept under the partition's write lock):
//! - each key's `versions` are in ascending `mod_rev`; a `None` value is a tombstone;
//! - `log` holds one entry per write to this resource, in ascending (global, not contiguous)
//!   revision order, every revision above the partition's `compacted`;
//! - for every revision `r` with `compacted <= r` the state at `r` can be read: for each key,
//!   its last version with `mod_rev <= r`. Compaction at `c` keeps exactly what reading at `c`
//!   and later needs.
//!
//! Entries may be applied here before they are visible (the durable store applies a write,
//! then makes it visible once its log record is on disk). Readers therefore always read at an
//! explicit revision, never "the newest entry".

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use listwatch_api::Object;
use tokio::sync::watch;

/// One stored version of a key.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) mod_rev: u64,
    /// The object at `mod_rev` (its resource version already set), or a tombstone.
    pub(crate) value: Option<Object>,
    /// The TTL the write set, kept so a snapshot can carry it.
    pub(crate) ttl: Option<Duration>,
}

/// One write, as watchers see it.
#[derive(Debug)]
pub(crate) struct LogEntry {
    pub(crate) rev: u64,
    pub(crate) key: Arc<str>,
    /// The new value (`None` for a delete).
    pub(crate) value: Option<Object>,
    /// The value before this write, when the key was live.
    pub(crate) prev: Option<Object>,
}

/// Fixed bytes a retained revision costs beyond its key and objects: the log entry, its
/// `Arc`, the version slot and the retention ledger's row.
pub(crate) const ENTRY_OVERHEAD: u64 = 160;

#[derive(Debug, Default)]
pub(crate) struct PartState {
    pub(crate) keys: BTreeMap<Arc<str>, Vec<Version>>,
    pub(crate) log: VecDeque<Arc<LogEntry>>,
    /// How far this partition has dropped history (the global compaction is set first).
    pub(crate) compacted: u64,
    /// The newest log entry compaction removed: a watcher whose cursor is below it missed an
    /// event. A watcher below the compaction revision but above this missed nothing (as an
    /// etcd watcher that is caught up survives compaction).
    pub(crate) dropped: u64,
}

impl PartState {
    /// The live value of `key` at revision `at`.
    pub(crate) fn value_at(&self, key: &str, at: u64) -> Option<&Object> {
        value_at(self.keys.get(key)?, at)
    }

    /// The newest applied version of `key` (possibly not visible yet).
    pub(crate) fn newest(&self, key: &str) -> Option<&Version> {
        self.keys.get(key)?.last()
    }

    /// The newest applied live value's revision, 0 when absent or deleted.
    pub(crate) fn newest_live_rev(&self, key: &str) -> u64 {
        self.newest(key)
            .filter(|v| v.value.is_some())
            .map_or(0, |v| v.mod_rev)
    }

    /// Applies one write at `rev` (value `None` deletes) and logs it. Returns the bytes that
    /// compacting `rev` away will free (see [`ENTRY_OVERHEAD`]) and the key as stored.
    /// One lookup of the key (a restart applies every logged write: lookups of long keys in
    /// a large map were most of it).
    pub(crate) fn apply(
        &mut self,
        rev: u64,
        key: &str,
        value: Option<Object>,
        ttl: Option<Duration>,
    ) -> (u64, Arc<str>) {
        use std::collections::btree_map::Entry;
        let value = value.map(|v| v.with_resource_version(rev));
        let (key, prev, versions) = match self.keys.entry(Arc::from(key)) {
            Entry::Occupied(o) => {
                let key = Arc::clone(o.key());
                let versions = o.into_mut();
                let prev = versions.last().and_then(|v| v.value.clone());
                (key, prev, versions)
            }
            Entry::Vacant(v) => {
                let key = Arc::clone(v.key());
                (key, None, v.insert(Vec::new()))
            }
        };
        // Compacting this revision frees the version it superseded, and for a delete the
        // tombstone itself (the key disappears).
        let freed = ENTRY_OVERHEAD
            + key.len() as u64
            + prev.as_ref().map_or(0, |p| p.size() as u64)
            + if value.is_none() { key.len() as u64 } else { 0 };
        versions.push(Version {
            mod_rev: rev,
            value: value.clone(),
            ttl,
        });
        self.log.push_back(Arc::new(LogEntry {
            rev,
            key: Arc::clone(&key),
            value,
            prev,
        }));
        (freed, key)
    }

    /// Drops history older than `at`, keeping everything reading at `at` or later needs.
    pub(crate) fn compact(&mut self, at: u64) {
        if at <= self.compacted {
            return;
        }
        while self.log.front().is_some_and(|e| e.rev <= at) {
            let Some(entry) = self.log.pop_front() else {
                break;
            };
            self.dropped = self.dropped.max(entry.rev);
            let Some(versions) = self.keys.get_mut(&entry.key) else {
                continue;
            };
            // Keep the last version at or below `at` (the state at `at`) unless it is a tombstone.
            let keep_from = versions.partition_point(|v| v.mod_rev <= at);
            let drop = match keep_from.checked_sub(1).and_then(|i| versions.get(i)) {
                Some(v) if v.value.is_some() => keep_from - 1,
                _ => keep_from,
            };
            versions.drain(..drop);
            if versions.is_empty() {
                self.keys.remove(&entry.key);
            }
        }
        self.compacted = at;
    }

    /// Up to `max` entries with `after < rev <= upto`, oldest first (`Arc` clones only).
    pub(crate) fn entries(&self, after: u64, upto: u64, max: usize) -> Vec<Arc<LogEntry>> {
        let from = self.log.partition_point(|e| e.rev <= after);
        self.log
            .range(from..)
            .take_while(|e| e.rev <= upto)
            .take(max)
            .cloned()
            .collect()
    }

    /// Keys under `prefix` from `start` (inclusive) with a live value at `at`, in key order.
    pub(crate) fn live_from<'a>(
        &'a self,
        prefix: &'a str,
        start: &str,
        at: u64,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a Object)> + 'a {
        self.keys
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .filter_map(move |(k, v)| {
                #[cfg(test)]
                VISITS.with(|c| c.set(c.get() + 1));
                Some((k, value_at(v, at)?))
            })
    }
}

#[cfg(test)]
thread_local! {
    /// Keys read by range walks on this thread (tests of the walk's complexity).
    pub(crate) static VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn value_at(versions: &[Version], at: u64) -> Option<&Object> {
    let i = versions.partition_point(|v| v.mod_rev <= at);
    versions.get(i.checked_sub(1)?)?.value.as_ref()
}

/// Remembers, for recent paginated walks, how many objects remain from a continue token's
/// start key at its revision. The state at a revision never changes (compaction only makes it
/// unreadable), so a remembered count stays true; a walk whose count is remembered costs its
/// page, not the rest of the range, and a whole walk is O(n) instead of O(n²/limit).
#[derive(Debug, Default)]
pub(crate) struct CountMemo {
    counts: HashMap<(Box<str>, u64, Box<str>), u64>,
    order: VecDeque<(Box<str>, u64, Box<str>)>,
}

/// Walks remembered at once; older ones are forgotten (and counted again if they continue).
const MEMO_CAPACITY: usize = 1024;

impl CountMemo {
    pub(crate) fn take(&mut self, prefix: &str, rev: u64, start: &str) -> Option<u64> {
        self.counts.remove(&(prefix.into(), rev, start.into()))
    }

    pub(crate) fn put(&mut self, prefix: &str, rev: u64, start: &str, remaining: u64) {
        let k: (Box<str>, u64, Box<str>) = (prefix.into(), rev, start.into());
        if self.counts.insert(k.clone(), remaining).is_none() {
            self.order.push_back(k);
        }
        while self.order.len() > MEMO_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.counts.remove(&old);
            }
        }
        // Taken entries leave stale rows in `order`; drop them when they dominate.
        if self.order.len() > 2 * self.counts.len() + 64 {
            let counts = &self.counts;
            self.order.retain(|k| counts.contains_key(k));
        }
    }
}

/// `dir_ticks` is never pruned below this many entries.
pub(crate) const DIR_TICKS_MIN_PRUNE: usize = 64;

/// A resource's partition: its state and the channels that wake its watchers.
#[derive(Debug)]
pub(crate) struct Partition {
    pub(crate) state: RwLock<PartState>,
    /// Wakes watchers of the whole resource, after every visible write to it.
    pub(crate) ticks: watch::Sender<u64>,
    /// Wakes watchers of one directory (a namespace, or a cluster-scoped resource's objects),
    /// keyed by the directory path (`/pods/ns/`); created by the first such watcher. An
    /// entry whose watchers are gone is dropped by the next write to its directory, or by
    /// [`Partition::subscribe`] once the map has doubled since it was last pruned, so the
    /// map holds at most twice the directories being watched plus [`DIR_TICKS_MIN_PRUNE`]
    /// (a client watching ever new namespaces, none of them written, cannot grow it).
    pub(crate) dir_ticks: Mutex<HashMap<Box<str>, watch::Sender<u64>>>,
    /// The size of `dir_ticks` at which the next subscription prunes it.
    dir_ticks_prune_at: AtomicUsize,
    pub(crate) memo: Mutex<CountMemo>,
}

impl Partition {
    pub(crate) fn new(compacted: u64) -> Self {
        Self {
            state: RwLock::new(PartState {
                compacted,
                ..PartState::default()
            }),
            ticks: watch::channel(0).0,
            dir_ticks: Mutex::new(HashMap::new()),
            dir_ticks_prune_at: AtomicUsize::new(DIR_TICKS_MIN_PRUNE),
            memo: Mutex::new(CountMemo::default()),
        }
    }

    /// Wakes the watchers a write of `key` at `rev` concerns: those of the resource and those
    /// of the key's directory.
    pub(crate) fn wake(&self, key: &str, rev: u64) {
        self.ticks.send_replace(rev);
        let dir = dir_of(key);
        if let Ok(mut dirs) = self.dir_ticks.lock() {
            if let Some(tx) = dirs.get(dir) {
                if tx.receiver_count() == 0 {
                    dirs.remove(dir);
                } else {
                    tx.send_replace(rev);
                }
            }
        }
    }

    /// The wake-ups a watcher of `key` (a collection or an object) needs.
    pub(crate) fn subscribe(&self, key: &str, is_collection: bool) -> watch::Receiver<u64> {
        let dir = if is_collection { key } else { dir_of(key) };
        if dir.matches('/').count() <= 2 {
            // `/pods/` or a cluster-scoped object `/nodes/a`: the whole resource.
            return self.ticks.subscribe();
        }
        match self.dir_ticks.lock() {
            Ok(mut dirs) => {
                if dirs.len() >= self.dir_ticks_prune_at.load(Ordering::Relaxed) {
                    dirs.retain(|_, tx| tx.receiver_count() > 0);
                    let next = dirs.len().saturating_mul(2).max(DIR_TICKS_MIN_PRUNE);
                    self.dir_ticks_prune_at.store(next, Ordering::Relaxed);
                }
                dirs.entry(dir.into())
                    .or_insert_with(|| watch::channel(0).0)
                    .subscribe()
            }
            Err(_) => self.ticks.subscribe(),
        }
    }
}

/// `/pods/ns/a` → `/pods/ns/`; `/nodes/a` → `/nodes/`.
pub(crate) fn dir_of(key: &str) -> &str {
    key.rfind('/').map_or(key, |i| &key[..=i])
}

/// `/pods/ns/a` → `pods`.
pub(crate) fn resource_of(key: &str) -> &str {
    let rest = key.strip_prefix('/').unwrap_or(key);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_of_directories_no_longer_watched_are_dropped_without_a_write() {
        // A client watching ever new namespaces, each watch closed, none written: before,
        // every namespace kept its entry for good (480 bytes each through the router).
        let p = Partition::new(0);
        let held = p.subscribe("/pods/kept/", true);
        for i in 0..10_000 {
            drop(p.subscribe(&format!("/pods/n{i}/"), true));
        }
        let dirs = p.dir_ticks.lock().unwrap();
        assert!(
            dirs.len() <= 2 * DIR_TICKS_MIN_PRUNE,
            "{} entries",
            dirs.len()
        );
        assert!(
            dirs.contains_key("/pods/kept/"),
            "a watched directory keeps its entry"
        );
        drop(dirs);
        drop(held);
    }

    #[test]
    fn paths_split_into_resource_and_directory() {
        assert_eq!(resource_of("/pods/ns/a"), "pods");
        assert_eq!(resource_of("/nodes/"), "nodes");
        assert_eq!(dir_of("/pods/ns/a"), "/pods/ns/");
        assert_eq!(dir_of("/nodes/a"), "/nodes/");
    }

    #[test]
    fn the_memo_forgets_the_oldest_walks() {
        let mut m = CountMemo::default();
        for i in 0..(MEMO_CAPACITY as u64 + 10) {
            m.put("/p/", i, "k", i);
        }
        assert_eq!(m.take("/p/", 0, "k"), None);
        assert_eq!(
            m.take("/p/", MEMO_CAPACITY as u64 + 9, "k"),
            Some(MEMO_CAPACITY as u64 + 9)
        );
        assert_eq!(m.take("/p/", MEMO_CAPACITY as u64 + 9, "k"), None);
    }
}
