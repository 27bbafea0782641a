//! The failures an [`Informer`](crate::Informer) reports ([`InformerError`], sent to
//! [`Informer::errors`](crate::Informer::errors)) and why its wait for the first sync gives
//! up ([`SyncError`]), and the guards that catch the caller's code (a transform's panic)
//! before it can kill the informer's task; see the informer's module doc, "Failures are
//! visible to code".
//!
//! Invariants: every variant is cheap to clone (errors are shared through a broadcast
//! channel); a panic's payload is reduced to its message, never kept.

use std::sync::Arc;

use crate::error::Error;
use crate::informer::Transform;
use crate::reflector::Event;
use crate::resource::{ObjectKey, Resource};

/// How many failures [`Informer::errors`](crate::Informer::errors) keeps for a receiver that does not read (older ones
/// are dropped; the receiver is told how many it missed).
pub(crate) const ERROR_BUFFER: usize = 64;

/// A failure inside an informer, sent to [`Informer::errors`](crate::Informer::errors).
#[derive(Debug, Clone, thiserror::Error)]
pub enum InformerError {
    /// The reflector failed a list or watch (it retries by itself, with backoff).
    #[error("reflector: {0}")]
    Reflector(Arc<Error>),
    /// The transform panicked on an object; its watch event was skipped, or the list it
    /// was in failed as a whole (and is retried).
    #[error("transform panicked on {key}: {message}; the event was skipped")]
    TransformPanicked {
        /// The object's key.
        key: ObjectKey,
        /// The panic's message.
        message: String,
    },
    /// An index function panicked while the store applied an event; the event was skipped
    /// (the store keeps its previous state, see the store's module doc).
    #[error("an index function panicked applying {event}: {message}; the event was skipped")]
    IndexPanicked {
        /// What was being applied: the object's key, or "a relist".
        event: String,
        /// The panic's message.
        message: String,
    },
    /// An event handler panicked on a delta; the handler goes on with the next one.
    #[error("event handler panicked on {key}: {message}")]
    HandlerPanicked {
        /// The key of the delta's object.
        key: ObjectKey,
        /// The panic's message.
        message: String,
    },
}

/// Why [`Informer::wait_until_synced`](crate::Informer::wait_until_synced) or
/// [`Store::wait_until_synced`](crate::Store::wait_until_synced) gave up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    /// The informer stopped (dropped, or its driver ended), or the store's writer went
    /// away, before the first sync.
    #[error("stopped before the first sync: the informer or the store's writer went away")]
    Stopped,
    /// The last try of the first list failed in a way retries do not mend (400, 401, 403,
    /// 404, 405, 406; an answer that is not a list of the type: an object that does not
    /// decode into it, a body that is not the list's JSON, a content type that is not
    /// JSON), or a transform or an index function panicked on it. The informer keeps
    /// retrying.
    #[error("the informer cannot sync: {0}")]
    Fatal(InformerError),
    /// A bounded wait (`wait_until_synced_within`) ran out before the first sync, the
    /// first list failing with retriable errors (refused connections, 5xx, 429) or slow.
    /// The informer keeps retrying; its failures are on `Informer::errors`.
    #[error("not synced within {0:?}: the first list is still failing or slow")]
    TimedOut(std::time::Duration),
}

/// Whether a list failure before the first sync will not go away by retrying: the request
/// is malformed for this server (400: a label or field selector it does not support; 406: a
/// content type it cannot produce), the resource does not exist or the client may not list
/// it (kube-rs's watcher docs call these misconfigurations; client-go retries them forever,
/// silently). Also, at the first failure of the kind, an answer that is not a list of the
/// type: an object the type cannot decode (`SkippedObject`, `Typed`: a CRD without a
/// structural schema, a field of another type — the server holds it, so every retry gets
/// it again) or a body that is not the list's JSON (`Decode`: a wrong URL answering HTML,
/// a non-JSON content type, a list without a resourceVersion). Transient kinds (refused or
/// cut connections, 5xx, 429, timeouts) are never fatal: bound those waits with
/// `wait_until_synced_within`.
pub(crate) fn is_fatal_before_sync(e: &Error) -> bool {
    matches!(e.code(), Some(400 | 401 | 403 | 404 | 405 | 406))
        || matches!(
            e,
            Error::Config(_)
                | Error::Request(_)
                | Error::Decode(_)
                | Error::Typed(_)
                | Error::SkippedObject { .. }
        )
}

/// A copy of `e` when it is fatal before the first sync ([`is_fatal_before_sync`]): those
/// variants hold plain data, so the caller keeps `e` and the store gets the copy.
pub(crate) fn fatal_copy(e: &Error) -> Option<Error> {
    if !is_fatal_before_sync(e) {
        return None;
    }
    Some(match e {
        Error::Api(status) => Error::Api(status.clone()),
        Error::Config(m) => Error::Config(m.clone()),
        Error::Request(m) => Error::Request(m.clone()),
        Error::Decode(m) => Error::Decode(m.clone()),
        // A fatal code is an `Api` error; anything else is described.
        other => Error::Decode(other.to_string()),
    })
}

/// The message of a caught panic.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// The event with its object transformed; `Err` when the transform panicked.
pub(crate) fn transformed<K: Resource>(
    event: Event<K>,
    f: &Transform<K>,
) -> Result<Event<K>, InformerError> {
    let call = |o: K| {
        let key = o.key();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(o))).map_err(|p| {
            InformerError::TransformPanicked {
                key,
                message: panic_message(p.as_ref()),
            }
        })
    };
    Ok(match event {
        Event::InitApply(o) => Event::InitApply(call(o)?),
        Event::Apply(o) => Event::Apply(call(o)?),
        Event::Delete(o) => Event::Delete(call(o)?),
        other => other,
    })
}

/// What an event is about, for a report.
pub(crate) fn describe<K: Resource>(event: &Event<K>) -> String {
    match event {
        Event::InitApply(o) | Event::Apply(o) | Event::Delete(o) => o.key().to_string(),
        Event::Init | Event::InitDone { .. } => "a relist".to_owned(),
        Event::Bookmark { .. } => "a bookmark".to_owned(),
    }
}
