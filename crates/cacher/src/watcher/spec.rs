//! What a watch asks for: its key, selectors, dispatcher scope and trigger value, bookmark
//! settings and deadline ([`Spec`]), and where it starts ([`Start`]).
//!
//! Invariants: a spec is fixed for the life of the watch (a resumed watcher registers again
//! with the same spec); its scope and trigger are derived from the key and the selectors only.

use listwatch_storage::{Key, SelectionPredicate};
use tokio::time::Instant;

/// A function run at every evaluation of one watcher's filter, before its predicate: lets
/// tests make a filter slow or block it.
#[cfg(test)]
pub(crate) type FilterHook = std::sync::Arc<dyn Fn(&listwatch_api::Object) + Send + Sync>;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The current state as ADDED events, then changes; optionally the
    /// initial-events-end bookmark after the state.
    State { end_bookmark: bool },
    /// Every change after this version.
    Since(u64),
}

/// One watch's request, as the registry indexes it and its filter applies it.
#[derive(Clone)]
pub(crate) struct Spec {
    pub(crate) key: Key,
    pub(crate) predicate: SelectionPredicate,
    pub(crate) scope: (Box<str>, Box<str>),
    pub(crate) trigger: Option<Box<str>>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) progress_notify: bool,
    pub(crate) deadline: Option<Instant>,
    /// Run at every evaluation of this watcher's filter (tests).
    #[cfg(test)]
    pub(crate) filter_hook: Option<FilterHook>,
}

/// The dispatcher scope of a watch: namespace and name fixed by the key or by exact
/// `metadata.namespace` / `metadata.name` field selectors, `""` where free.
pub(crate) fn scope_of(key: &Key, pred: &SelectionPredicate) -> (Box<str>, Box<str>) {
    let ns = key
        .namespace()
        .or_else(|| pred.field.exact_match("metadata.namespace"))
        .unwrap_or("");
    let name = key
        .name()
        .or_else(|| pred.field.exact_match("metadata.name"))
        .unwrap_or("");
    (ns.into(), name.into())
}
