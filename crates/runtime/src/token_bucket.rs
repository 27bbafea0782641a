//! [`TokenBucket`]: golang.org/x/time/rate's reserving token bucket, the one rate limit of
//! the runtime's work queue (its overall `qps`/`burst`) and of listwatch-client's
//! client-side limiter (client-go's `QPS`/`Burst`).
//!
//! Invariants: at most `burst` tokens, refilled at `qps` per second; a reservation always
//! takes a token, even when none is left (the count goes negative), and is told how long
//! to wait for it, so reservations are served in the order they were made; a `qps` of 0 or
//! less means no limit. A reservation given up before its token is due ([`cancel`]) gives
//! the token back (x/time/rate's `Reservation.Cancel`, which client-go's `Wait` calls when
//! its context ends): the count goes up by one, at most to `burst`; reservations made
//! before keep their due times, so the rate is never exceeded. Plain data: the caller holds
//! it under its own lock and does the waiting outside that lock.
//!
//! [`cancel`]: TokenBucket::cancel

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket whose tokens may be reserved ahead.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available (negative: reserved ahead) as of `refilled`.
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            refilled: Instant::now(),
        }
    }

    /// Reserves the next token: how long until it is due (zero when one is available).
    /// With `max_wait`, a reservation due later than that is not made: `Err` with the wait
    /// it would have had.
    pub fn reserve(&mut self, max_wait: Option<Duration>) -> Result<Duration, Duration> {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        let tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        let wait = if tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX)
        };
        if max_wait.is_some_and(|m| wait > m) {
            return Err(wait);
        }
        self.tokens = tokens;
        self.refilled = now;
        Ok(wait)
    }

    /// Gives back the token of a reservation that was due at `due` and is given up (its
    /// request dropped while it waited). Nothing when `due` has come: that token was used.
    pub fn cancel(&mut self, due: Instant) {
        let now = Instant::now();
        if due <= now || self.qps <= 0.0 {
            return;
        }
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = ((self.tokens + elapsed * self.qps).min(self.burst) + 1.0).min(self.burst);
        self.refilled = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_burst_is_free_then_reservations_queue_and_a_refused_one_takes_nothing() {
        let mut b = TokenBucket::new(10.0, 2);
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(100)));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(200)));
        assert_eq!(
            b.reserve(Some(Duration::from_millis(250))),
            Err(Duration::from_millis(300))
        );
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        let mut unlimited = TokenBucket::new(0.0, 0);
        assert_eq!(unlimited.reserve(None), Ok(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_reservation_gives_its_token_back_unless_it_came_due() {
        let mut b = TokenBucket::new(10.0, 1);
        let start = Instant::now();
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        // Two wait (100 ms, 200 ms); both are given up: the next one is due in 100 ms again.
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(100)));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(200)));
        b.cancel(start + Duration::from_millis(200));
        b.cancel(start + Duration::from_millis(100));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(100)));
        // A reservation whose time has come used its token: cancelling it gives nothing.
        tokio::time::advance(Duration::from_millis(100)).await;
        b.cancel(start + Duration::from_millis(100));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(100)));
        // Never more than the burst.
        tokio::time::advance(Duration::from_secs(10)).await;
        b.cancel(Instant::now() + Duration::from_secs(1));
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(100)));
    }
}
