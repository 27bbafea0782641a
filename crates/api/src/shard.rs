//! Shard selectors: upstream's `shardSelector` list and watch parameter (KEP-5866,
//! `ShardedListAndWatch`, alpha in 1.36).
//!
//! A selector is one or more `shardRange(<field>, '<hexStart>', '<hexEnd>')` calls joined by
//! `||`. An object is selected when the 64-bit FNV-1a hash of the field's value lies in one of
//! the ranges, `start <= hash < end`. The fields are `object.metadata.uid` and
//! `object.metadata.namespace` (CEL's object-rooted paths, not the field selector's); every
//! range of one selector hashes the same field, as upstream's parser requires. The bounds are
//! `0x`-prefixed lowercase hex of at most 16 digits, and the end may be `0x10000000000000000`
//! (2^64), the end of the hash space.
//!
//! Invariants:
//! - parsing is bounded: at most [`MAX_SELECTOR_LEN`] bytes and [`MAX_RANGES`] ranges, no
//!   recursion, no allocation beyond the ranges kept; errors say where the input went wrong;
//! - [`ShardSelector::canonical`] is the form the server echoes in `ListMeta.shardInfo`
//!   (upstream's `Selector.String()`: bounds as 16 hex digits, `", "` between arguments,
//!   `" || "` between ranges), and parsing it gives the same selector;
//! - a shard's membership never changes over an object's life (the uid and namespace are
//!   immutable), so filtering a watch needs no ADDED/DELETED conversion;
//! - the hash of an object's field is computed when a selector asks
//!   ([`crate::Object::shard_hash`]), not stored: a server that never sees a shard selector
//!   pays nothing per stored object.

use std::fmt;

/// The longest selector accepted, in bytes (ours: upstream bounds query strings only by the
/// request line; 64 full ranges take about 5 KiB).
pub const MAX_SELECTOR_LEN: usize = 8192;

/// The most ranges one selector may OR together (ours: enough for any split a controller
/// makes of the hash space; upstream sets no bound).
pub const MAX_RANGES: usize = 64;

/// The most hex digits of a bound, as upstream's parser (`max 16`).
const MAX_HEX_DIGITS: usize = 16;

/// The field a selector hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardField {
    /// `object.metadata.uid`.
    Uid,
    /// `object.metadata.namespace` (`""` for cluster-scoped objects).
    Namespace,
}

impl ShardField {
    /// The path as the selector names it.
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }
}

/// One `[start, end)` range of the 64-bit hash space; `end` may be 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardRange {
    /// Inclusive lower bound.
    pub start: u64,
    /// Exclusive upper bound (at most 2^64).
    pub end: u128,
}

impl ShardRange {
    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }
}

/// A parsed `shardSelector`: empty (selects everything) or ranges of one field.
///
/// One pointer wide: every watcher and list carries one in its predicate, nearly always
/// empty, so the ranges live behind a box only when there are any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ShardSelector(Option<Box<Ranges>>);

/// The ranges of a non-empty selector and the one field they hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Ranges {
    field: ShardField,
    ranges: Vec<ShardRange>,
}

/// Why a shard selector was refused; the server answers 400 with `invalid shard selector: `
/// and this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShardSelectorError(String);

