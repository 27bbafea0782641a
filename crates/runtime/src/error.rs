//! The one error enum of the runtime and of listwatch-client (which re-exports it): what a
//! [`ListerWatcher`](crate::ListerWatcher), a [`LeaseLock`](crate::LeaseLock) or a client call
//! can fail with, whether it talks HTTP or runs in process.
//!
//! A server's `Status` body (or a watch `ERROR` event) becomes [`Error::Api`], which keeps the
//! whole Status so callers can read its code, reason and retry hint. The reflector decides
//! what to do with an error only through the predicates here ([`Error::is_expired`],
//! [`Error::is_too_large_resource_version`], [`Error::is_retriable_with_backoff`]), so the
//! mapping from wire failures to behaviour lives in one place.

use std::time::Duration;

use listwatch_api::Status;
use listwatch_api::status::reason;

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to a Kubernetes-style server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a `Status` failure (HTTP error body or watch `ERROR` event).
    /// A refusal that asks to be retried (429 or 5xx with `Retry-After`) only gets here once
    /// the HTTP client's retries are spent
    /// (listwatch-client's `HttpConfig::max_retries`).
    #[error("api error {}: {} ({})", .0.code, .0.message, .0.reason)]
    Api(Box<Status>),
    /// The server could not be reached or its connection failed before a response: refused,
    /// reset, closed, TLS handshake, DNS, no response headers within the request timeout.
    /// A client with several servers has tried each once; the reflector retries with backoff
    /// (a watch from its last version, no relist).
    #[error("connection failed: {0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An HTTP-level failure other than a refused connection.
    #[error("http error: {0}")]
    Http(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server answered something that is not the expected JSON.
    #[error("cannot decode server response: {0}")]
    Decode(String),
    /// A typed object could not be built from an object's JSON.
    #[error("cannot decode object into the requested type: {0}")]
    Typed(#[source] serde_json::Error),
    /// One object of a list or watch is well-formed JSON with readable metadata but does not
    /// decode into the requested type: it is skipped, and the list or watch goes on (a
    /// [`PageStream`](crate::PageStream) or [`WatchStream`](crate::WatchStream) yields this
    /// and continues). The reflector fails a list with such an object as a whole (a list
    /// committed without it would delete it from the store) and retries it after a backoff;
    /// in a watch it reports the event and goes on past its version.
    #[error(
        "object {key} (resourceVersion {resource_version}) skipped: cannot decode it into the requested type: {source}"
    )]
    SkippedObject {
        /// The object's key (`namespace/name`).
        key: String,
        /// Its resource version as sent (`""` when unreadable).
        resource_version: String,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    /// A watch `DELETED` event whose object does not decode into the requested type but
    /// whose metadata reads: the object is gone whatever its last state, so the reflector's
    /// store removes `key` (reporting its last cached state as deleted, final state unknown)
    /// and the watch goes on past the version. A [`SkippedObject`](Error::SkippedObject)
    /// otherwise ([`is_skipped_object`](Error::is_skipped_object) is true for both).
    #[error(
        "deleted object {key} (resourceVersion {resource_version}) does not decode into the requested type: {source}; removed by its key"
    )]
    SkippedDelete {
        /// The object's key (`namespace/name`).
        key: String,
        /// Its resource version as sent (`""` when unreadable).
        resource_version: String,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    /// A watch ended within the minimum watch duration without delivering anything
    /// (client-go's "very short watch"): the server is probably unhealthy.
    #[error("very short watch: closed after {0:?} with no events")]
    VeryShortWatch(Duration),
    /// A watch delivered nothing, not even a bookmark, for longer than the server's timeout
    /// plus [`Config::watch_idle_margin`](crate::Config::watch_idle_margin): the connection is
    /// taken as dead and the watch reopened.
    #[error("watch idle: no event for {0:?}, connection taken as dead")]
    WatchIdle(Duration),
    /// A streaming list (sendInitialEvents) ended before its initial-events-end bookmark.
    #[error("streaming list ended before its initial-events-end bookmark")]
    StreamingListIncomplete,
    /// A streaming list received a change (MODIFIED or DELETED) before its initial-events-end
    /// bookmark: the server ignores sendInitialEvents and streams changes instead of its
    /// state. The reflector lists at once and uses plain lists from then on.
    #[error(
        "streaming list got a {0} event before its initial-events-end bookmark: the server ignores sendInitialEvents"
    )]
    StreamingListUnsupported(&'static str),
    /// A request could not be built from the caller's arguments: a name or namespace that is
    /// not a valid path segment, a namespace for a cluster-scoped kind (or none for an object
    /// of a namespaced one), an object that does not serialize.
    #[error("invalid request: {0}")]
    Request(String),
    /// Configuration is unusable: a client's URL, kubeconfig or TLS material, a leader
    /// election's timings.
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The `Status` of an API error.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) => Some(s),
            _ => None,
        }
    }

    /// The [`Error::SkippedObject`] for an object with `meta` that failed to decode.
    pub fn skipped_object(
        meta: &impl listwatch_api::resource::MetadataFields,
        source: serde_json::Error,
    ) -> Self {
        Error::SkippedObject {
            key: listwatch_api::resource::ObjectKey::new(
                meta.namespace(),
                meta.name().unwrap_or(""),
            )
            .to_string(),
            resource_version: meta.resource_version().unwrap_or("").to_owned(),
            source,
        }
    }

    /// Whether this is a per-object failure ([`Error::SkippedObject`],
    /// [`Error::SkippedDelete`]) after which a list or watch goes on.
    pub fn is_skipped_object(&self) -> bool {
        matches!(
            self,
            Error::SkippedObject { .. } | Error::SkippedDelete { .. }
        )
    }

    /// The resource version of a skipped object, as sent (`""` when unreadable).
    pub fn skipped_resource_version(&self) -> Option<&str> {
        match self {
            Error::SkippedObject {
                resource_version, ..
            }
            | Error::SkippedDelete {
                resource_version, ..
            } => Some(resource_version),
            _ => None,
        }
    }

    /// The same failure for a watch `DELETED` event: a [`SkippedObject`](Error::SkippedObject)
    /// becomes a [`SkippedDelete`](Error::SkippedDelete); anything else is unchanged.
    pub fn for_deleted(self) -> Self {
        match self {
            Error::SkippedObject {
                key,
                resource_version,
                source,
            } => Error::SkippedDelete {
                key,
                resource_version,
                source,
            },
            other => other,
        }
    }

    /// The store key of the object an [`Error::SkippedDelete`] names.
    pub fn deleted_key(&self) -> Option<listwatch_api::resource::ObjectKey> {
        match self {
            Error::SkippedDelete { key, .. } => Some(match key.split_once('/') {
                Some((namespace, name)) => {
                    listwatch_api::resource::ObjectKey::new(Some(namespace), name)
                }
                None => listwatch_api::resource::ObjectKey::new(None, key),
            }),
            _ => None,
        }
    }

    /// The HTTP code of an API error.
    pub fn code(&self) -> Option<u16> {
        self.status().map(|s| s.code)
    }

    /// The `reason` of an API error.
    pub fn reason(&self) -> Option<&str> {
        self.status().map(|s| s.reason.as_str())
    }

    /// 410 (reason `Expired` or `Gone`): the requested version is no longer held.
    pub fn is_expired(&self) -> bool {
        self.status().is_some_and(|s| {
            s.code == 410 || s.reason == reason::EXPIRED || s.reason == reason::GONE
        })
    }

    /// 504 "Too large resource version" (the server's cache has not reached the version).
    pub fn is_too_large_resource_version(&self) -> bool {
        self.status().is_some_and(|s| {
            s.code == 504
                && (s.message.contains("Too large resource version")
                    || s.details.as_ref().is_some_and(|d| {
                        d.causes
                            .iter()
                            .any(|c| c.reason == "ResourceVersionTooLarge")
                    }))
        })
    }

    /// 429 Too Many Requests.
    pub fn is_too_many_requests(&self) -> bool {
        self.status()
            .is_some_and(|s| s.code == 429 || s.reason == reason::TOO_MANY_REQUESTS)
    }

    /// Whether a failed watch should be retried after a backoff without relisting
    /// (client-go `isWatchErrorRetriable`: connection refused or 429).
    pub fn is_retriable_with_backoff(&self) -> bool {
        matches!(self, Error::Connect(_)) || self.is_too_many_requests()
    }

    /// The server's retry hint (`details.retryAfterSeconds`), when it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.status()
            .map(Status::retry_after)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s)))
    }

    /// An API error carrying `status` (a server's `Status` failure).
    pub fn api(status: Status) -> Self {
        Error::Api(Box::new(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_follow_the_status_code_and_reason() {
        let expired = Error::api(Status::failure(
            410,
            reason::EXPIRED,
            "too old resource version: 1 (5)",
        ));
        assert!(expired.is_expired());
        assert!(!expired.is_retriable_with_backoff());
        let gone = Error::api(Status::failure(410, reason::GONE, "gone"));
        assert!(gone.is_expired());
        let large = Error::api(
            Status::failure(
                504,
                reason::TIMEOUT,
                "Too large resource version: 9, current: 3",
            )
            .with_retry_after(1),
        );
        assert!(large.is_too_large_resource_version());
        assert_eq!(large.retry_after(), Some(Duration::from_secs(1)));
        let plain_timeout = Error::api(Status::failure(504, reason::TIMEOUT, "slow"));
        assert!(!plain_timeout.is_too_large_resource_version());
        let busy = Error::api(Status::failure(429, reason::TOO_MANY_REQUESTS, "busy"));
        assert!(busy.is_retriable_with_backoff());
        assert!(Error::Connect("refused".into()).is_retriable_with_backoff());
        assert!(!Error::Decode("x".into()).is_retriable_with_backoff());
    }

    #[test]
    fn api_errors_display_code_message_and_reason() {
        let e = Error::api(Status::failure(
            404,
            reason::NOT_FOUND,
            "pods \"a\" not found",
        ));
        assert_eq!(
            e.to_string(),
            "api error 404: pods \"a\" not found (NotFound)"
        );
        assert_eq!(e.code(), Some(404));
        assert_eq!(e.reason(), Some("NotFound"));
    }
}
