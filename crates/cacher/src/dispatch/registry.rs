//! The registry of watchers: who is registered, indexed for the dispatcher, and when each is
//! due its next bookmark.
//!
//! # Indexes
//!
//! A watcher sits in exactly one scope, `(namespace, name)`, each part `""` when the watch does
//! not fix it (from the key, or from an exact `metadata.namespace`/`metadata.name` field
//! selector), and within the scope either under the trigger value its field selector fixes
//! (pods: `spec.nodeName=N`) or among the untriggered. An event for `ns/name` with trigger
//! values `cur` and `prev` goes to the scopes `{ns,name}`, `{ns,""}`, `{"",name}`, `{"",""}`,
//! and within each to the untriggered watchers and those under `cur` or `prev`.
//!
//! # Bookmarks
//!
//! As upstream's `watcherBookmarkTimeBuckets`: every watcher that allows bookmarks is in the
//! bucket of the second its next one is due — a minute after the last (upstream's bookmark
//! frequency), or 2 s before the watch's deadline when that comes first; none once the deadline
//! is that close. The dispatcher sleeps until the first bucket and pops only the due ones, so a
//! tick costs the due watchers, never a scan of all of them.
//!
//! # Epochs
//!
//! A relist of the cache ends every watcher and moves the epoch; until the cache is ready
//! again the registry accepts no one. A watch admitted in one epoch can only register in that
//! epoch, so no watcher ever spans a relist.
//!
//! Invariants: the lock is held only for index updates, candidate collection, bucket pops and
//! non-blocking sends, never across an `.await`; every map mutation is a single operation, so
//! a poisoned lock still guards consistent indexes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::ResourceMetrics;
use crate::watcher::queue::Queue;
use crate::watcher::spec::Spec;
use crate::watcher::state::WatcherState;

/// A watcher's registration, shared by the registry and the watcher's stream (one allocation
/// per watch): its spec and its buffer, which also carries its state. A watcher that resumes
/// after being detached registers a new one.
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) spec: Spec,
    pub(crate) queue: Queue,
}

/// When a watcher's next bookmark is due, if any (upstream's `nextBookmarkTime`): after
/// `every`, or 2 s before its deadline when that is sooner; none once that moment has passed.
pub(crate) fn next_bookmark(
    now: Instant,
    every: Duration,
    allow: bool,
    deadline: Option<Instant>,
) -> Option<Instant> {
    if !allow {
        return None;
    }
    let mut due = now + every;
    if let Some(before_end) = deadline.and_then(|d| d.checked_sub(PRE_DEADLINE)) {
        due = due.min(before_end);
    }
    (due >= now).then_some(due)
}

/// How long before a watch's deadline its last bookmark is due (upstream: 2 s).
pub(crate) const PRE_DEADLINE: Duration = Duration::from_secs(2);

/// Watcher ids by the second their next bookmark is due.
pub(crate) struct BookmarkSchedule {
    origin: Instant,
    /// The first bucket not yet popped; later additions for earlier seconds go here.
    next: u64,
    buckets: BTreeMap<u64, Vec<u64>>,
}

impl BookmarkSchedule {
    fn new(origin: Instant) -> Self {
        Self {
            origin,
            next: 0,
            buckets: BTreeMap::new(),
        }
    }

    fn bucket_of(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.origin).as_secs()
    }

    /// Schedules watcher `id` for `due`; returns whether it is now the earliest bucket.
    pub(crate) fn add(&mut self, id: u64, due: Instant) -> bool {
        let b = self.bucket_of(due).max(self.next);
        let first = self.buckets.first_key_value().is_none_or(|(k, _)| b < *k);
        self.buckets.entry(b).or_default().push(id);
        first
    }

    /// Takes the ids of every bucket due by `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Vec<u64> {
        let current = self.bucket_of(now);
        let later = self.buckets.split_off(&(current + 1));
        let due = std::mem::replace(&mut self.buckets, later);
        self.next = self.next.max(current + 1);
        due.into_values().flatten().collect()
    }

    /// When the first bucket is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let (b, _) = self.buckets.first_key_value()?;
        Some(self.origin + Duration::from_secs(*b))
    }

    /// How many entries are scheduled (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.values().map(Vec::len).sum()
    }
}

