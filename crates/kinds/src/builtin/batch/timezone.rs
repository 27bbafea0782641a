//! A cron job's `spec.timeZone` as upstream's `validateTimeZone` checks it
//! (pkg/apis/batch/validation): set means non-empty; each `/`-separated part 1 to 14 of
//! `A-Za-z0-9._+-`, not `.`/`..`, not starting with `-`; not `Local` (any case); and a zone
//! Go's `time.LoadLocation` knows.
//!
//! Go reads the host's zoneinfo; this crate carries the names instead
//! (`timezones.txt`: every `Zone` and `Link` name of the IANA tz database 2025b's
//! `tzdata.zi`, sorted, one per line), so the answer never depends on the host. A zone newer
//! than 2025b is refused until the list is regenerated:
//! `awk '$1=="Z"{print $2} $1=="L"{print $3}' /usr/share/zoneinfo/tzdata.zi | LC_ALL=C sort -u`.
//!
//! Invariant: a name longer than `MAX_NAME` is refused before any lookup; the lookup is a
//! binary search over the embedded, sorted list.

use serde_json::Value;

use crate::FieldError;

/// The IANA zone and link names, sorted (bytewise), one per line.
const ZONES: &str = include_str!("timezones.txt");

/// The longest name looked up (the longest IANA name is 32 bytes).
const MAX_NAME: usize = 64;

/// Whether `name` is one of the embedded IANA names.
fn known(name: &str) -> bool {
    if name.len() > MAX_NAME {
        return false;
    }
    // `lines()` of a sorted file; collecting 600 slices per call is cheap next to a request.
    let zones: Vec<&str> = ZONES.lines().collect();
    zones.binary_search(&name).is_ok()
}

/// Whether one part of a name has upstream's allowed shape.
fn part_ok(part: &str) -> bool {
    (1..=14).contains(&part.len())
        && part != "."
        && part != ".."
        && !part.starts_with('-')
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'))
}

/// The errors of a cron job's `timeZone` at `field` (none when unset).
pub fn validate(tz: &Value, field: &str) -> Option<FieldError> {
    let name = tz.as_str()?;
    let unknown = || FieldError::invalid(field, tz, format!("unknown time zone {name}"));
    if name.is_empty() {
        return Some(FieldError::invalid(
            field,
            tz,
            "timeZone must be nil or non-empty string",
        ));
    }
    if name.len() > MAX_NAME || !name.split('/').all(part_ok) {
        return Some(unknown());
    }
    if name.eq_ignore_ascii_case("local") {
        return Some(FieldError::invalid(
            field,
            tz,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    (!known(name)).then(unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_zones_pass_and_others_are_refused() {
        for ok in [
            "UTC",
            "America/New_York",
            "Etc/GMT+5",
            "US/Eastern",
            "Europe/Kyiv",
        ] {
            assert_eq!(validate(&json!(ok), "spec.timeZone"), None, "{ok}");
        }
        assert_eq!(validate(&Value::Null, "spec.timeZone"), None);
        let body = |tz: &str| validate(&json!(tz), "spec.timeZone").map(|e| e.to_string());
        assert_eq!(
            body("Mars/Olympus").as_deref(),
            Some("spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus")
        );
        assert!(body("local").is_some_and(|b| b.contains("explicit time zone")));
        assert!(body("").is_some_and(|b| b.contains("nil or non-empty")));
        for bad in [
            "../etc/passwd",
            "America/-x",
            "a/averyverylongpart",
            "utc",
            &"A/".repeat(100),
        ] {
            assert!(
                body(bad).is_some_and(|b| b.contains("unknown time zone")),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_list_is_sorted_and_plain() {
        let zones: Vec<&str> = ZONES.lines().collect();
        assert!(zones.len() > 500);
        assert!(zones.windows(2).all(|w| w[0] < w[1]));
        assert!(zones.iter().all(|z| z.split('/').all(part_ok)));
    }
}
