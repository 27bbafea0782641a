//! The JSON numbers of a custom resource as upstream's unstructured decoding leaves them.
//!
//! Upstream decodes a custom resource's JSON into unstructured data (an integer literal that
//! fits becomes an int64, anything else a float64) and writes it back with Go's
//! `encoding/json`, which prints an integral float64 without a fractional part (`2.0` and
//! `2e0` are written `2`) unless it is at least 1e21. What is stored, answered and read back
//! is then an integer. [`normalize`] does the same to a body before it is pruned, defaulted,
//! validated and stored: every integral float within ±(2^53 − 1) becomes an integer.
//!
//! Invariants: only floats change, and only to the integer of the same value; a float
//! beyond ±(2^53 − 1) stays a float, so that a `type: integer` field refuses it as
//! kube-openapi's `IsFloat64AJSONInteger` does; the walk is iterative (no recursion) and
//! visits each value once.

use serde_json::{Number, Value};

/// The largest integer a float64 holds exactly, kube-openapi's bound for a float that is
/// a JSON integer.
pub const MAX_JSON_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The integer an integral float in ±[`MAX_JSON_INTEGER`] is, else `None`.
pub fn integral(f: f64) -> Option<i64> {
    if f.is_finite() && f.fract() == 0.0 && f.abs() <= MAX_JSON_INTEGER {
        // In range and integral: the conversion is exact.
        Some(f as i64)
    } else {
        None
    }
}

/// Rewrites every integral float of `obj` within ±[`MAX_JSON_INTEGER`] as an integer.
pub fn normalize(obj: &mut Value) {
    let mut stack: Vec<&mut Value> = vec![obj];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if n.is_f64() => {
                if let Some(i) = n.as_f64().and_then(integral) {
                    *n = Number::from(i);
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(m) => stack.extend(m.values_mut()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_floats_become_integers_and_the_rest_stay() {
        let mut v: Value = serde_json::from_str(
            r#"{"a":2.0,"b":[1e3,-0.0,1.5],"c":{"d":9007199254740994.0,"e":7,"f":"2.0"}}"#,
        )
        .unwrap();
        normalize(&mut v);
        assert_eq!(
            v.to_string(),
            r#"{"a":2,"b":[1000,0,1.5],"c":{"d":9007199254740994.0,"e":7,"f":"2.0"}}"#
        );
    }
}
