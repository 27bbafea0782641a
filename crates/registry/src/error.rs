//! The registry's typed error: every failure of a registry operation is an [`ApiError`]
//! carrying the upstream `Status` it means (upstream's `k8s.io/apimachinery/pkg/api/errors`
//! constructors); the endpoints turn it into an HTTP response, nothing here is HTTP.
//!
//! Invariants:
//! - every failure the registry reports is an [`ApiError`], built either from a storage
//!   [`listwatch_storage::Error`] (through its own `to_status`, the storage layer's single
//!   mapping) or from one of the constructors below; no caller writes a status code itself;
//! - the HTTP status code the endpoints send is always the Status's `code`;
//! - every value a message quotes from the request or from storage (a name, a field's value
//!   and path) is cut by [`listwatch_api::echo`], and every Status is bounded by
//!   [`echo::bound_status`] when it is built (and again by the endpoints when it is sent), so
//!   an error body is at most a constant (~320 KiB of text) whatever the input.

use std::collections::HashSet;

use listwatch_api::Status;
use listwatch_api::echo::{self, echo};
use listwatch_api::status::reason;

use listwatch_kinds::KindSpec;

/// How much cause text a 422 Invalid lists (in its causes and its message together,
/// counted in [`echo::wire_cost`] units with each cause's framing): past it the rest are
/// counted, not listed. Upstream lists every cause, so a body with
/// many small invalid values (distinct finalizers, label values) answered with a message
/// and causes ~70 times its size.
pub const MAX_INVALID_REPORT_BYTES: usize = 256 * 1024;

/// How a failed negotiation's 406 message begins (upstream's `NewNotAcceptableError`).
pub const NOT_ACCEPTABLE_PREFIX: &str = "only the following media types are accepted: ";

/// Result with [`ApiError`] as the error.
pub type ApiResult<T> = Result<T, ApiError>;

/// A failed request, carrying the Status sent to the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{} {}: {}", .0.code, .0.reason, .0.message)]
pub struct ApiError(pub Box<Status>);

impl ApiError {
    /// Wraps a Status, bounded by [`echo::bound_status`].
    pub fn from_status(mut status: Status) -> Self {
        echo::bound_status(&mut status);
        Self(Box::new(status))
    }

    /// A storage error about `info`'s objects: the storage mapping, named as upstream's
    /// `errors.NewNotFound/NewAlreadyExists/NewConflict(qualifiedResource, name, …)` name it
    /// (k8s.io/apimachinery `pkg/api/errors/errors.go`): the message quotes
    /// `qualifiedResource.String()` (`deployments.apps "x" not found`), `details.kind` is
    /// the plural resource and `details.group` its group — whatever segment the storage
    /// keys use (`storage_resource`, e.g. `widgets.example.com` for `--resources` kinds).
    pub fn storage(err: &listwatch_storage::Error, info: &KindSpec) -> Self {
        use listwatch_storage::Error as E;
        let resource = info.qualified_resource();
        let named = match err {
            E::NotFound { name, .. } => Some(E::NotFound {
                resource,
                name: name.clone(),
            }),
            E::AlreadyExists { name, .. } => Some(E::AlreadyExists {
                resource,
                name: name.clone(),
            }),
            E::Conflict { name, message, .. } => Some(E::Conflict {
                resource,
                name: name.clone(),
                message: message.clone(),
            }),
            _ => None,
        };
        let mut status = named.as_ref().unwrap_or(err).to_status();
        if let Some(d) = status.details.as_mut().filter(|d| !d.kind.is_empty()) {
            d.group.clone_from(&info.group);
            d.kind.clone_from(&info.plural);
        }
        Self::from_status(status)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::from_status(Status::failure(400, reason::BAD_REQUEST, message))
    }

