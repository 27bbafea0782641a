//! JSON text to CBOR in one pass: serde_json's parser drives a visitor that writes each
//! value's CBOR as it is parsed, so the numbers, strings and escapes mean exactly what they
//! mean in a `serde_json::Value` (the visitor receives the same calls a `Value` does), and
//! the output is byte for byte [`crate::encode`]'s of that value.
//!
//! A map's members are written in the order they come, their spans remembered; when the map
//! ends, the span is copied aside and written back behind the map's head in the
//! deterministic key order. An array's head goes in front of its items once their number is
//! known. Nesting is bounded by serde_json's recursion limit (128).

use std::fmt;
use std::ops::Range;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::{float, head, string, unsigned};

/// Writes the CBOR of the next JSON value to `out`.
pub(crate) struct Transcode<'a> {
    pub(crate) out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Writes a map key (a JSON string) as a CBOR byte string; its content's span is noted.
struct Key<'a> {
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Range<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Range<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = Range<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Range<usize>, E> {
        string(v, self.out);
        Ok(self.out.len() - v.len()..self.out.len())
    }
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out.push(if v { 0xf5 } else { 0xf4 });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        match u64::try_from(v) {
            Ok(u) => head(0, u, self.out),
            Err(_) => head(1, !(v as u64), self.out),
        }
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        unsigned(v, self.out);
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        float(v, self.out);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        string(v, self.out);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.push(0xf6);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let start = self.out.len();
        let mut n = 0u64;
        while seq
            .next_element_seed(Transcode { out: self.out })?
            .is_some()
        {
            n += 1;
        }
        let mut h = Vec::with_capacity(9);
        head(4, n, &mut h);
        self.out.splice(start..start, h);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let start = self.out.len();
        // Each member: its key's content and the whole member (key and value), as spans of
        // `out` counted from `start`.
        let mut members: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        loop {
            let at = self.out.len();
            let Some(key) = map.next_key_seed(Key { out: self.out })? else {
                break;
            };
            map.next_value_seed(Transcode { out: self.out })?;
            members.push((
                key.start - start..key.end - start,
                at - start..self.out.len() - start,
            ));
        }
        let body = self.out.split_off(start);
        let by_key = |r: &Range<usize>| body.get(r.clone()).unwrap_or_default();
        members.sort_by(|a, b| {
            let (ka, kb) = (by_key(&a.0), by_key(&b.0));
            ka.len().cmp(&kb.len()).then_with(|| ka.cmp(kb))
        });
        self.out.reserve(body.len() + 9);
        head(5, members.len() as u64, self.out);
        for (_, member) in members {
            self.out.extend_from_slice(by_key(&member));
        }
        Ok(())
    }
}
