//! A resource quantity's exact value as upstream's `resource.ParseQuantity` leaves it, for
//! the validation rules that compare quantities (`ValidateResourceRequirements`: not
//! negative, a request at most its limit, an integer where one is required, huge pages in
//! whole pages).
//!
//! What it owns: [`Amount`], a sign, the significant decimal digits and the power of ten of
//! the last one, so that a value of any size — `1e2147483647`, a 100 000-digit number —
//! is held in as many bytes as its text has digits and compared in one pass over them,
//! never expanded; and the comparisons on it. It does not parse: the value is the schema
//! crate's ([`listwatch_schema::quantity::exact`]), the same parse that writes the
//! quantity's canonical text — upstream's rounding away from zero to a billionth, its
//! 2^63-1 cap of a binary-suffixed value and its 32-bit exponent arithmetic
//! (`1e9223372036854775807` reads as `1e-1`, as there).
//!
//! Invariants: every function is linear in the value's digits (a remainder is one pass
//! plus a logarithmic power), the digits are at most the text's digits plus 20, and
//! nothing panics on any input; what does not parse is `None`.

use std::cmp::Ordering;

use listwatch_schema::quantity::{self, Exact};
use serde_json::Value;

/// A quantity's exact value: `±digits × 10^exp`, `digits` without leading or trailing
/// zeros (empty for zero, which has no sign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amount {
    negative: bool,
    /// Decimal digits, most significant first, each `0..=9`.
    digits: Vec<u8>,
    exp: i64,
}

impl Amount {
    /// Zero.
    pub fn zero() -> Self {
        Self {
            negative: false,
            digits: Vec::new(),
            exp: 0,
        }
    }

    /// The value of a quantity written as a string (trimmed, as upstream's decoder does) or
    /// a JSON number (read from its text); `None` when it does not parse.
    pub fn of(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Self::parse(s.trim()),
            Value::Number(n) => Self::parse(&n.to_string().replacen("e+", "e", 1)),
            _ => None,
        }
    }

    /// Upstream's `ParseQuantity` of `s`, as a value (the schema crate's parse).
    pub fn parse(s: &str) -> Option<Self> {
        let Exact {
            negative,
            digits,
            exp,
        } = quantity::exact(s)?;
        Some(Self {
            negative,
            digits,
            exp,
        })
    }

    /// The value in billionths (upstream's `Quantity.ScaledValue(Nano)` of a parsed value,
    /// which the parse has already rounded to a billionth); `None` when it does not fit
    /// an `i128`. Reads at most 39 digits.
    pub fn nanos(&self) -> Option<i128> {
        if self.digits.len() > 39 {
            return None;
        }
        let mut n: i128 = 0;
        for d in &self.digits {
            n = n.checked_mul(10)?.checked_add(i128::from(*d))?;
        }
        let shift = self.exp.checked_add(9)?;
        // A parsed value is a whole number of billionths, so `shift` is not negative.
        let shift = u32::try_from(shift).ok()?;
        if n != 0 {
            n = n.checked_mul(10i128.checked_pow(shift)?)?;
        }
        Some(if self.negative { -n } else { n })
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative && !self.digits.is_empty()
    }

    /// Upstream's `value.MilliValue() % 1000 == 0` for a value that fits: the value rounded
    /// up to a thousandth is whole.
    pub fn is_whole_at_milli(&self) -> bool {
        if self.exp >= 0 || self.digits.is_empty() {
            return true;
        }
        // Fraction digits: the last `-exp` digits (with leading zeros when fewer).
        let frac_len = usize::try_from(-self.exp).unwrap_or(usize::MAX);
        let have = self.digits.len().min(frac_len);
        let leading_zeros = frac_len - have;
        let tail = self.digits.get(self.digits.len() - have..).unwrap_or(&[]);
        // The fraction f > 0 (its last digit is not zero): whole at milli iff f > 0.999,
        // i.e. its first three digits are 9 and more follow.
        leading_zeros == 0 && tail.len() > 3 && tail.iter().take(3).all(|d| *d == 9)
    }

    /// Upstream's `value.Value() % modulus` for a value that fits: the value rounded up to
    /// a whole number, modulo `modulus` (not zero); the magnitude's remainder.
    pub fn ceil_rem(&self, modulus: u64) -> u64 {
        if modulus == 0 || self.digits.is_empty() {
            return 0;
        }
        let m = u128::from(modulus);
        if self.exp >= 0 {
            let mut r = 0u128;
            for d in &self.digits {
                r = (r * 10 + u128::from(*d)) % m;
            }
            let e = u64::try_from(self.exp).unwrap_or(0);
            let r = (r * pow_mod(10, e, m)) % m;
            return u64::try_from(r).unwrap_or(0);
        }
        let frac_len = usize::try_from(-self.exp).unwrap_or(usize::MAX);
        let int_len = self.digits.len().saturating_sub(frac_len);
        let mut r = 0u128;
        for d in self.digits.iter().take(int_len) {
            r = (r * 10 + u128::from(*d)) % m;
        }
        // A fraction remains (the last digit is not zero): round up.
        u64::try_from((r + 1) % m).unwrap_or(0)
    }

    /// Upstream's `Quantity.Cmp`.
    pub fn cmp_value(&self, other: &Amount) -> Ordering {
        match (self.is_negative(), other.is_negative()) {
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (true, true) => other.cmp_magnitude(self),
            (false, false) => self.cmp_magnitude(other),
        }
    }

    /// The magnitudes compared: by the position of the leading digit, then digit by digit.
    fn cmp_magnitude(&self, other: &Amount) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        let top =
            |a: &Amount| i128::from(a.exp) + i128::try_from(a.digits.len()).unwrap_or(i128::MAX);
        top(self).cmp(&top(other)).then_with(|| {
            // Same leading position: digits in order; with equal common digits the longer
            // is larger (its last digit is not zero).
            self.digits.cmp(&other.digits)
        })
    }
}

