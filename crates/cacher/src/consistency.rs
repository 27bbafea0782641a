//! The consistency checker: upstream's `DetectCacheInconsistency` (KEP-4988), and the
//! fallback it drives.
//!
//! Owns the periodic comparison of one cacher's watch cache with its backend, and the
//! cacher's *consistent* flag (`Inner::consistent`), which only a check changes.
//!
//! A check, every [`CacherConfig::consistency_check_period`](crate::CacherConfig) (5 min,
//! upstream's; each one starts between half a period and a period after the previous one
//! ended, so the caches of many resources spread out and a corruption is found within one
//! period), while the cache is ready:
//! 1. brings the cache up to the backend's current revision when it can (a bounded wait,
//!    with progress requested as consistent reads do; a cache that does not catch up is
//!    checked at the version it has);
//! 2. takes the cache's published view at its version `rv` and digests its state: for each
//!    object, `namespace/name/resourceVersion` (keys and versions, never bodies, as
//!    upstream), in chunks read from the immutable view;
//! 3. digests the backend's state at exactly `rv` the same way, listing it in pages
//!    (continue tokens, [`CacherConfig::consistency_check_page_size`](crate::CacherConfig)
//!    objects each, as upstream's checker pages);
//!    3b. when the backend has compacted `rv` away — an idle resource's cache stays at its
//!    last write's revision on a backend that cannot be asked for progress (etcd before
//!    3.5.13, etcd#15220), and a compaction passes it — compares with the backend's
//!    *current* state instead: lists it at its current revision `R` (paged, hashing as it
//!    goes). The cache's state at `rv` holds until its next change, so equal digests mean
//!    the resource did not change in `(rv, R]` and the cache holds the state at `R`. When
//!    they differ, the cache may only lag: the check waits (at most 3 s, the freshness
//!    timeout) for it to reach `R` and then compares both at its new version exactly; if it
//!    does not reach `R` in time, both sides are digested once more (the cache's state now,
//!    the backend's current one) and a difference that outlived the wait counts as a
//!    failure: the backend holds a change the cache did not receive within the wait;
//! 4. compares: equal → `success`; different → `failure`; a list that fails, a backend that
//!    answers at another version, or a relist meanwhile → `error` (counted, nothing changes).
//!
//! The first failure after agreement is logged as an error; while the resource stays
//! inconsistent, and for checks that could not compare, the line repeats at most every
//! 10 minutes per resource (debug otherwise).
//!
//! On a failure the cacher marks the resource inconsistent: every pinned past state is
//! dropped (upstream purges its snapshots), and lists and gets of the resource — at any
//! resource version, with or without a limit or continue token — read the backend instead of
//! the cache, until a later check agrees; then the pins are dropped once more (none was
//! taken from the cache meanwhile, but a page in flight at the failure may have pinned one)
//! and reads come from the cache again. This goes further than upstream, which stops
//! serving snapshots (exact and continued lists) but keeps serving the rest from the cache.
//! Watches stay on the cache, as upstream's: their events come from the backend's stream.
//! Nothing rebuilds the cache by force (as upstream): it agrees again when the objects it
//! got wrong change, or after a relist.
//!
//! Invariants:
//! - the two digests describe the same revision: the cache's state at `rv` (the view's
//!   state holds for every version from its last change to `rv`) and the backend's Exact
//!   list at `rv` — or, when `rv` is compacted away (3b), the backend's current state,
//!   where a difference is a failure only once the cache had the bounded wait to catch
//!   up; a relist during the check voids it;
//! - a digest is order-independent (a wrapping sum of each item's mixed 64-bit FNV-1a), so
//!   neither side's order or page boundaries matter, and a check holds one backend page and
//!   one chunk of the cache at a time (handles on the cache's objects, not copies), never a
//!   list;
//! - a check never blocks writes or watches: it takes no lock the writer or the dispatcher
//!   waits on (a view is an `Arc`; the writer moves on while a check reads an old one) and
//!   runs in a task of its own; each backend page has a deadline.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, SelectionPredicate};
use rand::Rng;
use tokio::time::Instant;

use crate::{Inner, ReadyState};

