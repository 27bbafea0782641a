//! A deterministic model check of a watcher's buffer and its close paths: every interleaving
//! of a producer (the dispatcher), a consumer (the watcher's stream) and a closer (a relist, a
//! shutdown, or the stream going away) is run step by step, and each end state is checked.
//!
//! Each queue operation is atomic under the queue's lock, so interleaving whole operations
//! covers the queue's logical states. What the real scheduler adds is parking: a task that
//! got `Pending` runs again only once its waker is woken. The model runs a parked actor only
//! after its waker fired, so a lost wake-up shows as an end state where an actor is parked
//! forever with something to do.
//!
//! Checked at every end state:
//! - the consumer received exactly the items whose push succeeded, in push order (nothing
//!   lost, nothing twice), then the end (`None`) — never the end while items remain;
//! - no push succeeded after the state left `Active`;
//! - the final state is the first transition's target (the first close wins);
//! - no actor is left parked that has something to do (no lost wake-up).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use futures::task::{ArcWake, waker};

use crate::event::Item;
use crate::watcher::queue::{PushError, Queue};
use crate::watcher::state::WatcherState;

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl ArcWake for Flag {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Stall-and-resume on: a full buffer detaches the watcher (`try_push`, then `close`).
    StallResume,
    /// Stall-and-resume off: a full buffer makes the dispatcher wait for room (`poll_push`).
    Blocking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Actor {
    Producer,
    Consumer,
    Closer,
}

struct Sim {
    queue: Queue,
    mode: Mode,
    items: u64,
    close_to: WatcherState,
    // Producer.
    next: u64,
    slot: Option<Item>,
    producer_parked: bool,
    producer_flag: Arc<Flag>,
    producer_waker: Waker,
    pushed: Vec<u64>,
    pushed_after_close: bool,
    // Consumer.
    consumer_parked: bool,
    consumer_flag: Arc<Flag>,
    consumer_waker: Waker,
    received: Vec<u64>,
    ended: bool,
    // Closer.
    closed: bool,
    /// The target of the first transition that took effect.
    first_transition: Option<WatcherState>,
}

impl Sim {
    fn new(mode: Mode, capacity: usize, items: u64, close_to: WatcherState) -> Self {
        let producer_flag = Arc::new(Flag::default());
        let consumer_flag = Arc::new(Flag::default());
        Self {
            queue: Queue::new(capacity),
            mode,
            items,
            close_to,
            next: 0,
            slot: None,
            producer_parked: false,
            producer_waker: waker(Arc::clone(&producer_flag)),
            producer_flag,
            pushed: Vec::new(),
            pushed_after_close: false,
            consumer_parked: false,
            consumer_waker: waker(Arc::clone(&consumer_flag)),
            consumer_flag,
            received: Vec::new(),
            ended: false,
            closed: false,
            first_transition: None,
        }
    }

    fn producer_done(&self) -> bool {
        self.next >= self.items && self.slot.is_none()
    }

    fn runnable(&self) -> Vec<Actor> {
        let mut r = Vec::new();
        if !self.producer_done()
            && (!self.producer_parked || self.producer_flag.0.load(Ordering::SeqCst))
        {
            r.push(Actor::Producer);
        }
        if !self.ended && (!self.consumer_parked || self.consumer_flag.0.load(Ordering::SeqCst)) {
            r.push(Actor::Consumer);
        }
        if !self.closed {
            r.push(Actor::Closer);
        }
        r
    }

    fn transition(&mut self, to: WatcherState) {
        if self.queue.close(to) {
            assert!(
                self.first_transition.is_none(),
                "a second transition took effect"
            );
            self.first_transition = Some(to);
        }
    }

    fn record_push(&mut self, rv: u64) {
        if self.first_transition.is_some() {
            self.pushed_after_close = true;
        }
        self.pushed.push(rv);
    }

    fn step(&mut self, actor: Actor) {
        match actor {
            Actor::Producer => {
                self.producer_flag.0.store(false, Ordering::SeqCst);
                self.producer_parked = false;
                match self.mode {
                    Mode::StallResume => {
                        let rv = self.next;
                        self.next += 1;
                        match self.queue.try_push(Item::Bookmark(rv)) {
                            Ok(()) => self.record_push(rv),
                            // The dispatcher detaches the slow watcher; later events are
                            // refused (it catches up from the window).
                            Err(PushError::Full(_)) => self.transition(WatcherState::Detached),
                            Err(PushError::Closed) => {}
                        }
                    }
                    Mode::Blocking => {
                        if self.slot.is_none() {
                            self.slot = Some(Item::Bookmark(self.next));
                            self.next += 1;
                        }
                        let rv = match &self.slot {
                            Some(Item::Bookmark(rv)) => *rv,
                            _ => unreachable!("the model only queues bookmarks"),
                        };
                        let mut cx = Context::from_waker(&self.producer_waker);
                        match self.queue.poll_push(&mut self.slot, &mut cx) {
                            Poll::Ready(Ok(())) => self.record_push(rv),
                            // The watcher went away: the event is dropped for it.
                            Poll::Ready(Err(())) => self.slot = None,
                            Poll::Pending => self.producer_parked = true,
                        }
                    }
                }
            }
            Actor::Consumer => {
                self.consumer_flag.0.store(false, Ordering::SeqCst);
                self.consumer_parked = false;
                let mut cx = Context::from_waker(&self.consumer_waker);
                match self.queue.poll_pop(&mut cx) {
                    Poll::Ready(Some(Item::Bookmark(rv))) => self.received.push(rv),
                    Poll::Ready(Some(Item::Event(..))) => unreachable!("only bookmarks queued"),
                    Poll::Ready(None) => self.ended = true,
                    Poll::Pending => self.consumer_parked = true,
                }
            }
            Actor::Closer => {
                self.closed = true;
                self.transition(self.close_to);
            }
        }
    }

    /// Checks an end state (no actor runnable).
    fn check(&self, schedule: &[Actor]) {
        let at = || {
            format!(
                "mode {:?}, close to {:?}, schedule {schedule:?}",
                self.mode, self.close_to
            )
        };
        assert!(
            !self.pushed_after_close,
            "a push succeeded after the state left Active; {}",
            at()
        );
        assert!(
            self.ended,
            "the consumer is parked forever (lost wake-up or no end); received {:?} of {:?}; {}",
            self.received,
            self.pushed,
            at()
        );
        assert_eq!(
            self.received,
            self.pushed,
            "delivered exactly the pushed items, in order; {}",
            at()
        );
        assert!(
            !self.producer_parked || self.producer_done(),
            "the producer is parked forever; {}",
            at()
        );
        let first = self.first_transition.unwrap_or(WatcherState::Active);
        assert_ne!(
            first,
            WatcherState::Active,
            "the closer always runs; {}",
            at()
        );
        assert_eq!(
            self.queue.status(),
            first,
            "the first transition wins; {}",
            at()
        );
    }
}

/// Runs every schedule from `prefix` to its end; returns how many end states were checked.
fn explore(
    build: &dyn Fn() -> Sim,
    prefix: &mut Vec<Actor>,
    ends: &mut usize,
    kinds: &mut [bool; 3],
) {
    let mut sim = build();
    for &a in prefix.iter() {
        sim.step(a);
    }
    let runnable = sim.runnable();
    if runnable.is_empty() {
        sim.check(prefix);
        *ends += 1;
        let kind = match (sim.first_transition, sim.pushed.len() as u64 == sim.items) {
            (Some(WatcherState::Detached), _) => 0,
            (_, true) => 1,
            _ => 2,
        };
        kinds[kind] = true;
        return;
    }
    assert!(prefix.len() < 64, "a schedule does not end: {prefix:?}");
    for a in runnable {
        prefix.push(a);
        explore(build, prefix, ends, kinds);
        prefix.pop();
    }
}

#[test]
fn every_interleaving_delivers_the_pushed_items_once_in_order_then_ends() {
    for mode in [Mode::StallResume, Mode::Blocking] {
        for close_to in [WatcherState::Closed, WatcherState::Reset] {
            for capacity in [1, 2] {
                let items = 3;
                let build = || Sim::new(mode, capacity, items, close_to);
                let (mut ends, mut kinds) = (0, [false; 3]);
                explore(&build, &mut Vec::new(), &mut ends, &mut kinds);
                assert!(
                    ends > 100,
                    "{mode:?}/{close_to:?}/{capacity}: only {ends} schedules"
                );
                // The branches the model claims to reach: every item delivered before the
                // close, and some refused after it; with stall-and-resume, a detachment.
                assert!(
                    kinds[1] && kinds[2],
                    "{mode:?}/{close_to:?}/{capacity}: {kinds:?}"
                );
                assert_eq!(
                    kinds[0],
                    mode == Mode::StallResume,
                    "{mode:?}/{close_to:?}/{capacity}: detached only with stall-and-resume"
                );
            }
        }
    }
}
