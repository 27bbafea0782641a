//! Resource quantities (`500m`, `1Gi`, `1e3`) as upstream's `resource.Quantity` decodes
//! and encodes them: [`canonical`] is the string upstream stores and serves for a
//! quantity written as a string or a JSON number.
//!
//! What it owns: upstream's parse (`ParseQuantity`: the value exact, rounded away from zero
//! to a billionth; a binary-suffixed value capped at 2^63-1, and one below 1 written as
//! decimal) and its encoding (`Quantity.MarshalJSON`): the text as given when it is already
//! canonical (no sign rewriting, no case folding — `1E3` stays `1E3`), else the canonical
//! form in the suffix family it was given in — binary (`Ki`…`Ei`) when the value is a
//! whole number of at least 1024, decimal SI (`n u m "" k M G T P E`, or `e<n>` past `E`)
//! or a decimal exponent (`e<n>`), with no fractional digits and the largest exponent
//! that loses nothing (`1.5` → `1500m`, `1000m` → `1`, `1536Mi` → `1536Mi`, `2048Ki` →
//! `2Mi`). A JSON number decodes from its literal text; serde keeps only its value, so a
//! float is read from its shortest rendering (`1e3` is read as `1000.0`, giving `1k`
//! where upstream keeps `1e3`; `1e21` stays `1e21`).
//!
//! Invariants: bounded — at most [`MAX_DIGITS`] significant digits and an exponent of at
//! most [`MAX_EXPONENT`] are computed with; beyond them (or on anything that does not
//! parse) [`canonical`] is `None` and the caller keeps the text. Never panics.

use serde_json::Value;

/// The most significant digits computed with (the mantissa is a `u128`).
pub const MAX_DIGITS: usize = 36;
/// The largest decimal exponent computed with.
pub const MAX_EXPONENT: i32 = 10_000;

/// The suffix family a quantity was written in (upstream's `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A suffix: base 10 or 2, its exponent, its family.
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
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let e: i32 = rest.parse().ok()?;
            (e.abs() <= MAX_EXPONENT).then_some((10, e, Format::DecimalExponent))
        }
    }
}

/// The pieces of a quantity's text: sign, integer digits (leading zeros dropped, `"0"`
/// when none are left), fractional digits, suffix.
struct Parts<'a> {
    negative: bool,
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
    let unsigned = rest.trim_start_matches('0');
    if unsigned.is_empty() {
        // All zeros: zero, whatever follows (nothing does).
        return Some(Parts {
            negative,
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
        num: if num.is_empty() { "0" } else { num },
        denom,
        suffix,
    })
}

/// A magnitude `m × 10^e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dec {
    m: u128,
    e: i32,
}

impl Dec {
    /// With the mantissa's factors of ten moved into the exponent.
    fn stripped(mut self) -> Dec {
        if self.m == 0 {
            return Dec { m: 0, e: 0 };
        }
        while self.m % 10 == 0 {
            self.m /= 10;
            self.e += 1;
        }
        self
    }

    /// The whole number it is, if it is one that fits.
    fn whole(self) -> Option<u128> {
        let d = self.stripped();
        if d.e < 0 {
            return None;
        }
        d.m.checked_mul(10u128.checked_pow(u32::try_from(d.e).ok()?)?)
    }

    /// Rounded away from zero to a multiple of 10^-9 (upstream keeps nanos).
    fn round_up_to_nano(self) -> Dec {
        if self.e >= -9 || self.m == 0 {
            return self;
        }
        let shift = u32::try_from(-9 - i64::from(self.e)).unwrap_or(u32::MAX);
        let (q, r) = match 10u128.checked_pow(shift) {
            Some(p) => (self.m / p, self.m % p),
            None => (0, self.m),
        };
        Dec {
            m: if r == 0 { q } else { q + 1 },
            e: -9,
        }
    }

