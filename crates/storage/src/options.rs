//! Options, preconditions and events of storage operations.

use listwatch_api::{FieldSelector, LabelSelector, Object, ShardSelector};

use crate::error::{Error, Result};
use crate::key::Key;

/// How a list or get interprets its resource version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceVersionMatch {
    /// Data at least as new as the version.
    NotOlderThan,
    /// Data exactly at the version (from history).
    Exact,
}

/// Label, field and shard selectors together; an object passes when all match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectionPredicate {
    /// The label selector.
    pub label: LabelSelector,
    /// The field selector.
    pub field: FieldSelector,
    /// The shard selector (`shardSelector`, upstream's sharded list and watch): the object's
    /// hashed uid or namespace in one of its ranges. The hash is kept with the object, so
    /// every watcher and list of one event hashes it once.
    pub shard: ShardSelector,
}

impl SelectionPredicate {
    /// Matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether the predicate selects everything.
    pub fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty() && self.shard.is_empty()
    }

    /// Whether `obj` passes.
    pub fn matches(&self, obj: &Object) -> bool {
        obj.in_shard(&self.shard) && self.label.matches(obj) && self.field.matches(obj)
    }
}

/// Options of list and watch, as the query parameters give them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `None`: unset (a consistent read of the latest); `Some(0)`: any version will do.
    pub resource_version: Option<u64>,
    /// How to interpret `resource_version`; `None` is the legacy behaviour.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// Label and field selectors.
    pub predicate: SelectionPredicate,
    /// Page size; `None` or `Some(0)` for everything.
    pub limit: Option<u64>,
    /// Continue token from a previous page.
    pub continue_token: Option<String>,
    /// Whether the key is a collection (list/watch everything under it).
    pub recursive: bool,
    /// Whether a watch may send BOOKMARK events.
    pub allow_watch_bookmarks: bool,
    /// For watches: send the current state first (`Some(true)`), end it with a bookmark.
    pub send_initial_events: Option<bool>,
    /// For watches: ask the backend for progress notifications (bookmarks when idle).
    pub progress_notify: bool,
    /// For watches: when the consumer will end the watch (the request's timeout), on tokio's
    /// clock (`tokio::time::Instant::into_std`). A cache sends a bookmark shortly before it
    /// (upstream: 2 s), so that the client resumes from a recent resourceVersion. Backends
    /// that serve watches directly ignore it: the consumer ends the stream.
    pub deadline: Option<std::time::Instant>,
}

impl ListOptions {
    /// Everything under a collection.
    pub fn recursive() -> Self {
        Self {
            recursive: true,
            ..Self::default()
        }
    }

    /// Sets the resource version.
    #[must_use]
    pub fn at(mut self, rv: Option<u64>, m: Option<ResourceVersionMatch>) -> Self {
        self.resource_version = rv;
        self.resource_version_match = m;
        self
    }

    /// The page size, `None` meaning all.
    pub fn page_limit(&self) -> Option<u64> {
        self.limit.filter(|l| *l > 0)
    }

    /// Checks the combinations upstream rejects for lists, with its messages.
    pub fn validate_list(&self) -> Result<()> {
        let has_rv = self.resource_version.is_some();
        if self.continue_token.is_some() && has_rv && self.resource_version != Some(0) {
            return Err(Error::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        if self.continue_token.is_some() && self.resource_version_match.is_some() {
            return Err(Error::bad_request(
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        match (self.resource_version_match, self.resource_version) {
            (Some(_), None) => Err(Error::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )),
            (Some(ResourceVersionMatch::Exact), Some(0)) => Err(Error::bad_request(
                "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
            )),
            _ => Ok(()),
        }
    }
}

/// Options of get.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetOptions {
    /// `None`/`Some(0)`: the latest; `Some(n)`: at least as new as `n`.
    pub resource_version: Option<u64>,
    /// Answer `Ok(None)` instead of `NotFound`.
    pub ignore_not_found: bool,
}

/// Conditions a write requires of the current object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's UID must be this.
    pub uid: Option<String>,
    /// The object's resource version must be this.
    pub resource_version: Option<u64>,
}

impl Preconditions {
    /// Checks `current` against the preconditions, with upstream's messages.
    pub fn check(&self, key: &Key, current: &Object) -> Result<()> {
        if let Some(uid) = &self.uid {
            let got = current.uid().unwrap_or("");
            if got != uid {
                return Err(key.conflict(format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    listwatch_api::echo::echo(uid),
                    listwatch_api::echo::echo(got)
                )));
            }
        }
        if let Some(rv) = self.resource_version {
            let got = current.resource_version();
            if got != rv {
                return Err(key.conflict(format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, \
                     ResourceVersion in object meta: {got}"
                )));
            }
        }
        Ok(())
    }
}

