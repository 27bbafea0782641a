//! client-go's `EventCorrelator` (`tools/record/events_cache.go`) for the [`Recorder`]
//! (super::Recorder): what one event becomes — a new Event, a `count` raised on an Event
//! already written, or nothing (the spam filter).
//!
//! Invariants:
//! - **aggregation**: events about one object with the same type, reason and action but
//!   different messages are *similar*; once [`MAX_SIMILAR`] distinct messages were seen within
//!   [`SIMILAR_WINDOW`] of each other, further ones go to one Event whose message is
//!   `(combined from similar events): <latest message>` and whose count is raised, instead of
//!   one Event per message (client-go's `EventAggregator`, 10 in 10 minutes);
//! - **series**: the same event again (same object, type, reason, action and message, or the
//!   same combined one) raises the `count` and `lastTimestamp` of the Event written for it
//!   (client-go's `eventLogger`);
//! - **spam filter**: every write about one object (creates and count updates alike) takes a
//!   token of that object's bucket, [`SPAM_BURST`] then one per [`SPAM_INTERVAL`]; without a
//!   token the event is not written (client-go's `EventSourceObjectSpamFilter`, 25 then one
//!   per 5 minutes);
//! - memory is bounded: each of the three caches keeps at most [`MAX_SERIES`](super::MAX_SERIES)
//!   entries, the least recently used forgotten first (a lookup refreshes), each key once
//!   (client-go's LRUs of 4096), a group of similar events holds at most [`MAX_SIMILAR`]
//!   messages, and every note is cut to 1 KiB before it is queued.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use listwatch_runtime::TokenBucket;
use tokio::time::Instant;

use super::{EventData, MAX_SERIES};

/// Distinct messages of similar events after which they are combined into one Event.
pub const MAX_SIMILAR: usize = 10;
/// How long similar events are remembered as a group after the last of them.
pub const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
/// Writes about one object let through at once by the spam filter.
pub const SPAM_BURST: u32 = 25;
/// Then one write about that object per this long.
pub const SPAM_INTERVAL: Duration = Duration::from_secs(300);

/// The prefix of a combined Event's message (client-go's wording).
pub(super) const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// A map of at most [`MAX_SERIES`] entries, least recently used forgotten first (client-go's
/// LRUs): every lookup ([`get_mut`](Self::get_mut), [`entry`](Self::entry)) and insert
/// refreshes its key, so a key in use (a hot object's spam bucket, a series still firing)
/// is never the one evicted. The order holds each key once, under its last use's stamp.
pub(super) struct Bounded<K, V> {
    map: HashMap<K, (V, u64)>,
    /// Keys by the stamp of their last use; the first is the least recently used.
    order: BTreeMap<u64, K>,
    /// The next use's stamp.
    clock: u64,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }
}

impl<K: Clone + Eq + Hash, V> Bounded<K, V> {
    /// Moves `key` (present) to the most recently used end.
    fn touch(&mut self, key: &K) {
        let stamp = self.clock;
        self.clock += 1;
        if let Some((_, s)) = self.map.get_mut(key) {
            self.order.remove(s);
            *s = stamp;
            self.order.insert(stamp, key.clone());
        }
    }

    /// The value of `key`, refreshed as the most recently used.
    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.touch(key);
        self.map.get_mut(key).map(|(v, _)| v)
    }

    /// Inserts or replaces `key` as the most recently used; a new key past the bound
    /// forgets the least recently used.
    pub(super) fn insert(&mut self, key: K, value: V) {
        if let Some((v, _)) = self.map.get_mut(&key) {
            *v = value;
            self.touch(&key);
            return;
        }
        while self.map.len() >= MAX_SERIES {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&old);
        }
        let stamp = self.clock;
        self.clock += 1;
        self.order.insert(stamp, key.clone());
        self.map.insert(key, (value, stamp));
    }

    /// The entry of `key` (refreshed), made by `new` when absent.
    pub(super) fn entry(&mut self, key: &K, new: impl FnOnce() -> V) -> &mut V {
        if self.map.contains_key(key) {
            self.touch(key);
        } else {
            self.insert(key.clone(), new());
        }
        self.map
            .get_mut(key)
            .map(|(v, _)| v)
            .unwrap_or_else(|| unreachable!("inserted just above"))
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub(super) fn order_len(&self) -> usize {
        self.order.len()
    }
}

/// Similar events seen together.
struct Similar {
    messages: HashSet<String>,
    last: Instant,
}

/// The Event written for a series.
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) count: i32,
}

/// What to do with one event.
#[derive(Debug)]
pub(super) enum Decision {
    /// Create a new Event with this message; remember it under `series`.
    Create {
        series: String,
        message: Option<String>,
    },
    /// Raise the count of the Event already written for `series`.
    Update {
        series: String,
        written: Written,
        message: Option<String>,
    },
    /// The spam filter holds it back.
    Filtered,
}

#[derive(Default)]
pub(super) struct Correlator {
    similar: Bounded<String, Similar>,
    series: Bounded<String, Written>,
    spam: Bounded<String, TokenBucket>,
}

