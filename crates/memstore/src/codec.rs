//! The on-disk record format shared by the write-ahead log and snapshots.
//!
//! A frame is `len: u32 LE | crc: u32 LE | payload (len bytes)`, the CRC-32 covering the
//! length bytes and the payload. In the log, frames are grouped in batches (`wal::batch`),
//! whose header gives where they end; a snapshot is a sequence of frames closed by an `end`.
//! Payloads:
//!
//! | kind | fields after `kind: u8, rev: u64` |
//! | --- | --- |
//! | 1 put (older) | `key: str32, ttl_ms: u64 (0: none), fields: u16 count × str16, json: bytes32` |
//! | 6 put | `key: str32, ttl_ms: u64, splice: u32, flags: u8, name: str32, [namespace: str32], [uid: str32], labels: u32 count × (str32, str32), fields: u16 count × (str16, u8 present, [str32]), json: bytes32` |
//! | 2 delete | `key: str32` |
//! | 3 compact | — (`rev` is the compaction revision) |
//! | 4 start | — (log format 1 only: the revision of the empty store the log starts from) |
//! | 5 end | `count: u64` (a snapshot's last frame: how many puts precede it) |
//! | 7 open | `epoch: u64` (`rev`: the revision the store starts at; written by every start) |
//!
//! `strN`/`bytesN` are a little-endian length of N bits followed by the bytes. Decoding is
//! bounded by the frame: every length is checked against what remains.
//!
//! A put (kind 6) carries the object's parsed view (name, namespace, uid, labels, selectable
//! field values, where its resource version is spliced in) beside its stored JSON, so that a
//! restart rebuilds objects by copying bytes, without parsing JSON ([`Object::from_parts`]).
//! `flags`: bit 0, metadata members follow the splice point; bit 1, a namespace follows; bit
//! 2, a uid follows. Kind 1 (the JSON alone, parsed on load) is still read.

use std::time::Duration;

use bytes::Bytes;
use listwatch_api::{Object, ObjectParts, SelectableFields};

/// Header bytes of a frame.
pub(crate) const HEADER: usize = 8;
/// The largest payload a frame may claim; anything larger is corruption.
pub(crate) const MAX_PAYLOAD: usize = 256 << 20;

pub(crate) const PUT: u8 = 1;
pub(crate) const DELETE: u8 = 2;
pub(crate) const COMPACT: u8 = 3;
pub(crate) const START: u8 = 4;
pub(crate) const END: u8 = 5;
pub(crate) const PUT_PARTS: u8 = 6;
pub(crate) const OPEN: u8 = 7;

/// A decoded record.
#[derive(Debug)]
pub(crate) enum Record {
    Put {
        rev: u64,
        key: String,
        ttl: Option<Duration>,
        object: Object,
    },
    Delete {
        rev: u64,
        key: String,
    },
    Compact {
        rev: u64,
    },
    /// Log format 1's first record (never written now; refused in the log).
    Start,
    End {
        count: u64,
    },
    /// A start of the store at revision `rev` (the first one: the empty store's revision).
    Open {
        rev: u64,
    },
    /// A put or delete at `rev` that recovery does not need (a snapshot holds its effect),
    /// left undecoded.
    Covered {
        rev: u64,
    },
}

