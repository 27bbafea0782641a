//! Watch slots ([`WatchLimits`], [`WatchSlot`]): open watches counted in total and per
//! client, with the fair share that keeps a few clients from taking every slot.
//!
//! Invariants: a watch is never queued (over a limit it is refused at once); a slot is
//! freed exactly once, by [`WatchSlot`]'s `Drop`; the count holds an entry only for a
//! client with an open watch, so it is bounded by the slots, not by the clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{ClientKey, Rejection, lock};
use crate::metrics::Metrics;

#[derive(Default)]
pub(super) struct WatchCount {
    /// Watches open, over every client.
    pub(super) open: usize,
    /// Watches open per client; a client with none has no entry.
    pub(super) by_client: HashMap<ClientKey, usize>,
}

/// Open watches from which a client's share of the slots is limited: half of them.
pub fn fair_share_threshold(total: usize) -> usize {
    total / 2
}

/// Open watches, in total and per client (0: no limit). Under pressure — once
/// [`fair_share_threshold`] of the slots are taken — a client may open another watch only
/// while it holds no more watches than there are free slots: a client holding many is
/// refused long before the pool is spent, and one holding few still finds a slot. One
/// client alone can take at most about half of the slots past the threshold; each client
/// that comes later, at most about half of what is still free, so the last slots always go
/// to clients with the fewest watches (max-min fairness, approximately, without queues).
/// Like the per-client cap, the share applies only with a per-client limit set (a
/// `per_client` of 0 says one client may stand for many, as a load generator does).
pub struct WatchLimits {
    total: usize,
    per_client: usize,
    pub(super) count: Mutex<WatchCount>,
    metrics: Metrics,
}

impl WatchLimits {
    /// `total` slots, `per_client` for one client (0: no limit), counting refusals in
    /// `metrics`.
    pub fn new(total: usize, per_client: usize, metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_client,
            count: Mutex::new(WatchCount::default()),
            metrics,
        })
    }

    /// A slot for a new watch of `key`, or why not.
    pub fn try_open(self: &Arc<Self>, key: &ClientKey) -> Result<WatchSlot, Rejection> {
        if self.total == 0 && self.per_client == 0 {
            return Ok(WatchSlot {
                limits: None,
                key: key.clone(),
            });
        }
        let mut c = lock(&self.count);
        let mine = c.by_client.get(key).copied().unwrap_or(0);
        let refused = if self.total > 0 && c.open >= self.total {
            Some(Rejection::ConcurrencyLimit)
        } else if self.per_client > 0 && mine >= self.per_client {
            Some(Rejection::ClientConcurrencyLimit)
        } else if self.total > 0
            && self.per_client > 0
            && c.open >= fair_share_threshold(self.total)
            && mine > self.total - c.open
        {
            Some(Rejection::FairShare)
        } else {
            None
        };
        if let Some(why) = refused {
            drop(c);
            self.metrics.rejected("watch");
            self.metrics.flowcontrol_rejected("watch", why.as_str());
            return Err(why);
        }
        c.open += 1;
        *c.by_client.entry(key.clone()).or_default() += 1;
        Ok(WatchSlot {
            limits: Some(Arc::clone(self)),
            key: key.clone(),
        })
    }
}

/// An open watch's slot; dropping it frees the slot.
pub struct WatchSlot {
    limits: Option<Arc<WatchLimits>>,
    key: ClientKey,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let Some(limits) = &self.limits else { return };
        let mut c = lock(&limits.count);
        c.open = c.open.saturating_sub(1);
        if let Some(n) = c.by_client.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&self.key);
            }
        }
    }
}