#[derive(Default)]
struct ScopeSet {
    untriggered: HashMap<u64, Arc<Entry>>,
    by_trigger: HashMap<Box<str>, HashMap<u64, Arc<Entry>>>,
}

impl ScopeSet {
    fn is_empty(&self) -> bool {
        self.untriggered.is_empty() && self.by_trigger.is_empty()
    }
}

/// Every registered watcher, indexed. Guarded by [`Registry`]'s mutex.
pub(crate) struct Watchers {
    /// The version of the newest event whose candidates have been collected. A watcher
    /// registering now receives every later event live and must replay the earlier ones.
    pub(crate) started_rv: u64,
    /// Moves at every reset (relist); see the module docs.
    pub(crate) epoch: u64,
    /// Whether watchers may register (the cache is ready).
    pub(crate) accepting: bool,
    scopes: HashMap<(Box<str>, Box<str>), ScopeSet>,
    all: HashMap<u64, Arc<Entry>>,
    /// Watchers that asked for progress notification and allow bookmarks.
    progress: HashMap<u64, Arc<Entry>>,
    pub(crate) bookmarks: BookmarkSchedule,
}

impl Watchers {
    fn new(origin: Instant) -> Self {
        Self {
            started_rv: 0,
            epoch: 0,
            accepting: false,
            scopes: HashMap::new(),
            all: HashMap::new(),
            progress: HashMap::new(),
            bookmarks: BookmarkSchedule::new(origin),
        }
    }

    /// Registers `e`; returns whether its first bookmark is now the earliest due.
    pub(crate) fn add(&mut self, e: Arc<Entry>, first_bookmark: Option<Instant>) -> bool {
        let set = self.scopes.entry(e.spec.scope.clone()).or_default();
        match &e.spec.trigger {
            Some(t) => {
                set.by_trigger
                    .entry(t.clone())
                    .or_default()
                    .insert(e.id, Arc::clone(&e));
            }
            None => {
                set.untriggered.insert(e.id, Arc::clone(&e));
            }
        }
        if e.spec.progress_notify && e.spec.allow_bookmarks {
            self.progress.insert(e.id, Arc::clone(&e));
        }
        let earliest = first_bookmark.is_some_and(|due| self.bookmarks.add(e.id, due));
        self.all.insert(e.id, e);
        earliest
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Arc<Entry>> {
        let e = self.all.remove(&id)?;
        self.progress.remove(&id);
        if let Some(set) = self.scopes.get_mut(&e.spec.scope) {
            match &e.spec.trigger {
                Some(t) => {
                    if let Some(m) = set.by_trigger.get_mut(t) {
                        m.remove(&id);
                        if m.is_empty() {
                            set.by_trigger.remove(t);
                        }
                    }
                }
                None => {
                    set.untriggered.remove(&id);
                }
            }
            if set.is_empty() {
                self.scopes.remove(&e.spec.scope);
            }
        }
        Some(e)
    }

    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Arc<Entry>> {
        self.all.get(&id)
    }

    pub(crate) fn progress_watchers(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.progress.values()
    }

    pub(crate) fn candidates(
        &self,
        ns: &str,
        name: &str,
        triggers: [Option<&str>; 2],
        out: &mut Vec<Arc<Entry>>,
    ) {
        let scopes = [(ns, name), (ns, ""), ("", name), ("", "")];
        for (i, (sn, sm)) in scopes.iter().enumerate() {
            // Cluster-scoped objects have ns == "", which makes scopes repeat.
            if scopes[..i].contains(&(*sn, *sm)) {
                continue;
            }
            let Some(set) = self.scopes.get(&(Box::from(*sn), Box::from(*sm))) else {
                continue;
            };
            out.extend(set.untriggered.values().cloned());
            for (j, t) in triggers.iter().enumerate() {
                let Some(t) = t else { continue };
                if triggers[..j].contains(&Some(*t)) {
                    continue;
                }
                if let Some(m) = set.by_trigger.get(*t) {
                    out.extend(m.values().cloned());
                }
            }
        }
    }

    /// Unregisters everyone (the schedule's entries then point nowhere and are skipped).
    pub(crate) fn drain(&mut self) -> Vec<Arc<Entry>> {
        self.scopes.clear();
        self.progress.clear();
        self.all.drain().map(|(_, e)| e).collect()
    }
}

/// The registry: watchers behind a mutex, plus what the dispatcher publishes.
pub(crate) struct Registry {
    watchers: Mutex<Watchers>,
    /// The last resource version the dispatcher handled (events and storage progress).
    pub(crate) last_rv: AtomicU64,
    /// Wakes the dispatcher when a registration made the first bookmark due sooner.
    pub(crate) bookmark_wake: Notify,
    /// The last watcher id handed out.
    next_id: AtomicU64,
}

impl Registry {
    pub(crate) fn new(origin: Instant) -> Self {
        Self {
            watchers: Mutex::new(Watchers::new(origin)),
            last_rv: AtomicU64::new(0),
            bookmark_wake: Notify::new(),
            next_id: AtomicU64::new(0),
        }
    }