    /// 422 Invalid for an object, with one cause per field error: upstream's aggregate
    /// message (duplicates once, one error as is, several in brackets). The causes are listed
    /// in order while their text fits in [`MAX_INVALID_REPORT_BYTES`] (always at least one);
    /// past it the rest are counted: the message ends with `... and N more` and so does one
    /// last cause. Costs the causes' text plus a hash each, whatever their number. `name`
    /// is quoted through [`echo()`] (an invalid name can be as long as the body).
    pub fn invalid(info: &KindSpec, name: &str, causes: &[FieldError]) -> Self {
        let name = echo(name);
        let mut seen: HashSet<String> = HashSet::new();
        let mut lines: Vec<String> = Vec::new();
        let mut listed: Vec<(&FieldError, String)> = Vec::new();
        let mut budget = MAX_INVALID_REPORT_BYTES;
        for c in causes {
            let text = c.to_string();
            // Listed in the causes (reason, message, field and their framing), and in the
            // summary (with its ", "); counted as the backstop (`echo::bound_status`) counts.
            let cost = echo::wire_cost(&text)
                .saturating_mul(2)
                .saturating_add(echo::wire_cost(&echo(&c.field)))
                .saturating_add(c.reason.len())
                .saturating_add(echo::CAUSE_FRAMING)
                .saturating_add(2);
            if !listed.is_empty() && cost > budget {
                break;
            }
            budget = budget.saturating_sub(cost);
            if seen.insert(text.clone()) {
                lines.push(text.clone());
            }
            listed.push((c, text));
        }
        let unlisted = causes.len().saturating_sub(listed.len());
        let more = format!("... and {unlisted} more");
        if unlisted > 0 {
            lines.push(more.clone());
        }
        let summary = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        // Upstream's `qualifiedKind.String()`: `Deployment.apps`, `Pod`.
        let kind = if info.group.is_empty() {
            info.kind.clone()
        } else {
            format!("{}.{}", info.kind, info.group)
        };
        let mut status = Status::failure(
            422,
            reason::INVALID,
            format!("{kind} \"{name}\" is invalid: {summary}"),
        )
        .with_target(&info.group, &info.kind, &name);
        // A cause's message is the error without its field (`field.Error.ErrorBody()`):
        // the field is the cause's `field`, and clients (kubectl) print `field: message`.
        for (c, _) in &listed {
            status = status.with_cause(c.reason, &c.body(), &echo(&c.field));
        }
        if unlisted > 0 {
            status = status.with_cause(reason::INVALID, &more, "");
        }
        Self::from_status(status)
    }

    /// 422 Invalid for request options (`DeleteOptions`), as upstream's
    /// `NewInvalid(meta.k8s.io/kind, "", errs)`: `DeleteOptions.meta.k8s.io "" is invalid: ...`.
    pub fn invalid_options(kind: &str, causes: &[FieldError]) -> Self {
        Self::invalid(&KindSpec::new("meta.k8s.io", "v1", "", kind), "", causes)
    }

