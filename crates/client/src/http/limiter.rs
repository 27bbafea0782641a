//! The client-side rate limiter ([`HttpConfig::rate_limit`](super::HttpConfig), client-go's
//! `QPS`/`Burst` with its token bucket `flowcontrol.NewTokenBucketRateLimiter`): every
//! request of one [`HttpClient`](super::HttpClient) — each retry included, as client-go's
//! `tryThrottle` — takes a token first.
//!
//! Invariants: a bucket of `burst` tokens refilled at `qps` per second; a request that finds
//! none reserves the next one (the count may go negative) and waits until it is due, so
//! requests are served in the order they asked; a wait that would end past the request's
//! deadline is refused at once with an error instead of taken (client-go's `Wait` fails the
//! same way on its context's deadline). Off unless configured (kube-rs has none either);
//! the lock is never held across the wait.

use std::sync::Mutex;
use std::time::Duration;

use listwatch_runtime::TokenBucket;

use crate::{Error, Result};

/// A token bucket shared by the requests of one client.
#[derive(Debug)]
pub(crate) struct Limiter {
    bucket: Mutex<TokenBucket>,
}

impl Limiter {
    /// A full bucket of `burst` (at least 1) refilled at `qps` (more than 0) per second.
    pub(crate) fn new(qps: f64, burst: u32) -> Self {
        let qps = if qps.is_finite() && qps > 0.0 {
            qps
        } else {
            f64::MIN_POSITIVE
        };
        Self {
            bucket: Mutex::new(TokenBucket::new(qps, burst.max(1))),
        }
    }

    /// Takes one token, waiting until it is due; fails at once when that would be past
    /// `deadline` (the token is not taken then).
    pub(crate) async fn acquire(&self, deadline: Option<Duration>) -> Result<()> {
        let reserved = self
            .bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reserve(deadline);
        let wait = reserved.map_err(|wait| {
            Error::Http(
                format!(
                    "client rate limiter: the next request is due in {wait:?}, past the request timeout"
                )
                .into(),
            )
        })?;
        if !wait.is_zero() {
            tracing::debug!(?wait, "client rate limiter: waiting");
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn the_burst_goes_at_once_then_one_per_interval_and_a_wait_past_the_deadline_fails() {
        let l = Limiter::new(5.0, 3);
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..6 {
            l.acquire(None).await.unwrap();
            at.push(start.elapsed().as_millis());
        }
        assert_eq!(at, [0, 0, 0, 200, 400, 600]);
        // The bucket is empty: the next is due in 200 ms, which a 100 ms deadline refuses
        // without taking the token.
        assert!(l.acquire(Some(Duration::from_millis(100))).await.is_err());
        l.acquire(Some(Duration::from_secs(1))).await.unwrap();
        assert_eq!(start.elapsed().as_millis(), 800);
    }
}
