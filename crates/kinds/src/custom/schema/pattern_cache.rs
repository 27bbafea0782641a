//! The process's compiled `pattern`s, keyed by their text: a CRD write, each of its
//! versions' strategies and every later write of the same CRD share one compilation of
//! each distinct pattern.
//!
//! Invariants: the cache holds at most [`MAX_CACHE_BYTES`] of compiled patterns (their
//! `memory_usage`) and [`MAX_CACHE_ENTRIES`] entries; past either, the least recently used
//! entries are evicted, so what a deleted CRD compiled is dropped once other patterns need
//! the room (a schema still in use keeps its own reference to its patterns). Compilation runs
//! outside the lock; a refused pattern is not cached. [`compiles`] counts compilations (tests
//! assert that a write of an unchanged schema compiles nothing).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use regex_automata::meta;

use super::pattern;

/// The most compiled-pattern heap the cache keeps.
pub const MAX_CACHE_BYTES: usize = 64 << 20;

/// The most patterns the cache keeps.
pub const MAX_CACHE_ENTRIES: usize = 4096;

struct Entry {
    re: meta::Regex,
    bytes: usize,
    used: u64,
}

#[derive(Default)]
struct Cache {
    map: HashMap<String, Entry>,
    bytes: usize,
    tick: u64,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
static COMPILES: AtomicU64 = AtomicU64::new(0);

/// How many patterns this process has compiled (cache misses).
pub fn compiles() -> u64 {
    COMPILES.load(Ordering::Relaxed)
}

/// The compiled `src`: the cached one, or a new compilation (see [`pattern::compile`]),
/// cached when it succeeds.
pub(super) fn get(src: &str) -> Result<meta::Regex, Box<meta::BuildError>> {
    {
        let mut guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = guard.get_or_insert_with(Cache::default);
        cache.tick += 1;
        let tick = cache.tick;
        if let Some(e) = cache.map.get_mut(src) {
            e.used = tick;
            return Ok(e.re.clone());
        }
    }
    COMPILES.fetch_add(1, Ordering::Relaxed);
    let re = pattern::compile(src)?;
    let bytes = re.memory_usage();
    let mut guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = guard.get_or_insert_with(Cache::default);
    cache.tick += 1;
    let tick = cache.tick;
    if let Some(old) = cache.map.insert(
        src.to_owned(),
        Entry {
            re: re.clone(),
            bytes,
            used: tick,
        },
    ) {
        // Compiled meanwhile by another caller.
        cache.bytes = cache.bytes.saturating_sub(old.bytes);
    }
    cache.bytes = cache.bytes.saturating_add(bytes);
    while cache.bytes > MAX_CACHE_BYTES || cache.map.len() > MAX_CACHE_ENTRIES {
        let Some(oldest) = cache
            .map
            .iter()
            .filter(|(k, _)| k.as_str() != src)
            .min_by_key(|(_, e)| e.used)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        if let Some(e) = cache.map.remove(&oldest) {
            cache.bytes = cache.bytes.saturating_sub(e.bytes);
        }
    }
    Ok(re)
}
