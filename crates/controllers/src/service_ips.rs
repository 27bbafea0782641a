//! The observer of the Service allocator (`listwatch_registry::service_alloc`): feeds it
//! every stored Service (so allocations are recomputed at start and confirmed as writes
//! land), releases what deleted Services held, and runs its repair (allocations of writes
//! that never got stored) every [`REPAIR_EVERY`]. Runs on every replica, not as a singleton:
//! each replica's allocator is its own memory.
//!
//! Invariant: the allocator is marked synced only once the informer's first list has been
//! fed to it, so no address a stored Service holds is handed out at start.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use listwatch_endpoints::Resource;
use listwatch_registry::service_alloc::ServiceAllocator;
use listwatch_runtime::Delta;

/// How often leaked allocations are looked for.
pub const REPAIR_EVERY: Duration = Duration::from_secs(10);

/// Starts the observer over the `services` resource; ends when the task is aborted. The
/// receiver turns `true` once the allocator is synced ([`ServiceAllocator::set_synced`]),
/// so that readiness waits for exactly that, without polling.
pub fn spawn(
    services: &Resource,
    alloc: Arc<ServiceAllocator>,
) -> Option<(
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Receiver<bool>,
)> {
    let informer = crate::local::informer(services)?;
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let observe = |d: Delta<listwatch_api::Object>| match d {
            Delta::Added { object, .. }
            | Delta::Updated { new: object, .. }
            | Delta::Sync(object) => {
                if let Ok(v) = object.to_value() {
                    alloc.observe(&v);
                }
            }
            Delta::Deleted { object, .. } => {
                if let Some(uid) = object.uid() {
                    alloc.forget(uid);
                }
            }
        };
        // The first list, then a subscription starting from it: once what it starts with
        // is consumed (without waiting for more), every stored Service has been fed. A
        // first list that fails fatally leaves the settle loop below to find the sync.
        let first = informer.wait_until_synced().await;
        let mut sub = informer.subscribe();
        if first.is_ok() {
            while let Some(Some(d)) = sub.next().now_or_never() {
                observe(d);
            }
        }
        let mark = |sub: &listwatch_runtime::Subscription<_>| {
            if !alloc.is_synced() && sub.has_synced() {
                alloc.set_synced();
                synced_tx.send_replace(true);
                tracing::debug!("service allocator synced with the stored Services");
            }
        };
        mark(&sub);
        let mut repair = tokio::time::interval(REPAIR_EVERY);
        repair.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Until synced, look again soon: the flag turns while the stream is polled,
            // also when no Service exists (no delta comes).
            let settle = tokio::time::sleep(Duration::from_millis(20));
            tokio::select! {
                d = sub.next() => match d {
                    Some(d) => observe(d),
                    None => return,
                },
                _ = repair.tick() => {
                    let n = alloc.repair();
                    if n > 0 {
                        tracing::info!(released = n, "service allocations never stored were released");
                    }
                }
                () = settle, if !alloc.is_synced() => {}
            }
            mark(&sub);
        }
    });
    Some((task, synced_rx))
}
