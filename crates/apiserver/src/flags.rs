//! Validation of the numeric flags, as clap value parsers: a bad value is a usage error
//! (a message naming the flag and what it accepts, exit code 2) before anything starts.
//!
//! Every duration is whole seconds up to [`MAX_SECONDS`] (ten years), so that no deadline
//! overflows; every count and byte size has an upper bound for the same reason. Where
//! upstream's flag reads 0 as "no limit" (`--max-requests-inflight`,
//! `--max-mutating-requests-inflight`) ours does too, and so do our own limits; where
//! upstream accepts 0 but it breaks the server (`--request-timeout 0` times every request
//! out at its arrival, `--min-request-timeout 0` ends every watch without `timeoutSeconds`
//! at once) ours refuses it.

/// The longest duration any flag accepts, in seconds (ten years).
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The largest count (connections, seats, watches, queue lengths) any flag accepts.
pub const MAX_COUNT: usize = 1 << 30;

/// The largest byte size any flag accepts (1 TiB).
pub const MAX_BYTES: usize = 1 << 40;

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
    s: &str,
    min: T,
    max: T,
    unit: &str,
) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("must be a whole number from {min} to {max}{unit}")),
    }
}

/// Seconds, at least 1.
pub fn positive_seconds(s: &str) -> Result<u64, String> {
    number(s, 1, MAX_SECONDS, " (seconds)")
}

/// Seconds, 0 allowed.
pub fn seconds(s: &str) -> Result<u64, String> {
    number(s, 0, MAX_SECONDS, " (seconds)")
}

/// `--request-timeout`: upstream accepts 0, which makes every request time out at its
/// arrival; refused here.
pub fn request_timeout(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Err(
            "must be at least 1 second: 0 would end every request at its arrival \
                    (what upstream's 0 does)"
                .into(),
        );
    }
    positive_seconds(s)
}

/// `--min-request-timeout`: upstream accepts 0, which ends every watch without
/// `timeoutSeconds` at once; refused here.
pub fn min_request_timeout(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Err(
            "must be at least 1 second: 0 would end every watch without timeoutSeconds \
                    at once (what upstream's 0 does)"
                .into(),
        );
    }
    positive_seconds(s)
}

/// A limit where 0 means no limit.
pub fn limit(s: &str) -> Result<usize, String> {
    number(s, 0, MAX_COUNT, " (0: no limit)")
}

/// The most threads `--request-workers` accepts.
pub const MAX_WORKERS: usize = 1024;

/// `--request-workers`: threads of the request compute pool, 0 (none: requests compute on
/// the I/O threads) to [`MAX_WORKERS`].
pub fn workers(s: &str) -> Result<usize, String> {
    number(
        s,
        0,
        MAX_WORKERS,
        " (threads; 0: compute on the I/O threads)",
    )
}

/// A count of at least 1.
pub fn positive_count(s: &str) -> Result<usize, String> {
    number(s, 1, MAX_COUNT, "")
}

/// A byte size where 0 means no limit.
pub fn bytes_limit(s: &str) -> Result<usize, String> {
    number(s, 0, MAX_BYTES, " (bytes; 0: no limit)")
}

/// `--http2-max-streams-per-connection`: as upstream, not negative, 0 for the default
/// (250); at most 2^31 - 1 (what an HTTP/2 SETTINGS value and upstream's int32 hold).
pub fn http2_max_streams(s: &str) -> Result<u32, String> {
    number(s, 0, (1 << 31) - 1, " (0: the default, 250)")
}

/// Any non-negative whole number.
pub fn count(s: &str) -> Result<u64, String> {
    number(s, 0, u64::MAX, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_bounded_and_zero_means_what_upstream_means() {
        assert_eq!(limit("0"), Ok(0));
        assert_eq!(limit("400"), Ok(400));
        for bad in [
            "-1",
            "1e3",
            "",
            "x",
            "1073741825",
            "99999999999999999999999",
        ] {
            assert!(limit(bad).is_err(), "{bad}");
        }
        assert!(request_timeout("0").unwrap_err().contains("at least 1"));
        assert!(min_request_timeout("0").is_err());
        assert_eq!(request_timeout("60"), Ok(60));
        assert!(positive_seconds(&(MAX_SECONDS + 1).to_string()).is_err());
        assert_eq!(seconds("0"), Ok(0));
        assert!(positive_count("0").is_err());
        assert_eq!(bytes_limit("0"), Ok(0));
        assert_eq!(count("18446744073709551615"), Ok(u64::MAX));
        assert!(count("-1").is_err());
        assert_eq!(http2_max_streams("0"), Ok(0));
        assert_eq!(http2_max_streams("250"), Ok(250));
        for bad in ["-1", "2147483648", "x", ""] {
            assert!(http2_max_streams(bad).is_err(), "{bad}");
        }
    }
}
