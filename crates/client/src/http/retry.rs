//! Retries of refused requests: an answer that asks the client to come back later is sent
//! again after the wait it names, as client-go's rest `Request` does (`checkWait` and
//! `withRetry.IsNextRetry` in `rest/with_retry.go`).
//!
//! What is a refusal ([`refusal_wait`]): a `429`, or any code `>= 500`, whose first
//! `Retry-After` header is a whole number of seconds (ASCII digits with an optional sign, as
//! Go's `strconv.Atoi` reads it; a negative number means "now"). Any other code, no header,
//! or a header that is an HTTP-date, a fraction, empty or out of range is the caller's error
//! at once, as in client-go. Only the code and the header decide: the body is never read
//! for it, so an unreadable body does not stop a retry.
//!
//! Invariants (enforced by [`Retries`]):
//! - at most [`HttpConfig::max_retries`](super::HttpConfig#structfield.max_retries)
//!   retries (client-go's `maxRetries`, 10), so at most that many plus one requests; the
//!   last refusal is the caller's error;
//! - each wait is the server's value capped at [`MAX_RETRY_AFTER`];
//! - with a request deadline ([`HttpConfig::request_timeout`](super::HttpConfig)), the
//!   retries fit in it, counted from the request's start: a wait that would end at or past
//!   it is not taken (the refusal is returned at once, where client-go would sleep and then
//!   report its context's deadline), and an attempt after a wait has only what remains for
//!   its response headers;
//! - every verb is retried, request bodies included (they are held in memory as `Bytes`,
//!   client-go's `bodyBytes`, which it re-sends too); a refusal is the server saying it did
//!   not do the work;
//! - the wait is a timer in the request's own future: dropping the future (a caller's
//!   timeout, an aborted task) cancels it and nothing more is sent.
//!
//! Where the retry goes when the client has several servers is decided by the caller
//! (`HttpClient::request`): the refusing server counts as failed, so the retry goes to the
//! next one, after the same wait.

use std::time::Duration;

use http::HeaderMap;
use http::header::RETRY_AFTER;
use tokio::time::Instant;

/// The longest wait taken for one `Retry-After` (a larger value is cut to this). The
/// largest hint kube-apiserver gives (its watch cache's while it initializes) is 30 s, as
/// is the reflector's longest backoff.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The default of [`HttpConfig::max_retries`](super::HttpConfig#structfield.max_retries)
/// (client-go's `Request.maxRetries`).
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 10;

/// The seconds of a `Retry-After` header, as client-go's `retryAfterSeconds` reads it: the
/// first value, trimmed of spaces and tabs, a decimal integer with an optional sign that
/// fits in 64 bits; `None` for anything else.
pub(crate) fn retry_after_seconds(headers: &HeaderMap) -> Option<i64> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    let value = value.trim_matches([' ', '\t']);
    // `i64::from_str` takes exactly Go's `Atoi` syntax: [+-]?[0-9]+, nothing else.
    value.parse::<i64>().ok()
}

