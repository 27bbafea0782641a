//! Keys with a TTL: the queue of deadlines and the reaper task that deletes each key when
//! its deadline passes (as a DELETED event, like an etcd lease expiring).
//!
//! Invariants: the reaper deletes a key only if nothing rewrote it since its TTL was set
//! (the delete is conditional on the revision that set it); it holds the store only while
//! it works, so dropping the last handle of the store ends it; it starts on the first TTL
//! (it needs a runtime), and a TTL earlier than every queued one wakes it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use listwatch_storage::Key;
use tokio::time::Instant;

use crate::{Life, MemStore};

/// Keys with a TTL: (deadline, key) → the revision whose write set it.
pub(crate) type TtlQueue = BTreeMap<(Instant, Arc<str>), u64>;

impl MemStore {
    pub(crate) fn queue_ttl(&self, key: &str, rev: u64, ttl: Duration) {
        let deadline = Instant::now() + ttl;
        if let Ok(mut q) = self.life.ttl.lock() {
            q.insert((deadline, Arc::from(key)), rev);
        }
        self.life.ttl_wake.notify_one();
    }

    pub(crate) fn schedule_ttl(&self, key: &Key, rev: u64, ttl: Duration) {
        self.queue_ttl(key.path(), rev, ttl);
        self.ensure_reaper();
    }

    /// Starts the TTL reaper (needs a runtime: called from the async methods).
    pub(crate) fn ensure_reaper(&self) {
        if self.life.reaper_started.load(Ordering::Acquire)
            || self.life.ttl.lock().map(|q| q.is_empty()).unwrap_or(true)
        {
            return;
        }
        if !self.life.reaper_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(reap(Arc::downgrade(&self.life)));
        }
    }
}

/// Deletes keys whose TTL ran out, as DELETED events, until the store is dropped.
async fn reap(life: Weak<Life>) {
    loop {
        // Hold the store only while working, so dropping the store ends this task.
        let Some(l) = life.upgrade() else { return };
        let store = MemStore { life: l };
        let notify = Arc::clone(&store.life.ttl_wake);
        let wake = notify.notified();
        let next = store
            .life
            .ttl
            .lock()
            .ok()
            .and_then(|q| q.keys().next().map(|(d, _)| *d));
        let now = Instant::now();
        match next {
            Some(d) if d <= now => {
                let due = store.life.ttl.lock().ok().and_then(|mut q| q.pop_first());
                if let Some(((_, path), rev)) = due {
                    // Delete only if nothing rewrote the key since the TTL was set.
                    match store.core().commit(&path, rev, None, None).await {
                        Ok(Ok(_)) => tracing::debug!(key = %path, "ttl expired"),
                        Ok(Err(_)) => {}
                        Err(e) => tracing::warn!(key = %path, error = %e, "ttl expiry failed"),
                    }
                }
            }
            Some(d) => {
                drop(store);
                tokio::select! {
                    () = tokio::time::sleep_until(d) => {}
                    () = wake => {}
                }
            }
            None => {
                drop(store);
                // Re-check now and then so a dropped store ends this task.
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = wake => {}
                }
            }
        }
    }
}
