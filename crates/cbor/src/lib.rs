//! Kubernetes' CBOR encoding (KEP-4222, `application/cbor`, `application/cbor-seq` for
//! watches) as a transcoder between the JSON the rest of listwatch holds and CBOR bytes.
//!
//! It owns both directions and nothing else:
//! - [`encode`] / [`from_json`]: a JSON value as upstream's CBOR serializer writes an object
//!   (k8s.io/apimachinery `pkg/runtime/serializer/cbor`, its `modes.Encode`): enclosed in the
//!   self-described CBOR tag 55799 (the prefix `d9 d9 f7`, [`SELF_DESCRIBED`]); map keys in
//!   the core deterministic order of RFC 8949 §4.2.1 (bytewise order of their encodings:
//!   shorter keys first); definite lengths only; integers as CBOR integers (never floats) in
//!   their shortest head; other numbers as the shortest float that keeps their value;
//!   strings — map keys too — as CBOR byte strings, as upstream's `StringToByteString` and
//!   `FieldNameToByteString` write Go strings; `null`, booleans as the simple values. Times
//!   are RFC 3339 strings already (upstream writes `metav1.Time` as text, no tag 0).
//! - [`decode`]: one CBOR data item (a request body) to a JSON value, refusing what
//!   upstream's `modes.Decode` refuses: nesting past [`MAX_DEPTH`] (64), arrays and maps of
//!   more than [`MAX_ITEMS`] (1 024) elements, duplicate map keys, text strings that are not
//!   UTF-8, NaN and infinities, integers outside `i64`, map keys that are not strings,
//!   the time and bignum tags (1, 2, 3), and anything after the data item. Indefinite
//!   lengths and other tags are accepted (the self-described tag and unknown tags are read
//!   through; tags 21/22/23 on a byte string give its base64url, base64 or base16 text, as
//!   upstream decodes `[]byte` sent under those tags into a string).
//!
//! Invariants:
//! - decoding never panics and allocates at most what the input holds: a declared length is
//!   checked against the bytes left before anything is allocated for it, so a header
//!   declaring 2^63 bytes or elements costs nothing; nesting (tags included) is bounded, so
//!   recursion is too;
//! - `decode(encode(v)) == v` for every JSON value (what the server sends, a client may
//!   send back);
//! - the encoding is deterministic: one JSON value has one CBOR encoding, whatever the order
//!   of its members.
//!
//! Where we differ from upstream: a byte string whose content is not UTF-8 is refused (the
//! object becomes JSON here, whose strings are text; upstream keeps arbitrary bytes in a Go
//! string); `[]byte` fields (a Secret's `data`, a ConfigMap's `binaryData`) are written as
//! the byte string of their base64 text, not as tag 22 around the raw bytes (the encoder
//! works from JSON without the kind's schema). Both are listed in docs/conformance.md.
//!
//! It depends on no workspace crate; the endpoints use it for responses, watch frames and
//! request bodies.

use std::cmp::Ordering;

use base64::Engine as _;
use ciborium_io::Read as _;
use ciborium_ll::{Decoder, Header};
use serde_json::{Map, Number, Value};

/// The head of tag 55799, "self-described CBOR", that upstream puts before every object it
/// encodes (a magic number: no JSON text starts with these bytes).
pub const SELF_DESCRIBED: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// The deepest nesting a decoded body may have (upstream's `MaxNestedLevels`).
pub const MAX_DEPTH: usize = 64;

/// The most elements of one array, or pairs of one map, a decoded body may have
/// (upstream's `MaxArrayElements` and `MaxMapPairs`).
pub const MAX_ITEMS: u64 = 1024;