    /// Whether it is below `limit` (a whole number).
    fn below(self, limit: u128) -> bool {
        match self.whole() {
            Some(w) => w < limit,
            None => {
                let d = self.stripped();
                if d.e >= 0 {
                    return false; // a whole number too large to hold
                }
                // Not whole: below `limit` iff its integer part is.
                let p = 10u128.checked_pow(u32::try_from(-d.e).unwrap_or(u32::MAX));
                p.is_none_or(|p| d.m / p < limit)
            }
        }
    }
}

/// What a parsed quantity encodes as.
enum Parsed {
    /// The text itself (already canonical).
    AsGiven,
    /// Computed: sign, magnitude, family.
    Value(bool, Dec, Format),
}

/// Upstream's `ParseQuantity`, as far as its encoding depends on it.
fn parse(s: &str) -> Option<Parsed> {
    if s == "0" {
        return Some(Parsed::AsGiven);
    }
    let p = split(s)?;
    let (base, exponent, mut format) = interpret(p.suffix)?;
    let digits = format!("{}{}", p.num, p.denom);
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return None;
    }
    let d: u128 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    let denom_len = i32::try_from(p.denom.len()).ok()?;
    // Upstream's fast path (an int64 amount) keeps a canonical text as given.
    if fast_path_keeps_text(&p, &digits, base, exponent, format, denom_len) {
        return Some(Parsed::AsGiven);
    }
    let mut value = match base {
        2 => Dec {
            m: d.checked_mul(1u128.checked_shl(u32::try_from(exponent).ok()?)?)?,
            e: -denom_len,
        },
        _ => Dec {
            m: d,
            e: exponent.checked_sub(denom_len)?,
        },
    };
    value = value.round_up_to_nano();
    const MAX_ALLOWED: u128 = i64::MAX as u128;
    if format == Format::BinarySi {
        if !value.below(MAX_ALLOWED + 1) {
            value = Dec {
                m: MAX_ALLOWED,
                e: 0,
            };
        }
        if value.m != 0 && value.below(1) {
            format = Format::DecimalSi;
        }
    }
    Some(Parsed::Value(p.negative, value, format))
}

/// Whether upstream's int64 fast path takes `p` and remembers its text: a decimal value
/// of at most 18 digits, at most nano precision, an exponent that is a multiple of three
/// and no trailing `000` or leading zero; a binary one of few digits, no fraction, whose
/// digits are not a multiple of eight.
fn fast_path_keeps_text(
    p: &Parts<'_>,
    digits: &str,
    base: u32,
    exponent: i32,
    format: Format,
    denom_len: i32,
) -> bool {
    let num_len = i32::try_from(p.num.len()).unwrap_or(i32::MAX);
    if format == Format::BinarySi {
        if exponent < 0 || denom_len != 0 {
            return false;
        }
        // 15 - len(num) - exponent*3/10 - 1 >= 0 (exponents are multiples of ten).
        if 15 - num_len - exponent * 3 / 10 - 1 < 0 {
            return false;
        }
        let Ok(v) = digits.parse::<i64>() else {
            return false;
        };
        let fits = u32::try_from(exponent)
            .ok()
            .and_then(|e| 1i64.checked_shl(e))
            .and_then(|f| v.checked_mul(f))
            .is_some();
        return fits && exponent % 10 == 0 && v & 0x07 != 0;
    }
    debug_assert!(base == 10);
    if 18 - num_len - denom_len < 0 {
        return false;
    }
    let scale = exponent - denom_len;
    scale >= -9
        && scale % 3 == 0
        && !digits.ends_with("000")
        && !digits.starts_with('0')
        && digits.parse::<i64>().is_ok()
}

