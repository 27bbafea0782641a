//! Reading what a handler left of a small request body, so an early answer (401, 403, 404,
//! 429, …) reaches the client and the connection stays usable.
//!
//! A server that answers before reading the request body and then closes the connection
//! makes the kernel reset it (unread bytes in the receive buffer), and a client still
//! sending may lose the answer (curl prints `000`). Upstream's server (Go's `net/http`)
//! reads up to 256 KiB of an unread body after the handler so the connection can be kept;
//! this layer does the same: it hands the handler a body that, when dropped unread, comes
//! back to the layer, which reads the rest in a task of its own *after* the response is
//! handed to the connection.
//!
//! Invariants: at most [`DRAIN_LIMIT`] bytes are read after the handler, for at most
//! [`DRAIN_DEADLINE`]; a body declared larger than the limit is not read at all (the
//! connection closes, as today); the response is never delayed by the drain.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// The most of an unread body read after the handler (Go's `maxPostHandlerReadBytes`).
pub const DRAIN_LIMIT: u64 = 256 << 10;

/// How long the rest of a body may take to arrive after the handler.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// Where a handler's unread body goes back when the handler drops it.
#[derive(Default)]
struct Slot {
    body: Mutex<Option<Body>>,
}

/// The body the handler sees: the request's, until it ends or is dropped.
struct Tracked {
    inner: Option<Body>,
    ended: bool,
    slot: Arc<Slot>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None) | Poll::Ready(Some(Err(_))) = &polled {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Some(inner) = self.inner.take()
            && !inner.is_end_stream()
            && let Ok(mut slot) = self.slot.body.lock()
        {
            *slot = Some(inner);
        }
    }
}

/// The declared length of a request body worth draining: known, non-zero and within
/// [`DRAIN_LIMIT`]. Chunked bodies (no length) are read up to the limit too.
fn drainable(req: &Request) -> bool {
    match req.headers().get(header::CONTENT_LENGTH) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0 && n <= DRAIN_LIMIT),
        None => req.headers().contains_key(header::TRANSFER_ENCODING),
    }
}

/// Reads at most [`DRAIN_LIMIT`] bytes of `body` within [`DRAIN_DEADLINE`], then drops it.
async fn drain(mut body: Body) {
    use http_body_util::BodyExt;
    let read = async {
        let mut seen: u64 = 0;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen = seen.saturating_add(data.len() as u64);
                if seen > DRAIN_LIMIT {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_DEADLINE, read).await;
}

/// The layer (axum `middleware::from_fn`): outermost, around the security filter.
pub async fn drain_unread_body(req: Request, next: Next) -> Response {
    if !drainable(&req) {
        return next.run(req).await;
    }
    let slot = Arc::new(Slot::default());
    let (parts, body) = req.into_parts();
    let tracked = Tracked {
        inner: Some(body),
        ended: false,
        slot: Arc::clone(&slot),
    };
    let response = next
        .run(Request::from_parts(parts, Body::new(tracked)))
        .await;
    let unread = slot.body.lock().ok().and_then(|mut b| b.take());
    if let Some(body) = unread {
        tokio::spawn(drain(body));
    }
    response
}
