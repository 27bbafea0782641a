//! Exponential backoff with jitter and a reset after a healthy period (client-go's
//! `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`).
//!
//! Invariant: the base delay starts at `initial`, doubles on each consecutive failure up to
//! `max`, and returns to `initial` when no backoff was asked for during `reset_after`. The
//! delay actually slept is `base × (1 + jitter × r)` with `r` uniform in `[0, 1)`, the way
//! client-go's `wait.Jitter` spreads it.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    jitter: f64,
    /// The next base delay; always within `[initial, max]`.
    next: Duration,
    /// When the last delay was handed out.
    last: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(
        initial: Duration,
        max: Duration,
        reset_after: Duration,
        jitter: f64,
    ) -> Self {
        Self {
            initial,
            max: max.max(initial),
            reset_after,
            // Finite and at most 10 (a delay of up to 11× the base): "forever" settings must
            // not make the arithmetic below panic (rtcl3).
            jitter: if jitter.is_finite() {
                jitter.clamp(0.0, 10.0)
            } else if jitter > 0.0 {
                10.0
            } else {
                0.0
            },
            next: initial,
            last: None,
        }
    }

    /// The delay before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) >= self.reset_after)
        {
            self.next = self.initial;
        }
        self.last = Some(now);
        let base = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        let r: f64 = rand::rng().random();
        Duration::try_from_secs_f64(base.as_secs_f64() * (1.0 + self.jitter * r))
            .unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn delays_double_to_the_cap_and_reset_after_a_healthy_period() {
        let mut b = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            0.0,
        );
        let got: Vec<u128> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(
            b.next_delay().as_millis(),
            30000,
            "not yet healthy for 2 min"
        );
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(b.next_delay().as_millis(), 800);
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_between_the_base_and_twice_the_base() {
        let mut b = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            1.0,
        );
        for _ in 0..50 {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(800) && d < Duration::from_secs(60),
                "{d:?}"
            );
        }
        let mut b = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            1.0,
        );
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1600));
    }
}
