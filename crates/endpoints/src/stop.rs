//! Shutdown as an open watch observes it: a flag read without a lock, and one waker per
//! watch, registered with the signal once when the watch starts (not per frame), which
//! shutdown wakes.
//!
//! Invariants: per event a watch reads the flag (a cache line written once, at shutdown)
//! and registers its waker in its own [`AtomicWaker`]; the signal's lock is taken when a
//! watch starts and ends and once at shutdown, never per frame. A watch that starts after
//! shutdown sees the flag at its first poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Context;

use futures::task::AtomicWaker;

/// Shutdown, for every open watch.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stopped: AtomicBool,
    next: AtomicU64,
    listeners: Mutex<HashMap<u64, Arc<AtomicWaker>>>,
}

impl StopSignal {
    /// Stops every watch, now and later (idempotent).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let wakers: Vec<Arc<AtomicWaker>> = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for w in wakers {
            w.wake();
        }
    }

    /// A listener for one watch; it unregisters when dropped.
    pub(crate) fn listen(self: &Arc<Self>) -> StopListener {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let waker = Arc::new(AtomicWaker::new());
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(&waker));
        StopListener {
            signal: Arc::clone(self),
            id,
            waker,
        }
    }

    /// Watches listening (tests).
    #[cfg(test)]
    pub(crate) fn listeners(&self) -> usize {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// One watch's view of the [`StopSignal`].
#[derive(Debug)]
pub(crate) struct StopListener {
    signal: Arc<StopSignal>,
    id: u64,
    waker: Arc<AtomicWaker>,
}

impl StopListener {
    /// Whether shutdown has begun; if not, the task of `cx` is woken when it does.
    pub(crate) fn poll_stopped(&self, cx: &mut Context<'_>) -> bool {
        if self.signal.stopped.load(Ordering::SeqCst) {
            return true;
        }
        self.waker.register(cx.waker());
        // Stopped between the check and the registration: the wake may have been missed.
        self.signal.stopped.load(Ordering::SeqCst)
    }
}

impl Drop for StopListener {
    fn drop(&mut self) {
        self.signal
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::task::Poll;

    #[tokio::test]
    async fn stop_wakes_a_waiting_watch_and_reaches_later_ones() {
        let signal = Arc::new(StopSignal::default());
        let l = signal.listen();
        let waiting = tokio::spawn(async move {
            poll_fn(|cx| {
                if l.poll_stopped(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(signal.listeners(), 1);
        signal.stop();
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(signal.listeners(), 0, "a finished watch unregisters");
        let late = signal.listen();
        assert!(late.poll_stopped(&mut Context::from_waker(futures::task::noop_waker_ref())));
    }
}