/// How long one backend page of a check may take (upstream's list timeout).
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a check comparing with the storage's current state waits for the cache to
/// reach the storage's revision (the watch cache's freshness timeout, upstream's 3 s).
const CATCH_UP_WAIT: Duration = Duration::from_secs(3);

/// How often a repeated line of the checks (still inconsistent, could not compare) is
/// logged per resource; the first failure after agreement is always logged.
const REPEAT_LOG_EVERY: Duration = Duration::from_secs(600);

/// The checks' log rate limits of one cacher.
#[derive(Debug, Default)]
pub(crate) struct CheckLogs {
    inconsistent: LogEvery,
    error: LogEvery,
}

/// Allows one line per [`REPEAT_LOG_EVERY`].
#[derive(Debug, Default)]
struct LogEvery(std::sync::Mutex<Option<Instant>>);

impl LogEvery {
    fn allow(&self) -> bool {
        self.allow_or_force(false)
    }

    /// Whether to log now: always when `force`d, else once per period; either way a line
    /// logged starts the period.
    fn allow_or_force(&self, force: bool) -> bool {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !force && last.is_some_and(|t| t.elapsed() < REPEAT_LOG_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

/// What one side holds: how many objects and the sum of their items' hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digest {
    /// Objects digested.
    pub objects: u64,
    /// The wrapping sum of each object's mixed FNV-1a of `namespace/name/resourceVersion`.
    pub sum: u64,
}

impl Digest {
    fn add(&mut self, o: &Object) {
        let mut h = Fnv::new();
        h.write(o.namespace().unwrap_or("").as_bytes());
        h.write(b"/");
        h.write(o.name().as_bytes());
        h.write(b"/");
        h.write(o.resource_version().to_string().as_bytes());
        self.objects += 1;
        self.sum = self.sum.wrapping_add(mix(h.0));
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x} ({} objects)", self.sum, self.objects)
    }
}

/// 64-bit FNV-1a, fed piece by piece.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// A bijective finaliser (splitmix64's), so that a sum of items' hashes does not cancel
/// the way a sum of raw FNV values could.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What one consistency check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsistencyCheck {
    /// The cache and the backend hold the same keys at the same versions at `rv`.
    Consistent {
        /// The revision compared.
        rv: u64,
        /// Both sides' digest.
        digest: Digest,
    },
    /// They differ at `rv`: reads of the resource now go to the backend.
    Inconsistent {
        /// The revision compared.
        rv: u64,
        /// The cache's digest.
        cache: Digest,
        /// The backend's digest.
        backend: Digest,
    },
    /// No comparison could be made (not ready, a list failed, a relist meanwhile).
    Error(String),
}

/// Runs a check every period (see the module docs) until the cacher stops.
pub(crate) async fn run(inner: Arc<Inner>) {
    let period = inner.config.consistency_check_period;
    if period.is_zero() {
        return;
    }
    let mut stop = inner.stop.subscribe();
    loop {
        // Between half a period and a period, so that the caches spread out.
        let wait = period.mul_f64(rand::rng().random_range(0.5..=1.0));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        check(&inner).await;
    }
}

/// One check, with its outcome recorded (metrics, flag, pins) and returned.
pub(crate) async fn check(inner: &Inner) -> ConsistencyCheck {
    let resource = inner.config.resource.as_str();
    let [success, failure, error] = &inner.metrics.checks;
    let outcome = compare(inner).await;
    match &outcome {
        ConsistencyCheck::Consistent { rv, digest } => {
            success.inc();
            if !inner.consistent.swap(true, Ordering::SeqCst) {
                inner.reader.drop_snapshots();
                inner.metrics.inconsistent.set(0);
                tracing::info!(resource, rv, %digest, "watch cache consistent with the storage again; reads are served from it again");
            } else {
                tracing::debug!(resource, rv, %digest, "watch cache consistency check passed");
            }
        }
        ConsistencyCheck::Inconsistent { rv, cache, backend } => {
            failure.inc();
            let was_consistent = inner.consistent.swap(false, Ordering::SeqCst);
            inner.reader.drop_snapshots();
            inner.metrics.inconsistent.set(1);
            if inner.check_logs.inconsistent.allow_or_force(was_consistent) {
                tracing::error!(resource, rv, cache = %cache, storage = %backend,
                    "watch cache inconsistent with the storage: its snapshots are dropped and lists and gets of the resource read the storage until a check agrees");
            } else {
                tracing::debug!(resource, rv, cache = %cache, storage = %backend,
                    "watch cache still inconsistent with the storage");
            }
        }
        ConsistencyCheck::Error(why) => {
            error.inc();
            if inner.check_logs.error.allow() {
                tracing::warn!(resource, error = %why, "watch cache consistency check could not compare");
            } else {
                tracing::debug!(resource, error = %why, "watch cache consistency check could not compare");
            }
        }
    }
    outcome
}

