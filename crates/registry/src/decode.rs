//! Decoding request bodies within bounds: JSON and YAML into `serde_json::Value`s that nest
//! at most [`MAX_DEPTH`] levels and, for YAML, expand at most linearly in the input
//! ([`yaml_budget`], [`max_replayed_events`]); the keys a body repeated in one object are
//! reported for field validation. The bounds and their upstream counterparts are listed in
//! the endpoints' `limits` module, which reads bodies off the connection and calls here.
//!
//! Why 100 levels: every reader of this server's JSON that uses serde_json (kube-rs, the
//! listwatch client) stops at 128 levels, and a list (`items`), a watch event (`object`)
//! and a Table row (`rows[].object`) wrap an object in up to four more. An object nested
//! deeper than the readers can parse would be stored but could never be listed or watched
//! again, so every informer of its resource would fail. Depth is measured without
//! recursion ([`depth`]), so even a value built past the bound is inspected safely.
//!
//! Invariants:
//! - decoding never builds more than its budget: YAML alias expansion is counted as it
//!   happens and stops at the budget, so the decoded size is linear in the input size;
//! - nothing recursive (clone, compare, drop, serialize, strategic merge) ever sees a value
//!   nested deeper than [`MAX_DEPTH`] + one patch value, because decoders refuse deeper input
//!   and JSON patches track an upper bound of the document's depth per operation.

use std::cell::Cell;
use std::fmt;
use std::io::Write;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

pub use crate::MAX_DEPTH;
use crate::error::ApiError;

/// Upstream's `maxJSONPatchOperations`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Array elements the adds, removes and moves of one JSON patch may shift together (an
/// insert or removal at index i of an n-element list shifts n − i). Upstream's json-patch
/// has no such bound (10 000 `remove /x/0` on a long list is O(operations × length)); the
/// bound keeps one patch's work within a fixed multiple of a large list's size.
pub const MAX_JSON_PATCH_SHIFTS: usize = 10_000_000;

/// A YAML body may decode to at most this many times its own size (as JSON bytes) …
pub const YAML_EXPANSION_FACTOR: usize = 8;

/// … plus this many bytes, so that small documents with a few anchors still decode.
pub const YAML_EXPANSION_FLOOR: usize = 64 * 1024;

/// Why a body could not be decoded within its limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The decoded value would be larger than the budget (YAML alias expansion).
    #[error("the body expands to more than {limit} bytes of JSON")]
    TooLarge {
        /// The budget, in JSON bytes.
        limit: usize,
    },
    /// Objects and arrays nest deeper than [`MAX_DEPTH`].
    #[error("the body nests objects and arrays deeper than the limit of {limit} levels")]
    TooDeep {
        /// The depth limit.
        limit: usize,
    },
    /// The body does not parse.
    #[error("{0}")]
    Syntax(String),
}

impl DecodeError {
    /// The Status for a body of `format` (`JSON`, `YAML`) that failed to decode.
    pub fn into_api_error(self, format: &str) -> ApiError {
        match self {
            DecodeError::TooLarge { .. } => ApiError::too_large_message(&self.to_string()),
            DecodeError::TooDeep { .. } => ApiError::bad_request(self.to_string()),
            DecodeError::Syntax(e) => ApiError::bad_request(format!(
                "the body of the request is not valid {format}: {e}"
            )),
        }
    }
}
/// Decodes JSON, refusing nesting deeper than [`MAX_DEPTH`].
pub fn decode_json(bytes: &[u8]) -> Result<Value, DecodeError> {
    decode_json_keys(bytes).map(|(v, _)| v)
}

/// [`decode_json`], also returning the keys that appeared twice in one object.
pub fn decode_json_keys(bytes: &[u8]) -> Result<(Value, Vec<String>), DecodeError> {
    let budget = Budget::new(usize::MAX);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = budget
        .seed()
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    let v = v.map_err(|e| budget.error(e.to_string()))?;
    Ok((v, budget.duplicates.take()))
}

/// The JSON bytes a YAML body of `input_len` bytes may decode to.
pub fn yaml_budget(input_len: usize) -> usize {
    input_len
        .saturating_mul(YAML_EXPANSION_FACTOR)
        .saturating_add(YAML_EXPANSION_FLOOR)
}

