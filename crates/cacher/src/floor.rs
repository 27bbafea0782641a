//! The floor of a (re)initialization: the lowest resource version that a list answered by the
//! backend handed out while the cache was not ready, so that the cache's new window starts
//! at or below it.
//!
//! While the cache lists (Pending), a page of everything is answered by the backend
//! (KEP-4568), at the backend's revision of that moment. The cache's own list may read a
//! later revision; a window starting there refuses (410) a watch from the version the client
//! was just given, and the client relists after a backoff — on a busy start (the server's own
//! informers, started before etcd), again and again, keeping `/readyz` failing for a minute
//! and more. Upstream's rule is that a watch from a version a list returned is served; so
//! here the cache does not become ready above such a version: the feeder relists at exactly
//! the floor (an Exact read of the backend, then the watch from there fills the window).
//!
//! The same holds across a relist after the storage's watch failed (etcd restarted or lost
//! its quorum): the cache's last version is the floor, so the watchers that relist ended, and
//! the clients of the cache's last lists, resume from their versions instead of a 410 each.
//!
//! Invariant: when the cacher turns Ready with its state at revision `r`, every version a
//! list answered by the backend handed out since the cacher last turned Ready (and, after a
//! failed storage watch, the cache's version before the relist) is ≥ `r`, or
//! below the backend's compaction (the backend refuses a watch from it too), or an Exact
//! relist at it failed. Held by one lock: a list answered by the backend records its version
//! under it only while the cacher is Pending (one that finds the cacher Ready is answered
//! again from the cache), and the feeder checks the floor and turns Ready under it.

/// The lowest version handed out by lists the backend answered while the cache was not
/// ready; `None` when there was none since the cacher last turned Ready.
#[derive(Debug, Default)]
pub(crate) struct Floor(tokio::sync::Mutex<Option<u64>>);

/// The floor's lock, held while a version is recorded or while the cacher turns Ready.
pub(crate) type FloorGuard<'a> = tokio::sync::MutexGuard<'a, Option<u64>>;

impl Floor {
    /// Locks the floor (the only way to read or move it).
    pub(crate) async fn lock(&self) -> FloorGuard<'_> {
        self.0.lock().await
    }
}

/// Records `rv`, handed out by a list the backend answered while the cacher was Pending.
pub(crate) fn record(floor: &mut FloorGuard<'_>, rv: u64) {
    **floor = Some(floor.map_or(rv, |low| low.min(rv)));
}

/// What the feeder does with a complete list at `listed`: `Some(floor)` when a version below
/// it was handed out and can still be read exactly (not below `compacted`, and lower than
/// `tried`, the floor an Exact relist already tried in this pending period, which bounds the
/// relists); `None` when the cache may turn Ready at `listed`.
pub(crate) fn relist_at(
    floor: &FloorGuard<'_>,
    listed: u64,
    compacted: u64,
    tried: Option<u64>,
) -> Option<u64> {
    let low = (**floor)?;
    (low < listed && low >= compacted && tried.is_none_or(|t| low < t)).then_some(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_floor_is_the_lowest_version_and_relists_only_below_the_list_and_above_compaction()
    {
        let floor = Floor::default();
        let mut g = floor.lock().await;
        assert_eq!(relist_at(&g, 10, 0, None), None, "nothing handed out");
        record(&mut g, 7);
        record(&mut g, 9);
        record(&mut g, 5);
        assert_eq!(*g, Some(5));
        assert_eq!(relist_at(&g, 10, 0, None), Some(5));
        assert_eq!(relist_at(&g, 5, 0, None), None, "the list is at the floor");
        assert_eq!(relist_at(&g, 10, 6, None), None, "compacted away");
        assert_eq!(relist_at(&g, 10, 0, Some(5)), None, "tried already");
        assert_eq!(relist_at(&g, 10, 0, Some(6)), Some(5), "lower than tried");
    }
}
