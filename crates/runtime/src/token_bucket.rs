//! [`TokenBucket`]: golang.org/x/time/rate's reserving token bucket, the one rate limit of
//! the runtime's work queue (its overall `qps`/`burst`) and of listwatch-client's
//! client-side limiter (client-go's `QPS`/`Burst`).
//!
//! Invariants: at most `burst` tokens, refilled at `qps` per second; a reservation always
//! takes a token, even when none is left (the count goes negative), and is told how long
//! to wait for it, so reservations are served in the order they were made; a `qps` of 0 or
//! less means no limit. A reservation given up before its token is due ([`cancel`]) never
//! hands back a token a later reservation was already promised (x/time/rate's
//! `Reservation.Cancel` restores only what is not owed: else a new reservation is due at the
//! same instant as one already waiting, two at once with a burst of 1). The last
//! reservation's token goes back to the count (at most `burst`); an earlier one's due time
//! becomes a free slot that the next reservation takes when it is sooner than the count's
//! next token (so the tokens of many dropped waiters are not lost, rtcl M3, and no one is
//! double-booked, rtcl2 L1). A free slot whose time passes unused is dropped (using it late
//! could exceed the rate); at most 4096 are kept, and past that a cancelled token goes
//! back to the count (a storm of dropped waiters never stalls the bucket). Reservations keep
//! their due times. Plain data: the caller holds it under its own lock
//! and does the waiting outside that lock.
//!
//! [`cancel`]: TokenBucket::cancel

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// Free slots (due times of cancelled reservations that later ones were counted against)
/// kept at most; past that a cancelled one's token goes back to the count.
const MAX_FREE_SLOTS: usize = 4096;

/// A token bucket whose tokens may be reserved ahead.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available (negative: reserved ahead) as of `refilled`.
    tokens: f64,
    refilled: Instant,
    /// When the latest reservation's token is due (x/time/rate's `lastEvent`).
    last_due: Instant,
    /// Due times of cancelled reservations that later ones were counted against.
    free: BTreeSet<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            refilled: Instant::now(),
            last_due: Instant::now(),
            free: BTreeSet::new(),
        }
    }

    /// Reserves the next token: how long until it is due (zero when one is available).
    /// With `max_wait`, a reservation due later than that is not made: `Err` with the wait
    /// it would have had.
    pub fn reserve(&mut self, max_wait: Option<Duration>) -> Result<Duration, Duration> {
        self.reserve_due(max_wait).map(|(wait, _)| wait)
    }

    /// [`reserve`](Self::reserve), also returning the instant the token is due: what
    /// [`cancel`](Self::cancel) takes to give it back.
    pub fn reserve_due(
        &mut self,
        max_wait: Option<Duration>,
    ) -> Result<(Duration, Instant), Duration> {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        let tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        let wait = if tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX)
        };
        // A slot given up by an earlier waiter, sooner than the count's next token.
        self.free = self.free.split_off(&now);
        if let Some(&slot) = self.free.first() {
            let slot_wait = slot.saturating_duration_since(now);
            if !wait.is_zero() && slot_wait < wait && max_wait.is_none_or(|m| slot_wait <= m) {
                self.free.remove(&slot);
                return Ok((slot_wait, slot));
            }
        }
        if max_wait.is_some_and(|m| wait > m) {
            return Err(wait);
        }
        self.tokens = tokens;
        self.refilled = now;
        let due = crate::instant::after(now, wait);
        self.last_due = self.last_due.max(due);
        Ok((wait, due))
    }

    /// Gives back a reservation that was due at `due` and is given up (its request dropped
    /// while it waited): the last one's token to the count, an earlier one's due time as a
    /// free slot (see the module doc). Nothing when `due` has come: that token was used.
    pub fn cancel(&mut self, due: Instant) {
        let now = Instant::now();
        if due <= now || self.qps <= 0.0 {
            return;
        }
        if due < self.last_due {
            // Later reservations were counted against this token: keep its slot instead.
            if self.free.len() < MAX_FREE_SLOTS {
                self.free.insert(due);
                return;
            }
            // Past the bound the token goes back to the count (x/time/rate's behaviour before
            // its fix): a later request may then be due beside a waiting one, but a storm of
            // dropped waits never stalls the bucket (rtcl3).
            let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
            self.tokens =
                ((self.tokens + elapsed * self.qps).min(self.burst) + 1.0).min(self.burst);
            self.refilled = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = ((self.tokens + elapsed * self.qps).min(self.burst) + 1.0).min(self.burst);
        self.refilled = now;
        // The last reservation is gone: the one before it is the last now.
        let interval = Duration::try_from_secs_f64(1.0 / self.qps).unwrap_or(Duration::MAX);
        self.last_due = due.checked_sub(interval).unwrap_or(now).max(now);
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

    /// Cancelling an early reservation while a later one waits must not give back the token
    /// the later one was counted against (x/time/rate restores only what is not owed):
    /// else a new reservation is due at the same instant as the waiting one, two requests
    /// at once with a burst of 1.
    #[tokio::test(start_paused = true)]
    async fn cancelling_an_early_reservation_does_not_double_book_a_token() {
        let mut b = TokenBucket::new(1.0, 1);
        assert_eq!(b.reserve(None), Ok(Duration::ZERO));
        let (first, first_due) = b.reserve_due(None).unwrap();
        let second = b.reserve(None).unwrap();
        assert_eq!(
            (first, second),
            (Duration::from_secs(1), Duration::from_secs(2))
        );
        b.cancel(first_due);
        // The freed slot (1 s), not the waiting one's instant (2 s).
        assert_eq!(b.reserve_due(None), Ok((first, first_due)));
        // Then the count's next token, after the waiting one's.
        assert_eq!(b.reserve(None), Ok(Duration::from_secs(3)));
        // A free slot whose time passed unused is dropped.
        let (_, d4) = b.reserve_due(None).unwrap();
        assert_eq!(b.reserve(None), Ok(Duration::from_secs(5)));
        b.cancel(d4);
        tokio::time::advance(Duration::from_millis(4500)).await;
        assert_eq!(b.reserve(None), Ok(Duration::from_millis(1500)));
    }
}
