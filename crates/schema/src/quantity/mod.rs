//! Resource quantities (`500m`, `1Gi`, `1e3`) as upstream's `resource.Quantity` decodes
//! and encodes them: [`canonical`] is the string upstream stores and serves for a
//! quantity written as a string or a JSON number, and [`canonical_in_resource_list`] the
//! one it stores for a value of a `ResourceList` (a container's `limits`, a quota's
//! `hard`, a node's `capacity`, …), which upstream's v1 defaulting
//! (`SetDefaults_ResourceList`) also rounds up to a thousandth.
//!
//! What it owns: upstream's parse (`ParseQuantity`: its int64 fast path, which keeps a text
//! that is already canonical as given — `+1`, `5.`, `1E3`, `012` stay as sent — and its
//! exact path, which rounds away from zero to a billionth, caps a binary-suffixed value at
//! 2^63-1 and writes one below 1 as decimal) and its encoding (`Quantity.MarshalJSON`):
//! the canonical form in the suffix family the value was given in — binary (`Ki`…`Ei`)
//! for a whole number of at least 1024, decimal SI (`n u m "" k M G T P E`, or `e<n>` past
//! `E`) or a decimal exponent (`e<n>`), with no fractional digits and the largest exponent
//! that loses nothing (`1.5` → `1500m`, `1000m` → `1`, `2048Ki` → `2Mi`, `1e1000000` →
//! `10e999999`, `1e-1000000` → `1e-9`). Upstream's 32-bit exponent arithmetic is kept,
//! wrap-arounds included (`1e4294967297` is `1e1`, read as `10`), as far as upstream
//! computes a result at all: where its rounding would build a number of billions of
//! digits (exponents near ±2^31 with many digits or a large negative exponent) this
//! computes the value that work would give, and the one input upstream's rounding
//! panics on (`parse`) is left as given.
//!
//! A JSON number decodes from its literal text; serde keeps only its value, so a float is
//! read from its shortest rendering (`1e3` is read as `1000.0`, giving `1k` where upstream
//! keeps `1e3`; `1e21` stays `1e21`).
//!
//! Invariants: never panics; every step is linear in the text's length (values are exact
//! decimal strings, `digits`, never expanded by their exponent), so the request body
//! limit bounds the work and the output (at most the input's digits and 20 more); what
//! does not parse is `None` and the caller keeps the text.

mod digits;
#[cfg(test)]
mod tests;

use std::cmp::Ordering;

use serde_json::Value;

use digits::Magnitude;

/// Upstream's `maxAllowed`: a binary-suffixed value is capped at 2^63-1.
const MAX_ALLOWED: u128 = i64::MAX as u128;

/// The suffix family a quantity was written in (upstream's `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A suffix: base 10 or 2, its exponent (upstream's `int32`, wrapped as its conversion
/// from the parsed `int64` wraps), its family.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSi));
    let bin = |e| Some((2, e, Format::BinarySi));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let e = parse_i64(rest)?;
            // Go's int32(parsed): the low 32 bits.
            Some((10, e as i32, Format::DecimalExponent))
        }
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign and at least one ASCII digit, in
/// range.
pub(crate) fn parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