/// The comparison itself; changes nothing.
async fn compare(inner: &Inner) -> ConsistencyCheck {
    let generation = {
        let r = inner.ready.borrow();
        if r.state != ReadyState::Ready {
            return ConsistencyCheck::Error("the cache is not ready".into());
        }
        r.generation
    };
    let key = match Key::collection(&inner.config.resource, None) {
        Ok(key) => key,
        Err(e) => return ConsistencyCheck::Error(e.to_string()),
    };
    // Up to the backend's current revision when the cache can be made to catch up (a bounded
    // wait); otherwise (or in vain) at the version the cache has.
    if inner.config.consistent_reads_from_cache {
        if let Ok(current) = inner.backend.current_resource_version().await {
            let _ = inner.reader.wait_until_fresh(current, None).await;
        }
    }
    let outcome = match compare_exact(inner, &key).await {
        Err(Failed::Compacted(why)) => {
            tracing::debug!(resource = %inner.config.resource, error = %why,
                "the cache's version is compacted away: comparing with the storage's current state");
            compare_current(inner, &key).await
        }
        other => other,
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(Failed::Compacted(why) | Failed::Other(why)) => return ConsistencyCheck::Error(why),
    };
    let same_generation = {
        let r = inner.ready.borrow();
        r.state == ReadyState::Ready && r.generation == generation
    };
    if !same_generation {
        return ConsistencyCheck::Error("the cache relisted during the check".into());
    }
    outcome
}

/// Why a comparison could not be made.
enum Failed {
    /// The storage no longer has the revision asked for.
    Compacted(String),
    /// Anything else.
    Other(String),
}

/// Compares the cache at its version `rv` with the storage's state at exactly `rv`.
async fn compare_exact(inner: &Inner, key: &Key) -> Result<ConsistencyCheck, Failed> {
    let (rv, cache) = cache_digest(inner, key).await?;
    let backend = backend_digest(inner, key, Some(rv)).await?.1;
    Ok(verdict(rv, cache, backend))
}

/// Compares the cache with the storage's current state (module docs, step 3b): used when
/// the cache's version `c` is compacted away, as an idle resource's is on a backend that
/// sends it no progress (etcd before 3.5.13).
async fn compare_current(inner: &Inner, key: &Key) -> Result<ConsistencyCheck, Failed> {
    let (c, cache) = cache_digest(inner, key).await?;
    let (r, backend) = backend_digest(inner, key, None).await?;
    if cache == backend || c >= r {
        return Ok(verdict(r, cache, backend));
    }
    // The resource may have changed in (c, r] with the cache yet to hear of it: wait
    // (bounded) for the cache to reach r, then compare at one exact revision.
    let deadline = Instant::now() + CATCH_UP_WAIT;
    if inner
        .reader
        .wait_until_fresh(r, Some(deadline))
        .await
        .is_ok()
    {
        return compare_exact(inner, key).await;
    }
    // Not in time: compare once more with the state now on both sides. A difference that
    // outlived the wait is a change the cache has not received within it: a divergence.
    let (_, cache) = cache_digest(inner, key).await?;
    let (r, backend) = backend_digest(inner, key, None).await?;
    Ok(verdict(r, cache, backend))
}

fn verdict(rv: u64, cache: Digest, backend: Digest) -> ConsistencyCheck {
    if cache == backend {
        ConsistencyCheck::Consistent { rv, digest: cache }
    } else {
        ConsistencyCheck::Inconsistent { rv, cache, backend }
    }
}

