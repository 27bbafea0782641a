//! The `audit.k8s.io/v1` `Event`, as one JSON line.

use std::collections::BTreeMap;
use std::time::SystemTime;

use listwatch_auth::UserInfo;
use serde::{Deserialize, Serialize};

use crate::policy::Level;

/// The stage of a request an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before anything else.
    RequestReceived,
    /// Long-running requests (watches): the response headers are sent.
    ResponseStarted,
    /// The response is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

/// What object a request concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Resource (plural).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Subresource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The response's status: the code, and for a failure the bounded fields of the Status sent
/// (`status`, `message`, `reason`, `details`), as upstream's `LogResponseObject` copies them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseStatus {
    /// Always `{}`.
    pub metadata: BTreeMap<String, String>,
    /// `Failure` for errors.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// The error's message (as in the Status sent to the client).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The error's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The error's details (the Status's `details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// The HTTP code.
    pub code: u16,
}

/// One audit event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Event`.
    pub kind: String,
    /// `audit.k8s.io/v1`.
    pub api_version: String,
    /// The level the event is recorded at: the policy's, with `RequestResponse` recorded
    /// as `Request` ([`Level::applied`]).
    pub level: String,
    /// Unique per request; the same in every stage's event.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage.
    pub stage: Stage,
    /// The request URI (path and query).
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// The Kubernetes verb (or lower-case HTTP method for non-resource paths).
    pub verb: String,
    /// Who sent the request (the authenticated user, before any impersonation).
    pub user: UserInfo,
    /// Whom the request impersonated (`Impersonate-User` and friends; `kubectl --as`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    /// The client's address.
    #[serde(rename = "sourceIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    /// The client's User-Agent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    /// The response status (from `ResponseStarted` on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    /// The request body (`Request` level and above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_object: Option<serde_json::Value>,
    /// When the request arrived (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When this stage was reached.
    pub stage_timestamp: String,
    /// Annotations, e.g. the authorization decision.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    /// An event at `level` (as [`Level::applied`]) and `stage`, with the other fields
    /// empty.
    pub fn new(level: Level, audit_id: &str, stage: Stage, received: SystemTime) -> Self {
        Self {
            kind: "Event".into(),
            api_version: "audit.k8s.io/v1".into(),
            level: level.applied().as_str().into(),
            audit_id: audit_id.into(),
            stage,
            request_uri: String::new(),
            verb: String::new(),
            user: UserInfo::default(),
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_object: None,
            request_received_timestamp: timestamp(received),
            stage_timestamp: timestamp(SystemTime::now()),
            annotations: BTreeMap::new(),
        }
    }
}

/// RFC 3339 in UTC with microseconds, e.g. `2026-12-01T00:49:12.123456Z`.
pub fn timestamp(t: SystemTime) -> String {
    let dt = time::OffsetDateTime::from(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.microsecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_in_upstream_shape() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(timestamp(t), "2023-11-14T22:13:20.123456Z");
        let mut e = Event::new(Level::Metadata, "id-1", Stage::ResponseComplete, t);
        e.verb = "list".into();
        e.user = UserInfo::new("alice", ["system:authenticated"]);
        e.object_ref = Some(ObjectRef {
            resource: "pods".into(),
            namespace: "demo".into(),
            api_version: "v1".into(),
            ..ObjectRef::default()
        });
        e.response_status = Some(ResponseStatus {
            code: 200,
            ..ResponseStatus::default()
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["auditID"], "id-1");
        assert_eq!(v["stage"], "ResponseComplete");
        assert_eq!(v["user"]["username"], "alice");
        assert_eq!(v["objectRef"]["resource"], "pods");
        assert_eq!(v["responseStatus"]["code"], 200);
        assert_eq!(v["responseStatus"]["metadata"], serde_json::json!({}));
        assert_eq!(v["requestReceivedTimestamp"], "2023-11-14T22:13:20.123456Z");
    }

    #[test]
    fn request_response_is_recorded_as_the_request_level_it_gets() {
        // No response body is recorded, so the event must not claim RequestResponse.
        let t = SystemTime::now();
        let e = Event::new(Level::RequestResponse, "id", Stage::ResponseComplete, t);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["level"], "Request");
        assert!(v.get("responseObject").is_none());
        for l in [Level::None, Level::Metadata, Level::Request] {
            assert_eq!(
                Event::new(l, "id", Stage::ResponseComplete, t).level,
                l.as_str()
            );
        }
    }
}