/// The wait a refused answer asks for before it is sent again: `Some` for a 429 or any
/// code from 500 up with a valid `Retry-After` (client-go's `checkWait`), negative values
/// as zero, anything above [`MAX_RETRY_AFTER`] cut to it.
pub(crate) fn refusal_wait(code: u16, headers: &HeaderMap) -> Option<Duration> {
    if code != 429 && code < 500 {
        return None;
    }
    let seconds = retry_after_seconds(headers)?;
    let seconds = u64::try_from(seconds).unwrap_or(0);
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The retry budget of one request: how many retries are left and the deadline they fit in.
#[derive(Debug)]
pub(crate) struct Retries {
    left: u32,
    deadline: Option<Instant>,
    /// Whether a retry has been taken (attempts after one are bounded by the deadline).
    retried: bool,
}

impl Retries {
    /// The budget of a request starting now: `max` retries within `timeout` (none: no
    /// deadline).
    pub(crate) fn new(max: u32, timeout: Option<Duration>) -> Self {
        Self {
            left: max,
            deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
            retried: false,
        }
    }

    /// Takes one retry after a refusal asking for `wait`: `false` when none is left or the
    /// wait would end at or past the deadline (the refusal is then the caller's error).
    pub(crate) fn take(&mut self, wait: Duration) -> bool {
        if self.left == 0 {
            return false;
        }
        if let Some(deadline) = self.deadline {
            match Instant::now().checked_add(wait) {
                Some(end) if end < deadline => {}
                _ => return false,
            }
        }
        self.left -= 1;
        self.retried = true;
        true
    }

    /// The instant an attempt's response headers are due by at the latest: the request's
    /// deadline once a retry has been taken; `None` for the first attempt, whose servers
    /// each get the whole request timeout (so that failover can leave a hung one).
    pub(crate) fn attempt_deadline(&self) -> Option<Instant> {
        if self.retried { self.deadline } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(RETRY_AFTER, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn wait(code: u16, value: &[u8]) -> Option<Duration> {
        refusal_wait(code, &headers(&[value]))
    }

    #[test]
    fn only_429_and_5xx_with_a_retry_after_are_refusals() {
        let s = Duration::from_secs;
        assert_eq!(wait(429, b"1"), Some(s(1)));
        assert_eq!(wait(500, b"2"), Some(s(2)));
        assert_eq!(wait(503, b"1"), Some(s(1)));
        assert_eq!(wait(504, b"3"), Some(s(3)));
        // Any code from 500 up, as client-go's `r >= 500`.
        assert_eq!(wait(599, b"1"), Some(s(1)));
        assert_eq!(wait(999, b"1"), Some(s(1)));
        for code in [400, 401, 403, 404, 409, 410, 422, 428, 431, 499] {
            assert_eq!(wait(code, b"1"), None, "{code}");
        }
        assert_eq!(refusal_wait(503, &HeaderMap::new()), None, "no header");
    }

    #[test]
    fn retry_after_is_read_as_go_reads_it() {
        let s = Duration::from_secs;
        assert_eq!(wait(503, b"0"), Some(s(0)), "zero: at once");
        assert_eq!(wait(503, b"+4"), Some(s(4)), "Atoi takes a plus sign");
        assert_eq!(wait(503, b"-1"), Some(s(0)), "negative: at once");
        assert_eq!(wait(503, b"-9223372036854775808"), Some(s(0)));
        assert_eq!(
            wait(503, b" 2\t"),
            Some(s(2)),
            "surrounding spaces and tabs"
        );
        assert_eq!(wait(503, b"007"), Some(s(7)));
        for bad in [
            &b""[..],
            b" ",
            b"+",
            b"-",
            b"1.5",
            b"1e3",
            b"0x10",
            b"1 2",
            b"1_000",
            b"Wed, 21 Oct 2015 07:28:00 GMT",
            b"9223372036854775808",
            b"99999999999999999999999999999999999999999999999999999999999999",
            "\u{0663}".as_bytes(), // ARABIC-INDIC DIGIT THREE
            "１".as_bytes(),       // FULLWIDTH DIGIT ONE
            b"\xff\xfe",
        ] {
            assert_eq!(wait(503, bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_huge_retry_after_is_cut_to_the_cap_and_only_the_first_header_counts() {
        assert_eq!(wait(429, b"3600"), Some(MAX_RETRY_AFTER));
        assert_eq!(wait(429, b"9223372036854775807"), Some(MAX_RETRY_AFTER));
        let long = "9".repeat(10_000);
        assert_eq!(wait(429, long.as_bytes()), None, "out of range");
        let two = headers(&[b"2", b"7"]);
        assert_eq!(refusal_wait(503, &two), Some(Duration::from_secs(2)));
        let bad_first = headers(&[b"soon", b"7"]);
        assert_eq!(refusal_wait(503, &bad_first), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_counts_retries_and_keeps_them_within_the_deadline() {
        let s = Duration::from_secs;
        let mut r = Retries::new(2, None);
        assert_eq!(r.attempt_deadline(), None);
        assert!(r.take(s(1)) && r.take(MAX_RETRY_AFTER));
        assert!(!r.take(s(0)), "two retries, no third");
        assert_eq!(r.attempt_deadline(), None, "no deadline without a timeout");

        let start = Instant::now();
        let mut r = Retries::new(10, Some(s(5)));
        assert_eq!(r.attempt_deadline(), None, "the first attempt is not cut");
        assert!(r.take(s(3)));
        assert_eq!(r.attempt_deadline(), Some(start + s(5)));
        tokio::time::sleep(s(3)).await;
        assert!(!r.take(s(2)), "would end at the deadline");
        assert!(r.take(s(1)));
        assert!(!r.take(s(5)));

        let mut none = Retries::new(0, Some(s(60)));
        assert!(!none.take(s(0)), "max_retries 0: never");
    }
}