    /// A watcher id never handed out before.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Watchers> {
        // A panic while holding this lock leaves the indexes consistent (every mutation is a
        // single map operation), so a poisoned lock is still usable.
        self.watchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Removes a watcher and closes its queue with `state`; returns whether it was still
/// registered.
pub(crate) fn unregister(
    registry: &Registry,
    id: u64,
    state: WatcherState,
    metrics: &ResourceMetrics,
) -> bool {
    let e = registry.lock().remove(id);
    match e {
        Some(e) => {
            e.queue.close(state);
            metrics.watchers_active.dec();
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_bookmark_is_a_minute_away_or_two_seconds_before_the_deadline() {
        let now = Instant::now();
        let minute = Duration::from_secs(60);
        assert_eq!(next_bookmark(now, minute, false, None), None);
        assert_eq!(next_bookmark(now, minute, true, None), Some(now + minute));
        let far = now + Duration::from_secs(600);
        assert_eq!(
            next_bookmark(now, minute, true, Some(far)),
            Some(now + minute)
        );
        let soon = now + Duration::from_secs(10);
        assert_eq!(
            next_bookmark(now, minute, true, Some(soon)),
            Some(now + Duration::from_secs(8))
        );
        // Within the last 2 s nothing more is scheduled.
        let ending = now + Duration::from_secs(1);
        assert_eq!(next_bookmark(now, minute, true, Some(ending)), None);
    }

    #[test]
    fn buckets_pop_only_what_is_due_and_late_additions_join_the_next_pop() {
        let origin = Instant::now();
        let mut s = BookmarkSchedule::new(origin);
        let at = |secs: f64| origin + Duration::from_secs_f64(secs);
        assert!(s.add(1, at(5.5)));
        assert!(!s.add(2, at(5.9)), "same bucket");
        assert!(!s.add(3, at(70.0)));
        assert!(s.add(4, at(2.0)), "earlier than the first");
        assert_eq!(s.next_due(), Some(at(2.0)));
        assert!(s.pop_due(at(1.9)).is_empty());
        assert_eq!(s.pop_due(at(2.0)), [4]);
        let mut due = s.pop_due(at(6.0));
        due.sort_unstable();
        assert_eq!(due, [1, 2]);
        // Due in a second already popped: goes to the next pop rather than being lost.
        s.add(5, at(3.0));
        assert_eq!(s.pop_due(at(7.0)), [5]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.next_due(), Some(at(70.0)));
    }
}
