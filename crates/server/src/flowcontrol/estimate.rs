//! Work estimates: how many seats of its level a request takes — upstream's APF list work
//! estimator (`k8s.io/apiserver/pkg/util/flowcontrol/request/list_work_estimator.go`) with
//! `SizeBasedListCostEstimate` (beta and on by default since Kubernetes 1.34): a list costs
//! one seat per [`BYTES_PER_SEAT`] of the objects it holds in memory at once.
//!
//! What it owns: the formula, as a pure function of what the caller knows of the list
//! ([`ListWork`]: the resource's object count and average size from the cache, the list's
//! limit and selectors, whether it is served from the cache or read whole from the backend)
//! and of the level's size ([`max_width`]). The caller (the endpoints) gathers the inputs;
//! the level ([`super::Level`]) holds the seats.
//!
//! The rules, upstream's:
//! - a GET, a write, a watch without initial events: one seat;
//! - a list naming one object (`fieldSelector=metadata.name=…`): one object;
//! - a list served from the cache holds `min(limit, count)` objects, but is streamed, so at
//!   most [`CACHE_STREAMING_MAX_BYTES`] count (at most 10 seats); a watch-list
//!   (`sendInitialEvents=true`) is estimated as such a list;
//! - a list read whole from the backend holds `min(limit, count)` objects, or with a label or
//!   field selector `max(limit, count / 2)` (the backend reads past what the selector drops),
//!   with no streaming cap: up to [`MAX_LIST_SEATS`];
//! - unknown statistics (no cache, or not ready): one seat (upstream's answer for a resource
//!   its object count tracker does not know); an unknown average size with objects present
//!   is taken as the largest object, [`MAX_OBJECT_BYTES`];
//! - never more than the level's [`max_width`], never less than one.
//!
//! Invariant: the result is in `1..=MAX_LIST_SEATS`, whatever the inputs (saturating
//! arithmetic; no input can overflow or divide by zero).

/// Bytes of a list's objects held at once that cost one seat (upstream's `bytesPerSeat`).
pub const BYTES_PER_SEAT: u64 = 100_000;

/// What a list streamed from the cache is taken to hold at once, at most (upstream's
/// `cacheWithStreamingMaxMemoryUsage`): 10 seats.
pub const CACHE_STREAMING_MAX_BYTES: u64 = 1_000_000;

/// The largest object (upstream's `maxObjectSize`, etcd's recommended request limit).
pub const MAX_OBJECT_BYTES: u64 = 1_500_000;

/// The most seats a list may take (upstream's `MaximumListSeatsLimit` with
/// `SizeBasedListCostEstimate`); a level's [`max_width`] may be lower.
pub const MAX_LIST_SEATS: usize = 100;

/// What is known of a list when it asks for seats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListWork {
    /// The resource's objects (every namespace) and their average encoded size in bytes
    /// (0: unknown), from the cache; `None` when nothing is known.
    pub stats: Option<(u64, u64)>,
    /// `limit` (`None` or 0: none).
    pub limit: Option<u64>,
    /// The list names one object (`fieldSelector=metadata.name=…`).
    pub single: bool,
    /// A label or field selector is set.
    pub selector: bool,
    /// Served from the cache (streamed) rather than read whole from the backend; a
    /// watch-list always is.
    pub from_cache: bool,
}

/// The seats a list costs, before the level's cap.
pub fn list_seats(work: &ListWork) -> usize {
    let Some((count, average)) = work.stats else {
        return 1;
    };
    let average = if average == 0 && count != 0 {
        MAX_OBJECT_BYTES
    } else {
        average
    };
    let limited = match work.limit {
        Some(l) if l > 0 && l < count => l,
        _ => count,
    };
    let loaded = if work.single {
        1
    } else if work.from_cache {
        limited
    } else if work.selector {
        limited.max(count / 2)
    } else {
        limited
    };
    let mut bytes = loaded.saturating_mul(average);
    if work.from_cache {
        bytes = bytes.min(CACHE_STREAMING_MAX_BYTES);
    }
    let seats = bytes.div_ceil(BYTES_PER_SEAT);
    usize::try_from(seats)
        .unwrap_or(MAX_LIST_SEATS)
        .clamp(1, MAX_LIST_SEATS)
}

/// The most seats one request may take in a level of `seats` seats: upstream's
/// `max(1, min(ceil(0.15 × concurrency), concurrency / handSize))` with its default hand size
/// of 6 (so 400 seats allow 60, 100 allow 15, fewer than 12 allow 1).
pub fn max_width(seats: usize) -> usize {
    (seats.saturating_mul(15).div_ceil(100))
        .min(seats / 6)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_cache(count: u64, average: u64) -> ListWork {
        ListWork {
            stats: Some((count, average)),
            from_cache: true,
            ..ListWork::default()
        }
    }

    #[test]
    fn a_cached_list_costs_a_seat_per_100_kb_up_to_ten() {
        // 1 000 pods of 4 KB: 4 MB, streamed: capped at 1 MB, 10 seats.
        assert_eq!(list_seats(&from_cache(1_000, 4_000)), 10);
        // 50 objects of 4 KB: 200 KB, 2 seats.
        assert_eq!(list_seats(&from_cache(50, 4_000)), 2);
        // A page of 10 of them: 40 KB, 1 seat.
        let page = ListWork {
            limit: Some(10),
            ..from_cache(1_000, 4_000)
        };
        assert_eq!(list_seats(&page), 1);
        // Empty, or one named object: 1 seat.
        assert_eq!(list_seats(&from_cache(0, 0)), 1);
        let named = ListWork {
            single: true,
            ..from_cache(1_000_000, 4_000)
        };
        assert_eq!(list_seats(&named), 1);
        // One named object of 1 MB costs its size.
        let large = ListWork {
            single: true,
            ..from_cache(10, 1_000_000)
        };
        assert_eq!(list_seats(&large), 10);
    }

    #[test]
    fn a_list_from_the_backend_is_not_capped_by_streaming_and_pays_for_its_selector() {
        let backend = ListWork {
            from_cache: false,
            ..from_cache(1_000, 4_000)
        };
        assert_eq!(list_seats(&backend), 40);
        // A selector reads at least half of the objects, whatever the limit.
        let selected = ListWork {
            limit: Some(10),
            selector: true,
            ..backend
        };
        assert_eq!(list_seats(&selected), 20);
        let paged = ListWork {
            limit: Some(10),
            ..backend
        };
        assert_eq!(list_seats(&paged), 1);
        // Huge: capped at the list maximum.
        let huge = ListWork {
            stats: Some((u64::MAX, u64::MAX)),
            ..backend
        };
        assert_eq!(list_seats(&huge), MAX_LIST_SEATS);
    }

    #[test]
    fn unknown_stats_cost_one_seat_and_an_unknown_size_is_the_largest_object() {
        assert_eq!(list_seats(&ListWork::default()), 1);
        // Three objects of unknown size: 3 × 1.5 MB, streamed: 10 seats.
        assert_eq!(list_seats(&from_cache(3, 0)), 10);
    }

    #[test]
    fn a_levels_cap_follows_upstream() {
        assert_eq!(max_width(400), 60);
        assert_eq!(max_width(100), 15);
        assert_eq!(max_width(20), 3);
        assert_eq!(max_width(11), 1);
        assert_eq!(max_width(1), 1);
        assert_eq!(max_width(0), 1);
        assert!(max_width(usize::MAX) > 1, "no overflow");
    }
}
