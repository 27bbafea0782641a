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

use futures::StreamExt;
use listwatch_endpoints::Resource;
use listwatch_registry::service_alloc::ServiceAllocator;
use listwatch_runtime::Delta;

/// How often leaked allocations are looked for.
pub const REPAIR_EVERY: Duration = Duration::from_secs(10);

/// Starts the observer over the `services` resource; ends when the task is aborted.
pub fn spawn(
    services: &Resource,
    alloc: Arc<ServiceAllocator>,
) -> Option<tokio::task::JoinHandle<()>> {
    let informer = crate::local::informer(services)?;
    Some(tokio::spawn(async move {
        let mut sub = informer.subscribe();
        let mut repair = tokio::time::interval(REPAIR_EVERY);
        repair.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Until synced, look again soon: the flag turns while the stream is polled,
            // also when no Service exists (no delta comes).
            let settle = tokio::time::sleep(Duration::from_millis(20));
            tokio::select! {
                d = sub.next() => match d {
                    Some(Delta::Added { object, .. } | Delta::Updated { new: object, .. } | Delta::Sync(object)) => {
                        if let Ok(v) = object.to_value() {
                            alloc.observe(&v);
                        }
                    }
                    Some(Delta::Deleted { object, .. }) => {
                        if let Some(uid) = object.uid() {
                            alloc.forget(uid);
                        }
                    }
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
            if !alloc.is_synced() && sub.has_synced() {
                alloc.set_synced();
                tracing::debug!("service allocator synced with the stored Services");
            }
        }
    }))
}
