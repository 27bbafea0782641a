//! The watch server: a storage watch stream turned into a chunked HTTP body of
//! newline-terminated `WatchEvent` frames (or websocket messages, one per event).
//!
//! Invariants:
//! - the response head goes out before the first event (hyper flushes it while the body is
//!   pending), so clients see `200` at once;
//! - an object event is sent as three chunks — a static prefix, the object's wire bytes,
//!   a static suffix ([`frame_chunks`]) — so the object is never copied per watcher: when
//!   the cacher marked it with a shared encoding, every watcher sends the same bytes;
//! - chunks already waiting are written together; the connection is flushed whenever the
//!   storage stream has nothing more ready (hyper flushes when the body is pending);
//! - an `Error` event is sent as one ERROR frame (its Status from the one error mapping),
//!   then the body ends;
//! - the body ends cleanly (chunked terminator) at the watch's deadline and on shutdown;
//!   a client disconnect drops the body, which drops the storage stream and frees the
//!   watch's slot and gauge.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use listwatch_api::watch::{EventType, encode_bookmark, encode_error, frame_chunks};
use listwatch_api::{Object, TypeMeta};
use listwatch_storage::{WatchEvent, WatchStream};
use prometheus_client::metrics::counter::Counter;
use rand::Rng;

use crate::error::ApiError;
use crate::flowcontrol::WatchSlot;
use crate::metrics::GaugeGuard;
use crate::negotiate::Format;
use crate::query::IncludeObject;
use crate::resource::ResourceInfo;
use crate::table;

/// Response extension of a long-running response (an HTTP watch stream): it lasts as long
/// as the watch, so a server must not hold it to a deadline for sending a response
/// (upstream's `LongRunningFunc` decides the same from the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongRunning;

/// Upstream's watch timeout: `timeoutSeconds` when given, else the minimum request timeout
/// times a random factor in [1, 2), so that watches do not all expire together.
pub fn watch_timeout(requested: Option<Duration>, min_request_timeout: Duration) -> Duration {
    match requested {
        Some(t) => t,
        None => min_request_timeout.mul_f64(1.0 + rand::rng().random::<f64>()),
    }
}

/// One event on the wire: a whole frame, or an object frame in three shared chunks.
pub(crate) enum Frame {
    /// A frame built for this watcher (bookmarks, errors, table rows).
    One(Bytes),
    /// Prefix, the object's (shared) wire bytes, suffix.
    Parts([Bytes; 3]),
}

impl Frame {
    fn chunks(self) -> impl Iterator<Item = Bytes> {
        let (one, parts) = match self {
            Frame::One(b) => (Some(b), None),
            Frame::Parts(p) => (None, Some(p)),
        };
        one.into_iter().chain(parts.into_iter().flatten())
    }

    /// The frame as one buffer, without its trailing newline (a websocket message).
    fn message(self) -> Bytes {
        let whole = match self {
            Frame::One(b) => b,
            Frame::Parts(p) => {
                let mut m = BytesMut::with_capacity(p.iter().map(Bytes::len).sum());
                for c in &p {
                    m.extend_from_slice(c);
                }
                m.freeze()
            }
        };
        let end = whole.len() - usize::from(whole.ends_with(b"\n"));
        whole.slice(..end)
    }
}

/// How events become bytes for one watcher.
pub(crate) struct Encoder {
    pub(crate) info: Arc<ResourceInfo>,
    pub(crate) type_meta: TypeMeta,
    pub(crate) format: Format,
    pub(crate) include: IncludeObject,
    /// Whether the client asked for bookmarks (`allowWatchBookmarks=true`).
    pub(crate) bookmarks: bool,
}

impl Encoder {
    /// The frame for one event, and whether it is the last (an error).
    fn encode(&self, ev: &WatchEvent) -> (Frame, bool) {
        if let Format::Table { beta } = self.format {
            return self.encode_table(ev, beta);
        }
        if self.format == Format::Metadata {
            return self.encode_metadata(ev);
        }
        match ev {
            WatchEvent::Added(o) => (Frame::Parts(frame_chunks(EventType::Added, o)), false),
            WatchEvent::Modified { object, .. } => (
                Frame::Parts(frame_chunks(EventType::Modified, object)),
                false,
            ),
            WatchEvent::Deleted(o) => (Frame::Parts(frame_chunks(EventType::Deleted, o)), false),
            WatchEvent::Bookmark(b) => (
                Frame::One(encode_bookmark(
                    &self.type_meta,
                    b.resource_version,
                    b.initial_events_end,
                )),
                false,
            ),
            WatchEvent::Error(e) => (
                Frame::One(encode_error(&ApiError::storage(e, &self.info).0)),
                true,
            ),
        }
    }