/// Decodes YAML (one document), refusing nesting deeper than [`MAX_DEPTH`] and stopping
/// as soon as alias expansion would take the value past [`yaml_budget`] of the input.
///
/// The parser is serde-saphyr's, configured as upstream's YAML reader (go-yaml v2) reads
/// Kubernetes manifests: YAML 1.1 booleans (`yes`, `on`) and octals (`0755`), merge keys,
/// and the last of duplicate keys wins. Its own budgets stop the scanner early (flow nesting,
/// depth, events), so a deeply nested body costs time linear in what is read before the
/// refusal; serde_yaml (libyaml) scans nesting in quadratic time before any check runs.
pub fn decode_yaml(bytes: &[u8]) -> Result<Value, DecodeError> {
    decode_yaml_keys(bytes).map(|(v, _)| v)
}

/// [`decode_yaml`], also returning the keys that appeared twice in one mapping.
pub fn decode_yaml_keys(bytes: &[u8]) -> Result<(Value, Vec<String>), DecodeError> {
    let limit = yaml_budget(bytes.len());
    let budget = Budget::new(limit);
    let r = serde_saphyr::with_deserializer_from_slice_with_options(
        bytes,
        yaml_options(bytes.len(), limit),
        |de| budget.seed().deserialize(de),
    );
    r.map_err(|e| {
        let message = e.to_string();
        if budget.breach.get().is_none() {
            // The parser's own budgets refuse the same things: depth, and expansion.
            if message.contains("budget breached: Depth")
                || message.contains("recursion limit exceeded")
                || message.contains("nesting")
            {
                budget.breach.set(Some(Breach::Depth));
            } else if message.contains("budget breached") || message.contains("lias") {
                budget.breach.set(Some(Breach::Size));
            }
        }
        budget.error(message.lines().next().unwrap_or("").to_owned())
    })
    .map(|v| (v, budget.duplicates.take()))
}

/// serde-saphyr's options for request bodies: go-yaml v2's reading of scalars, and budgets
/// in line with [`MAX_DEPTH`] and the expansion budget (its own checks sit one level above
/// this module's, so the decoder's [`DecodeError`]s are what a client normally sees).
fn yaml_options(input_len: usize, expansion: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH + 2;
    budget.flow_nesting_limit = MAX_DEPTH + 2;
    // Each node or event takes at least a byte or two of input: these never refuse a
    // document for its length, only the expansion budget does.
    budget.max_nodes = input_len.saturating_mul(2).saturating_add(1024);
    budget.max_events = input_len.saturating_mul(4).saturating_add(1024);
    budget.max_documents = 1;
    let mut aliases = serde_saphyr::options::AliasLimits::default();
    // Replayed events, not bytes: each replayed event builds a node (tens of bytes of
    // memory, microseconds of CPU) whether or not it survives into the value — merge keys
    // (`<<: [*a, *a, …]`) fold every replay into the same few keys, so the value-size budget
    // never fires for them. Counting the byte budget as events let a 3 MB body replay 24
    // million events: ~32 s of CPU and +1.9 GB (issue 24's red team). A replayed event
    // costs ~850 bytes of allocation; one per 64 body bytes keeps replays under the parse's
    // own cost (tests/yaml_replay_memory.rs); the floor still lets a small manifest reuse an
    // anchor of a few dozen keys a hundred times.
    let _ = expansion;
    aliases.max_total_replayed_events = max_replayed_events(input_len);
    let mut o = serde_saphyr::Options::default();
    o.budget = Some(budget);
    o.alias_limits = aliases;
    o.duplicate_keys = serde_saphyr::options::DuplicateKeyPolicy::LastWins;
    o.legacy_octal_numbers = true;
    o
}

/// The events YAML aliases (and merge keys) may replay in a body of `input_len` bytes, in
/// all: [`YAML_REPLAY_FLOOR`] + `input_len` / [`YAML_REPLAY_DIVISOR`].
pub fn max_replayed_events(input_len: usize) -> usize {
    (input_len / YAML_REPLAY_DIVISOR).saturating_add(YAML_REPLAY_FLOOR)
}

