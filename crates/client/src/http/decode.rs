//! Wire decoding: watch frames and Status bodies (list bodies: `list_body`).
//!
//! The watch body is decoded incrementally: bytes accumulate only until a frame's newline
//! (the apiserver's JSON encoder ends every frame with one), so memory holds at most one
//! frame plus one network chunk, never the stream. A frame larger than [`MAX_FRAME`] is an
//! error rather than unbounded buffering. A gzipped watch body (a watch-list of
//! kube-apiserver 1.37 or of this server, one gzip member or many) is inflated one bounded
//! step at a time, and only when no complete frame is left: the bound stays one frame plus
//! one step's output (32 KiB) plus one network chunk, however far the body inflates.

use bytes::{Buf, Bytes, BytesMut};
use futures::Stream;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use listwatch_api::watch::INITIAL_EVENTS_END_ANNOTATION;
use listwatch_api::{EventType, Object, SelectableFields, Status};
use serde::Deserialize;
use serde_json::Value;

use super::gzip::Inflater;
use crate::WatchEvent;
use crate::{Error, Result};

/// A watch response body and what to do if its connection is cut mid-stream (tell the client
/// that its server failed, so the next watch goes to another).
pub(crate) struct WatchBody {
    body: Incoming,
    on_cut: Option<Box<dyn FnOnce() + Send>>,
    /// The body is gzipped (`Content-Encoding: gzip`).
    gzip: bool,
}

impl WatchBody {
    /// The body of `res`, gzipped or not as its headers say.
    pub(crate) fn new(res: hyper::Response<Incoming>, on_cut: Box<dyn FnOnce() + Send>) -> Self {
        let gzip = super::body::is_gzip(&res);
        Self {
            body: res.into_body(),
            on_cut: Some(on_cut),
            gzip,
        }
    }
}

/// The largest watch frame accepted (objects are limited to a few MiB upstream).
pub(crate) const MAX_FRAME: usize = 16 << 20;

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    event_type: EventType,
    object: Value,
}

/// Turns a failed response into an error: its Status body, or one made from the code.
pub(crate) fn decode_status(code: u16, body: &[u8]) -> Error {
    if let Ok(status) = serde_json::from_slice::<Status>(body)
        && (status.kind == "Status" || status.code != 0)
    {
        let mut status = status;
        if status.code == 0 {
            status.code = code;
        }
        return Error::api(status);
    }
    let reason = match code {
        400 => listwatch_api::status::reason::BAD_REQUEST,
        404 => listwatch_api::status::reason::NOT_FOUND,
        409 => listwatch_api::status::reason::CONFLICT,
        410 => listwatch_api::status::reason::EXPIRED,
        429 => listwatch_api::status::reason::TOO_MANY_REQUESTS,
        503 => listwatch_api::status::reason::SERVICE_UNAVAILABLE,
        504 => listwatch_api::status::reason::TIMEOUT,
        _ => listwatch_api::status::reason::INTERNAL_ERROR,
    };
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)])
        .trim()
        .to_owned();
    Error::api(Status::failure(code, reason, text))
}

