//! `Status`, the body of every failed request.
//!
//! Constructors here give the shapes; which code and reason a failure gets is decided in one
//! place per layer (listwatch-storage maps its errors), never invented ad hoc.

use serde::{Deserialize, Serialize};

use crate::meta::ListMeta;

/// Well-known `reason` values.
pub mod reason {
    /// 403
    pub const FORBIDDEN: &str = "Forbidden";
    /// 404
    pub const NOT_FOUND: &str = "NotFound";
    /// 409 on create
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
    /// 409 on update/delete
    pub const CONFLICT: &str = "Conflict";
    /// 422
    pub const INVALID: &str = "Invalid";
    /// 400
    pub const BAD_REQUEST: &str = "BadRequest";
    /// 410
    pub const EXPIRED: &str = "Expired";
    /// 410 (older servers)
    pub const GONE: &str = "Gone";
    /// 504
    pub const TIMEOUT: &str = "Timeout";
    /// 500 with retry
    pub const SERVER_TIMEOUT: &str = "ServerTimeout";
    /// 429
    pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";
    /// 500
    pub const INTERNAL_ERROR: &str = "InternalError";
    /// 405
    pub const METHOD_NOT_ALLOWED: &str = "MethodNotAllowed";
    /// 406
    pub const NOT_ACCEPTABLE: &str = "NotAcceptable";
    /// 413
    pub const REQUEST_ENTITY_TOO_LARGE: &str = "RequestEntityTooLarge";
    /// 415
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "UnsupportedMediaType";
    /// 503
    pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailable";
}

/// One cause of a failure, usually a field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    /// Machine-readable cause, e.g. `FieldValueInvalid`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// Extra detail about the object a failure concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The resource's API group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The resource (plural) or kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The object's UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Causes, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// Seconds a client should wait before retrying; 0 means not set.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_after_seconds: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_zero_code(v: &u16) -> bool {
    *v == 0
}

/// A Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Always `Status`.
    pub kind: String,
    /// Always `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// List metadata; `continue` carries a fresh token on an expired continuation.
    #[serde(default)]
    pub metadata: ListMeta,
    /// `Success` or `Failure`.
    #[serde(default)]
    pub status: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Machine-readable reason (see [`reason`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Detail about the object concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// The HTTP status code; 0 (omitted, as upstream's `omitempty`) in the Status a
    /// registry answers a DELETE with ([`Status::deleted`]).
    #[serde(default, skip_serializing_if = "is_zero_code")]
    pub code: u16,
}

impl Status {
    /// A `Failure` status with a code, reason and message.
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: ListMeta::default(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
        }
    }

    /// A `Success` status (e.g. a collection delete).
    pub fn success() -> Self {
        Self {
            status: "Success".into(),
            code: 200,
            ..Self::failure(200, "", "")
        }
    }

    /// What upstream's generic registry answers a DELETE with when the resource does not
    /// return the deleted object (`Store.finalizeDelete` without `ReturnDeletedObject`):
    /// `Success`, no code, and details naming the object — `kind` is the plural resource,
    /// as upstream sets it.
    pub fn deleted(group: &str, resource: &str, name: &str, uid: &str) -> Self {
        let mut s = Self {
            status: "Success".into(),
            ..Self::failure(0, "", "")
        };
        s = s.with_target(group, resource, name);
        if let Some(d) = s.details.as_mut() {
            d.uid = uid.into();
        }
        s
    }

    /// Sets `details.retryAfterSeconds`.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.details
            .get_or_insert_with(Default::default)
            .retry_after_seconds = seconds;
        self
    }

    /// Sets the details' name, group and kind.
    #[must_use]
    pub fn with_target(mut self, group: &str, kind: &str, name: &str) -> Self {
        let d = self.details.get_or_insert_with(Default::default);
        d.group = group.into();
        d.kind = kind.into();
        d.name = name.into();
        self
    }

    /// Adds a cause.
    #[must_use]
    pub fn with_cause(mut self, reason: &str, message: &str, field: &str) -> Self {
        self.details
            .get_or_insert_with(Default::default)
            .causes
            .push(StatusCause {
                reason: reason.into(),
                message: message.into(),
                field: field.into(),
            });
        self
    }

    /// `details.retryAfterSeconds`, or 0.
    pub fn retry_after(&self) -> u32 {
        self.details.as_ref().map_or(0, |d| d.retry_after_seconds)
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings and integers cannot fail to serialize.
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_status_has_no_code_and_names_the_resource() {
        let s = Status::deleted("apps", "deployments", "d", "u-1");
        let v: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",
                "details":{"name":"d","group":"apps","kind":"deployments","uid":"u-1"}})
        );
    }

    #[test]
    fn failure_has_the_upstream_shape() {
        let s = Status::failure(410, reason::EXPIRED, "too old resource version: 1 (5)");
        let v: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"too old resource version: 1 (5)","reason":"Expired","code":410})
        );
    }

    #[test]
    fn retry_after_goes_into_details() {
        let s = Status::failure(429, reason::TOO_MANY_REQUESTS, "x").with_retry_after(3);
        let v: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(v["details"]["retryAfterSeconds"], 3);
        assert_eq!(s.retry_after(), 3);
    }
}