/// See [`max_replayed_events`].
pub const YAML_REPLAY_DIVISOR: usize = 64;

/// See [`max_replayed_events`].
pub const YAML_REPLAY_FLOOR: usize = 4096;

/// The nesting depth of `v`: 0 for a scalar, 1 for `{}` or `[1]`, … Computed without
/// recursion, so any value can be measured.
pub fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(d + 1);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// The length of `v` encoded as compact JSON, or `None` once it passes `cap` (the encoding
/// stops there, so the cost is bounded by `cap`). `v` must nest at most a few hundred levels
/// (serialization recurses).
pub fn encoded_len_capped(v: &Value, cap: usize) -> Option<usize> {
    struct Counter {
        n: usize,
        cap: usize,
    }
    impl Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n = self.n.saturating_add(buf.len());
            if self.n > self.cap {
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter { n: 0, cap };
    serde_json::to_writer(&mut c, v).ok().map(|()| c.n)
}

/// The limit that failed while decoding.
#[derive(Debug, Clone, Copy)]
enum Breach {
    Size,
    Depth,
}

/// The state a decode shares with its nested seeds: what is left of the size budget (in
/// JSON bytes), the current depth, and which limit stopped it, if one did.
struct Budget {
    limit: usize,
    remaining: Cell<usize>,
    depth: Cell<usize>,
    breach: Cell<Option<Breach>>,
    /// The keys seen twice in one object (at most [`crate::field_validation::MAX_FINDINGS`]).
    duplicates: std::cell::RefCell<Vec<String>>,
}

impl Budget {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            remaining: Cell::new(limit),
            depth: Cell::new(0),
            breach: Cell::new(None),
            duplicates: std::cell::RefCell::new(Vec::new()),
        }
    }

    fn seed(&self) -> Seed<'_> {
        Seed(self)
    }

    /// Charges `n` JSON bytes.
    fn charge<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        match self.remaining.get().checked_sub(n) {
            Some(left) => {
                self.remaining.set(left);
                Ok(())
            }
            None => {
                self.breach.set(Some(Breach::Size));
                Err(E::custom("size budget exhausted"))
            }
        }
    }

    fn enter<E: serde::de::Error>(&self) -> Result<(), E> {
        let d = self.depth.get() + 1;
        if d > MAX_DEPTH {
            self.breach.set(Some(Breach::Depth));
            return Err(E::custom("too deep"));
        }
        self.depth.set(d);
        Ok(())
    }

    fn leave(&self) {
        self.depth.set(self.depth.get().saturating_sub(1));
    }

    fn error(&self, message: String) -> DecodeError {
        match self.breach.get() {
            Some(Breach::Size) => DecodeError::TooLarge { limit: self.limit },
            Some(Breach::Depth) => DecodeError::TooDeep { limit: MAX_DEPTH },
            None => DecodeError::Syntax(message),
        }
    }
}

/// The JSON length of a string: quotes, escapes and the UTF-8 bytes.
fn json_str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Builds a `serde_json::Value` from any self-describing format, charging each node's
/// JSON size (an upper bound: floats count as 24) to the shared budget.
#[derive(Clone, Copy)]
struct Seed<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        // Each level of nesting recurses through the format's deserializer too, whose frames
        // are large (serde-saphyr's take ~5 KiB a level in release builds, ~30 KiB in debug
        // ones): the stack grows on the heap when it runs low, so [`MAX_DEPTH`] levels fit
        // any thread.
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || d.deserialize_any(self))
    }
}

/// Below this much free stack, a nested decode continues on a new segment …
const STACK_RED_ZONE: usize = 256 * 1024;
/// … of this size.
const STACK_SEGMENT: usize = 2 * 1024 * 1024;