/// Refuses a successful answer whose `Content-Type` says it is not JSON (the client asks
/// for JSON only): a wrong server URL answering `text/html` (a web server, an ingress's
/// page) is told as such, as an `Error::Decode` that fails the wait for the first sync,
/// not as a JSON syntax error retried for ever. No `Content-Type` at all is let through
/// (the body decides).
pub(crate) fn expect_json(headers: &hyper::HeaderMap, what: &str) -> Result<()> {
    let Some(value) = headers.get(hyper::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media == "application/json" || media.ends_with("+json") {
        return Ok(());
    }
    // The server's header in the message, bounded.
    let shown: String = text.chars().take(80).collect();
    Err(Error::Decode(format!(
        "the server answered the {what} with Content-Type {shown:?}, not JSON: is the server URL a Kubernetes API server?"
    )))
}

/// Decodes one watch frame (without its newline).
#[cfg(test)]
pub(crate) fn decode_frame(frame: &[u8], fields: &SelectableFields) -> Result<WatchEvent<Object>> {
    decode_frame_with(frame, |v| {
        Object::from_value(v, fields).map_err(|e| Error::Decode(format!("watch object: {e}")))
    })
}

/// Decodes one watch frame, its object with `object`.
pub(crate) fn decode_frame_with<K>(
    frame: &[u8],
    object: impl Fn(Value) -> Result<K>,
) -> Result<WatchEvent<K>> {
    let ev: WireEvent =
        serde_json::from_slice(frame).map_err(|e| Error::Decode(format!("watch frame: {e}")))?;
    match ev.event_type {
        EventType::Added => Ok(WatchEvent::Added(object(ev.object)?)),
        EventType::Modified => Ok(WatchEvent::Modified(object(ev.object)?)),
        // The object is gone: one that does not decode still names what to remove.
        EventType::Deleted => Ok(WatchEvent::Deleted(
            object(ev.object).map_err(Error::for_deleted)?,
        )),
        EventType::Bookmark => {
            let meta = &ev.object["metadata"];
            // Opaque: kept as sent, whatever the server's versions look like.
            let resource_version = meta["resourceVersion"]
                .as_str()
                .filter(|rv| !rv.is_empty())
                .ok_or_else(|| Error::Decode("bookmark without metadata.resourceVersion".into()))?
                .to_owned();
            let initial_events_end = meta["annotations"][INITIAL_EVENTS_END_ANNOTATION] == "true";
            Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            })
        }
        EventType::Error => {
            let status: Status = serde_json::from_value(ev.object)
                .map_err(|e| Error::Decode(format!("watch error status: {e}")))?;
            Err(Error::api(status))
        }
    }
}

/// Splits a byte stream into newline-terminated frames, holding at most one partial frame.
#[derive(Default)]
pub(crate) struct FrameBuffer {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
}

impl FrameBuffer {
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, skipping blank lines.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Bytes>> {
        loop {
            let Some(pos) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') else {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_FRAME {
                    return Err(Error::Decode(format!(
                        "watch frame larger than {MAX_FRAME} bytes"
                    )));
                }
                return Ok(None);
            };
            let line = self.buf.split_to(self.scanned + pos + 1).freeze();
            self.scanned = 0;
            let trimmed = line.slice(..line.len() - 1);
            if trimmed.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(trimmed));
        }
    }

    /// What is left at the end of the stream, if it is more than whitespace.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        let rest = self.buf.split().freeze();
        self.scanned = 0;
        (!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest)
    }
}

/// Decodes a watch response body into events, incrementally. The stream ends after an
/// `ERROR` event, a decoding or transport error, or the body's end.
pub(crate) fn watch_events(
    body: WatchBody,
    fields: SelectableFields,
) -> impl Stream<Item = Result<WatchEvent<Object>>> + Send {
    watch_events_with(body, move |v| {
        // The metadata is kept (it is small) to name an object that does not decode.
        let meta = v.get("metadata").cloned();
        Object::from_value(v, &fields).map_err(|e| super::typed::skipped_or_dynamic_event(meta, &e))
    })
}

