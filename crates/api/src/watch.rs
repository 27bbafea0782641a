//! Watch events on the wire: `{"type":"ADDED","object":{...}}`, one per line.
//!
//! Frames are built by concatenating pre-encoded object bytes; nothing here re-serializes an
//! object.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::meta::TypeMeta;
use crate::object::Object;
use crate::status::Status;

/// The annotation that marks the bookmark ending a watch's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// An object appeared (or entered the selection).
    Added,
    /// An object changed.
    Modified,
    /// An object went away (or left the selection).
    Deleted,
    /// Progress: only the resource version is meaningful.
    Bookmark,
    /// The stream failed; the object is a `Status`.
    Error,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
            EventType::Error => "ERROR",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded watch event, generic over the object type (clients decode with this).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchEvent<T> {
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The object (a `Status` for `ERROR`).
    pub object: T,
}

fn frame(event_type: EventType, write_object: impl FnOnce(&mut Vec<u8>), hint: usize) -> Bytes {
    let mut out = Vec::with_capacity(hint + 40);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_str().as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    write_object(&mut out);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// Encodes one newline-terminated watch frame for an object event.
///
/// ```
/// use listwatch_api::{Object, SelectableFields, watch::{encode_frame, EventType}};
/// let o = Object::from_json(br#"{"metadata":{"name":"a"}}"#, &SelectableFields::none()).unwrap();
/// let f = encode_frame(EventType::Added, &o.with_resource_version(3));
/// assert_eq!(&f[..], &br#"{"type":"ADDED","object":{"metadata":{"resourceVersion":"3","name":"a"}}}
/// "#[..]);
/// ```
pub fn encode_frame(event_type: EventType, object: &Object) -> Bytes {
    frame(event_type, |out| object.write_json(out), object.size())
}

/// The bytes of a watch frame before its object: `{"type":"<TYPE>","object":`.
pub fn frame_prefix(event_type: EventType) -> &'static [u8] {
    match event_type {
        EventType::Added => b"{\"type\":\"ADDED\",\"object\":",
        EventType::Modified => b"{\"type\":\"MODIFIED\",\"object\":",
        EventType::Deleted => b"{\"type\":\"DELETED\",\"object\":",
        EventType::Bookmark => b"{\"type\":\"BOOKMARK\",\"object\":",
        EventType::Error => b"{\"type\":\"ERROR\",\"object\":",
    }
}

/// The bytes of a watch frame after its object: the closing brace and the newline.
pub const FRAME_SUFFIX: &[u8] = b"}\n";

/// One object event frame as three chunks (prefix, object, suffix) that a streaming body can
/// send without copying the object: the prefix and suffix are static and the object chunk is
/// the object's (possibly shared) wire bytes.
pub fn frame_chunks(event_type: EventType, object: &Object) -> [Bytes; 3] {
    [
        Bytes::from_static(frame_prefix(event_type)),
        object.to_json_bytes(),
        Bytes::from_static(FRAME_SUFFIX),
    ]
}

/// Encodes a BOOKMARK frame: an object of the resource's kind carrying only its version
/// (and the initial-events-end annotation when it closes a watch's initial events).
pub fn encode_bookmark(type_meta: &TypeMeta, rv: u64, initial_events_end: bool) -> Bytes {
    frame(
        EventType::Bookmark,
        |out| bookmark_object(out, type_meta, rv, initial_events_end),
        96,
    )
}

/// Encodes an ERROR frame carrying a Status.
pub fn encode_error(status: &Status) -> Bytes {
    frame(
        EventType::Error,
        |out| out.extend_from_slice(&status.to_json()),
        256,
    )
}

fn bookmark_object(out: &mut Vec<u8>, type_meta: &TypeMeta, rv: u64, end: bool) {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), rv.to_string().into());
    if end {
        meta.insert(
            "annotations".into(),
            serde_json::json!({ INITIAL_EVENTS_END_ANNOTATION: "true" }),
        );
    }
    let v = serde_json::json!({
        "kind": type_meta.kind,
        "apiVersion": type_meta.api_version,
        "metadata": meta,
    });
    // A map of strings cannot fail to serialize.
    let _ = serde_json::to_writer(out, &v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmark_frames_carry_only_the_version() {
        let f = encode_bookmark(&TypeMeta::new("v1", "Pod"), 42, true);
        let ev: WatchEvent<serde_json::Value> = serde_json::from_slice(&f).unwrap();
        assert_eq!(ev.event_type, EventType::Bookmark);
        assert_eq!(ev.object["metadata"]["resourceVersion"], "42");
        assert_eq!(
            ev.object["metadata"]["annotations"][INITIAL_EVENTS_END_ANNOTATION],
            "true"
        );
        assert_eq!(ev.object["kind"], "Pod");
        assert!(f.ends_with(b"\n"));
    }

    #[test]
    fn chunked_frames_equal_contiguous_frames() {
        let o = Object::from_json(
            br#"{"metadata":{"name":"a"}}"#,
            &crate::SelectableFields::none(),
        )
        .unwrap()
        .with_resource_version(9);
        for t in [EventType::Added, EventType::Modified, EventType::Deleted] {
            let joined: Vec<u8> = frame_chunks(t, &o)
                .iter()
                .flat_map(|b| b.to_vec())
                .collect();
            assert_eq!(joined, encode_frame(t, &o).to_vec());
        }
    }

    #[test]
    fn error_frames_carry_a_status() {
        let s = Status::failure(410, crate::status::reason::EXPIRED, "gone");
        let ev: WatchEvent<Status> = serde_json::from_slice(&encode_error(&s)).unwrap();
        assert_eq!(ev.object, s);
    }
}