/// The pieces of a quantity's text as upstream's scanner cuts it: sign, integer digits
/// (leading zeros dropped, `"0"` when none are left), fractional digits, suffix.
struct Parts<'a> {
    negative: bool,
    /// Whether the number before the suffix has any digit (upstream's exact path cannot
    /// read one that has none; its fast path reads it as zero).
    any_digit: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn split(s: &str) -> Option<Parts<'_>> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, s.get(1..)?),
        b'+' => (false, s.get(1..)?),
        _ => (false, s),
    };
    let any_digit = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .any(|b| b.is_ascii_digit());
    let unsigned = rest.trim_start_matches('0');
    if unsigned.is_empty() {
        // All zeros: zero, whatever follows (nothing does).
        return Some(Parts {
            negative,
            any_digit,
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let int_end = unsigned
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let (num, after) = unsigned.split_at(int_end);
    let (denom, suffix) = match after.strip_prefix('.') {
        Some(frac) => {
            let end = frac
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(frac.len());
            frac.split_at(end)
        }
        None => ("", after),
    };
    Some(Parts {
        negative,
        any_digit,
        num: if num.is_empty() { "0" } else { num },
        denom,
        suffix,
    })
}

/// A parsed quantity, as upstream's `Quantity` holds it.
#[derive(Debug, Clone)]
struct Quantity {
    negative: bool,
    value: Magnitude,
    format: Format,
    /// The scale of upstream's `int64Amount` when the fast path took the text; `None`
    /// for an `inf.Dec` amount.
    fast_scale: Option<i32>,
    /// Whether upstream remembers the text as its canonical string (`Quantity.s`).
    kept: bool,
}

/// Upstream's `ParseQuantity`; `None` where it answers an error, and for the one input its
/// rounding panics on (a scale that makes `inf`'s shift exactly -2^31).
fn parse(s: &str) -> Option<Quantity> {
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Quantity {
            negative: false,
            value: Magnitude::zero(),
            format: Format::DecimalSi,
            fast_scale: Some(0),
            kept: true,
        });
    }
    let p = split(s)?;
    let (base, exponent, mut format) = interpret(p.suffix)?;
    if !p
        .num
        .bytes()
        .chain(p.denom.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let denom_len = i32::try_from(p.denom.len()).ok()?;
    let shifted = format!("{}{}", p.num, p.denom);
    if let Some(q) = fast_path(&p, &shifted, base, exponent, format, denom_len) {
        return Some(q);
    }
    // The exact path: the digits as an unscaled `inf.Dec` of scale `denom_len`.
    if !p.any_digit {
        return None;
    }
    let mut unscaled = Magnitude::new(shifted.as_bytes(), 0);
    let mut scale = denom_len;
    if base == 2 {
        let factor = 1u64.checked_shl(u32::try_from(exponent).ok()?)?;
        unscaled = unscaled.mul_small(factor);
    } else {
        scale = scale.wrapping_add(exponent.wrapping_neg());
    }
    let mut value = round_to_nano(&unscaled, scale)?;
    if format == Format::BinarySi {
        if value.cmp_u128(MAX_ALLOWED) == Ordering::Greater {
            value = Magnitude::from_u128(MAX_ALLOWED);
        }
        if !value.is_zero() && value.cmp_u128(1) == Ordering::Less {
            format = Format::DecimalSi;
        }
    }
    Some(Quantity {
        negative: p.negative,
        value,
        format,
        fast_scale: None,
        kept: false,
    })
}

/// Upstream's int64 fast path: a value of at most 18 decimal digits (fewer for a binary
/// suffix, no fraction) at a scale of at least nano that fits an int64. It keeps the text
/// when it is already canonical: a decimal one whose scale is a multiple of three, with
/// no trailing `000` and no leading zero in its digits; a binary one whose digits are not
/// a multiple of eight.
fn fast_path(
    p: &Parts<'_>,
    shifted: &str,
    base: u32,
    exponent: i32,
    format: Format,
    denom_len: i32,
) -> Option<Quantity> {
    let len = i64::try_from(p.num.len() + p.denom.len()).ok()?;
    let (precision, mut scale, mantissa) = if base == 2 {
        if exponent < 0 || denom_len != 0 {
            return None;
        }
        // 15 - len(num) - exponent*3/10 - 1, exponents being multiples of ten.
        let precision = 15 - len - i64::from(exponent) * 3 / 10 - 1;
        (
            precision,
            0i32,
            1i64.checked_shl(u32::try_from(exponent).ok()?)?,
        )
    } else {
        (18 - len, exponent, 1)
    };
    if precision < 0 {
        return None;
    }
    scale = scale.wrapping_sub(denom_len);
    if scale < -9 {
        return None;
    }
    let v: i64 = shifted.parse().ok()?;
    let result = v.checked_mul(mantissa)?;
    let kept = match format {
        Format::BinarySi => exponent % 10 == 0 && v & 0x07 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    };
    Some(Quantity {
        negative: p.negative,
        value: Magnitude::new(result.to_string().as_bytes(), i64::from(scale)),
        format,
        fast_scale: Some(scale),
        kept,
    })
}

/// `inf.Dec.Round(x, 9, RoundUp)` of `unscaled × 10^-scale`, with `inf`'s 32-bit shift
/// (`9 - scale`): when it does not wrap, the value rounded away from zero to a multiple of
/// 10^-9; when it wraps negative, `unscaled` divided by the wrapped power of ten, rounded
/// up, in billionths. `None` for the shift of -2^31, where `inf` indexes its table of
/// powers of ten with a negative number.
fn round_to_nano(unscaled: &Magnitude, scale: i32) -> Option<Magnitude> {
    if unscaled.is_zero() {
        return Some(Magnitude::zero());
    }
    let shift = 9i32.wrapping_sub(scale);
    if shift >= 0 {
        // Exact: already a multiple of 10^-9.
        return Some(unscaled.scaled(-i64::from(scale)));
    }
    if shift == i32::MIN {
        return None;
    }
    let k = -i64::from(shift);
    Some(unscaled.scaled(-9 - k).round_up_to(-9))
}

impl Quantity {
    /// Upstream's `RoundUp(-3)` (`SetDefaults_ResourceList`): an int64 amount finer than
    /// a thousandth, or any `inf.Dec` amount, is rounded away from zero to a thousandth
    /// and forgets its text.
    fn round_up_to_milli(&mut self) {
        match self.fast_scale {
            Some(scale) if scale >= -3 => {}
            _ => {
                self.value = self.value.round_up_to(-3);
                self.kept = false;
                if let Some(s) = self.fast_scale.as_mut() {
                    *s = -3;
                }
            }
        }
    }

    /// Upstream's `CanonicalizeBytes`: the canonical text of the value.
    fn encode(&self) -> String {
        if self.value.is_zero() {
            return "0".into();
        }
        let sign = if self.negative { "-" } else { "" };
        let mut format = self.format;
        if format == Format::BinarySi {
            if self.value.cmp_u128(1024) == Ordering::Less {
                format = Format::DecimalSi;
            } else {
                let whole = self.value.round_up_to(0);
                match whole.to_u128() {
                    Some(w) if whole.normalized() == self.value.normalized() => {
                        return format!("{sign}{}", binary(w));
                    }
                    _ => format = Format::DecimalSi,
                }
            }
        }
        let (digits, exp) = self.value.normalized();
        let mut mantissa = String::from_utf8_lossy(digits).into_owned();
        // Upstream's exponent is an int32 (`int32(scale) + factors of ten`).
        let mut e = exp as i32;
        if self.fast_scale.is_some() {
            // int64Amount: one step to the multiple of three below.
            let zeros: i32 = match e % 3 {
                1 | -2 => 1,
                2 | -1 => 2,
                _ => 0,
            };
            for _ in 0..zeros {
                mantissa.push('0');
            }
            e = e.wrapping_sub(zeros);
        } else {
            while e % 3 != 0 {
                mantissa.push('0');
                e = e.wrapping_sub(1);
            }
        }
        let si = match e {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        let suffix = match (format, si) {
            (Format::DecimalSi, Some(s)) => s.to_owned(),
            _ if e == 0 => String::new(),
            // Past `E` a decimal SI value is written with an exponent too (upstream's
            // master drops the exponent there, `1000E` → `1`; this keeps the value).
            _ => format!("e{e}"),
        };
        format!("{sign}{mantissa}{suffix}")
    }
}

/// A whole number of at least 1024 in binary SI: the most factors of 1024 in the suffix.
fn binary(mut w: u128) -> String {
    let mut k = 0;
    while w % 1024 == 0 && k < 6 {
        w /= 1024;
        k += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .get(k)
        .copied()
        .unwrap_or("");
    format!("{w}{suffix}")
}

/// A quantity's exact value as upstream's `ParseQuantity` leaves it (rounded away from
/// zero to a billionth, a binary-suffixed value capped at 2^63-1, upstream's 32-bit
/// exponent arithmetic kept): `±digits × 10^exp`, for the rules that compare quantities.
///
/// Invariants: `digits` are `0..=9`, most significant first, with no leading or trailing
/// zero (empty for zero, which is never negative); they number at most the text's digits
/// and 20 more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exact {
    /// Whether the value is below zero.
    pub negative: bool,
    /// The significant decimal digits, each `0..=9`.
    pub digits: Vec<u8>,
    /// The power of ten of the last digit.
    pub exp: i64,
}

/// The exact value of the quantity `text` (not trimmed), linear in its length; `None`
/// where [`canonical`] is, and for a number without a digit (`-`, `.`, `e3`, which
/// upstream's int64 fast path reads as zero and the decoder has already written `0`).
///
/// ```
/// use listwatch_schema::quantity::exact;
/// let parts = |e: listwatch_schema::quantity::Exact| (e.negative, e.digits, e.exp);
/// assert_eq!(exact("1.5Ki").map(parts), Some((false, vec![1, 5, 3, 6], 0)));
/// assert_eq!(exact("-1e-12").map(parts), Some((true, vec![1], -9)));
/// ```
pub fn exact(text: &str) -> Option<Exact> {
    let q = parse(text)?;
    if text != "0" && !split(text)?.any_digit {
        return None;
    }
    let (digits, exp) = q.value.normalized();
    let digits: Vec<u8> = digits.iter().map(|d| d.saturating_sub(b'0')).collect();
    Some(Exact {
        negative: q.negative && !digits.is_empty(),
        exp: if digits.is_empty() { 0 } else { exp },
        digits,
    })
}

/// The text upstream stores and serves for the quantity `text` (trimmed of whitespace, as
/// its decoder does); `None` when it does not parse.
///
/// ```
/// use listwatch_schema::quantity::canonical;
/// assert_eq!(canonical("1000m").as_deref(), Some("1"));
/// assert_eq!(canonical("1.5Gi").as_deref(), Some("1536Mi"));
/// assert_eq!(canonical("+1").as_deref(), Some("+1"));
/// assert_eq!(canonical("1e1000000").as_deref(), Some("10e999999"));
/// ```
pub fn canonical(text: &str) -> Option<String> {
    let s = text.trim();
    let q = parse(s)?;
    Some(if q.kept { s.to_owned() } else { q.encode() })
}

/// [`canonical`] of a value of a `ResourceList`, which upstream's v1 defaulting rounds up
/// to a thousandth (`1n` → `1m`, `1e-9` → `1e-3`; `1`, `1.5Gi`, `+1` as [`canonical`]).
///
/// ```
/// use listwatch_schema::quantity::canonical_in_resource_list;
/// assert_eq!(canonical_in_resource_list("1n").as_deref(), Some("1m"));
/// assert_eq!(canonical_in_resource_list("1.0001").as_deref(), Some("1001m"));
/// ```
pub fn canonical_in_resource_list(text: &str) -> Option<String> {
    let s = text.trim();
    let mut q = parse(s)?;
    q.round_up_to_milli();
    Some(if q.kept { s.to_owned() } else { q.encode() })
}

/// [`canonical`] (or, `in_resource_list`, [`canonical_in_resource_list`]) of a quantity
/// written as a string or a JSON number (read from its text).
pub fn canonical_value(v: &Value, in_resource_list: bool) -> Option<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        // serde renders a large float as `1e+21`; the literal was most likely `1e21`.
        Value::Number(n) => n.to_string().replacen("e+", "e", 1),
        _ => return None,
    };
    if in_resource_list {
        canonical_in_resource_list(&text)
    } else {
        canonical(&text)
    }
}