/// One page (or all) of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectList {
    /// The objects, in key order.
    pub items: Vec<Object>,
    /// The version the list reflects.
    pub resource_version: u64,
    /// Token for the next page, when more remain.
    pub continue_token: Option<String>,
    /// Objects after this page, when known (only without selectors).
    pub remaining_item_count: Option<i64>,
}

/// A bookmark: progress up to a version, with no object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bookmark {
    /// Every event at or below this version has been delivered.
    pub resource_version: u64,
    /// Marks the end of a watch's initial events.
    pub initial_events_end: bool,
}

/// One event of a storage watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The object appeared, or entered the selection.
    Added(Object),
    /// The object changed; `prev` is its state before, when the backend knows it.
    Modified {
        /// The new state.
        object: Object,
        /// The previous state.
        prev: Option<Object>,
    },
    /// The object went away, or left the selection: its last state, at the deletion's version.
    Deleted(Object),
    /// Progress without an object.
    Bookmark(Bookmark),
    /// The watch failed; nothing follows.
    Error(Error),
}

impl WatchEvent {
    /// The version this event happened at (`None` for errors).
    pub fn resource_version(&self) -> Option<u64> {
        match self {
            WatchEvent::Added(o)
            | WatchEvent::Deleted(o)
            | WatchEvent::Modified { object: o, .. } => Some(o.resource_version()),
            WatchEvent::Bookmark(b) => Some(b.resource_version),
            WatchEvent::Error(_) => None,
        }
    }

    /// The object, for object events.
    pub fn object(&self) -> Option<&Object> {
        match self {
            WatchEvent::Added(o)
            | WatchEvent::Deleted(o)
            | WatchEvent::Modified { object: o, .. } => Some(o),
            _ => None,
        }
    }
}

/// Object count under a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// How many objects.
    pub object_count: u64,
}

/// What a list is expected to cost ([`Storage::list_cost`](crate::Storage::list_cost)):
/// upstream's `storage.Stats` as its APF list work estimator reads them, and where the list
/// would be served from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListCost {
    /// Objects of the resource, in every namespace (upstream counts per resource too).
    pub object_count: u64,
    /// Their average encoded size in bytes; 0 when unknown (then taken as the largest
    /// object, upstream's 1.5 MB, whenever there are objects).
    pub average_object_bytes: u64,
    /// The list would be served from memory (a cache) and streamed as it is sent, rather
    /// than read whole from the backend first.
    pub from_cache: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_validation_follows_upstream() {
        let mut o = ListOptions::recursive();
        o.continue_token = Some("t".into());
        o.resource_version = Some(5);
        assert!(o.validate_list().is_err());
        o.resource_version = Some(0);
        assert!(o.validate_list().is_ok());
        let o = ListOptions::recursive().at(None, Some(ResourceVersionMatch::Exact));
        assert!(o.validate_list().is_err());
        let o = ListOptions::recursive().at(Some(0), Some(ResourceVersionMatch::Exact));
        assert!(o.validate_list().is_err());
        let o = ListOptions::recursive().at(Some(0), Some(ResourceVersionMatch::NotOlderThan));
        assert!(o.validate_list().is_ok());
    }
}
