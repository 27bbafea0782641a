//! The watch server: a storage watch stream turned into a chunked HTTP body of
//! newline-terminated `WatchEvent` frames.
//!
//! Invariants:
//! - the response head goes out before the first event (hyper flushes it while the body is
//!   pending), so clients see `200` at once;
//! - frames already waiting are written together; the connection is flushed whenever the
//!   storage stream has nothing more ready (hyper flushes when the body is pending);
//! - an `Error` event is sent as one ERROR frame (its Status from the one error mapping),
//!   then the body ends;
//! - the body ends cleanly (chunked terminator) at the watch's deadline and on shutdown;
//!   a client disconnect drops the body, which drops the storage stream and frees the
//!   watch's slot and gauge.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, Utf8Bytes, WebSocket};
use bytes::{Bytes, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use listwatch_api::watch::{EventType, encode_bookmark, encode_error, encode_frame};
use listwatch_api::{Object, TypeMeta};
use listwatch_storage::{WatchEvent, WatchStream};
use prometheus_client::metrics::counter::Counter;
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;

use crate::error::ApiError;
use crate::metrics::GaugeGuard;
use crate::negotiate::Format;
use crate::query::IncludeObject;
use crate::resource::ResourceInfo;
use crate::table;

/// At most this many bytes of ready frames are written as one chunk.
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Upstream's watch timeout: `timeoutSeconds` when given, else the minimum request timeout
/// times a random factor in [1, 2), so that watches do not all expire together.
pub fn watch_timeout(requested: Option<Duration>, min_request_timeout: Duration) -> Duration {
    match requested {
        Some(t) => t,
        None => min_request_timeout.mul_f64(1.0 + rand::rng().random::<f64>()),
    }
}

/// How events become bytes for one watcher.
pub(crate) struct Encoder {
    pub(crate) info: Arc<ResourceInfo>,
    pub(crate) type_meta: TypeMeta,
    pub(crate) format: Format,
    pub(crate) include: IncludeObject,
}

impl Encoder {
    /// The frame for one event, and whether it is the last (an error).
    fn encode(&self, ev: &WatchEvent) -> Option<(Bytes, bool)> {
        match self.format {
            Format::Table { beta } => self.encode_table(ev, beta),
            _ => Some(match ev {
                WatchEvent::Added(o) => (encode_frame(EventType::Added, o), false),
                WatchEvent::Modified { object, .. } => {
                    (encode_frame(EventType::Modified, object), false)
                }
                WatchEvent::Deleted(o) => (encode_frame(EventType::Deleted, o), false),
                WatchEvent::Bookmark(b) => (
                    encode_bookmark(&self.type_meta, b.resource_version, b.initial_events_end),
                    false,
                ),
                WatchEvent::Error(e) => (encode_error(&ApiError::storage(e, &self.info).0), true),
            }),
        }
    }

    fn encode_table(&self, ev: &WatchEvent, beta: bool) -> Option<(Bytes, bool)> {
        let (ty, obj, rv): (EventType, Option<&Object>, u64) = match ev {
            WatchEvent::Added(o) => (EventType::Added, Some(o), o.resource_version()),
            WatchEvent::Modified { object, .. } => {
                (EventType::Modified, Some(object), object.resource_version())
            }
            WatchEvent::Deleted(o) => (EventType::Deleted, Some(o), o.resource_version()),
            WatchEvent::Bookmark(b) => (EventType::Bookmark, None, b.resource_version),
            WatchEvent::Error(e) => {
                return Some((encode_error(&ApiError::storage(e, &self.info).0), true));
            }
        };
        match table::watch_frame(&self.info, ty, obj, rv, self.include, beta) {
            Ok(f) => Some((f, false)),
            Err(e) => {
                let err = ApiError::internal(format!("printing a table row failed: {e}"));
                Some((encode_error(&err.0), true))
            }
        }
    }
}

/// Everything a watch body owns; dropping it ends the watch.
pub(crate) struct WatchState {
    pub(crate) stream: WatchStream,
    pub(crate) encoder: Encoder,
    pub(crate) deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    pub(crate) sent: Counter,
    pub(crate) _permit: OwnedSemaphorePermit,
    pub(crate) _gauge: GaugeGuard,
}

enum Step {
    Frame(Bytes, bool),
    Skip,
    End,
}

impl WatchState {
    fn step(&self, ev: Option<WatchEvent>) -> Step {
        match ev {
            None => Step::End,
            Some(ev) => match self.encoder.encode(&ev) {
                Some((b, last)) => {
                    self.sent.inc();
                    Step::Frame(b, last)
                }
                None => Step::Skip,
            },
        }
    }
}

/// The body stream of a watch response.
pub(crate) fn body(state: WatchState) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    futures::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        loop {
            let ev = tokio::select! {
                biased;
                _ = st.shutdown.wait_for(|stop| *stop) => return None,
                () = &mut st.deadline => return None,
                ev = st.stream.next() => ev,
            };
            let (first, mut last) = match st.step(ev) {
                Step::End => return None,
                Step::Skip => continue,
                Step::Frame(b, last) => (b, last),
            };
            if last {
                return Some((Ok(first), None));
            }
            // Write what is already waiting as one chunk; flush happens when we pend.
            let mut batch: Option<BytesMut> = None;
            while !last {
                let size = batch.as_ref().map_or(first.len(), BytesMut::len);
                if size >= MAX_BATCH_BYTES {
                    break;
                }
                let Some(ev) = st.stream.next().now_or_never() else {
                    break;
                };
                match st.step(ev) {
                    Step::End => {
                        last = true;
                    }
                    Step::Skip => {}
                    Step::Frame(b, l) => {
                        batch
                            .get_or_insert_with(|| BytesMut::from(&first[..]))
                            .extend_from_slice(&b);
                        last = l;
                    }
                }
            }
            let out = batch.map_or(first, BytesMut::freeze);
            return Some((Ok(out), if last { None } else { Some(st) }));
        }
    })
}

/// Serves a watch over a websocket: one text message per event (the frame without its
/// newline), then a close. Ends early when the client closes or goes away.
pub(crate) async fn forward_to_websocket(mut socket: WebSocket, state: WatchState) {
    let body = body(state);
    futures::pin_mut!(body);
    loop {
        tokio::select! {
            chunk = body.next() => {
                let Some(Ok(chunk)) = chunk else { break };
                // A chunk holds whole newline-terminated frames; each becomes one message.
                let mut start = 0;
                while let Some(n) = chunk[start..].iter().position(|b| *b == b'\n') {
                    let frame = chunk.slice(start..start + n);
                    start += n + 1;
                    let Ok(text) = Utf8Bytes::try_from(frame) else { return };
                    if socket.send(Message::Text(text)).await.is_err() {
                        return;
                    }
                }
            }
            msg = socket.recv() => match msg {
                None | Some(Err(_) | Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = socket.send(Message::Close(None)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_timeout_is_randomized_between_one_and_two_minimums() {
        let min = Duration::from_secs(1800);
        for _ in 0..100 {
            let t = watch_timeout(None, min);
            assert!(t >= min && t < min * 2, "{t:?}");
        }
        assert_eq!(
            watch_timeout(Some(Duration::from_secs(5)), min),
            Duration::from_secs(5)
        );
    }
}