/// 64-bit FNV-1a of `value` (upstream's `HashField`, `hash/fnv`'s `New64a`).
pub fn fnv1a64(value: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

impl ShardSelector {
    /// The selector that selects everything (no `shardSelector`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether this selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The hashed field (`None` when empty).
    pub fn field(&self) -> Option<ShardField> {
        self.0.as_ref().map(|r| r.field)
    }

    /// The ranges, in the order given.
    pub fn ranges(&self) -> &[ShardRange] {
        self.0.as_deref().map_or(&[], |r| &r.ranges)
    }

    /// Shard `index` of `count` equal parts of the hash space over `field` (client-go's
    /// `NewShardRangeSelector`); `None` when `count` is 0 or `index >= count`.
    pub fn nth_of(field: ShardField, index: u64, count: u64) -> Option<Self> {
        if count == 0 || index >= count {
            return None;
        }
        let space: u128 = 1 << 64;
        let bound = |i: u64| u128::from(i) * space / u128::from(count);
        let start = u64::try_from(bound(index)).ok()?;
        Some(Self(Some(Box::new(Ranges {
            field,
            ranges: vec![ShardRange {
                start,
                end: bound(index + 1),
            }],
        }))))
    }

    /// Whether a hash of this selector's field is selected (true for the empty selector).
    pub fn contains(&self, hash: u64) -> bool {
        self.0
            .as_ref()
            .is_none_or(|r| r.ranges.iter().any(|x| x.contains(hash)))
    }

    /// Whether an object with these field values is selected, hashing the one field asked.
    pub fn matches_values(&self, uid: Option<&str>, namespace: Option<&str>) -> bool {
        match self.field() {
            None => true,
            Some(ShardField::Uid) => self.contains(fnv1a64(uid.unwrap_or("").as_bytes())),
            Some(ShardField::Namespace) => {
                self.contains(fnv1a64(namespace.unwrap_or("").as_bytes()))
            }
        }
    }

    /// The canonical text, echoed in `ListMeta.shardInfo.selector` (`""` when empty).
    pub fn canonical(&self) -> String {
        self.to_string()
    }

    /// Parses a `shardSelector` value; blank selects everything.
    pub fn parse(input: &str) -> Result<Self, ShardSelectorError> {
        if input.len() > MAX_SELECTOR_LEN {
            return Err(ShardSelectorError(format!(
                "selector too long ({} bytes, max {MAX_SELECTOR_LEN})",
                input.len()
            )));
        }
        let mut p = Parser {
            s: input.as_bytes(),
            pos: 0,
        };
        p.skip_ws();
        if p.at_end() {
            return Ok(Self::everything());
        }
        let mut field_seen: Option<ShardField> = None;
        let mut ranges = Vec::new();
        loop {
            if ranges.len() == MAX_RANGES {
                return Err(p.error(&format!("too many shardRange terms (max {MAX_RANGES})")));
            }
            let (field, range) = p.range()?;
            match field_seen {
                Some(f) if f != field => {
                    return Err(ShardSelectorError(format!(
                        "inconsistent shard keys: {:?} vs {:?}",
                        f.path(),
                        field.path()
                    )));
                }
                _ => field_seen = Some(field),
            }
            ranges.push(range);
            p.skip_ws();
            if p.at_end() {
                return Ok(Self(Some(Box::new(Ranges { field, ranges }))));
            }
            if !p.eat("||") {
                return Err(p.error("expected '||'"));
            }
            p.skip_ws();
        }
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(field) = self.field() else {
            return Ok(());
        };
        for (i, r) in self.ranges().iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '{}', '{}')",
                field.path(),
                hex_bound(u128::from(r.start)),
                hex_bound(r.end)
            )?;
        }
        Ok(())
    }
}

