//! Int-or-percent fields (`maxSurge`, `maxUnavailable`, `minAvailable`) as upstream's
//! apps validation reads and checks them (`getIntOrPercentValue`,
//! `ValidatePositiveIntOrPercent`, `IsNotMoreThan100Percent`), shared by the deployment and
//! pod disruption budget rules.
//!
//! Invariant: pure and linear in the value's length; a value of another JSON type reads as
//! 0 and is left to the schema.

use serde_json::Value;

/// An int-or-percent as upstream's `getIntOrPercentValue` reads it: the number, or the
/// percentage's number (0 when it does not parse, as Go's `Atoi` error value).
pub(crate) fn int_or_percent(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.strip_suffix('%').unwrap_or(s).parse().unwrap_or(0),
        _ => v.as_i64().unwrap_or(0),
    }
}

/// Upstream's `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent` of one field.
pub(crate) fn positive_int_or_percent(v: &Value, field: &str, out: &mut Vec<crate::FieldError>) {
    match v {
        Value::Null => {}
        Value::String(s) => {
            let digits = s.strip_suffix('%').unwrap_or("");
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                out.push(crate::FieldError::invalid(
                    field,
                    v,
                    "must be an integer or percentage (e.g '5%')",
                ));
            } else if int_or_percent(v) > 100 {
                out.push(crate::FieldError::invalid(
                    field,
                    v,
                    "must not be greater than 100%",
                ));
            }
        }
        _ => {
            if v.as_i64().is_some_and(|n| n < 0) {
                out.push(crate::FieldError::invalid(
                    field,
                    v,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}