/// The canonical text of a value in `format` (upstream's `CanonicalizeBytes`).
fn encode(negative: bool, value: Dec, format: Format) -> Option<String> {
    if value.m == 0 {
        return Some("0".into());
    }
    let sign = if negative { "-" } else { "" };
    let mut format = format;
    let mut whole = None;
    if format == Format::BinarySi {
        if value.below(1024) {
            format = Format::DecimalSi;
        } else {
            match value.whole() {
                Some(w) => whole = Some(w),
                None => format = Format::DecimalSi,
            }
        }
    }
    if let (Format::BinarySi, Some(mut w)) = (format, whole) {
        let mut k = 0;
        while w % 1024 == 0 && k < 6 {
            w /= 1024;
            k += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
            .get(k)
            .copied()
            .unwrap_or("");
        return Some(format!("{sign}{w}{suffix}"));
    }
    let Dec { mut m, mut e } = value.stripped();
    while e % 3 != 0 {
        m = m.checked_mul(10)?;
        e -= 1;
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
        (_, _) if e == 0 => String::new(),
        _ => format!("e{e}"),
    };
    Some(format!("{sign}{m}{suffix}"))
}

/// The text upstream stores and serves for the quantity `text` (trimmed of whitespace, as
/// its decoder does); `None` when it does not parse or is past the bounds above.
///
/// ```
/// use listwatch_schema::quantity::canonical;
/// assert_eq!(canonical("1000m").as_deref(), Some("1"));
/// assert_eq!(canonical("1.5Gi").as_deref(), Some("1536Mi"));
/// assert_eq!(canonical("500m").as_deref(), Some("500m"));
/// ```
pub fn canonical(text: &str) -> Option<String> {
    let s = text.trim();
    match parse(s)? {
        Parsed::AsGiven => Some(s.to_owned()),
        Parsed::Value(negative, value, format) => encode(negative, value, format),
    }
}

/// [`canonical`] of a quantity written as a string or a JSON number (read from its text).
pub fn canonical_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => canonical(s),
        // serde renders a large float as `1e+21`; the literal was most likely `1e21`.
        Value::Number(n) => canonical(&n.to_string().replacen("e+", "e", 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(s: &str) -> String {
        canonical(s).unwrap_or_else(|| format!("<none: {s}>"))
    }

    #[test]
    fn canonical_texts_are_kept_as_given() {
        for s in [
            "1",
            "500m",
            "1Gi",
            "1e3",
            "1E3",
            "+1",
            "-1",
            "100Mi",
            "2k",
            "1e-3",
            "0",
            "7Ki",
            "123456789",
            "1e300",
            "1.",
            "012",
        ] {
            assert_eq!(c(s), s, "{s}");
        }
        assert_eq!(c(" 250m "), "250m");
    }

    #[test]
    fn other_texts_take_upstreams_canonical_form() {
        let cases = [
            ("1000m", "1"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            (".5", "500m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("2000m", "2"),
            ("1.5Gi", "1536Mi"),
            ("8Gi", "8Gi"),
            ("1024Mi", "1Gi"),
            ("2048Ki", "2Mi"),
            ("0.5Gi", "512Mi"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("0.1Ki", "102400m"),
            ("0.0000000001", "1n"),
            ("-0.0000000001", "-1n"),
            ("1000E", "1e21"),
            ("1000e3", "1e6"),
            ("10e2", "1e3"),
            ("0m", "0"),
            ("000", "0"),
            ("-0", "0"),
            ("1000.0", "1k"),
            ("16Ei", "9223372036854775807"),
            ("-1.5", "-1500m"),
            ("1.234567891234", "1234567892n"),
        ];
        for (input, want) in cases {
            assert_eq!(c(input), want, "{input}");
        }
    }

    #[test]
    fn numbers_read_from_their_text_and_bounds_hold() {
        assert_eq!(canonical_value(&json!(1)).as_deref(), Some("1"));
        assert_eq!(canonical_value(&json!(1.5)).as_deref(), Some("1500m"));
        assert_eq!(canonical_value(&json!(2000)).as_deref(), Some("2k"));
        assert_eq!(canonical_value(&json!(1e21)).as_deref(), Some("1e21"));
        assert_eq!(canonical_value(&json!(true)), None);
        for bad in ["", "x", "1x", "1e", "1ii", "1.5.5"] {
            assert_eq!(canonical(bad), None, "{bad}");
        }
        let long = "9".repeat(MAX_DIGITS + 1);
        assert_eq!(canonical(&long), None);
        assert_eq!(canonical("1e99999"), None);
        assert_eq!(
            canonical(&format!("0.{}1", "0".repeat(200))).as_deref(),
            Some("1n")
        );
    }
}
