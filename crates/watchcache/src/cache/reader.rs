//! [`WatchCacheReader`]: the readers' handle, which takes views and waits for fresh ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use listwatch_api::Object;
use listwatch_storage::{Error, GetOptions, Key, ListOptions, ObjectList, Result, decode_continue};
use tokio::time::Instant;

use crate::config::Config;
use crate::event::Events;

use super::{CacheView, Shared};

/// A cheap, clonable read handle. See the module docs for what it guarantees.
#[derive(Clone)]
pub struct WatchCacheReader {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for WatchCacheReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCacheReader")
            .field("view", &*self.view())
            .finish()
    }
}

/// Decrements the waiter count when a wait ends, however it ends.
struct WaiterGuard<'a>(&'a AtomicUsize);

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WatchCacheReader {
    /// The latest published view (an `Arc` clone under a lock held only for that).
    pub fn view(&self) -> Arc<CacheView> {
        Arc::clone(&self.shared.published.borrow())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The highest resource version the cache has seen.
    pub fn resource_version(&self) -> u64 {
        self.shared.published.borrow().rv
    }

    /// Drops every pinned past state (the next Exact list or continuation at a past version
    /// rebuilds from the window, or is `Expired`). The cacher calls it when its consistency
    /// check finds the cache's state disagreeing with the backend's: a state pinned from a
    /// corrupt cache must not be read again. Pins taken later are kept as usual.
    pub fn drop_snapshots(&self) {
        self.view().pins.clear();
    }

    /// Whether some reader is waiting in [`wait_until_fresh`](Self::wait_until_fresh); the
    /// owner then asks the backend for progress notifications.
    pub fn has_waiters(&self) -> bool {
        self.shared.waiters.load(Ordering::Relaxed) > 0
    }

    /// Resolves as soon as some reader waits in [`wait_until_fresh`](Self::wait_until_fresh)
    /// (at once if one does already), so that the owner asks the backend for progress the
    /// moment a reader needs it, and sleeps otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn waiter_arrived(&self) {
        loop {
            let notified = self.next_first_waiter();
            if self.has_waiters() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves the next time the number of waiters leaves zero. The wait counts from this
    /// call, not from the first poll: create it before doing what it must not miss.
    pub fn next_first_waiter(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.first_waiter.notified()
    }

    /// Waits until the cache has reached `rv` and returns that view; fails with
    /// `TooLargeResourceVersion` when it has not by `deadline` or the configured freshness
    /// timeout (upstream 3 s), whichever comes first. Version 0 returns at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait and leaves nothing behind.
    pub async fn wait_until_fresh(
        &self,
        rv: u64,
        deadline: Option<Instant>,
    ) -> Result<Arc<CacheView>> {
        let view = self.view();
        if view.rv >= rv {
            return Ok(view);
        }
        let timeout = Instant::now() + self.shared.config.freshness_timeout;
        let deadline = deadline.map_or(timeout, |d| d.min(timeout));
        if self.shared.waiters.fetch_add(1, Ordering::Relaxed) == 0 {
            self.shared.first_waiter.notify_waiters();
        }
        let _guard = WaiterGuard(&self.shared.waiters);
        let mut rx = self.shared.published.subscribe();
        let waited = tokio::time::timeout_at(deadline, rx.wait_for(|v| v.rv >= rv)).await;
        match waited {
            Ok(Ok(view)) => Ok(Arc::clone(&view)),
            // The sender lives in `shared`, which we hold: it cannot close.
            Ok(Err(_)) | Err(_) => Err(Error::TooLargeResourceVersion {
                requested: rv,
                current: self.resource_version(),
            }),
        }
    }

    /// Waits, with no time limit, for a view newer than `rv` (a dispatcher's idle wait: it
    /// then takes `events_since(rv)` from the returned view).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait and leaves nothing behind.
    pub async fn wait_for_change(&self, rv: u64) -> Arc<CacheView> {
        let mut rx = self.shared.published.subscribe();
        match rx.wait_for(|v| v.rv > rv).await {
            Ok(view) => Arc::clone(&view),
            // The sender lives in `shared`, which we hold: it cannot close. Should it ever,
            // the latest view is still the right answer for the caller to look at.
            Err(_) => self.view(),
        }
    }

    /// [`CacheView::list`] after waiting until fresh enough for `opts`' version (not for an
    /// unset one: a consistent read waits for the backend's revision, which the caller knows).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let need = match &opts.continue_token {
            Some(token) => decode_continue(token, key.path())?.1,
            None => opts.resource_version.unwrap_or(0),
        };
        self.wait_until_fresh(need, None).await?.list(key, opts)
    }

    /// [`CacheView::get`] after waiting until fresh enough for `opts`' version.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let need = opts.resource_version.unwrap_or(0);
        self.wait_until_fresh(need, None).await?.get(key, opts)
    }

    /// [`CacheView::events_since`] after waiting until the cache has reached `rv`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn events_since(&self, rv: u64) -> Result<Events> {
        self.wait_until_fresh(rv, None).await?.events_since(rv)
    }
}
