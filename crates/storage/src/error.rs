//! The storage error enum and its one mapping to a Kubernetes `Status`.

use listwatch_api::Status;
use listwatch_api::echo::echo;
use listwatch_api::status::reason;

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure a [`Storage`](crate::Storage) can report.
///
/// Messages follow upstream's wording, because clients (and people) match on them; a name
/// in them is cut by [`echo`] (a name from a request path can be any length).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The key does not exist.
    #[error("{resource} \"{}\" not found", echo(name))]
    NotFound {
        /// The resource (plural), e.g. `pods`.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// Create found the key taken.
    #[error("{resource} \"{}\" already exists", echo(name))]
    AlreadyExists {
        /// The resource (plural).
        resource: String,
        /// The object's name.
        name: String,
    },
    /// A precondition or an optimistic write failed.
    #[error(
        "Operation cannot be fulfilled on {resource} \"{}\": {message}",
        echo(name)
    )]
    Conflict {
        /// The resource (plural).
        resource: String,
        /// The object's name.
        name: String,
        /// Why.
        message: String,
    },
    /// The object is not acceptable (bad shape, stored bytes that do not decode).
    #[error("invalid object: {message}")]
    InvalidObject {
        /// Why.
        message: String,
    },
    /// The requested version is older than what is still held.
    #[error("{message}")]
    Expired {
        /// e.g. `too old resource version: 5 (120)`.
        message: String,
        /// For an expired list continuation: a token that continues at the latest version.
        continue_token: Option<String>,
    },
    /// The requested version is newer than what storage has reached.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The version asked for.
        requested: u64,
        /// The newest version storage had.
        current: u64,
    },
    /// The backend cannot be reached.
    #[error("storage backend unreachable: {message}")]
    Unreachable {
        /// Why.
        message: String,
    },
    /// The operation did not finish in time.
    #[error("{message}")]
    Timeout {
        /// What timed out.
        message: String,
    },
    /// Not serving yet (e.g. a cache still initializing).
    #[error("{message}")]
    NotReady {
        /// Why.
        message: String,
        /// Seconds the client should wait before retrying (≥ 1).
        retry_after_seconds: u32,
    },
    /// The backend refuses work for now: overloaded, or out of space (etcd's
    /// `ResourceExhausted`: "too many requests", "database space exceeded").
    #[error("{message}")]
    TooManyRequests {
        /// Why.
        message: String,
        /// Seconds the client should wait before retrying (≥ 1).
        retry_after_seconds: u32,
    },
    /// The request is larger than the backend accepts (etcd's "request is too large", its
    /// `--max-request-bytes`).
    #[error("{message}")]
    RequestTooLarge {
        /// Why.
        message: String,
    },
    /// The request itself is malformed.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// A bug or an unexpected backend answer.
    #[error("internal error: {message}")]
    Internal {
        /// What happened.
        message: String,
    },
}

impl Error {
    /// Builds `Expired` with upstream's message for a version older than `oldest`.
    pub fn too_old(requested: u64, oldest: u64) -> Self {
        Error::Expired {
            message: format!("too old resource version: {requested} ({oldest})"),
            continue_token: None,
        }
    }

    /// Builds `RequestTooLarge` for an object of `size` bytes over a storage's `limit`, in
    /// upstream's 413 wording.
    pub fn object_too_large(size: usize, limit: usize) -> Self {
        Error::RequestTooLarge {
            message: format!(
                "Request entity too large: the object is {size} bytes, more than the storage limit of {limit} bytes"
            ),
        }
    }