/// A map key: a string, charged like one (plus the colon).
struct KeySeed<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let k = <String as serde::Deserialize>::deserialize(d)?;
        self.0.charge(json_str_len(&k) + 1)?;
        Ok(k)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(5)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(digits(v.unsigned_abs()) + 1)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(digits(v))?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(24)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(json_str_len(v))?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(json_str_len(&v))?;
        Ok(Value::String(v))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.0.charge(4)?;
        Ok(Value::Null)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_none()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.enter()?;
        self.0.charge(2)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            self.0.charge(1)?;
            out.push(v);
        }
        self.0.leave();
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.enter()?;
        self.0.charge(2)?;
        let mut out = Map::new();
        while let Some(k) = map.next_key_seed(KeySeed(self.0))? {
            let v = map.next_value_seed(self)?;
            self.0.charge(1)?;
            match out.entry(k) {
                serde_json::map::Entry::Occupied(mut o) => {
                    let mut d = self.0.duplicates.borrow_mut();
                    if d.len() < crate::field_validation::MAX_FINDINGS {
                        d.push(o.key().clone());
                    }
                    // The last of duplicate keys wins, as upstream's decoders.
                    o.insert(v);
                }
                serde_json::map::Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
        }
        self.0.leave();
        Ok(Value::Object(out))
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn json_decodes_like_serde_json_within_the_depth_limit() {
        let v = decode_json(br#"{"a":[1,-2,3.5,"x\n",true,null,{"b":{}}]}"#).unwrap();
        assert_eq!(v, json!({"a":[1,-2,3.5,"x\n",true,null,{"b":{}}]}));
        assert_eq!(depth(&v), 4);
        assert!(decode_json(nested(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(
            decode_json(nested(MAX_DEPTH + 1).as_bytes()),
            Err(DecodeError::TooDeep { limit: MAX_DEPTH })
        );
        // Far past serde_json's own limit: still the same answer, never a stack overflow.
        assert_eq!(
            decode_json(nested(1_000_000).as_bytes()),
            Err(DecodeError::TooDeep { limit: MAX_DEPTH })
        );
        assert!(matches!(decode_json(b"{} x"), Err(DecodeError::Syntax(_))));
    }

    #[test]
    fn yaml_depth_is_bounded_too() {
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(
            decode_yaml(deep.as_bytes()),
            Err(DecodeError::TooDeep { limit: MAX_DEPTH })
        );
        assert_eq!(decode_yaml(b"a: [1, b]\n").unwrap(), json!({"a":[1,"b"]}));
    }

    /// The "billion laughs": nine levels of nine aliases each.
    fn laughs(levels: usize, fan: usize) -> String {
        let mut y = String::from("a0: &a0 [\"lol\"]\n");
        for i in 1..=levels {
            let refs = vec![format!("*a{}", i - 1); fan].join(", ");
            y.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        y
    }

    #[test]
    fn yaml_alias_bombs_stop_at_the_budget() {
        let bomb = laughs(9, 9);
        assert!(bomb.len() < 2048);
        assert_eq!(
            decode_yaml(bomb.as_bytes()),
            Err(DecodeError::TooLarge {
                limit: yaml_budget(bomb.len())
            })
        );
        // A few anchors used a few times decode as before.
        let ok = "base: &b {image: nginx, tag: \"1\"}\nx: *b\ny: *b\n";
        let v = decode_yaml(ok.as_bytes()).unwrap();
        assert_eq!(v["y"], json!({"image":"nginx","tag":"1"}));
    }

    /// An anchor of `keys` scalars, replayed `refs` times (as merge keys or as list items),
    /// padded with a long scalar so that the body is `pad` bytes longer.
    fn replays(keys: usize, refs: usize, merge: bool, pad: usize) -> String {
        let mut y = String::from("base: &a\n");
        for i in 0..keys {
            y.push_str(&format!("  k{i}: {i}\n"));
        }
        y.push_str(&format!("pad: \"{}\"\n", "p".repeat(pad)));
        let list = vec!["*a"; refs].join(",");
        y.push_str(&if merge {
            format!("spec:\n  <<: [{list}]\n")
        } else {
            format!("spec: [{list}]\n")
        });
        y
    }

    #[test]
    fn heavy_alias_replays_are_refused_and_ordinary_reuse_decodes() {
        // ~400 replayed events per alias, 300 aliases: refused (how much is spent before the
        // refusal is tests/yaml_replay_memory.rs's business); ordinary reuse still decodes.
        for merge in [true, false] {
            let y = replays(200, 300, merge, 100_000);
            let got = decode_yaml(y.as_bytes());
            assert!(
                matches!(got, Err(DecodeError::TooLarge { .. })),
                "merge={merge}: {} bytes replaying ~400 000 events: {:?}",
                y.len(),
                got.map(|v| serde_json::to_vec(&v).map(|b| b.len()))
            );
        }
        // Ordinary reuse: an anchor of 10 keys merged into 20 places.
        let y = replays(10, 20, true, 0);
        let v = decode_yaml(y.as_bytes()).unwrap();
        assert_eq!(v["spec"]["k9"], json!(9));
    }

    #[test]
    fn a_long_scalar_aliased_many_times_is_refused() {
        let big = "x".repeat(10_000);
        let refs = vec!["*s"; 200].join(", ");
        let y = format!("s: &s \"{big}\"\nl: [{refs}]\n");
        assert!(matches!(
            decode_yaml(y.as_bytes()),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn encoded_len_stops_at_its_cap() {
        let v = json!({"a":"\u{1}é","b":[1,2.5]});
        let exact = serde_json::to_vec(&v).unwrap().len();
        assert_eq!(encoded_len_capped(&v, exact), Some(exact));
        assert_eq!(encoded_len_capped(&v, exact - 1), None);
    }

    /// Regression: serde-saphyr's frames overflowed a 2 MiB test thread at 100 levels in a
    /// debug build. With the stack growing on demand, even a 128 KiB thread decodes the
    /// deepest allowed body and refuses the next level.
    #[test]
    fn the_deepest_bodies_decode_on_a_small_stack() {
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(|| {
                for d in [MAX_DEPTH, MAX_DEPTH + 1] {
                    let b = format!("{}1{}", "[".repeat(d), "]".repeat(d));
                    for r in [decode_yaml(b.as_bytes()), decode_json(b.as_bytes())] {
                        match r {
                            Ok(v) => assert_eq!((d, depth(&v)), (MAX_DEPTH, MAX_DEPTH)),
                            Err(e) => assert_eq!(e, DecodeError::TooDeep { limit: MAX_DEPTH }),
                        }
                    }
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    proptest::proptest! {
        /// Naive model: whatever YAML comes in, what comes out (as JSON) is at most the
        /// budget — so never more than linear in the input.
        #[test]
        fn yaml_output_is_linear_in_the_input(levels in 0usize..12, fan in 1usize..12, pad in "[a-z]{0,40}") {
            let y = format!("p: {pad}\n{}", laughs(levels, fan));
            match decode_yaml(y.as_bytes()) {
                Ok(v) => {
                    let n = serde_json::to_vec(&v).unwrap().len();
                    proptest::prop_assert!(n <= yaml_budget(y.len()), "{n} > budget for {} bytes", y.len());
                }
                Err(e) => proptest::prop_assert_eq!(e, DecodeError::TooLarge { limit: yaml_budget(y.len()) }),
            }
        }

        /// The charged size is an upper bound of the real JSON size, whatever the value.
        #[test]
        fn charged_size_bounds_the_encoding(s in "\\PC{0,30}", n in proptest::prelude::any::<i64>(), f in proptest::prelude::any::<f64>()) {
            let v = json!({"s": s, "n": n, "f": f, "l": [s.clone(), null, true]});
            let text = serde_json::to_vec(&v).unwrap();
            let budget = Budget::new(usize::MAX);
            let mut de = serde_json::Deserializer::from_slice(&text);
            let back = budget.seed().deserialize(&mut de).unwrap();
            let charged = usize::MAX - budget.remaining.get();
            proptest::prop_assert!(charged >= text.len(), "charged {charged} < {}", text.len());
            proptest::prop_assert_eq!(back, v);
        }

        #[test]
        fn depth_agrees_with_a_recursive_model(levels in 0usize..40, wide in 0usize..4) {
            let mut v = json!(1);
            for i in 0..levels {
                v = if i % 2 == 0 { json!([v]) } else { json!({"k": v, "w": vec![0; wide]}) };
            }
            fn model(v: &Value) -> usize {
                match v {
                    Value::Array(a) => 1 + a.iter().map(model).max().unwrap_or(0),
                    Value::Object(m) => 1 + m.values().map(model).max().unwrap_or(0),
                    _ => 0,
                }
            }
            proptest::prop_assert_eq!(depth(&v), model(&v));
        }
    }
}