impl Correlator {
    /// Decides what `event` about the object `object` (its uid, or kind/namespace/name)
    /// becomes.
    pub(super) fn decide(&mut self, object: &str, event: &EventData) -> Decision {
        let now = Instant::now();
        let group = format!(
            "{object}\u{0}{}\u{0}{}\u{0}{}",
            event.type_.as_str(),
            event.reason,
            event.action
        );
        let note = event.note.clone().unwrap_or_default();
        let similar = self.similar.entry(&group, || Similar {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(similar.last) > SIMILAR_WINDOW {
            similar.messages.clear();
        }
        similar.last = now;
        if similar.messages.len() < MAX_SIMILAR {
            similar.messages.insert(note.clone());
        }
        let (series, message) = if similar.messages.len() < MAX_SIMILAR {
            (format!("{group}\u{0}{note}"), event.note.clone())
        } else {
            (group, Some(format!("{COMBINED_PREFIX}{note}")))
        };
        let bucket = self.spam.entry(&object.to_owned(), || {
            TokenBucket::new(1.0 / SPAM_INTERVAL.as_secs_f64(), SPAM_BURST)
        });
        if bucket.reserve(Some(Duration::ZERO)).is_err() {
            return Decision::Filtered;
        }
        match self.series.get_mut(&series) {
            Some(written) => Decision::Update {
                written: written.clone(),
                series,
                message,
            },
            None => Decision::Create { series, message },
        }
    }

    /// Remembers the Event written for `series`.
    pub(super) fn written(&mut self, series: String, written: Written) {
        self.series.insert(series, written);
    }

    #[cfg(test)]
    pub(super) fn series_len(&self) -> usize {
        self.series.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;

    fn failed(message: &str) -> EventData {
        EventData {
            type_: EventType::Warning,
            reason: "ReconcileFailed".into(),
            action: "Reconcile".into(),
            note: Some(message.into()),
        }
    }

    /// Plays `n` events through the correlator as the recorder does (a create is
    /// remembered, an update raises the count); returns (creates, updates, filtered).
    fn play(
        c: &mut Correlator,
        object: &str,
        events: impl Iterator<Item = EventData>,
    ) -> (u32, u32, u32) {
        let (mut creates, mut updates, mut filtered) = (0, 0, 0);
        for e in events {
            match c.decide(object, &e) {
                Decision::Create { series, .. } => {
                    creates += 1;
                    let name = format!("e{creates}");
                    c.written(
                        series,
                        Written {
                            namespace: "ns".into(),
                            name,
                            count: 1,
                        },
                    );
                }
                Decision::Update {
                    series,
                    mut written,
                    ..
                } => {
                    updates += 1;
                    written.count += 1;
                    c.written(series, written);
                }
                Decision::Filtered => filtered += 1,
            }
        }
        (creates, updates, filtered)
    }

    #[tokio::test(start_paused = true)]
    async fn similar_events_combine_after_ten_messages_and_the_spam_filter_holds_past_25() {
        let mut c = Correlator::default();
        // 9 distinct messages: 9 Events; the 10th and later: one combined Event, raised.
        let (creates, updates, filtered) = play(
            &mut c,
            "u1",
            (0..50).map(|i| failed(&format!("conflict at {i}"))),
        );
        assert_eq!((creates, updates, filtered), (10, 15, 25));
        match c.decide("u2", &failed("x")) {
            Decision::Create { message, .. } => assert_eq!(message.as_deref(), Some("x")),
            d => panic!("another object is its own: {d:?}"),
        }
        // The spam filter lets one more through every 5 minutes.
        tokio::time::advance(SPAM_INTERVAL).await;
        match c.decide("u1", &failed("later")) {
            Decision::Update { message, .. } => assert_eq!(
                message.as_deref(),
                Some("(combined from similar events): later")
            ),
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            c.decide("u1", &failed("later")),
            Decision::Filtered
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_event_is_one_series_and_the_group_resets_after_its_window() {
        let mut c = Correlator::default();
        let (creates, updates, _) = play(&mut c, "u1", (0..5).map(|_| failed("same")));
        assert_eq!((creates, updates), (1, 4));
        play(&mut c, "u1", (0..8).map(|i| failed(&format!("m{i}"))));
        // Ten minutes later the group starts over: a new message is its own Event again.
        tokio::time::advance(SIMILAR_WINDOW + Duration::from_secs(1)).await;
        let (creates, _, _) = play(&mut c, "u1", (0..2).map(|i| failed(&format!("n{i}"))));
        assert_eq!(creates, 2);
    }

    #[test]
    fn caches_are_bounded_and_hold_each_key_once() {
        let mut b: Bounded<u32, u32> = Bounded::default();
        for i in 0..(MAX_SERIES as u32 + 10) {
            b.insert(i, i);
            b.insert(i, i + 1);
        }
        assert_eq!(b.len(), MAX_SERIES);
        assert_eq!(
            b.order_len(),
            MAX_SERIES,
            "an update repeated its key in the order"
        );
        assert!(b.get_mut(&0).is_none() && b.get_mut(&(MAX_SERIES as u32 + 9)).is_some());
        let mut c = Correlator::default();
        for i in 0..(MAX_SERIES + 5) {
            play(&mut c, &format!("o{i}"), std::iter::once(failed("x")));
        }
        assert_eq!(c.series_len(), MAX_SERIES);
    }

    /// A key in use is not the one evicted (LRU, as client-go's caches): a hot object's
    /// spam bucket survives thousands of other objects' events.
    #[test]
    fn a_lookup_keeps_a_key_from_being_evicted() {
        let mut b: Bounded<u32, u32> = Bounded::default();
        b.insert(0, 0);
        for i in 1..(MAX_SERIES as u32 * 2) {
            b.insert(i, i);
            if i % 100 == 0 {
                assert!(b.get_mut(&0).is_some(), "key 0 evicted after {i} inserts");
            }
        }
        assert_eq!(b.len(), MAX_SERIES);
        assert_eq!(b.order_len(), MAX_SERIES);
        assert!(
            b.get_mut(&1).is_none(),
            "the least recently used went first"
        );
    }
}