/// The cache's published version and the digest of its state there, read in chunks.
async fn cache_digest(inner: &Inner, key: &Key) -> Result<(u64, Digest), Failed> {
    let view = inner.reader.view();
    let rv = view.resource_version();
    let page = usize::try_from(inner.config.consistency_check_page_size.max(1)).unwrap_or(1000);
    let mut cache = Digest::default();
    let everything = SelectionPredicate::everything();
    let mut start: Option<String> = None;
    loop {
        let (objects, next) = view
            .state_chunk(key, &everything, start.as_deref(), page)
            .map_err(|e| Failed::Other(format!("reading the cache: {e}")))?;
        objects.iter().for_each(|o| cache.add(o));
        match next {
            Some(next) => start = Some(next),
            None => break,
        }
        // Hashing a large state is CPU work: let the other tasks of this thread run.
        tokio::task::yield_now().await;
    }
    Ok((rv, cache))
}

/// The storage's state at exactly `at` (`None`: its current revision), listed in pages, and
/// the revision it was listed at.
async fn backend_digest(
    inner: &Inner,
    key: &Key,
    at: Option<u64>,
) -> Result<(u64, Digest), Failed> {
    let mut backend = Digest::default();
    let mut opts = ListOptions::recursive().at(at, at.map(|_| ResourceVersionMatch::Exact));
    opts.limit = Some(u64::from(inner.config.consistency_check_page_size.max(1)));
    let mut listed_at = None;
    loop {
        let list = match tokio::time::timeout(PAGE_TIMEOUT, inner.backend.list(key, &opts)).await {
            Ok(Ok(list)) => list,
            Ok(Err(e)) if e.is_expired() => {
                return Err(Failed::Compacted(format!("listing the storage: {e}")));
            }
            Ok(Err(e)) => return Err(Failed::Other(format!("listing the storage: {e}"))),
            Err(_) => {
                return Err(Failed::Other(format!(
                    "listing the storage took over {PAGE_TIMEOUT:?}"
                )));
            }
        };
        let expected = *listed_at.get_or_insert(at.unwrap_or(list.resource_version));
        if list.resource_version != expected {
            return Err(Failed::Other(format!(
                "the storage listed at resource version {} instead of {expected}",
                list.resource_version
            )));
        }
        list.items.iter().for_each(|o| backend.add(o));
        match list.continue_token {
            Some(token) => {
                opts.resource_version = None;
                opts.resource_version_match = None;
                opts.continue_token = Some(token);
            }
            None => return Ok((expected, backend)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    fn obj(ns: &str, name: &str, rv: u64) -> Object {
        let v = serde_json::json!({"metadata":{"name":name,"namespace":ns}});
        Object::from_value(v, &SelectableFields::none())
            .unwrap()
            .with_resource_version(rv)
    }

    fn digest(objects: &[Object]) -> Digest {
        let mut d = Digest::default();
        objects.iter().for_each(|o| d.add(o));
        d
    }

    #[test]
    fn a_digest_ignores_order_and_sees_a_missing_object_or_another_version() {
        let all = [obj("a", "x", 5), obj("a", "y", 6), obj("b", "x", 7)];
        let reversed = [obj("b", "x", 7), obj("a", "y", 6), obj("a", "x", 5)];
        assert_eq!(digest(&all), digest(&reversed));
        assert_ne!(digest(&all), digest(&all[..2]));
        let moved = [obj("a", "x", 5), obj("a", "y", 8), obj("b", "x", 7)];
        assert_ne!(digest(&all), digest(&moved));
        // The item is namespace/name/version: a name moving between namespaces differs.
        assert_ne!(digest(&[obj("a", "bx", 5)]), digest(&[obj("ab", "x", 5)]));
    }

    #[test]
    fn a_repeated_line_is_allowed_once_per_period() {
        let every = LogEvery::default();
        assert!(every.allow());
        assert!(!every.allow());
        assert!(!every.allow());
        // The line that starts a failure is logged whatever the period, and starts one:
        // the next check that is still failing is quiet.
        let every = LogEvery::default();
        assert!(every.allow_or_force(true));
        assert!(!every.allow_or_force(false));
        assert!(every.allow_or_force(true));
    }

    #[test]
    fn fnv_matches_the_reference_value() {
        // FNV-1a 64 of "a" (the reference test vector).
        let mut h = Fnv::new();
        h.write(b"a");
        assert_eq!(h.0, 0xaf63_dc4c_8601_ec8c);
    }
}
