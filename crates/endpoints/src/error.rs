//! The one place where a failed request becomes an HTTP response: the registry's typed
//! error ([`ApiError`], which carries upstream's `Status`) is sent as that Status.
//!
//! Invariants:
//! - the HTTP status code is always the Status's `code`;
//! - a `Retry-After` header goes out whenever `details.retryAfterSeconds > 0`;
//! - every Status is bounded by [`echo::bound_status`] again when it is sent.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use listwatch_api::Status;
use listwatch_api::echo;
use listwatch_registry::error::NOT_ACCEPTABLE_PREFIX;
pub use listwatch_registry::error::{ApiError, ApiResult, FieldError, MAX_INVALID_REPORT_BYTES};

/// How an [`ApiError`] (the registry's type) becomes a response: its Status, sent as the
/// one Status response of this crate (a `Retry-After` header when the Status asks for one).
pub trait ErrorResponse {
    /// The HTTP response carrying this error's Status.
    fn into_response(self) -> Response;
}

impl ErrorResponse for ApiError {
    fn into_response(self) -> Response {
        status_response(&self.0)
    }
}

/// The Status a response carries, as a response extension: what the audit filter records
/// of a failed request without parsing the body.
#[derive(Debug, Clone)]
pub struct SentStatus(pub Box<Status>);

/// The HTTP response for a Status (also used for a collection delete's `Success`).
pub(crate) fn status_response(status: &Status) -> Response {
    // Bounded again here: a Status may have been changed since it was built.
    let mut status = status.clone();
    echo::bound_status(&mut status);
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry = status.retry_after();
    let mut resp = (code, status_body(&status)).into_response();
    resp.extensions_mut().insert(SentStatus(Box::new(status)));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if retry > 0 {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry));
    }
    resp
}

/// A Status body as upstream writes it. A 406 of a failed negotiation is one
/// upstream answers by `responsewriters.WriteRawJSON` (`json.MarshalIndent` with two spaces,
/// no newline: there is no serializer the client accepts); every other Status goes through
/// the negotiated serializer, whose `json.Encoder` ends it with a newline
/// (k8s.io/apiserver `pkg/endpoints/handlers/responsewriters/writers.go`).
fn status_body(status: &Status) -> Vec<u8> {
    if status.code == 406 && status.message.starts_with(NOT_ACCEPTABLE_PREFIX) {
        // A struct of strings and integers cannot fail to serialize.
        return serde_json::to_vec_pretty(status).unwrap_or_else(|_| status.to_json());
    }
    let mut body = status.to_json();
    body.push(b'\n');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_header_follows_the_status_details() {
        let resp = ApiError::too_many_requests().into_response();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let resp = ApiError::bad_request("x").into_response();
        assert_eq!(resp.status(), 400);
        assert!(resp.headers().get(header::RETRY_AFTER).is_none());
    }
}
