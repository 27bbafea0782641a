//! Exact decimal magnitudes of any size for [`super`]: a quantity's value is
//! `digits × 10^exp` with the digits kept as a decimal string, so no value a body can
//! write is out of range and nothing is ever expanded by its exponent.
//!
//! What it owns: the few operations upstream's `inf.Dec`/`big.Int` perform on a parsed
//! quantity — multiplying by a power of two (a binary suffix), rounding away from zero to
//! a power of ten (rounding to nano or milli), comparing with a small whole number (the
//! 2^63-1 cap, the 1024 threshold of binary output) and moving factors of ten into the
//! exponent (canonical output).
//!
//! Invariants: a [`Magnitude`] has no leading zero digit (zero has no digits) and every
//! operation is linear in its number of digits, allocating at most the digits it returns
//! (a multiplication by 2^k, k ≤ 60, adds at most 19); exponents are `i64`, which no
//! input can overflow (an exponent is an `i32` plus a body's length).

use std::cmp::Ordering;

/// A non-negative value `digits × 10^exp` (`digits` are ASCII, most significant first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Magnitude {
    digits: Vec<u8>,
    exp: i64,
}

impl Magnitude {
    /// Zero.
    pub(super) fn zero() -> Self {
        Self {
            digits: Vec::new(),
            exp: 0,
        }
    }

    /// `digits × 10^exp`; `digits` are ASCII digits (leading zeros allowed).
    pub(super) fn new(digits: &[u8], exp: i64) -> Self {
        let start = digits
            .iter()
            .position(|&d| d != b'0')
            .unwrap_or(digits.len());
        let digits = digits.get(start..).unwrap_or_default().to_vec();
        if digits.is_empty() {
            return Self::zero();
        }
        Self { digits, exp }
    }

    /// A whole number.
    pub(super) fn from_u128(n: u128) -> Self {
        Self::new(n.to_string().as_bytes(), 0)
    }

    /// The same digits times `10^exp` (for an unscaled amount, whose `exp` is 0).
    pub(super) fn scaled(&self, exp: i64) -> Self {
        Self {
            digits: self.digits.clone(),
            exp,
        }
    }

    pub(super) fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The value times `factor` (exact).
    pub(super) fn mul_small(&self, factor: u64) -> Self {
        if self.is_zero() || factor == 0 {
            return Self::zero();
        }
        let mut out = Vec::with_capacity(self.digits.len() + 20);
        let mut carry: u128 = 0;
        for &d in self.digits.iter().rev() {
            let v = u128::from(d.saturating_sub(b'0')) * u128::from(factor) + carry;
            out.push(b'0' + (v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            out.push(b'0' + (carry % 10) as u8);
            carry /= 10;
        }
        out.reverse();
        Self::new(&out, self.exp)
    }

    /// The value rounded away from zero to a multiple of `10^target` (upstream's
    /// `inf.RoundUp` to scale `-target`); unchanged when it already is one.
    pub(super) fn round_up_to(&self, target: i64) -> Self {
        if self.is_zero() || self.exp >= target {
            return self.clone();
        }
        // Drop the last `k` digits, adding one if any of them was not zero.
        let k = target.saturating_sub(self.exp);
        let len = self.digits.len();
        let kept = usize::try_from(k)
            .ok()
            .and_then(|k| len.checked_sub(k))
            .unwrap_or(0);
        let (head, dropped) = self.digits.split_at(kept);
        let mut q = head.to_vec();
        if dropped.iter().any(|&d| d != b'0') {
            increment(&mut q);
        }
        Self::new(&q, target)
    }

    /// With its trailing zero digits moved into the exponent: `(digits, exp)`.
    pub(super) fn normalized(&self) -> (&[u8], i64) {
        let end = self
            .digits
            .iter()
            .rposition(|&d| d != b'0')
            .map_or(0, |i| i + 1);
        let zeros = self.digits.len() - end;
        let digits = self.digits.get(..end).unwrap_or_default();
        (digits, self.exp.saturating_add(zeros as i64))
    }

    /// Its digits as a whole number, when it is whole and fits.
    pub(super) fn to_u128(&self) -> Option<u128> {
        let (digits, exp) = self.normalized();
        if digits.is_empty() {
            return Some(0);
        }
        if exp < 0 || digits.len() as i64 + exp > 38 {
            return None;
        }
        let mut n: u128 = 0;
        for &d in digits {
            n = n
                .checked_mul(10)?
                .checked_add(u128::from(d.saturating_sub(b'0')))?;
        }
        n.checked_mul(10u128.checked_pow(u32::try_from(exp).ok()?)?)
    }

    /// How it compares with the whole number `n`.
    pub(super) fn cmp_u128(&self, n: u128) -> Ordering {
        let (digits, exp) = self.normalized();
        if digits.is_empty() {
            return 0.cmp(&n);
        }
        let int_len = digits.len() as i64 + exp;
        if int_len > 38 {
            return Ordering::Greater;
        }
        if int_len <= 0 {
            // 0 < value < 1.
            return if n == 0 {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        // int_len in 1..=38: the whole part fits a u128.
        let whole_digits = usize::try_from(int_len).unwrap_or(0);
        let mut whole: u128 = 0;
        for i in 0..whole_digits {
            let d = digits
                .get(i)
                .map_or(0, |&d| u128::from(d.saturating_sub(b'0')));
            whole = whole.saturating_mul(10).saturating_add(d);
        }
        let fraction = digits.len() > whole_digits;
        match whole.cmp(&n) {
            Ordering::Equal if fraction => Ordering::Greater,
            o => o,
        }
    }
}

/// Adds one to a string of ASCII digits (which may be empty: it becomes `1`).
fn increment(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, b'1');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str, exp: i64) -> Magnitude {
        Magnitude::new(s.as_bytes(), exp)
    }

    #[test]
    fn arithmetic_is_exact_at_any_size() {
        assert_eq!(m("5", 0).mul_small(1 << 60), m("5764607523034234880", 0));
        let big = "9".repeat(500);
        assert_eq!(m(&big, 0).mul_small(2).normalized().0.len(), 501);
        assert_eq!(m("123456", -12).round_up_to(-9), m("124", -9));
        assert_eq!(m("123000", -12).round_up_to(-9), m("123", -9));
        assert_eq!(m("1", -1_000_000).round_up_to(-9), m("1", -9));
        assert_eq!(m("999", -12).round_up_to(-9), m("1", -9));
        assert_eq!(m("1000", 0).normalized(), (&b"1"[..], 3));
        assert_eq!(m("00120", 2).to_u128(), Some(12000));
        assert_eq!(m("15", -1).to_u128(), None);
        assert_eq!(m("1", 40).cmp_u128(u128::MAX), Ordering::Greater);
        assert_eq!(m("15", -1).cmp_u128(1), Ordering::Greater);
        assert_eq!(m("15", -1).cmp_u128(2), Ordering::Less);
        assert_eq!(m("5", -1).cmp_u128(1), Ordering::Less);
        assert_eq!(m("5", -1).cmp_u128(0), Ordering::Greater);
        assert_eq!(Magnitude::zero().cmp_u128(0), Ordering::Equal);
    }
}
