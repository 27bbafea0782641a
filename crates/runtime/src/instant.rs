//! Instants computed from durations a caller or a server chose: [`after`] never panics.
//!
//! `Instant + Duration` panics on overflow, and a caller may well ask for
//! `Action::RequeueAfter(Duration::MAX)` ("no need to look again"), a resync period of
//! `Duration::MAX`, or a rate limit whose next token is due in `Duration::MAX`. Every place
//! the runtime (and listwatch-client) turns such a duration into an instant goes through
//! [`after`], which saturates at [`FAR_FUTURE`] from the base (tokio's own cap for its
//! timers is about 30 years as well).
//!
//! Invariant: `after(base, d) >= base`, and `after(base, d) == base + d` whenever
//! `d <= FAR_FUTURE`.

use std::time::Duration;

use tokio::time::Instant;

/// The furthest an instant is put after its base: about 30 years, never reached by a
/// running process, so "that far" means "never".
pub const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `base + d`, at most [`FAR_FUTURE`] after `base`.
pub fn after(base: Instant, d: Duration) -> Instant {
    let d = d.min(FAR_FUTURE);
    // A base so late that 30 years overflow cannot be reached by a process; keep the base
    // rather than panic.
    base.checked_add(d).unwrap_or(base)
}

/// [`after`] from now.
pub fn from_now(d: Duration) -> Instant {
    after(Instant::now(), d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_duration_saturates_instead_of_panicking() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }
}