/// A bound as upstream normalises it: `0x` and 16 digits, or `0x10000000000000000`.
fn hex_bound(v: u128) -> String {
    format!("0x{v:016x}")
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn error(&self, what: &str) -> ShardSelectorError {
        ShardSelectorError(format!("{what} at position {}", self.pos))
    }

    fn skip_ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        let end = self.pos.saturating_add(token.len());
        if self.s.get(self.pos..end) == Some(token.as_bytes()) {
            self.pos = end;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &str) -> Result<(), ShardSelectorError> {
        self.skip_ws();
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {what}")))
        }
    }

    /// `shardRange(<field>, '<start>', '<end>')`.
    fn range(&mut self) -> Result<(ShardField, ShardRange), ShardSelectorError> {
        if !self.eat("shardRange") {
            return Err(self.error("expected 'shardRange('"));
        }
        self.expect("(", "'shardRange('")?;
        self.skip_ws();
        if !self.eat("object.metadata.") {
            return Err(self.error("expected 'object.metadata.'"));
        }
        let field = if self.eat("uid") {
            ShardField::Uid
        } else if self.eat("namespace") {
            ShardField::Namespace
        } else {
            return Err(self.error("unsupported metadata field, expected uid or namespace"));
        };
        self.expect(",", "',' after fieldPath")?;
        let start = self.bound("hexStart")?;
        self.expect(",", "',' after hexStart")?;
        let end = self.bound("hexEnd")?;
        self.expect(")", "')'")?;
        let start = u64::try_from(start)
            .map_err(|_| ShardSelectorError("invalid hexStart: must be below 2^64".into()))?;
        if u128::from(start) >= end {
            return Err(ShardSelectorError(format!(
                "hexStart {} must be less than hexEnd {}",
                hex_bound(u128::from(start)),
                hex_bound(end)
            )));
        }
        Ok((field, ShardRange { start, end }))
    }

    /// A quoted bound, `'0x<hex>'`: at most 16 lowercase digits, or exactly 2^64.
    fn bound(&mut self, name: &str) -> Result<u128, ShardSelectorError> {
        self.skip_ws();
        if !self.eat("'") {
            return Err(self.error(&format!("invalid {name}: expected a single-quoted string")));
        }
        if !self.eat("0x") {
            return Err(self.error(&format!("invalid {name}: expected '0x' prefix")));
        }
        let from = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        {
            self.pos += 1;
        }
        let digits = self.s.get(from..self.pos).unwrap_or_default();
        let text = std::str::from_utf8(digits).unwrap_or_default();
        if !self.eat("'") {
            return Err(self.error(&format!(
                "invalid {name}: expected lowercase hex digits and a closing quote"
            )));
        }
        if text.is_empty() {
            return Err(self.error(&format!("invalid {name}: empty hex value")));
        }
        if text.len() > MAX_HEX_DIGITS {
            // The one 17-digit value allowed: the end of the hash space.
            let rest = text.strip_prefix('1').unwrap_or(text);
            if text.len() == MAX_HEX_DIGITS + 1
                && rest.len() == MAX_HEX_DIGITS
                && rest.bytes().all(|c| c == b'0')
            {
                return Ok(1 << 64);
            }
            return Err(ShardSelectorError(format!(
                "invalid {name}: hex value too long ({} chars, max {MAX_HEX_DIGITS}): {text:?}",
                text.len()
            )));
        }
        u128::from_str_radix(text, 16)
            .map_err(|e| ShardSelectorError(format!("invalid {name}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_values() {
        // Go's hash/fnv New64a test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"abc"), 0xe71f_a219_0541_574b);
    }

    #[test]
    fn upstream_examples_parse_and_print_canonically() {
        let two = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";
        let s = ShardSelector::parse(two).unwrap();
        assert_eq!(s.ranges().len(), 2);
        assert_eq!(s.canonical(), two);
        let short =
            ShardSelector::parse("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')")
                .unwrap();
        assert_eq!(
            short.canonical(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        let tight = ShardSelector::parse(
            "shardRange(object.metadata.namespace,'0x0','0x10000000000000000')",
        )
        .unwrap();
        assert_eq!(tight.field(), Some(ShardField::Namespace));
        assert!(tight.contains(u64::MAX));
        assert!(ShardSelector::parse("  ").unwrap().is_empty());
    }

    #[test]
    fn hostile_selectors_are_refused_with_a_position() {
        for (input, wants) in [
            (
                "shardRange(object.metadata.name, '0x0', '0x1')",
                "unsupported metadata field",
            ),
            (
                "shardRange(metadata.uid, '0x0', '0x1')",
                "expected 'object.metadata.'",
            ),
            (
                "shard(object.metadata.uid, '0x0', '0x1')",
                "expected 'shardRange('",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x1'",
                "expected ')'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x1') && shardRange(object.metadata.uid, '0x1', '0x2')",
                "expected '||'",
            ),
            (
                "shardRange(object.metadata.uid, '0X0', '0x1')",
                "expected '0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0xABC', '0x1')",
                "lowercase hex",
            ),
            (
                "shardRange(object.metadata.uid, '0x', '0x1')",
                "empty hex value",
            ),
            (
                "shardRange(object.metadata.uid, '0x00000000000000000', '0x1')",
                "hex value too long (17 chars, max 16)",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x20000000000000000')",
                "hex value too long",
            ),
            (
                "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
                "below 2^64",
            ),
            (
                "shardRange(object.metadata.uid, '0x8', '0x8')",
                "must be less than",
            ),
            (
                "shardRange(object.metadata.uid, 0x0, '0x1')",
                "single-quoted",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8') || shardRange(object.metadata.namespace, '0x8', '0x9')",
                "inconsistent shard keys",
            ),
        ] {
            let e = ShardSelector::parse(input).unwrap_err().to_string();
            assert!(e.contains(wants), "{input}: {e}");
        }
        let many =
            vec!["shardRange(object.metadata.uid, '0x0', '0x1')"; MAX_RANGES + 1].join(" || ");
        assert!(
            ShardSelector::parse(&many)
                .unwrap_err()
                .to_string()
                .contains("too many")
        );
        let long = "x".repeat(MAX_SELECTOR_LEN + 1);
        assert!(
            ShardSelector::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("too long")
        );
    }

    #[test]
    fn equal_shards_partition_the_hash_space() {
        for count in [1u64, 2, 3, 4, 7] {
            let shards: Vec<_> = (0..count)
                .map(|i| ShardSelector::nth_of(ShardField::Uid, i, count).unwrap())
                .collect();
            for h in [0u64, 1, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                assert_eq!(
                    shards.iter().filter(|s| s.contains(h)).count(),
                    1,
                    "{count} {h}"
                );
            }
            for s in &shards {
                assert_eq!(&ShardSelector::parse(&s.canonical()).unwrap(), s);
            }
        }
        assert!(ShardSelector::nth_of(ShardField::Uid, 2, 2).is_none());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(s in "[ -~]{0,200}") {
            let _ = ShardSelector::parse(&s);
        }

        #[test]
        fn canonical_text_round_trips(a in proptest::num::u64::ANY, b in proptest::num::u64::ANY) {
            let (lo, hi) = if a < b { (a, b) } else if a > b { (b, a) } else { return Ok(()) };
            let s = ShardSelector::parse(&format!("shardRange(object.metadata.uid, '0x{lo:x}', '0x{hi:x}')")).unwrap();
            proptest::prop_assert_eq!(ShardSelector::parse(&s.canonical()).unwrap(), s);
        }
    }
}
