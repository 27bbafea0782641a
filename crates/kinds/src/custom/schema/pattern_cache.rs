//! The process's compiled `pattern`s, keyed by their text, and the heap they take together.
//!
//! What it owns: one compilation of each distinct pattern while anything holds it (an
//! installed CRD's strategies, a schema being compiled, the recent list), and the sum of
//! the live patterns' `memory_usage` ([`live_bytes`]), which a CRD's validation bounds
//! across the server ([`within_limit`], [`set_limit`]).
//!
//! Invariants:
//! - the map holds each pattern weakly: a pattern is freed when its last holder drops it,
//!   and its bytes leave [`live_bytes`] then (added when it is compiled, subtracted when it
//!   is dropped), so the sum is exactly that of the distinct live patterns;
//! - the recent list holds the most recently used patterns strongly, at most
//!   [`MAX_RECENT_BYTES`] and [`MAX_RECENT_ENTRIES`] (past either, the least recently used
//!   leave it), so that a CRD's validation and the strategies the CRD controller builds
//!   from the stored CRD right after share one compilation, as does a later label-only
//!   write; [`release_recent`] empties it: the CRD controller calls it when it stops serving
//!   a CRD or replaces its kinds (what only the old schema held is then freed with it), and
//!   [`within_limit`] does before it refuses;
//! - the map's dead entries are swept when it has doubled since the last sweep, so it
//!   holds at most twice the live patterns (plus a constant);
//! - compilation runs outside the lock, and no pattern is dropped under it (what the lock's
//!   holder evicts is dropped once it is released); a refused pattern is not kept.
//!   [`compiles`] counts compilations (tests assert that a write of an unchanged schema
//!   compiles nothing).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use regex_automata::meta;

use super::pattern;

/// The most compiled-pattern heap the recent list keeps alive (one CRD's worth:
/// [`super::MAX_REGEX_TOTAL_BYTES`]).
pub const MAX_RECENT_BYTES: usize = super::MAX_REGEX_TOTAL_BYTES;

/// The most patterns the recent list keeps alive.
pub const MAX_RECENT_ENTRIES: usize = 1024;

/// [`set_limit`]'s default: the most heap the live patterns may take together before a CRD
/// that adds more is refused (8 CRDs at the per-CRD limit).
pub const DEFAULT_LIMIT_BYTES: usize = 256 << 20;

/// A compiled pattern; its bytes count in [`live_bytes`] until it is dropped.
#[derive(Debug)]
pub(crate) struct Compiled {
    re: meta::Regex,
    bytes: usize,
}

impl Compiled {
    /// The compiled program.
    pub(crate) fn regex(&self) -> &meta::Regex {
        &self.re
    }

    /// Its `memory_usage`, as counted in [`live_bytes`].
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        LIVE.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A shared compiled pattern.
pub(crate) type Shared = Arc<Compiled>;

#[derive(Default)]
struct Registry {
    /// Every pattern compiled and not yet swept; an entry is live while its `Weak` upgrades.
    map: HashMap<String, Weak<Compiled>>,
    /// The recent list: each pattern with its last use (a tick).
    recent: HashMap<String, (Shared, u64)>,
    /// The sum of `recent`'s patterns' bytes.
    recent_bytes: usize,
    tick: u64,
    /// `map.len()` after the last sweep.
    swept_at: usize,
}

impl Registry {
    /// Puts `s` first in the recent list and returns what left it (to be dropped unlocked).
    fn touch(&mut self, src: &str, s: &Shared) -> Vec<Shared> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.recent.get_mut(src) {
            e.1 = tick;
            return Vec::new();
        }
        self.recent.insert(src.to_owned(), (Arc::clone(s), tick));
        self.recent_bytes = self.recent_bytes.saturating_add(s.bytes);
        let mut evicted = Vec::new();
        while self.recent_bytes > MAX_RECENT_BYTES || self.recent.len() > MAX_RECENT_ENTRIES {
            let Some(oldest) = self
                .recent
                .iter()
                .filter(|(k, _)| k.as_str() != src)
                .min_by_key(|(_, e)| e.1)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((e, _)) = self.recent.remove(&oldest) {
                self.recent_bytes = self.recent_bytes.saturating_sub(e.bytes);
                evicted.push(e);
            }
        }
        evicted
    }

    fn sweep_if_doubled(&mut self) {
        if self.map.len() > (2 * self.swept_at).max(64) {
            self.map.retain(|_, w| w.strong_count() > 0);
            self.swept_at = self.map.len();
        }
    }
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
static COMPILES: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_LIMIT_BYTES);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many patterns this process has compiled.
pub fn compiles() -> u64 {
    COMPILES.load(Ordering::Relaxed)
}

/// The heap the live compiled patterns take together (their `memory_usage`): those of the
/// served CRDs' schemas, of schemas being compiled and of the recent list.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The server-wide limit of [`live_bytes`] a CRD's validation enforces (0: none).
pub fn limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Sets [`limit`] (process-wide, as the patterns are; the binary's
/// `--max-crd-pattern-bytes`).
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// Drops the recent list's references, so that every pattern no schema holds is freed (and
/// its bytes leave [`live_bytes`]).
pub fn release_recent() {
    let released = {
        let mut guard = registry();
        let Some(r) = guard.as_mut() else {
            return;
        };
        r.recent_bytes = 0;
        std::mem::take(&mut r.recent)
    };
    drop(released);
    if let Some(r) = registry().as_mut() {
        r.map.retain(|_, w| w.strong_count() > 0);
        r.swept_at = r.map.len();
    }
}

/// Whether [`live_bytes`] is within [`limit`]; when it is not, the recent list is released
/// first (it is only a cache) and the sum read again.
pub(super) fn within_limit() -> bool {
    let limit = limit();
    if limit == 0 || live_bytes() <= limit {
        return true;
    }
    release_recent();
    live_bytes() <= limit
}

/// The compiled `src`, and whether it adds to what the served schemas hold (`true` when it
/// was compiled now or only the recent list held it): the live one, or a new compilation
/// (see [`pattern::compile`]).
pub(super) fn get(src: &str) -> Result<(Shared, bool), Box<meta::BuildError>> {
    {
        let mut guard = registry();
        let r = guard.get_or_insert_with(Registry::default);
        if let Some(s) = r.map.get(src).and_then(Weak::upgrade) {
            let recent = usize::from(r.recent.contains_key(src));
            // Held by this call, maybe the recent list, and nothing else.
            let adds = Arc::strong_count(&s) <= 1 + recent;
            let evicted = r.touch(src, &s);
            drop(guard);
            drop(evicted);
            return Ok((s, adds));
        }
    }
    COMPILES.fetch_add(1, Ordering::Relaxed);
    let re = pattern::compile(src)?;
    let bytes = re.memory_usage();
    LIVE.fetch_add(bytes, Ordering::Relaxed);
    let mut s = Arc::new(Compiled { re, bytes });
    let mut raced = None;
    let evicted = {
        let mut guard = registry();
        let r = guard.get_or_insert_with(Registry::default);
        match r.map.get(src).and_then(Weak::upgrade) {
            // Compiled meanwhile by another caller: share that one.
            Some(other) => raced = Some(std::mem::replace(&mut s, other)),
            None => {
                r.map.insert(src.to_owned(), Arc::downgrade(&s));
                r.sweep_if_doubled();
            }
        }
        r.touch(src, &s)
    };
    drop(raced);
    drop(evicted);
    Ok((s, true))
}
