//! Resource quantities (`100m`, `1.5Gi`, `2e3`) in billionths, for the strategies that
//! compute from them (a pod's QoS class, a huge page size, an update's equal values).
//!
//! Invariant: no parse of its own — the value is the schema crate's exact parse
//! ([`Amount`]: upstream's `ParseQuantity`, rounded up to a billionth), read into an
//! `i128` only when it fits (at most 39 digits are read); never panics; whatever does not
//! parse or does not fit is `None`.

use serde_json::Value;

use crate::builtin::amount::Amount;

/// A resource quantity (`100m`, `1.5Gi`, `2e3`, `1`) in billionths, as upstream's
/// `resource.Quantity` holds it (a fraction of a billionth rounded away from zero);
/// `None` if it does not parse or does not fit.
pub fn quantity_nanos(v: &Value) -> Option<i128> {
    Amount::of(v)?.nanos()
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

    #[test]
    fn a_fraction_of_a_nano_rounds_up_as_upstreams_parse() {
        // Upstream's ParseQuantity rounds `0.5n` up to `1n`: a request, not none (a pod
        // asking for it is Burstable, not BestEffort).
        let q = |s: &str| quantity_nanos(&json!(s));
        assert_eq!(q("0.5n"), Some(1));
        assert_eq!(q("1.5n"), Some(2));
        assert_eq!(q("-0.5n"), Some(-1));
        assert_eq!(q("1e-10000"), Some(1));
    }
}
