//! Client-side request metrics, the figures of client-go's `rest_client_*` metrics
//! (`requests_total{code,method}`, `request_duration_seconds`, `request_retries_total`,
//! `rate_limiter_duration_seconds`) kept per [`HttpClient`](super::HttpClient), with no global
//! registry: read them with [`HttpClient::metrics`](super::HttpClient::metrics) and export
//! them with whatever metrics library the program uses.
//!
//! Invariants: every attempt sent to a server (each retry, each server tried, a 401's second
//! try) is counted once, under its method and the status code of its answer, or under no code
//! when no answer came (connection failure, deadline); the time counted is until the
//! response headers (a watch's or list's body is not in it). The keys are a method and a
//! three-digit code, so the table stays small whatever the traffic.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// What one method and outcome cost so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Attempts counted.
    pub count: u64,
    /// Their time until the response headers, summed.
    pub total: Duration,
    /// The longest of them.
    pub max: Duration,
}

/// The attempts of one method with one outcome.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The HTTP method (`GET` for lists and watches too).
    pub method: String,
    /// The answer's status code; `None` when no answer came.
    pub code: Option<u16>,
}

/// A snapshot of an [`HttpClient`](super::HttpClient)'s request metrics.
///
/// ```
/// # async fn run() -> listwatch_client::Result<()> {
/// use listwatch_client::{HttpClient, HttpConfig, RequestKey};
///
/// let client = HttpClient::new(HttpConfig::new("http://127.0.0.1:8080")?)?;
/// let _ = client.get("/api/v1/namespaces/default").await;
/// let m = client.metrics();
/// let ok = m.requests.get(&RequestKey { method: "GET".into(), code: Some(200) });
/// println!("GET 200: {:?}; retries: {}", ok.map(|s| s.count), m.retries);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientMetrics {
    /// Attempts by method and outcome (client-go's `rest_client_requests_total` and
    /// `rest_client_request_duration_seconds`).
    pub requests: BTreeMap<RequestKey, RequestStats>,
    /// Requests sent again after a refusal with `Retry-After`
    /// (`rest_client_request_retries_total`).
    pub retries: u64,
    /// Time spent waiting for the client-side rate limiter
    /// (`rest_client_rate_limiter_duration_seconds`), summed.
    pub rate_limiter_wait: Duration,
}

/// The live counters behind [`ClientMetrics`].
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    inner: Mutex<ClientMetrics>,
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut ClientMetrics)) {
        // A panic elsewhere while holding the lock cannot leave the counters inconsistent.
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut m);
    }

    /// One attempt of `method` that ended with `code` (`None`: no answer) after `took`.
    pub(crate) fn attempt(&self, method: &http::Method, code: Option<u16>, took: Duration) {
        self.with(|m| {
            let s = m
                .requests
                .entry(RequestKey {
                    method: method.as_str().to_owned(),
                    code,
                })
                .or_default();
            s.count = s.count.saturating_add(1);
            s.total = s.total.saturating_add(took);
            s.max = s.max.max(took);
        });
    }

    pub(crate) fn retry(&self) {
        self.with(|m| m.retries = m.retries.saturating_add(1));
    }

    pub(crate) fn limiter_wait(&self, waited: Duration) {
        self.with(|m| m.rate_limiter_wait = m.rate_limiter_wait.saturating_add(waited));
    }

    pub(crate) fn snapshot(&self) -> ClientMetrics {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_counted_by_method_and_code_with_their_time() {
        let m = Metrics::default();
        m.attempt(&http::Method::GET, Some(200), Duration::from_millis(5));
        m.attempt(&http::Method::GET, Some(200), Duration::from_millis(7));
        m.attempt(&http::Method::POST, None, Duration::from_millis(1));
        m.retry();
        m.limiter_wait(Duration::from_millis(3));
        let s = m.snapshot();
        let get = s.requests[&RequestKey {
            method: "GET".into(),
            code: Some(200),
        }];
        assert_eq!(
            get,
            RequestStats {
                count: 2,
                total: Duration::from_millis(12),
                max: Duration::from_millis(7)
            }
        );
        assert_eq!(s.requests.len(), 2);
        assert_eq!(s.retries, 1);
        assert_eq!(s.rate_limiter_wait, Duration::from_millis(3));
    }
}