    /// Events whose objects are `PartialObjectMetadata` (metadata informers).
    fn encode_metadata(&self, ev: &WatchEvent) -> (Frame, bool) {
        let (ty, obj) = match ev {
            WatchEvent::Added(o) => (EventType::Added, o),
            WatchEvent::Modified { object, .. } => (EventType::Modified, object),
            WatchEvent::Deleted(o) => (EventType::Deleted, o),
            WatchEvent::Bookmark(b) => {
                let tm = TypeMeta::new("meta.k8s.io/v1", "PartialObjectMetadata");
                return (
                    Frame::One(encode_bookmark(
                        &tm,
                        b.resource_version,
                        b.initial_events_end,
                    )),
                    false,
                );
            }
            WatchEvent::Error(e) => {
                return (
                    Frame::One(encode_error(&ApiError::storage(e, &self.info).0)),
                    true,
                );
            }
        };
        let encoded = obj
            .to_value()
            .and_then(|v| serde_json::to_vec(&table::partial_metadata(&v)));
        match encoded {
            Ok(meta) => {
                let mut out = Vec::with_capacity(meta.len() + 32);
                out.extend_from_slice(b"{\"type\":\"");
                out.extend_from_slice(ty.as_str().as_bytes());
                out.extend_from_slice(b"\",\"object\":");
                out.extend_from_slice(&meta);
                out.extend_from_slice(b"}\n");
                (Frame::One(Bytes::from(out)), false)
            }
            Err(e) => {
                let err = ApiError::internal(format!("stored object does not decode: {e}"));
                (Frame::One(encode_error(&err.0)), true)
            }
        }
    }

    fn encode_table(&self, ev: &WatchEvent, beta: bool) -> (Frame, bool) {
        let (ty, obj, rv): (EventType, Option<&Object>, u64) = match ev {
            WatchEvent::Added(o) => (EventType::Added, Some(o), o.resource_version()),
            WatchEvent::Modified { object, .. } => {
                (EventType::Modified, Some(object), object.resource_version())
            }
            WatchEvent::Deleted(o) => (EventType::Deleted, Some(o), o.resource_version()),
            WatchEvent::Bookmark(b) => (EventType::Bookmark, None, b.resource_version),
            WatchEvent::Error(e) => {
                return (
                    Frame::One(encode_error(&ApiError::storage(e, &self.info).0)),
                    true,
                );
            }
        };
        match table::watch_frame(&self.info, ty, obj, rv, self.include, beta) {
            Ok(f) => (Frame::One(f), false),
            Err(e) => {
                let err = ApiError::internal(format!("printing a table row failed: {e}"));
                (Frame::One(encode_error(&err.0)), true)
            }
        }
    }
}

/// Everything a watch owns; dropping it ends the watch.
pub(crate) struct WatchState {
    pub(crate) stream: WatchStream,
    pub(crate) encoder: Encoder,
    pub(crate) deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    pub(crate) sent: Counter,
    pub(crate) _slot: WatchSlot,
    pub(crate) _gauge: GaugeGuard,
}

/// The watch's frames, one per event, until the storage stream, the deadline or shutdown
/// ends it (or an ERROR frame, which is the last).
pub(crate) fn frames(state: WatchState) -> impl Stream<Item = Frame> + Send {
    futures::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        let ev = loop {
            let ev = tokio::select! {
                biased;
                _ = st.shutdown.wait_for(|stop| *stop) => return None,
                () = &mut st.deadline => return None,
                ev = st.stream.next() => ev?,
            };
            // Bookmarks only go to clients that asked for them, whatever storage sends.
            if st.encoder.bookmarks || !matches!(ev, WatchEvent::Bookmark(_)) {
                break ev;
            }
        };
        let (frame, last) = st.encoder.encode(&ev);
        st.sent.inc();
        Some((frame, if last { None } else { Some(st) }))
    })
}

/// The body stream of a watch response: every frame's chunks, in order.
pub(crate) fn body(state: WatchState) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    frames(state).flat_map(|f| futures::stream::iter(f.chunks().map(Ok)))
}

/// The largest message (and frame) a watch's websocket accepts from the client. A watch
/// client sends nothing meaningful: pings (at most 125 bytes), pongs and a close.
pub(crate) const MAX_INBOUND_WEBSOCKET_MESSAGE: usize = 1024;

/// A websocket upgrade with the watch's inbound bounds: messages and frames of at most
/// [`MAX_INBOUND_WEBSOCKET_MESSAGE`] (the library default is 64 MiB; a larger frame is
/// refused from its header, before its payload is read), and a small read buffer (the
/// default allocates 128 KiB per socket up front). Outbound, each send waits for its flush,
/// so the write buffer holds one event at most; automatic pongs replace each other.
pub(crate) fn bounded(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(MAX_INBOUND_WEBSOCKET_MESSAGE)
        .max_frame_size(MAX_INBOUND_WEBSOCKET_MESSAGE)
        .read_buffer_size(4 * 1024)
}

