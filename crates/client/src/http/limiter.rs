//! The client-side rate limiter ([`HttpConfig::rate_limit`](super::HttpConfig), client-go's
//! `QPS`/`Burst` with its token bucket `flowcontrol.NewTokenBucketRateLimiter`): every
//! request of one [`HttpClient`](super::HttpClient) — each retry included, as client-go's
//! `tryThrottle` — takes a token first.
//!
//! Invariants: a bucket of `burst` tokens refilled at `qps` per second; a request that finds
//! none reserves the next one (the count may go negative) and waits until it is due, so
//! requests are served in the order they asked; a request dropped while it waits gives back
//! only what no later request was promised (`TokenBucket::cancel`). The first try of a request waits as long as
//! its token takes, before the request timeout starts (client-go throttles the first try
//! before it sets up the timeout, so that a throttled client does not time out requests it
//! never sent); the caller bounds that wait by dropping the request. A retry's wait that
//! would end past the request's deadline is refused at once instead (client-go's `Wait`
//! fails the same way on its context's deadline). A request dropped while it waits gives its
//! token back ([`TokenBucket::cancel`]). A `qps` of 0, less, or not a finite number is no
//! limit at all (the runtime's token bucket's meaning of 0). Off unless configured (kube-rs
//! has none either); the lock is never held across the wait.

use std::sync::Mutex;
use std::time::Duration;

use listwatch_runtime::TokenBucket;
use tokio::time::Instant;

use crate::{Error, Result};

/// A token bucket shared by the requests of one client.
#[derive(Debug)]
pub(crate) struct Limiter {
    bucket: Mutex<TokenBucket>,
}

/// A reservation being waited for: given back when dropped before it came due.
struct Waiting<'a> {
    limiter: &'a Limiter,
    due: Option<Instant>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(due) = self.due.take() {
            self.limiter.bucket().cancel(due);
        }
    }
}

impl Limiter {
    /// A full bucket of `burst` (at least 1) refilled at `qps` per second; `None` when `qps`
    /// is no limit (0 or less, or not finite).
    pub(crate) fn new(qps: f64, burst: u32) -> Option<Self> {
        (qps.is_finite() && qps > 0.0).then(|| Self {
            bucket: Mutex::new(TokenBucket::new(qps, burst.max(1))),
        })
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        self.bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes one token, waiting until it is due; with `deadline`, fails at once when that
    /// would be past it (the token is not taken then). Dropped while waiting, the token is
    /// given back.
    pub(crate) async fn acquire(&self, deadline: Option<Duration>) -> Result<()> {
        // The due instant as the bucket recorded it: what `cancel` matches against the
        // reservations made after this one.
        let reserved = self.bucket().reserve_due(deadline);
        let (wait, due) = reserved.map_err(|wait| {
            Error::Http(
                format!(
                    "client rate limiter: the retry is due in {wait:?}, past the request timeout"
                )
                .into(),
            )
        })?;
        if !wait.is_zero() {
            let mut waiting = Waiting {
                limiter: self,
                due: Some(due),
            };
            tracing::debug!(?wait, "client rate limiter: waiting");
            tokio::time::sleep(wait).await;
            waiting.due = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_burst_goes_at_once_then_one_per_interval_and_a_wait_past_the_deadline_fails() {
        let l = Limiter::new(5.0, 3).unwrap();
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

    #[tokio::test(start_paused = true)]
    async fn a_wait_dropped_gives_its_token_back() {
        let l = Limiter::new(1.0, 1).unwrap();
        let start = Instant::now();
        l.acquire(None).await.unwrap();
        // Due in 1 s, dropped after 100 ms.
        let dropped = tokio::time::timeout(Duration::from_millis(100), l.acquire(None)).await;
        assert!(dropped.is_err());
        l.acquire(None).await.unwrap();
        assert_eq!(
            start.elapsed().as_millis(),
            1000,
            "not 2000: the token came back"
        );
    }

    #[test]
    fn a_qps_of_zero_or_less_or_not_finite_is_no_limit() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Limiter::new(qps, 3).is_none(), "{qps}");
        }
        assert!(Limiter::new(0.5, 0).is_some());
    }
}
