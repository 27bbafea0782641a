//! One watcher's buffer: a bounded queue between the dispatcher (the only producer) and the
//! watcher's stream (the only consumer), allocated lazily.
//!
//! It replaces a tokio mpsc channel, which allocates its shared state and a first block of 32
//! slots (about 1 KiB) when it is made, whether or not anything is ever queued. Here a watcher
//! that keeps up holds one item in place and allocates nothing; a backlog of two or more
//! items is allocated when it forms, grows up to the capacity, and is given back once
//! drained.
//!
//! The queue also carries the watcher's state (active, detached, closed, reset): closing it
//! under the same lock as the pushes means that the consumer, once it finds the queue empty
//! and not active, has seen every item that will ever be queued — what a channel's "all
//! senders dropped" said before.
//!
//! Invariants: at most `capacity` items are queued (a push beyond it is refused, and the
//! dispatcher decides what that means); nothing is queued once the state has left
//! [`WatcherState::Active`]; the lock is this watcher's alone, taken for a push, a pop or a state change,
//! never across an `.await`; wakers are woken after the lock is released.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::event::Item;
use crate::watcher::state::WatcherState;

/// Why a push was refused.
#[derive(Debug)]
pub(crate) enum PushError {
    /// The buffer holds `capacity` items; the item comes back.
    Full(Item),
    /// The watcher is no longer active (detached, closed, or its stream is gone).
    Closed,
}

#[derive(Debug)]
struct State {
    /// The oldest item, held in place: a watcher that keeps up never needs `rest`.
    first: Option<Item>,
    /// The items after `first` (allocated only for a backlog).
    rest: VecDeque<Item>,
    capacity: u32,
    status: WatcherState,
    /// Whoever waits: the consumer for an item or the end (the queue is empty), or the
    /// dispatcher for room (the queue is full; only when stall-and-resume is off). Never both,
    /// as the queue cannot be empty and full at once.
    waiter: Option<Waker>,
}

/// A bounded single-producer, single-consumer queue of [`Item`]s with the watcher's state.
#[derive(Debug)]
pub(crate) struct Queue {
    state: Mutex<State>,
}

impl State {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_full(&self) -> bool {
        self.len() >= self.capacity as usize
    }