/// `base^exp mod m` by squaring (`m` > 0, below 2^64).
fn pow_mod(base: u128, mut exp: u64, m: u128) -> u128 {
    let mut result = 1 % m;
    let mut b = base % m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result * b % m;
        }
        b = b * b % m;
        exp >>= 1;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::quantity::quantity_nanos;
    use proptest::prelude::*;
    use serde_json::json;

    /// A quantity text of ordinary size: sign, digits, maybe a fraction, a suffix.
    fn quantity() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            0u64..10_000_000,
            prop::option::of(0u32..1000),
            prop::sample::select(vec![
                "", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2",
            ]),
        )
            .prop_map(|(neg, int, frac, suffix)| {
                let sign = if neg { "-" } else { "" };
                match frac {
                    Some(f) => format!("{sign}{int}.{f:03}{suffix}"),
                    None => format!("{sign}{int}{suffix}"),
                }
            })
    }

    proptest! {
        /// Where the bounded reader of the QoS class reads both values exactly (whole
        /// nanos), the exact comparison agrees with it.
        #[test]
        fn ordinary_values_order_as_their_nanos(x in quantity(), y in quantity()) {
            let (ax, ay) = (Amount::parse(&x), Amount::parse(&y));
            prop_assert!(ax.is_some() && ay.is_some(), "{} {}", x, y);
            // A fraction of a nano is rounded up here and dropped there.
            let exact = |s: &str| !(s.ends_with('n') && s.contains('.'));
            if let (Some(nx), Some(ny), true, true) =
                (quantity_nanos(&json!(x)), quantity_nanos(&json!(y)), exact(&x), exact(&y))
            {
                let (ax, ay) = (ax.unwrap_or_else(Amount::zero), ay.unwrap_or_else(Amount::zero));
                prop_assert_eq!(ax.cmp_value(&ay), nx.cmp(&ny), "{} vs {}", x, y);
                prop_assert_eq!(ax.is_negative(), nx < 0, "{}", x);
            }
        }
    }

    fn a(s: &str) -> Amount {
        Amount::parse(s).unwrap_or_else(|| panic!("{s} does not parse"))
    }

    #[test]
    fn values_compare_as_upstreams_cmp() {
        let less = [
            ("1", "2"),
            ("500m", "1"),
            ("999m", "1"),
            ("1Ki", "1025"),
            ("1e3", "1001"),
            ("1.5Gi", "1610612737"),
            ("-1", "0"),
            ("-2", "-1"),
            ("1e999999", "1e1000000"),
            ("9999", "1e4"),
            ("0.1", "1"),
        ];
        for (x, y) in less {
            assert_eq!(a(x).cmp_value(&a(y)), Ordering::Less, "{x} < {y}");
            assert_eq!(a(y).cmp_value(&a(x)), Ordering::Greater, "{y} > {x}");
        }
        let equal = [
            ("1", "1000m"),
            ("1k", "1e3"),
            ("1Ki", "1024"),
            ("0", "-0"),
            ("0.5", ".5"),
            ("+1", "1"),
            ("1.", "1"),
            ("1e-10", "1n"),
            ("1.0000000002", "1.0000000001"),
            ("16Ei", "9223372036854775807"),
            ("1e2147483647", "1e2147483647"),
        ];
        for (x, y) in equal {
            assert_eq!(a(x).cmp_value(&a(y)), Ordering::Equal, "{x} = {y}");
        }
        // Upstream casts the exponent to 32 bits.
        assert_eq!(a("1e9223372036854775807"), a("0.1"));
        assert_eq!(Amount::of(&json!(1.5)), Some(a("1500m")));
        assert_eq!(Amount::of(&json!(2)), Some(a("2")));
        assert!(a("-1e-12").is_negative());
        assert!(!a("-0").is_negative());
        for bad in [
            "",
            "x",
            "1x",
            "e3",
            "1e",
            "-",
            ".",
            "1e99999999999999999999",
        ] {
            assert_eq!(Amount::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn huge_texts_are_held_by_their_digits() {
        let big = format!("{}e900000", "9".repeat(100_000));
        let x = a(&big);
        assert!(x.digits.len() <= 100_000);
        assert_eq!(x.cmp_value(&a("1e1000000")), Ordering::Less);
        assert_eq!(a(&"9".repeat(100_000)).cmp_value(&x), Ordering::Less);
    }

    #[test]
    fn integers_and_remainders() {
        for whole in ["1", "2k", "1e30", "0.9999", "1Ki", "0"] {
            assert!(a(whole).is_whole_at_milli(), "{whole}");
        }
        for not_whole in ["0.5", "1.001", "100m", "1.0000001", "0.999"] {
            assert!(!a(not_whole).is_whole_at_milli(), "{not_whole}");
        }
        assert_eq!(a("4Mi").ceil_rem(2 << 20), 0);
        assert_eq!(a("3Mi").ceil_rem(2 << 20), 1 << 20);
        assert_eq!(a("1e30").ceil_rem(7), 1); // 10^30 = (10^6)^5 and 10^6 mod 7 = 1
        assert_eq!(a("0.5").ceil_rem(2), 1);
        assert_eq!(a("2Gi").ceil_rem(1 << 30), 0);
    }

    #[test]
    fn far_exponents_read_as_upstreams_32_bit_scale_does() {
        // 19 digits take upstream's exact path, whose 32-bit scale wraps: the value is a
        // billionth (the decoder stores `1e-9`), so it is below a limit of `1m`.
        let far = a("1111111111111111111e2147483647");
        assert_eq!(far, a("1n"));
        assert_eq!(far.cmp_value(&a("1m")), Ordering::Less);
    }
}