/// Why a JSON document could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The input is not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Why CBOR bytes could not be decoded (each is a 400 for a request body).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a data item (or a declared length runs past it).
    #[error("cbor: unexpected end of input")]
    Truncated,
    /// Bytes that are not well-formed CBOR.
    #[error("cbor: malformed input at byte {0}")]
    Malformed(usize),
    /// Bytes after the one data item.
    #[error("cbor: {0} bytes of extraneous data after the data item")]
    Trailing(usize),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("cbor: exceeded max nested level {MAX_DEPTH}")]
    TooDeep,
    /// An array or map of more than [`MAX_ITEMS`] elements.
    #[error("cbor: exceeded max number of elements {MAX_ITEMS} for CBOR {0}")]
    TooMany(&'static str),
    /// A map with the same key twice.
    #[error("cbor: found duplicate map key {0:?}")]
    DuplicateKey(String),
    /// A map key that is not a text or byte string.
    #[error("cbor: map keys must be strings")]
    KeyNotString,
    /// A string whose content is not UTF-8.
    #[error("cbor: invalid UTF-8 string")]
    InvalidUtf8,
    /// NaN or an infinity (no JSON form).
    #[error("cbor: floating-point number NaN or infinity is not allowed")]
    NonFinite,
    /// An integer outside the range of `int64`.
    #[error("cbor: integer {0} overflows int64")]
    IntegerOverflow(String),
    /// A tag whose value has no JSON form (epoch times, bignums).
    #[error("cbor: tag {0} is not supported")]
    UnsupportedTag(u64),
    /// A simple value other than false, true, null and undefined.
    #[error("cbor: simple value {0} is not supported")]
    UnsupportedSimple(u8),
    /// A break code outside an indefinite-length item.
    #[error("cbor: unexpected break")]
    UnexpectedBreak,
}

/// `value` as upstream encodes an object: the self-described tag, then the value.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&SELF_DESCRIBED);
    encode_into(value, &mut out);
    out
}

/// The JSON document `json` as [`encode`] writes its value, in one pass over the text: no
/// tree is built; each map's members are written as they are parsed and reordered in place
/// once the map ends (`transcode`).
pub fn from_json(json: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(json.len());
    out.extend_from_slice(&SELF_DESCRIBED);
    from_json_into(json, &mut out)?;
    Ok(out)
}

/// Appends the CBOR (no tag) of the JSON document `json` to `out`, as [`from_json`] writes
/// it: the form of an item nested in a list. On error `out` may hold part of it.
pub fn from_json_into(json: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    serde::de::DeserializeSeed::deserialize(transcode::Transcode { out }, &mut de)?;
    de.end()?;
    Ok(())
}

mod transcode;

/// Appends `value`'s CBOR (no tag) to `out`: the form of an item nested in a list.
pub fn encode_into(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(0xf6),
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Number(n) => number(n, out),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            head(4, items.len() as u64, out);
            for item in items {
                encode_into(item, out);
            }
        }
        Value::Object(map) => {
            head(5, map.len() as u64, out);
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_unstable_by(|a, b| key_order(a.0, b.0));
            for (k, v) in pairs {
                string(k, out);
                encode_into(v, out);
            }
        }
    }
}

/// The prefix of a watch event item of `event_type` in an `application/cbor-seq` stream:
/// the self-described tag and the event map up to its `object` key, which the object's own
/// encoding (with its tag, as upstream's `RawExtension` embeds it) follows. The keys come in
/// the deterministic order (`type`, then `object`).
pub fn event_prefix(event_type: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&SELF_DESCRIBED);
    head(5, 2, &mut out);
    string("type", &mut out);
    string(event_type, &mut out);
    string("object", &mut out);
    out
}

/// The deterministic order of two map keys: the bytewise order of their encodings, which
/// for byte strings in shortest form is shorter first, then bytewise.
fn key_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