/// [`watch_events`] with the objects decoded by `object`.
pub(crate) fn watch_events_with<K, F>(
    body: WatchBody,
    object: F,
) -> impl Stream<Item = Result<WatchEvent<K>>> + Send
where
    K: Send,
    F: Fn(Value) -> Result<K> + Send,
{
    struct S<F> {
        body: WatchBody,
        frames: FrameBuffer,
        object: F,
        /// Present for a gzipped body.
        inflater: Option<Inflater>,
        /// Compressed bytes received and not inflated yet (a gzipped body only).
        pending: Bytes,
        /// The body has ended (and its gzip stream was finished): what is left is framed.
        ended: bool,
        done: bool,
    }
    let inflater = body.gzip.then(|| Inflater::new("watch body"));
    let s = S {
        body,
        frames: FrameBuffer::default(),
        object,
        inflater,
        pending: Bytes::new(),
        ended: false,
        done: false,
    };
    futures::stream::unfold(s, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            match s.frames.next_frame() {
                Ok(Some(frame)) => {
                    let ev = decode_frame_with(&frame, &s.object);
                    // One object that does not fit the type is skipped; the watch goes on.
                    s.done = ev.as_ref().is_err_and(|e| !e.is_skipped_object());
                    return Some((ev, s));
                }
                Ok(None) => {}
                Err(e) => {
                    s.done = true;
                    return Some((Err(e), s));
                }
            }
            // No complete frame left: inflate one more step of what arrived, if any.
            if let Some(inflater) = &mut s.inflater
                && !s.pending.is_empty()
            {
                let frames = &mut s.frames;
                match inflater.step(&s.pending, &mut |out| {
                    frames.push(out);
                    Ok(())
                }) {
                    Ok(n) => s.pending.advance(n.min(s.pending.len())),
                    Err(e) => {
                        s.done = true;
                        return Some((Err(e), s));
                    }
                }
                continue;
            }
            if s.ended {
                s.done = true;
                let rest = s.frames.finish()?;
                return Some((decode_frame_with(&rest, &s.object), s));
            }
            match s.body.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if s.inflater.is_some() {
                            s.pending = data;
                        } else {
                            s.frames.push(&data);
                        }
                    }
                }
                Some(Err(e)) => {
                    // The connection was cut mid-stream (reset, closed, h2 ping unanswered).
                    s.done = true;
                    if let Some(cut) = s.body.on_cut.take() {
                        cut();
                    }
                    return Some((Err(Error::Http(Box::new(e))), s));
                }
                None => {
                    s.ended = true;
                    if let Some(inflater) = &mut s.inflater {
                        // The last member's end and trailer: a stream cut inside a member is
                        // an error, never a silently shorter watch.
                        let frames = &mut s.frames;
                        if let Err(e) = inflater.finish(&mut |out| {
                            frames.push(out);
                            Ok(())
                        }) {
                            s.done = true;
                            return Some((Err(e), s));
                        }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::TypeMeta;
    use listwatch_api::watch::{encode_bookmark, encode_error, encode_frame};

    #[test]
    fn frames_split_across_chunks_at_any_byte() {
        let o =
            Object::from_json(br#"{"metadata":{"name":"a"}}"#, &SelectableFields::none()).unwrap();
        let mut wire = Vec::new();
        wire.extend_from_slice(&encode_frame(EventType::Added, &o.with_resource_version(3)));
        wire.extend_from_slice(b"\n");
        wire.extend_from_slice(&encode_bookmark(&TypeMeta::new("v1", "Pod"), 9, true));
        for cut in 0..wire.len() {
            let mut fb = FrameBuffer::default();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                fb.push(part);
                while let Some(f) = fb.next_frame().unwrap() {
                    got.push(decode_frame(&f, &SelectableFields::none()).unwrap());
                }
            }
            assert!(fb.finish().is_none());
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert!(
                matches!(&got[0], WatchEvent::Added(o) if o.resource_version() == 3 && o.name() == "a")
            );
            assert_eq!(
                got[1],
                WatchEvent::Bookmark {
                    resource_version: "9".into(),
                    initial_events_end: true
                }
            );
        }
    }

    #[test]
    fn error_frames_become_api_errors() {
        let s = Status::failure(410, "Expired", "too old resource version: 1 (5)");
        let f = encode_error(&s);
        let e = decode_frame(&f[..f.len() - 1], &SelectableFields::none()).unwrap_err();
        assert!(e.is_expired());
        assert_eq!(e.status(), Some(&s));
    }

    #[test]
    fn oversized_frames_are_refused() {
        let mut fb = FrameBuffer::default();
        fb.push(&vec![b' '; MAX_FRAME + 1]);
        assert!(fb.next_frame().is_err());
    }

    #[test]
    fn status_bodies_map_to_typed_errors_and_other_bodies_to_the_code() {
        let s = Status::failure(429, "TooManyRequests", "slow down").with_retry_after(3);
        let e = decode_status(429, &s.to_json());
        assert!(e.is_too_many_requests());
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(3)));
        let e = decode_status(410, b"<html>gone</html>");
        assert!(e.is_expired());
        assert_eq!(e.status().unwrap().message, "<html>gone</html>");
    }
}