fn frame(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER]);
    payload(out);
    let len = u32::try_from(out.len() - at - HEADER).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[at..at + 4]);
    h.update(&out[at + HEADER..]);
    let crc = h.finalize();
    out[at + 4..at + HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn str32(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(s);
}

/// Appends a put of `object` at `key`, revision `rev`.
pub(crate) fn put(out: &mut Vec<u8>, rev: u64, key: &str, object: &Object, ttl: Option<Duration>) {
    frame(out, |p| {
        p.push(PUT_PARTS);
        p.extend_from_slice(&rev.to_le_bytes());
        str32(p, key.as_bytes());
        let ttl_ms = ttl.map_or(0, |t| {
            u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        p.extend_from_slice(&ttl_ms.to_le_bytes());
        let (splice, more) = object.splice_point();
        p.extend_from_slice(&u32::try_from(splice).unwrap_or(u32::MAX).to_le_bytes());
        let flags = u8::from(more)
            | (u8::from(object.namespace().is_some()) << 1)
            | (u8::from(object.uid().is_some()) << 2);
        p.push(flags);
        str32(p, object.name().as_bytes());
        if let Some(ns) = object.namespace() {
            str32(p, ns.as_bytes());
        }
        if let Some(uid) = object.uid() {
            str32(p, uid.as_bytes());
        }
        let labels = object.labels();
        p.extend_from_slice(
            &u32::try_from(labels.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for (k, v) in labels.iter() {
            str32(p, k.as_bytes());
            str32(p, v.as_bytes());
        }
        // Field paths are declared by the server (short); one longer than a u16 would be
        // cut, and the record then fails to decode rather than load a wrong path.
        let fields: Vec<&str> = object.selectable_fields().paths().collect();
        p.extend_from_slice(
            &u16::try_from(fields.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        for (path, value) in fields.iter().zip(object.field_values()) {
            let b = path.as_bytes();
            p.extend_from_slice(&u16::try_from(b.len()).unwrap_or(u16::MAX).to_le_bytes());
            p.extend_from_slice(b);
            match value {
                Some(v) => {
                    p.push(1);
                    str32(p, v.as_bytes());
                }
                None => p.push(0),
            }
        }
        str32(p, object.stored_json());
    });
}

/// Appends a record with no body (`DELETE` needs [`delete`]).
pub(crate) fn bare(out: &mut Vec<u8>, kind: u8, rev: u64) {
    frame(out, |p| {
        p.push(kind);
        p.extend_from_slice(&rev.to_le_bytes());
    });
}

/// Appends the record a start of the store writes first: its revision and a random epoch
/// (which makes the log's checksum chain after it unpredictable from any earlier run).
pub(crate) fn open(out: &mut Vec<u8>, rev: u64, epoch: u64) {
    frame(out, |p| {
        p.push(OPEN);
        p.extend_from_slice(&rev.to_le_bytes());
        p.extend_from_slice(&epoch.to_le_bytes());
    });
}

/// Appends a delete of `key` at `rev`.
pub(crate) fn delete(out: &mut Vec<u8>, rev: u64, key: &str) {
    frame(out, |p| {
        p.push(DELETE);
        p.extend_from_slice(&rev.to_le_bytes());
        str32(p, key.as_bytes());
    });
}

/// Appends a snapshot's closing frame.
pub(crate) fn end(out: &mut Vec<u8>, count: u64) {
    frame(out, |p| {
        p.push(END);
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
    });
}

/// What the bytes at an offset hold.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// A zero header: no more data here.
    End,
    /// A frame whose checksum holds; `next` is the offset after it.
    Valid { payload: &'a [u8], next: usize },
    /// A frame that runs past the end of the data.
    Truncated,
    /// A frame whose length or checksum is wrong.
    Corrupt,
}

/// Reads the frame at `at`.
pub(crate) fn read_frame(data: &[u8], at: usize) -> Frame<'_> {
    let Some(header) = data.get(at..at + HEADER) else {
        return if data.len() > at && data[at..].iter().any(|b| *b != 0) {
            Frame::Truncated
        } else {
            Frame::End
        };
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len == 0 && crc == 0 {
        return Frame::End;
    }
    if len > MAX_PAYLOAD {
        return Frame::Corrupt;
    }
    let Some(payload) = data.get(at + HEADER..at + HEADER + len) else {
        return Frame::Truncated;
    };
    let mut h = crc32fast::Hasher::new();
    h.update(&header[..4]);
    h.update(payload);
    if h.finalize() != crc {
        return Frame::Corrupt;
    }
    Frame::Valid {
        payload,
        next: at + HEADER + len,
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("record shorter than its fields".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn str32(&mut self) -> Result<&'a str, String> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| "key is not UTF-8".to_owned())
    }
}

/// Remembers the selectable-field lists decoded so far, so that the objects of a resource
/// share one (as they do when written) instead of each allocating its own.
#[derive(Default)]
pub(crate) struct FieldsCache(Vec<SelectableFields>);

impl FieldsCache {
    fn get(&mut self, paths: &[&str]) -> SelectableFields {
        if let Some(f) = self.0.iter().find(|f| f.paths().eq(paths.iter().copied())) {
            return f.clone();
        }
        let f = SelectableFields::new(paths.iter().copied());
        // Resources have a handful of distinct lists; a hostile log cannot grow this much.
        if self.0.len() < 64 {
            self.0.push(f.clone());
        }
        f
    }
}

/// Decodes a valid frame's payload; a put or delete at or below `covered` is only
/// [`Record::Covered`].
pub(crate) fn decode(
    payload: &[u8],
    covered: u64,
    cache: &mut FieldsCache,
) -> Result<Record, String> {
    let mut c = Cursor(payload);
    let kind = c.u8()?;
    let rev = c.u64()?;
    if matches!(kind, PUT | PUT_PARTS | DELETE) && rev <= covered {
        return Ok(Record::Covered { rev });
    }
    Ok(match kind {
        PUT_PARTS => {
            let key = c.str32()?.to_owned();
            let ttl_ms = c.u64()?;
            let splice = c.u32()? as usize;
            let flags = c.u8()?;
            let name = c.str32()?.into();
            let namespace = if flags & 2 != 0 {
                Some(c.str32()?.into())
            } else {
                None
            };
            let uid = if flags & 4 != 0 {
                Some(c.str32()?.into())
            } else {
                None
            };
            let n = c.u32()? as usize;
            // Bounded by the frame: each label takes at least 8 bytes.
            let mut labels = Vec::with_capacity(n.min(c.0.len() / 8));
            for _ in 0..n {
                labels.push((c.str32()?.into(), c.str32()?.into()));
            }
            let n = c.u16()?;
            let mut paths = Vec::with_capacity(usize::from(n).min(64));
            let mut values = Vec::with_capacity(usize::from(n).min(64));
            for _ in 0..n {
                let len = usize::from(c.u16()?);
                paths.push(
                    std::str::from_utf8(c.take(len)?)
                        .map_err(|_| "field path is not UTF-8".to_owned())?,
                );
                values.push(match c.u8()? {
                    0 => None,
                    _ => Some(c.str32()?.into()),
                });
            }
            let json_len = c.u32()? as usize;
            let json = Bytes::copy_from_slice(c.take(json_len)?);
            let parts = ObjectParts {
                json,
                splice_point: (splice, flags & 1 != 0),
                name,
                namespace,
                uid,
                labels,
                fields: cache.get(&paths),
                field_values: values,
            };
            let object = Object::from_parts(parts, rev)
                .map_err(|e| format!("stored object of {key}: {e}"))?;
            Record::Put {
                rev,
                key,
                ttl: (ttl_ms > 0).then(|| Duration::from_millis(ttl_ms)),
                object,
            }
        }
        PUT => {
            let key = c.str32()?.to_owned();
            let ttl_ms = c.u64()?;
            let n = c.u16()?;
            let mut fields = Vec::with_capacity(usize::from(n).min(64));
            for _ in 0..n {
                let len = usize::from(c.u16()?);
                let f = std::str::from_utf8(c.take(len)?)
                    .map_err(|_| "field path is not UTF-8".to_owned())?;
                fields.push(f);
            }
            let json_len = c.u32()? as usize;
            let json = c.take(json_len)?;
            let object = Object::from_json(json, &cache.get(&fields))
                .map_err(|e| format!("stored object of {key}: {e}"))?
                .with_resource_version(rev);
            Record::Put {
                rev,
                key,
                ttl: (ttl_ms > 0).then(|| Duration::from_millis(ttl_ms)),
                object,
            }
        }
        DELETE => Record::Delete {
            rev,
            key: c.str32()?.to_owned(),
        },
        COMPACT => Record::Compact { rev },
        START => Record::Start,
        END => Record::End { count: c.u64()? },
        OPEN => {
            c.u64()?;
            Record::Open { rev }
        }
        k => return Err(format!("unknown record kind {k}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Object {
        Object::from_json(
            br#"{"metadata":{"name":"a","namespace":"ns"},"spec":{"nodeName":"n1"}}"#,
            &SelectableFields::new(["spec.nodeName"]),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        put(
            &mut buf,
            7,
            "/pods/ns/a",
            &obj(),
            Some(Duration::from_secs(3)),
        );
        delete(&mut buf, 8, "/pods/ns/a");
        bare(&mut buf, COMPACT, 7);
        let Frame::Valid { payload, next } = read_frame(&buf, 0) else {
            panic!("first frame invalid")
        };
        match decode(payload, 0, &mut FieldsCache::default()) {
            Ok(Record::Put {
                rev,
                key,
                ttl,
                object,
            }) => {
                assert_eq!(
                    (rev, key.as_str(), ttl),
                    (7, "/pods/ns/a", Some(Duration::from_secs(3)))
                );
                assert_eq!(object.resource_version(), 7);
                assert!(object.same_content(&obj()));
                use listwatch_api::fields::Fields;
                assert_eq!(object.get_field("spec.nodeName"), Some("n1"));
            }
            other => panic!("{other:?}"),
        }
        let Frame::Valid { payload, next } = read_frame(&buf, next) else {
            panic!("second frame invalid")
        };
        assert!(matches!(
            decode(payload, 0, &mut FieldsCache::default()),
            Ok(Record::Delete { rev: 8, .. })
        ));
        let Frame::Valid { next, .. } = read_frame(&buf, next) else {
            panic!("third frame invalid")
        };
        assert!(matches!(read_frame(&buf, next), Frame::End));
    }

    /// Logs written before puts carried the parsed view (kind 1) still load.
    #[test]
    fn older_puts_are_parsed_from_their_json() {
        let o = obj();
        let mut buf = Vec::new();
        frame(&mut buf, |p| {
            p.push(PUT);
            p.extend_from_slice(&9u64.to_le_bytes());
            str32(p, b"/pods/ns/a");
            p.extend_from_slice(&0u64.to_le_bytes());
            p.extend_from_slice(&1u16.to_le_bytes());
            p.extend_from_slice(&13u16.to_le_bytes());
            p.extend_from_slice(b"spec.nodeName");
            str32(p, o.stored_json());
        });
        let Frame::Valid { payload, .. } = read_frame(&buf, 0) else {
            panic!("frame invalid")
        };
        match decode(payload, 0, &mut FieldsCache::default()) {
            Ok(Record::Put {
                rev, object, ttl, ..
            }) => {
                assert_eq!((rev, ttl), (9, None));
                assert!(object.same_content(&o));
                use listwatch_api::fields::Fields;
                assert_eq!(object.get_field("spec.nodeName"), Some("n1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn damage_is_told_apart() {
        let mut buf = Vec::new();
        put(&mut buf, 7, "/pods/ns/a", &obj(), None);
        let whole = buf.len();
        assert!(matches!(read_frame(&buf[..whole - 1], 0), Frame::Truncated));
        let mut flipped = buf.clone();
        flipped[whole - 3] ^= 1;
        assert!(matches!(read_frame(&flipped, 0), Frame::Corrupt));
        let mut huge = buf.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read_frame(&huge, 0), Frame::Corrupt));
        // Hostile payloads: lengths beyond the frame never panic.
        for cut in 0..whole - HEADER {
            let _ = decode(&buf[HEADER..HEADER + cut], 0, &mut FieldsCache::default());
        }
    }
}