    /// 422 for a request that is well-formed but cannot be applied (a failing JSON patch
    /// `test`, a patch that does not fit the object), as upstream answers patch failures.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::from_status(Status::failure(422, reason::INVALID, message))
    }

    /// 404 for a path that names nothing served here.
    pub fn path_not_found() -> Self {
        Self::from_status(
            Status::failure(
                404,
                reason::NOT_FOUND,
                "the server could not find the requested resource",
            )
            .with_target("", "", ""),
        )
    }

    /// 405 for a method the path does not support, as upstream's route table answers it
    /// (`NewGenericServerResponse(405, …)` with no resource: empty `details`).
    pub fn method_not_allowed() -> Self {
        Self::from_status(
            Status::failure(
                405,
                reason::METHOD_NOT_ALLOWED,
                "the server does not allow this method on the requested resource",
            )
            .with_target("", "", ""),
        )
    }

    /// 406 when nothing the client accepts can be produced, in upstream's words
    /// (`negotiation.NewNotAcceptableError`, k8s.io/apiserver
    /// `pkg/endpoints/handlers/negotiation/errors.go`): the media types served, not the
    /// client's `Accept`.
    pub fn not_acceptable(supported: &str) -> Self {
        Self::from_status(Status::failure(
            406,
            reason::NOT_ACCEPTABLE,
            format!("{NOT_ACCEPTABLE_PREFIX}{supported}"),
        ))
    }

    /// 406 when the representation asked for exists but the answer cannot take it (upstream's
    /// `errNotAcceptable` of `handlers/response.go`, e.g. `PartialObjectMetadataList` of a
    /// single object).
    pub fn not_acceptable_conversion(message: &str) -> Self {
        Self::from_status(Status::failure(406, reason::NOT_ACCEPTABLE, message))
    }

    /// 415 for a request body in a media type this endpoint does not read.
    pub fn unsupported_media_type(content_type: &str, supported: &str) -> Self {
        Self::from_status(Status::failure(
            415,
            reason::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "the body of the request was in an unknown format ({:?}) - accepted \
                 media types include: {supported}",
                echo(content_type)
            ),
        ))
    }

    /// 415 for a PATCH whose Content-Type is not one of the resource's patch types, in
    /// upstream's words (`negotiation.NewUnsupportedMediaTypeError`).
    pub fn unsupported_patch_type(accepted: &[&str]) -> Self {
        Self::from_status(Status::failure(
            415,
            reason::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        ))
    }

    /// 413 for a body over the limit, in upstream's words.
    pub fn too_large(limit: usize) -> Self {
        Self::too_large_message(&format!("limit is {limit}"))
    }

    /// 413 RequestEntityTooLarge: `Request entity too large: {message}`, as upstream's
    /// `NewRequestEntityTooLargeError` words it.
    pub fn too_large_message(message: &str) -> Self {
        Self::from_status(Status::failure(
            413,
            reason::REQUEST_ENTITY_TOO_LARGE,
            format!("Request entity too large: {message}"),
        ))
    }

    /// 403 Forbidden for an operation on `name` that policy refuses, as upstream's
    /// `NewForbidden`: `{resource} "{name}" is forbidden: {why}` (the name cut by
    /// [`echo()`]).
    pub fn forbidden(info: &KindSpec, name: &str, why: &str) -> Self {
        let name = echo(name);
        Self::from_status(
            Status::failure(
                403,
                reason::FORBIDDEN,
                format!(
                    "{} \"{name}\" is forbidden: {why}",
                    info.qualified_resource()
                ),
            )
            .with_target(&info.group, &info.plural, &name),
        )
    }

    /// 429 when the server is at its limit of concurrent requests or watches.
    pub fn too_many_requests() -> Self {
        Self::from_status(
            Status::failure(
                429,
                reason::TOO_MANY_REQUESTS,
                "Too many requests, please try again later.",
            )
            .with_retry_after(1),
        )
    }

    /// 504 when a request ran past its deadline (`timeout` or the server's limit). A read
    /// (`retryable`) carries `Retry-After: 1`; a write does not: it may already have been
    /// applied (the handler is dropped, not what it sent to storage), and clients (client-go,
    /// listwatch-client) resend any verb on that header — a `generateName` create would make
    /// a second object. Upstream's timeout filter sends no Retry-After at all.
    pub fn request_timeout(retryable: bool) -> Self {
        let status = Status::failure(
            504,
            reason::TIMEOUT,
            "request did not complete within the allowed duration",
        );
        Self::from_status(if retryable {
            status.with_retry_after(1)
        } else {
            status
        })
    }

    /// 408 when a request's body did not arrive within its deadline (`allowed`).
    pub fn body_timeout(allowed: std::time::Duration) -> Self {
        Self::from_status(Status::failure(
            408,
            reason::TIMEOUT,
            format!(
                "the request body was not received within {}s",
                allowed.as_secs()
            ),
        ))
    }

    /// 503 while the server is shutting down.
    pub fn shutting_down() -> Self {
        Self::from_status(
            Status::failure(
                503,
                reason::SERVICE_UNAVAILABLE,
                "the apiserver is shutting down",
            )
            .with_retry_after(1),
        )
    }

    /// 500 for a failure that is a bug or an unexpected condition.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::from_status(Status::failure(500, reason::INTERNAL_ERROR, message))
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.0.code
    }
}

