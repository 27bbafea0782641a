//! The MVCC state behind one lock: key histories, the event log and compaction.
//!
//! Invariants (all kept under the store's write lock):
//! - `rev` is the global revision, starting at 1 for the empty store as etcd's does; every
//!   write increments it by exactly one, so the log holds contiguous revisions
//!   `compacted + 1 ..= rev` (an entry per write, oldest first);
//! - each key's `versions` are in ascending `mod_rev`; a `None` value is a tombstone;
//! - the state at any revision `r` with `compacted <= r <= rev` can be read: for each key, its
//!   last version with `mod_rev <= r`. Compaction at `c` keeps exactly what reading at `c`
//!   and later needs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use listwatch_api::Object;
use listwatch_storage::{Error, Result};
use tokio::time::Instant;

/// One stored version of a key.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) mod_rev: u64,
    /// The object at `mod_rev` (its resource version already set), or a tombstone.
    pub(crate) value: Option<Object>,
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
    pub(crate) at: Instant,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) rev: u64,
    pub(crate) compacted: u64,
    pub(crate) keys: BTreeMap<Arc<str>, Vec<Version>>,
    pub(crate) log: VecDeque<Arc<LogEntry>>,
    /// Writes since the automatic compaction policy last looked.
    pub(crate) writes_since_policy: u64,
}

impl Default for State {
    /// An empty store at revision 1, as a fresh etcd is: revision 0 never names a state, so
    /// a list of an empty store reports "1" and a watch from it cannot be mistaken for a
    /// watch from "0" (which means "send the current state first").
    fn default() -> Self {
        Self {
            rev: 1,
            compacted: 1,
            keys: BTreeMap::new(),
            log: VecDeque::new(),
            writes_since_policy: 0,
        }
    }
}

impl State {
    /// The live value of `key` at revision `at`.
    pub(crate) fn value_at(&self, key: &str, at: u64) -> Option<&Object> {
        let versions = self.keys.get(key)?;
        let i = versions.partition_point(|v| v.mod_rev <= at);
        versions.get(i.checked_sub(1)?)?.value.as_ref()
    }

    /// The latest live value of `key`.
    pub(crate) fn latest(&self, key: &str) -> Option<&Object> {
        self.keys.get(key)?.last()?.value.as_ref()
    }

    /// Errors with `Expired` when revision `at` is no longer readable.
    pub(crate) fn check_readable(&self, at: u64) -> Result<()> {
        if at < self.compacted {
            return Err(Error::too_old(at, self.compacted));
        }
        Ok(())
    }

    /// Applies one write (value `None` deletes) at the next revision and logs it.
    pub(crate) fn write(&mut self, key: &str, value: Option<Object>, now: Instant) -> u64 {
        self.rev += 1;
        let rev = self.rev;
        let value = value.map(|v| v.with_resource_version(rev));
        let (key, prev) = match self.keys.get_key_value(key) {
            Some((k, versions)) => (Arc::clone(k), versions.last().and_then(|v| v.value.clone())),
            None => (Arc::<str>::from(key), None),
        };
        self.keys
            .entry(Arc::clone(&key))
            .or_default()
            .push(Version {
                mod_rev: rev,
                value: value.clone(),
            });
        self.log.push_back(Arc::new(LogEntry {
            rev,
            key,
            value,
            prev,
            at: now,
        }));
        self.writes_since_policy += 1;
        rev
    }

    /// Drops history older than `at`, keeping everything reading at `at` or later needs.
    pub(crate) fn compact(&mut self, at: u64) -> Result<()> {
        if at > self.rev {
            return Err(Error::bad_request(format!(
                "cannot compact at revision {at}: the current revision is {}",
                self.rev
            )));
        }
        if at <= self.compacted {
            return Ok(());
        }
        while self.log.front().is_some_and(|e| e.rev <= at) {
            let Some(entry) = self.log.pop_front() else {
                break;
            };
            let Some(versions) = self.keys.get_mut(&entry.key) else {
                continue;
            };
            // Keep the last version at or below `at` (the state at `at`) unless it is a tombstone.
            let keep_from = versions.partition_point(|v| v.mod_rev <= at);
            let drop = match versions.get(keep_from.wrapping_sub(1)) {
                Some(v) if keep_from > 0 && v.value.is_some() => keep_from - 1,
                _ => keep_from,
            };
            versions.drain(..drop);
            if versions.is_empty() {
                self.keys.remove(&entry.key);
            }
        }
        self.compacted = at;
        Ok(())
    }

    /// Applies the automatic policy: keep at least `min_revisions` and everything younger
    /// than `min_age`; compact what is older than both.
    pub(crate) fn auto_compact(
        &mut self,
        min_revisions: u64,
        min_age: std::time::Duration,
        now: Instant,
    ) {
        self.writes_since_policy = 0;
        let Some(cutoff) = now.checked_sub(min_age) else {
            return;
        };
        let by_count = self.rev.saturating_sub(min_revisions);
        // The newest revision older than the age cutoff; the log is in time order.
        let old = self.log.partition_point(|e| e.at < cutoff);
        let Some(by_age) = old
            .checked_sub(1)
            .and_then(|i| self.log.get(i))
            .map(|e| e.rev)
        else {
            return;
        };
        let target = by_count.min(by_age);
        if target > self.compacted {
            // `target <= rev` holds, so this cannot fail.
            let _ = self.compact(target);
            tracing::debug!(revision = target, "memstore compacted automatically");
        }
    }
}