/// Serves a watch over a websocket: one text message per event (the frame without its
/// newline), then a close. Ends early when the client closes or goes away; a message over
/// the inbound limit closes the socket with 1009 (message too big).
pub(crate) async fn forward_to_websocket(mut socket: WebSocket, state: WatchState) {
    let frames = frames(state);
    futures::pin_mut!(frames);
    loop {
        tokio::select! {
            frame = frames.next() => {
                let Some(frame) = frame else { break };
                let Ok(text) = Utf8Bytes::try_from(frame.message()) else { return };
                if socket.send(Message::Text(text)).await.is_err() {
                    return;
                }
            }
            msg = socket.recv() => match msg {
                None | Some(Ok(Message::Close(_))) => return,
                Some(Err(e)) => {
                    // tungstenite's capacity error; anything else just ends the socket.
                    if e.to_string().contains("Space limit exceeded") {
                        let close = CloseFrame {
                            code: close_code::SIZE,
                            reason: Utf8Bytes::from_static("message too big"),
                        };
                        let _ = socket.send(Message::Close(Some(close))).await;
                    }
                    return;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = socket.send(Message::Close(None)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    fn encoder(format: Format) -> Encoder {
        let info = Arc::new(ResourceInfo::new("", "v1", "configmaps", "ConfigMap"));
        Encoder {
            type_meta: info.type_meta(),
            info,
            format,
            include: IncludeObject::Metadata,
            bookmarks: true,
        }
    }

    #[test]
    fn object_frames_share_the_objects_wire_bytes_across_watchers() {
        let o = Object::from_json(br#"{"metadata":{"name":"a"}}"#, &SelectableFields::none())
            .unwrap()
            .with_resource_version(5)
            .with_shared_encoding();
        let (a, b) = (encoder(Format::Json), encoder(Format::Json));
        let (Frame::Parts(fa), false) = a.encode(&WatchEvent::Added(o.clone())) else {
            panic!()
        };
        let (Frame::Parts(fb), false) = b.encode(&WatchEvent::Added(o.clone())) else {
            panic!()
        };
        assert_eq!(fa[1].as_ptr(), fb[1].as_ptr(), "one encoding, shared");
        let whole: Vec<u8> = fa.concat();
        let ev: serde_json::Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(
            (
                ev["type"].as_str(),
                ev["object"]["metadata"]["resourceVersion"].as_str()
            ),
            (Some("ADDED"), Some("5"))
        );
        assert!(whole.ends_with(b"}\n"));
        let msg = Frame::Parts(fa).message();
        assert!(!msg.ends_with(b"\n") && msg.ends_with(b"}"));
    }

    /// A watch over `events`; keep the returned sender alive (dropping it is a shutdown).
    fn state(
        events: Vec<WatchEvent>,
        bookmarks: bool,
    ) -> (WatchState, tokio::sync::watch::Sender<bool>) {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::metrics::Metrics::register(&mut registry);
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let slot = crate::flowcontrol::WatchLimits::new(1, 1, metrics.clone())
            .try_open(&crate::ClientKey::Unidentified)
            .unwrap();
        let st = WatchState {
            stream: Box::pin(futures::stream::iter(events)),
            encoder: Encoder {
                bookmarks,
                ..encoder(Format::Json)
            },
            deadline: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            shutdown,
            sent: metrics.watch_events("configmaps"),
            _slot: slot,
            _gauge: metrics.watch_started(),
        };
        (st, stop)
    }

    fn types(frames: Vec<Frame>) -> Vec<String> {
        frames
            .into_iter()
            .map(|f| {
                let v: serde_json::Value = serde_json::from_slice(&f.message()).unwrap();
                v["type"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[tokio::test]
    async fn bookmarks_reach_only_clients_that_asked_and_nothing_follows_an_error() {
        let o = Object::from_json(br#"{"metadata":{"name":"a"}}"#, &SelectableFields::none())
            .unwrap()
            .with_resource_version(2);
        let bookmark = WatchEvent::Bookmark(listwatch_storage::Bookmark {
            resource_version: 3,
            initial_events_end: false,
        });
        let events = vec![
            WatchEvent::Added(o.clone()),
            bookmark,
            WatchEvent::Error(listwatch_storage::Error::too_old(1, 9)),
            WatchEvent::Deleted(o),
        ];
        let (st, _stop) = state(events.clone(), true);
        let with: Vec<Frame> = frames(st).collect().await;
        assert_eq!(types(with), ["ADDED", "BOOKMARK", "ERROR"]);
        let (st, _stop) = state(events.clone(), false);
        let without: Vec<Frame> = frames(st).collect().await;
        assert_eq!(types(without), ["ADDED", "ERROR"]);
        let (st, stop) = state(events, true);
        stop.send_replace(true);
        assert!(
            frames(st).collect::<Vec<_>>().await.is_empty(),
            "shutdown ends the watch"
        );
    }

    #[test]
    fn errors_are_the_last_frame_and_carry_the_mapped_status() {
        let (f, last) = encoder(Format::Json)
            .encode(&WatchEvent::Error(listwatch_storage::Error::too_old(1, 9)));
        assert!(last);
        let Frame::One(bytes) = f else { panic!() };
        let ev: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            (ev["type"].as_str(), ev["object"]["code"].as_u64()),
            (Some("ERROR"), Some(410))
        );
    }

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