    /// Builds `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Error::BadRequest {
            message: message.into(),
        }
    }

    /// Builds `Internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            message: message.into(),
        }
    }

    /// Whether this is `NotFound`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether this is `Conflict`.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether this is `Expired`.
    pub fn is_expired(&self) -> bool {
        matches!(self, Error::Expired { .. })
    }

    /// The Kubernetes `Status` for this error: the one place storage errors get codes.
    ///
    /// ```
    /// use listwatch_storage::Error;
    /// let s = Error::too_old(5, 120).to_status();
    /// assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
    /// ```
    pub fn to_status(&self) -> Status {
        let msg = self.to_string();
        match self {
            Error::NotFound { resource, name } => {
                Status::failure(404, reason::NOT_FOUND, msg).with_target("", resource, name)
            }
            Error::AlreadyExists { resource, name } => {
                Status::failure(409, reason::ALREADY_EXISTS, msg).with_target("", resource, name)
            }
            Error::Conflict { resource, name, .. } => {
                Status::failure(409, reason::CONFLICT, msg).with_target("", resource, name)
            }
            Error::InvalidObject { .. } => Status::failure(422, reason::INVALID, msg),
            Error::Expired { continue_token, .. } => {
                let mut s = Status::failure(410, reason::EXPIRED, msg);
                s.metadata.continue_token.clone_from(continue_token);
                s
            }
            Error::TooLargeResourceVersion { .. } => Status::failure(504, reason::TIMEOUT, msg)
                .with_cause("ResourceVersionTooLarge", "Too large resource version", "")
                .with_retry_after(1),
            Error::Unreachable { .. } => {
                Status::failure(500, reason::SERVER_TIMEOUT, msg).with_retry_after(2)
            }
            Error::Timeout { .. } => Status::failure(504, reason::TIMEOUT, msg),
            Error::NotReady {
                retry_after_seconds,
                ..
            } => Status::failure(429, reason::TOO_MANY_REQUESTS, msg)
                .with_retry_after((*retry_after_seconds).max(1)),
            Error::TooManyRequests {
                retry_after_seconds,
                ..
            } => Status::failure(429, reason::TOO_MANY_REQUESTS, msg)
                .with_retry_after((*retry_after_seconds).max(1)),
            Error::RequestTooLarge { .. } => {
                Status::failure(413, reason::REQUEST_ENTITY_TOO_LARGE, msg)
            }
            Error::BadRequest { .. } => Status::failure(400, reason::BAD_REQUEST, msg),
            Error::Internal { .. } => Status::failure(500, reason::INTERNAL_ERROR, msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_its_upstream_code_and_reason() {
        let s = |r: &str, n: &str| (r.to_owned(), n.to_owned());
        let cases = [
            (
                Error::NotFound {
                    resource: s("pods", "").0,
                    name: "a".into(),
                },
                404,
                "NotFound",
            ),
            (
                Error::AlreadyExists {
                    resource: "pods".into(),
                    name: "a".into(),
                },
                409,
                "AlreadyExists",
            ),
            (
                Error::Conflict {
                    resource: "pods".into(),
                    name: "a".into(),
                    message: "x".into(),
                },
                409,
                "Conflict",
            ),
            (
                Error::InvalidObject {
                    message: "x".into(),
                },
                422,
                "Invalid",
            ),
            (Error::too_old(1, 2), 410, "Expired"),
            (
                Error::TooLargeResourceVersion {
                    requested: 9,
                    current: 3,
                },
                504,
                "Timeout",
            ),
            (
                Error::Unreachable {
                    message: "x".into(),
                },
                500,
                "ServerTimeout",
            ),
            (
                Error::Timeout {
                    message: "x".into(),
                },
                504,
                "Timeout",
            ),
            (
                Error::NotReady {
                    message: "x".into(),
                    retry_after_seconds: 0,
                },
                429,
                "TooManyRequests",
            ),
            (
                Error::TooManyRequests {
                    message: "x".into(),
                    retry_after_seconds: 0,
                },
                429,
                "TooManyRequests",
            ),
            (
                Error::RequestTooLarge {
                    message: "x".into(),
                },
                413,
                "RequestEntityTooLarge",
            ),
            (Error::bad_request("x"), 400, "BadRequest"),
            (Error::internal("x"), 500, "InternalError"),
        ];
        for (e, code, reason) in cases {
            let st = e.to_status();
            assert_eq!((st.code, st.reason.as_str()), (code, reason), "{e:?}");
        }
        assert_eq!(
            Error::TooLargeResourceVersion {
                requested: 9,
                current: 3
            }
            .to_status()
            .retry_after(),
            1
        );
        assert_eq!(
            Error::NotReady {
                message: "x".into(),
                retry_after_seconds: 0
            }
            .to_status()
            .retry_after(),
            1
        );
        assert_eq!(
            Error::TooManyRequests {
                message: "x".into(),
                retry_after_seconds: 7
            }
            .to_status()
            .retry_after(),
            7
        );
    }

    #[test]
    fn expired_continuation_carries_the_fresh_token() {
        let e = Error::Expired {
            message: "m".into(),
            continue_token: Some("tok".into()),
        };
        assert_eq!(
            e.to_status().metadata.continue_token.as_deref(),
            Some("tok")
        );
    }
}