pub(crate) fn string(s: &str, out: &mut Vec<u8>) {
    head(2, s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

fn number(n: &Number, out: &mut Vec<u8>) {
    if let Some(u) = n.as_u64() {
        unsigned(u, out);
    } else if let Some(i) = n.as_i64() {
        // Negative: CBOR's major type 1 holds -1 - i, which is !i for two's complement.
        head(1, !(i as u64), out);
    } else if let Some(f) = n.as_f64() {
        float(f, out);
    } else {
        // serde_json numbers are u64, i64 or a finite f64; nothing else reaches here.
        out.push(0xf6);
    }
}

/// A non-negative integer: as an integer within int64, else as the nearest float64 — what
/// upstream's JSON decoding (sigs.k8s.io/json) makes of such a number, and the only form
/// upstream's CBOR decoder (and ours) accepts back: integers past int64 are refused there.
pub(crate) fn unsigned(u: u64, out: &mut Vec<u8>) {
    if i64::try_from(u).is_ok() {
        head(0, u, out);
    } else {
        float(u as f64, out);
    }
}

/// The shortest of float16, float32 and float64 that holds `f` exactly (upstream's
/// `ShortestFloat16`), through ciborium's header encoding, which picks it.
pub(crate) fn float(f: f64, out: &mut Vec<u8>) {
    let mut enc = ciborium_ll::Encoder::from(&mut *out);
    // Writing into a Vec cannot fail.
    enc.push(Header::Float(f)).unwrap_or(());
}

/// A head in its shortest form: major type `major`, argument `n`.
pub(crate) fn head(major: u8, n: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if let Ok(b) = u8::try_from(n) {
        out.extend_from_slice(&[m | 24, b]);
    } else if let Ok(h) = u16::try_from(n) {
        out.push(m | 25);
        out.extend_from_slice(&h.to_be_bytes());
    } else if let Ok(w) = u32::try_from(n) {
        out.push(m | 26);
        out.extend_from_slice(&w.to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Decodes one CBOR data item, the whole of `input`, to JSON (see the crate docs for what is
/// refused).
pub fn decode(input: &[u8]) -> Result<Value, DecodeError> {
    let mut r = Reader {
        dec: Decoder::from(input),
        len: input.len(),
    };
    let v = r.value(0)?;
    match r.remaining() {
        0 => Ok(v),
        n => Err(DecodeError::Trailing(n)),
    }
}

/// Decodes a CBOR sequence (RFC 8742: data items one after another, an
/// `application/cbor-seq` watch body) of at most `max_items` items, each as [`decode`] reads
/// one.
pub fn decode_sequence(input: &[u8], max_items: usize) -> Result<Vec<Value>, DecodeError> {
    let mut r = Reader {
        dec: Decoder::from(input),
        len: input.len(),
    };
    let mut items = Vec::new();
    while r.remaining() > 0 {
        if items.len() == max_items {
            return Err(DecodeError::TooMany("sequence"));
        }
        items.push(r.value(0)?);
    }
    Ok(items)
}

/// Decodes `input` (one data item) and writes it as JSON.
pub fn to_json(input: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let v = decode(input)?;
    // A value decoded from CBOR has string keys and finite numbers: it always serializes.
    Ok(serde_json::to_vec(&v).unwrap_or_default())
}

/// Whether `bytes` start as upstream's encoder starts every object (the self-described tag).
pub fn is_self_described(bytes: &[u8]) -> bool {
    bytes.starts_with(&SELF_DESCRIBED)
}

struct Reader<'a> {
    dec: Decoder<&'a [u8]>,
    len: usize,
}

impl Reader<'_> {
    fn remaining(&mut self) -> usize {
        self.len.saturating_sub(self.dec.offset())
    }

    fn header(&mut self) -> Result<Header, DecodeError> {
        self.dec.pull().map_err(|e| match e {
            ciborium_ll::Error::Io(_) => DecodeError::Truncated,
            ciborium_ll::Error::Syntax(at) => DecodeError::Malformed(at),
        })
    }

    /// `n` bytes of content, refused before allocating when fewer remain.
    fn take(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let start = out.len();
        out.resize(start + n, 0);
        let dst = out.get_mut(start..).ok_or(DecodeError::Truncated)?;
        self.dec.read_exact(dst).map_err(|_| DecodeError::Truncated)
    }

    /// A byte or text string's content (`text`: the major type), definite or in chunks.
    fn content(&mut self, len: Option<usize>, text: bool) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        match len {
            Some(n) => self.take(n, &mut out)?,
            None => loop {
                let at = self.dec.offset();
                match (self.header()?, text) {
                    (Header::Break, _) => break,
                    (Header::Bytes(Some(n)), false) => self.take(n, &mut out)?,
                    (Header::Text(Some(n)), true) => {
                        let start = out.len();
                        self.take(n, &mut out)?;
                        // Each chunk of a text string is itself valid UTF-8 (RFC 8949 §3.2.3).
                        let chunk = out.get(start..).unwrap_or_default();
                        std::str::from_utf8(chunk).map_err(|_| DecodeError::InvalidUtf8)?;
                    }
                    _ => return Err(DecodeError::Malformed(at)),
                }
            },
        }
        Ok(out)
    }

    fn string(&mut self, len: Option<usize>, text: bool) -> Result<String, DecodeError> {
        String::from_utf8(self.content(len, text)?).map_err(|_| DecodeError::InvalidUtf8)
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        match self.header()? {
            Header::Positive(n) => i64::try_from(n)
                .map(Value::from)
                .map_err(|_| DecodeError::IntegerOverflow(n.to_string())),
            Header::Negative(n) => i64::try_from(n)
                .map(|i| Value::from(-1 - i))
                .map_err(|_| DecodeError::IntegerOverflow(format!("-{}", u128::from(n) + 1))),
            Header::Float(f) => Number::from_f64(f)
                .map(Value::Number)
                .ok_or(DecodeError::NonFinite),
            Header::Bytes(len) => self.string(len, false).map(Value::String),
            Header::Text(len) => self.string(len, true).map(Value::String),
            Header::Array(len) => self.array(len, depth),
            Header::Map(len) => self.map(len, depth),
            Header::Tag(tag) => self.tagged(tag, depth),
            Header::Simple(20) => Ok(Value::Bool(false)),
            Header::Simple(21) => Ok(Value::Bool(true)),
            // `undefined` decodes as `null`, as upstream's decoder gives nil for both.
            Header::Simple(22 | 23) => Ok(Value::Null),
            Header::Simple(s) => Err(DecodeError::UnsupportedSimple(s)),
            Header::Break => Err(DecodeError::UnexpectedBreak),
        }
    }

    /// Whether an indefinite-length item ends here (its break code, consumed).
    fn at_break(&mut self) -> Result<bool, DecodeError> {
        match self.header()? {
            Header::Break => Ok(true),
            h => {
                self.dec.push(h);
                Ok(false)
            }
        }
    }

    fn array(&mut self, len: Option<usize>, depth: usize) -> Result<Value, DecodeError> {
        if len.is_some_and(|n| n as u64 > MAX_ITEMS) {
            return Err(DecodeError::TooMany("array"));
        }
        // Every element is at least one byte: never more room than the input could fill.
        let mut items = Vec::with_capacity(len.unwrap_or(0).min(self.remaining()));
        loop {
            match len {
                Some(n) if items.len() == n => break,
                None if self.at_break()? => break,
                _ => {}
            }
            if items.len() as u64 == MAX_ITEMS {
                return Err(DecodeError::TooMany("array"));
            }
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, len: Option<usize>, depth: usize) -> Result<Value, DecodeError> {
        if len.is_some_and(|n| n as u64 > MAX_ITEMS) {
            return Err(DecodeError::TooMany("map"));
        }
        let mut map = Map::new();
        let mut pairs = 0usize;
        loop {
            match len {
                Some(n) if pairs == n => break,
                None if self.at_break()? => break,
                _ => {}
            }
            if pairs as u64 == MAX_ITEMS {
                return Err(DecodeError::TooMany("map"));
            }
            let key = match self.header()? {
                Header::Bytes(l) => self.string(l, false)?,
                Header::Text(l) => self.string(l, true)?,
                _ => return Err(DecodeError::KeyNotString),
            };
            let value = self.value(depth + 1)?;
            if map.contains_key(&key) {
                return Err(DecodeError::DuplicateKey(key));
            }
            map.insert(key, value);
            pairs += 1;
        }
        Ok(Value::Object(map))
    }

    fn tagged(&mut self, tag: u64, depth: usize) -> Result<Value, DecodeError> {
        // A tag nests its content: chains of tags count towards the depth bound.
        let depth = depth + 1;
        match tag {
            // Epoch times and bignums have no JSON form upstream's unstructured accepts.
            1..=3 => Err(DecodeError::UnsupportedTag(tag)),
            // Expected later encodings of a byte string: its text in that encoding.
            21..=23 => {
                if depth > MAX_DEPTH {
                    return Err(DecodeError::TooDeep);
                }
                match self.header()? {
                    Header::Bytes(len) => {
                        let raw = self.content(len, false)?;
                        Ok(Value::String(match tag {
                            21 => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw),
                            22 => base64::engine::general_purpose::STANDARD.encode(raw),
                            _ => hex(&raw),
                        }))
                    }
                    h => {
                        self.dec.push(h);
                        self.value(depth)
                    }
                }
            }
            // The self-described tag, tag 0 (an RFC 3339 string) and unknown tags: their
            // content, as upstream's decoder gives it.
            _ => self.value(depth),
        }
    }
}

fn hex(raw: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(raw.len() * 2);
    for b in raw {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

#[cfg(test)]
mod tests;