/// One invalid field, as a 422's cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: &'static str,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The offending value, when there is one.
    pub value: Option<String>,
    /// What is wrong.
    pub detail: String,
    /// `value` is shown as it is (already rendered, e.g. Go's `[]string{"a"}`), not quoted.
    pub raw: bool,
}

impl FieldError {
    /// A value that breaks a rule, shown as given (`shown`: a rendering such as Go's
    /// `[]string{"a", "b"}` or a JSON number), not quoted.
    pub fn invalid_raw(field: &str, shown: &str, detail: impl Into<String>) -> Self {
        Self {
            raw: true,
            ..Self::invalid(field, shown, detail)
        }
    }

    /// A value that breaks a rule.
    pub fn invalid(field: &str, value: &str, detail: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            value: Some(value.into()),
            detail: detail.into(),
            raw: false,
        }
    }

    /// A value longer than allowed (upstream's `field.TooLong`: the value is not shown).
    pub fn too_long(field: &str, max_bytes: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            value: None,
            detail: format!("must have at most {max_bytes} bytes"),
            raw: false,
        }
    }

    /// A change that a rule forbids (upstream's `field.Forbidden`: the value is not shown).
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            value: None,
            detail: detail.into(),
            raw: false,
        }
    }

    /// A value outside a fixed set (upstream's `field.NotSupported`).
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            value: Some(value.into()),
            detail: format!("supported values: {list}"),
            raw: false,
        }
    }

    /// A value that is missing.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            value: None,
            detail: detail.into(),
            raw: false,
        }
    }
}

impl FieldError {
    /// Upstream's `field.Error.ErrorBody()`: the text without the field (a 422 cause's
    /// `message`); the value is cut by [`echo()`].
    pub fn body(&self) -> String {
        match (self.value.as_deref().map(echo), self.reason) {
            // A value shown as rendered: upstream's `ErrorBody` for every error type (a
            // kind's own errors, [`listwatch_kinds::FieldError`], are all of this form).
            (v, _) if self.raw => {
                let mut s = reason_text(self.reason).to_owned();
                if let Some(v) = v {
                    s.push_str(": ");
                    s.push_str(&v);
                }
                if !self.detail.is_empty() {
                    s.push_str(": ");
                    s.push_str(&self.detail);
                }
                s
            }
            (Some(v), "FieldValueDuplicate") => format!("Duplicate value: {v:?}"),
            (Some(v), "FieldValueNotSupported") => {
                format!("Unsupported value: {v:?}: {}", self.detail)
            }
            (Some(v), _) => format!("Invalid value: {v:?}: {}", self.detail),
            (None, "FieldValueTooLong") => format!("Too long: {}", self.detail),
            (None, "FieldValueForbidden") => format!("Forbidden: {}", self.detail),
            (None, _) => format!("Required value: {}", self.detail),
        }
    }
}

/// Upstream's `field.ErrorType` text of a cause's reason (`Invalid value` for an unknown
/// one).
fn reason_text(reason: &str) -> &'static str {
    match reason {
        "FieldValueNotSupported" => "Unsupported value",
        "FieldValueRequired" => "Required value",
        "FieldValueForbidden" => "Forbidden",
        "FieldValueTooLong" => "Too long",
        "FieldValueTooMany" => "Too many",
        "FieldValueDuplicate" => "Duplicate value",
        "FieldValueNotFound" => "Not found",
        "InternalError" => "Internal error",
        _ => "Invalid value",
    }
}

