//! Resource quantities (`100m`, `1.5Gi`, `2e3`) as upstream's `resource.Quantity` reads
//! them, for the strategies that compute from them (a pod's QoS class).
//!
//! Invariant: parsing is bounded (at most 30 digits, a 4-digit exponent) and never panics;
//! whatever does not parse or does not fit is `None`.

use serde_json::Value;

/// A resource quantity (`100m`, `1.5Gi`, `2e3`, `1`) in billionths, as upstream's
/// `resource.Quantity` reads it (sub-nano digits dropped); `None` if it does not parse or
/// does not fit.
pub fn quantity_nanos(v: &Value) -> Option<i128> {
    let text;
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Number(n) => {
            text = n.to_string();
            text.as_str()
        }
        _ => return None,
    };
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, s.get(1..)?),
        b'+' => (false, s.get(1..)?),
        _ => (false, s),
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty()
        || int.len() + frac.len() > 30
        || !digits(int)
        || !digits(frac)
    {
        return None;
    }
    let mut mantissa: i128 = 0;
    for d in int.bytes().chain(frac.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(d.saturating_sub(b'0')))?;
    }
    // value = mantissa × 10^(exp10 − frac digits) × 2^exp2, in nanos: + 9.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e => {
            let exp = e.strip_prefix(['e', 'E'])?;
            if exp.is_empty() || exp.len() > 4 {
                return None;
            }
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    let frac_len = i32::try_from(frac.len()).ok()?;
    let scale = exp10 - frac_len + 9;
    let mut n = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    if scale >= 0 {
        n = n.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)?;
    } else {
        let div = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        n /= div;
    }
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_as_upstream() {
        let q = |s: &str| quantity_nanos(&json!(s));
        assert_eq!(q("1"), Some(1_000_000_000));
        assert_eq!(q("100m"), Some(100_000_000));
        assert_eq!(q("0.5"), Some(500_000_000));
        assert_eq!(q("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(q("1.5Gi"), Some(3 * (1i128 << 29) * 1_000_000_000));
        assert_eq!(q("2e3"), Some(2_000 * 1_000_000_000));
        assert_eq!(q("1k"), q("1e3"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(quantity_nanos(&json!(2)), q("2"));
        for bad in [
            "",
            "m",
            "1x",
            "1.2.3",
            "e3",
            "1e",
            "99999999999999999999999999999999",
        ] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }
}
