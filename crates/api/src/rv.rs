//! Resource versions: etcd revisions written as decimal strings.
//!
//! Invariant: `""` and `"0"` both mean "no particular version" and parse to `0`; every other
//! accepted string is the decimal form of a `u64` without sign, blanks or leading `+`.

use thiserror::Error;

/// A resource version string that is not a decimal `u64`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid resource version {:?}: must be a non-negative decimal integer",
    crate::echo::echo(.value)
)]
pub struct InvalidResourceVersion {
    /// The rejected input, as given.
    pub value: String,
}

/// Parses a resource version; `""` and `"0"` give `0`.
///
/// ```
/// use listwatch_api::rv;
/// assert_eq!(rv::parse("").unwrap(), 0);
/// assert_eq!(rv::parse("120").unwrap(), 120);
/// assert!(rv::parse("-1").is_err());
/// ```
pub fn parse(s: &str) -> Result<u64, InvalidResourceVersion> {
    if s.is_empty() {
        return Ok(0);
    }
    // u64::from_str accepts a leading '+', Kubernetes' strconv.ParseUint does not.
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InvalidResourceVersion {
            value: s.to_owned(),
        });
    }
    s.parse::<u64>().map_err(|_| InvalidResourceVersion {
        value: s.to_owned(),
    })
}

/// Parses an optional query value: absent or `""` is `None` (unset), `"0"` is `Some(0)`.
///
/// Kubernetes distinguishes an unset resource version (a consistent read) from `"0"`
/// (any version will do), so callers keep the difference.
pub fn parse_optional(s: Option<&str>) -> Result<Option<u64>, InvalidResourceVersion> {
    match s {
        None | Some("") => Ok(None),
        Some(v) => parse(v).map(Some),
    }
}

/// Formats a resource version the way the wire carries it.
pub fn format(rv: u64) -> String {
    rv.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_and_empty() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse(""), Ok(0));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_optional(None), Ok(None));
        assert_eq!(parse_optional(Some("")), Ok(None));
        assert_eq!(parse_optional(Some("0")), Ok(Some(0)));
    }

    #[test]
    fn rejects_signs_blanks_overflow_and_letters() {
        for bad in [
            "+1",
            "-1",
            " 1",
            "1 ",
            "abc",
            "18446744073709551616",
            "1.0",
            "0x10",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