impl From<&listwatch_kinds::FieldError> for FieldError {
    /// A kind's own error (a custom resource's schema validation), kept as upstream words
    /// it: its value is shown as already rendered.
    fn from(e: &listwatch_kinds::FieldError) -> Self {
        Self {
            reason: e.kind.reason(),
            field: e.field.clone(),
            value: e.value.clone(),
            detail: e.detail.clone(),
            raw: true,
        }
    }
}

impl std::fmt::Display for FieldError {
    /// Upstream's `field.Error` text, `field: body` ([`FieldError::body`]); the field path
    /// is cut by [`echo()`] (it can hold a caller's megabytes: a label key is part of it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", echo(&self.field), self.body())
    }
}

impl From<listwatch_storage::Error> for ApiError {
    fn from(err: listwatch_storage::Error) -> Self {
        Self::from_status(err.to_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_keep_their_code_and_gain_the_group() {
        let info = KindSpec::new("apps", "v1", "deployments", "Deployment");
        let err = listwatch_storage::Error::NotFound {
            resource: "deployments".into(),
            name: "d".into(),
        };
        let e = ApiError::storage(&err, &info);
        assert_eq!(e.code(), 404);
        assert_eq!(e.0.details.as_ref().map(|d| d.group.as_str()), Some("apps"));
        assert_eq!(e.0.message, r#"deployments.apps "d" not found"#);
        let mut widgets = KindSpec::new("example.com", "v1", "widgets", "Widget");
        widgets.storage_resource = "widgets.example.com".into();
        let err = listwatch_storage::Error::AlreadyExists {
            resource: widgets.storage_resource.clone(),
            name: "w".into(),
        };
        let e = ApiError::storage(&err, &widgets);
        assert_eq!(e.0.message, r#"widgets.example.com "w" already exists"#);
        let d = e.0.details.clone().unwrap_or_default();
        assert_eq!(
            (d.kind.as_str(), d.group.as_str()),
            ("widgets", "example.com")
        );
        let e = ApiError::from(listwatch_storage::Error::too_old(1, 5));
        assert_eq!((e.code(), e.0.reason.as_str()), (410, "Expired"));
    }

    #[test]
    fn invalid_lists_every_cause() {
        let info = KindSpec::new("", "v1", "pods", "Pod");
        let e = ApiError::invalid(
            &info,
            "A",
            &[FieldError::invalid("metadata.name", "A", "bad")],
        );
        assert_eq!(e.code(), 422);
        assert!(
            e.0.message
                .starts_with("Pod \"A\" is invalid: metadata.name: Invalid value")
        );
        assert_eq!(e.0.details.as_ref().map(|d| d.causes.len()), Some(1));
    }

    #[test]
    fn invalid_names_the_group_kind_and_keeps_the_field_out_of_cause_messages() {
        let info = KindSpec::new("apps", "v1", "deployments", "Deployment");
        let e = ApiError::invalid(
            &info,
            "d",
            &[FieldError::forbidden("metadata.finalizers", "no")],
        );
        assert_eq!(
            e.0.message,
            r#"Deployment.apps "d" is invalid: metadata.finalizers: Forbidden: no"#
        );
        let d = e.0.details.clone().unwrap_or_default();
        assert_eq!((d.kind.as_str(), d.group.as_str()), ("Deployment", "apps"));
        let c = d.causes.first().cloned().unwrap_or_default();
        assert_eq!(
            (c.reason.as_str(), c.message.as_str(), c.field.as_str()),
            (
                "FieldValueForbidden",
                "Forbidden: no",
                "metadata.finalizers"
            )
        );
        let e = ApiError::invalid_options("DeleteOptions", &[FieldError::required("x", "y")]);
        assert!(
            e.0.message
                .starts_with(r#"DeleteOptions.meta.k8s.io "" is invalid: x: "#)
        );
        let d = e.0.details.clone().unwrap_or_default();
        assert_eq!(
            (d.kind.as_str(), d.group.as_str()),
            ("DeleteOptions", "meta.k8s.io")
        );
    }

    #[test]
    fn invalid_lists_causes_within_the_bound() {
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        let few = [
            FieldError::invalid("a", "1", "bad"),
            FieldError::invalid("a", "1", "bad"),
            FieldError::invalid("b", "2", "bad"),
        ];
        let e = ApiError::invalid(&info, "c", &few);
        assert_eq!(
            e.0.message,
            "ConfigMap \"c\" is invalid: [a: Invalid value: \"1\": bad, b: Invalid value: \"2\": bad]"
        );
        assert_eq!(e.0.details.as_ref().map(|d| d.causes.len()), Some(3));

        let n = 20_000;
        let many: Vec<FieldError> = (0..n)
            .map(|i| FieldError::invalid(&format!("f[{i}]"), &i.to_string(), "bad"))
            .collect();
        let e = ApiError::invalid(&info, "c", &many);
        let causes =
            &e.0.details
                .as_ref()
                .map(|d| d.causes.clone())
                .unwrap_or_default();
        let listed = causes.len() - 1;
        assert!(listed > 100 && listed < n, "{listed}");
        let text: usize = causes.iter().map(|c| c.message.len() + c.field.len()).sum();
        assert!(text + e.0.message.len() <= MAX_INVALID_REPORT_BYTES + 1024);
        assert_eq!(causes[0].message, many[0].body());
        let more = format!("... and {} more", n - listed);
        assert_eq!(
            causes.last().map(|c| c.message.as_str()),
            Some(more.as_str())
        );
        assert!(e.0.message.ends_with(&format!(", {more}]")));

        // One cause longer than the bound is still listed.
        let huge = [FieldError::invalid(
            "x",
            &"v".repeat(MAX_INVALID_REPORT_BYTES),
            "bad",
        )];
        let e = ApiError::invalid(&info, "c", &huge);
        assert_eq!(e.0.details.as_ref().map(|d| d.causes.len()), Some(1));
    }

    #[test]
    fn echoed_values_are_cut_at_character_boundaries() {
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        // Each repeated unit straddles every possible cut: 2-byte 'é', a 4-byte emoji, a
        // quote and control characters (escaped by every layer).
        for unit in ["é", "😀", "\"", "\u{0}", "\u{7f}\n", "aé😀\"\u{1}"] {
            let value = unit.repeat(400_000);
            let e = FieldError::invalid(&format!("metadata.labels[{value}]"), &value, "bad");
            let text = e.to_string();
            assert!(text.starts_with("metadata.labels["), "{unit:?}");
            assert_eq!(
                text.matches("...<truncated from ").count(),
                2,
                "{unit:?}: the field and the value are both cut"
            );
            assert!(
                echo::wire_cost(&text) <= 4 * echo::MAX_ECHO_BYTES,
                "{unit:?}"
            );
            let err = ApiError::invalid(&info, &value, &[e]);
            let body = err.0.to_json();
            assert!(body.len() <= 16 * 1024, "{unit:?}: {} bytes", body.len());
            let name = err
                .0
                .details
                .as_ref()
                .map(|d| d.name.clone())
                .unwrap_or_default();
            assert!(name.ends_with(&format!("...<truncated from {} bytes>", value.len())));
            assert!(name.len() <= echo::MAX_ECHO_BYTES + 40, "{unit:?}");
            // Every prefix kept is whole units of the value (no character split).
            let kept = name.split("...<truncated").next().unwrap_or_default();
            assert!(value.starts_with(kept), "{unit:?}");
        }
        // A short value is shown as it is.
        let e = FieldError::invalid("metadata.name", "é😀\"", "bad");
        assert_eq!(
            e.to_string(),
            "metadata.name: Invalid value: \"é😀\\\"\": bad"
        );
    }
}