    fn push(&mut self, item: Item) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(item);
        } else {
            self.rest.push_back(item);
        }
    }

    fn pop(&mut self) -> Option<Item> {
        if let Some(item) = self.first.take() {
            return Some(item);
        }
        let item = self.rest.pop_front()?;
        if self.rest.is_empty() {
            // The backlog is read: give its buffer back.
            self.rest = VecDeque::new();
        }
        Some(item)
    }
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                first: None,
                rest: VecDeque::new(),
                capacity: u32::try_from(capacity).unwrap_or(u32::MAX).max(1),
                status: WatcherState::Active,
                waiter: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent (single operations on the
        // deque and fields), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` if there is room and the watcher is active.
    pub(crate) fn try_push(&self, item: Item) -> Result<(), PushError> {
        let mut s = self.lock();
        if !s.status.is_active() {
            return Err(PushError::Closed);
        }
        if s.is_full() {
            return Err(PushError::Full(item));
        }
        s.push(item);
        let waker = s.waiter.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Queues the item in `slot` once there is room; `Err` (the item stays in `slot`) when
    /// the watcher stops being active first.
    pub(crate) fn poll_push(
        &self,
        slot: &mut Option<Item>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        let mut s = self.lock();
        if !s.status.is_active() {
            return Poll::Ready(Err(()));
        }
        if s.is_full() {
            if !s.waiter.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                s.waiter = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let Some(item) = slot.take() else {
            return Poll::Ready(Ok(()));
        };
        s.push(item);
        let waker = s.waiter.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }

    /// The next item; `Ready(None)` once the queue is empty and the watcher no longer active
    /// (its state then says why).
    pub(crate) fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let mut s = self.lock();
        if let Some(item) = s.pop() {
            let waker = s.waiter.take();
            drop(s);
            if let Some(w) = waker {
                w.wake();
            }
            return Poll::Ready(Some(item));
        }
        if !s.status.is_active() {
            return Poll::Ready(None);
        }
        if !s.waiter.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waiter = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Moves an active watcher to `status` (nothing more is queued; what is queued can still
    /// be read); returns whether it was active.
    pub(crate) fn close(&self, status: WatcherState) -> bool {
        let mut s = self.lock();
        let Some(next) = s.status.leave(status) else {
            return false;
        };
        s.status = next;
        let waker = s.waiter.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// The watcher's state.
    pub(crate) fn status(&self) -> WatcherState {
        self.lock().status
    }

    /// Items queued and the backlog buffer's capacity in items (tests).
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let s = self.lock();
        (s.len(), s.rest.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watcher::state::WatcherState::{Closed, Detached};
    use futures::task::noop_waker_ref;

    fn pop(q: &Queue) -> Poll<Option<Item>> {
        q.poll_pop(&mut Context::from_waker(noop_waker_ref()))
    }

    #[test]
    fn nothing_is_allocated_until_something_is_queued_and_a_drained_backlog_is_released() {
        let q = Queue::new(100);
        assert_eq!(q.sizes(), (0, 0));
        assert!(pop(&q).is_pending());
        for rv in 0..50 {
            q.try_push(Item::Bookmark(rv)).unwrap();
        }
        assert!(q.sizes().1 >= 50);
        for rv in 0..50 {
            let Poll::Ready(Some(Item::Bookmark(got))) = pop(&q) else {
                panic!("item {rv} missing")
            };
            assert_eq!(got, rv, "in order");
        }
        assert_eq!(q.sizes(), (0, 0), "a drained backlog gives its buffer back");
        // One at a time allocates nothing; order holds across the item held in place.
        q.try_push(Item::Bookmark(1)).unwrap();
        assert_eq!(q.sizes(), (1, 0));
        q.try_push(Item::Bookmark(2)).unwrap();
        assert!(matches!(pop(&q), Poll::Ready(Some(Item::Bookmark(1)))));
        q.try_push(Item::Bookmark(3)).unwrap();
        assert!(matches!(pop(&q), Poll::Ready(Some(Item::Bookmark(2)))));
        assert!(matches!(pop(&q), Poll::Ready(Some(Item::Bookmark(3)))));
        assert_eq!(q.sizes(), (0, 0));
    }

    #[test]
    fn a_full_queue_refuses_and_a_closed_one_drains_then_ends() {
        let q = Queue::new(2);
        q.try_push(Item::Bookmark(1)).unwrap();
        q.try_push(Item::Bookmark(2)).unwrap();
        assert!(matches!(
            q.try_push(Item::Bookmark(3)),
            Err(PushError::Full(Item::Bookmark(3)))
        ));
        assert!(q.close(Detached));
        assert!(!q.close(Closed), "closed once");
        assert_eq!(q.status(), Detached);
        assert!(matches!(
            q.try_push(Item::Bookmark(4)),
            Err(PushError::Closed)
        ));
        assert!(matches!(pop(&q), Poll::Ready(Some(Item::Bookmark(1)))));
        assert!(matches!(pop(&q), Poll::Ready(Some(Item::Bookmark(2)))));
        assert!(matches!(pop(&q), Poll::Ready(None)));
    }

    #[tokio::test]
    async fn a_blocked_push_completes_when_the_consumer_makes_room_and_fails_on_close() {
        let q = std::sync::Arc::new(Queue::new(1));
        q.try_push(Item::Bookmark(1)).unwrap();
        let pusher = {
            let q = std::sync::Arc::clone(&q);
            tokio::spawn(async move {
                let mut slot = Some(Item::Bookmark(2));
                std::future::poll_fn(|cx| q.poll_push(&mut slot, cx)).await
            })
        };
        tokio::task::yield_now().await;
        let first = std::future::poll_fn(|cx| q.poll_pop(cx)).await;
        assert!(matches!(first, Some(Item::Bookmark(1))));
        assert_eq!(pusher.await.unwrap(), Ok(()));
        let second = std::future::poll_fn(|cx| q.poll_pop(cx)).await;
        assert!(matches!(second, Some(Item::Bookmark(2))));
        // Blocked again, then the watcher goes away.
        q.try_push(Item::Bookmark(3)).unwrap();
        let pusher = {
            let q = std::sync::Arc::clone(&q);
            tokio::spawn(async move {
                let mut slot = Some(Item::Bookmark(4));
                std::future::poll_fn(|cx| q.poll_push(&mut slot, cx)).await
            })
        };
        tokio::task::yield_now().await;
        q.close(Closed);
        assert_eq!(pusher.await.unwrap(), Err(()));
    }
}
