//! The worst case of a relist: every object changed while the watch was down, so the new
//! copy of each is staged until `InitDone` and the peak is the store plus a whole second
//! copy (about 2×). Measured with a counting global allocator, in its own test binary
//! because the allocator's maximum is process-wide. (`relist_memory.rs` is the usual case.)
//!
//! The lister-watcher here generates every page afresh (as a network decode would), so each
//! relist brings a complete new copy of every object; the store must drop the copies of
//! unchanged objects as they arrive instead of building a second map beside the first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cap::Cap;
use futures::StreamExt;
use listwatch_api::status::reason;
use listwatch_api::{Object, SelectableFields, Status};
use listwatch_client::{
    Config, Error, ListRequest, ListerWatcher, Page, WatchRequest, WatchStream, Writer, reflector,
    watcher,
};
use tokio::sync::watch;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

const OBJECTS: usize = 4000;
const PAYLOAD: usize = 1024;
/// Small pages keep the initial list's own transient peak (one decoded page) far below
/// what a relist holding a second copy would reach, so the allocator's all-time maximum
/// measures the relist.
const PAGE: u32 = 50;

/// Serves `OBJECTS` generated objects; `versions[i]` is object i's resource version.
struct Generated {
    versions: Mutex<Vec<u64>>,
    expire: watch::Sender<u64>,
}

impl Generated {
    fn object(i: usize, rv: u64) -> Object {
        let payload = "x".repeat(PAYLOAD);
        Object::from_value(
            serde_json::json!({"kind":"Pod","apiVersion":"v1",
                "metadata":{"name":format!("pod-{i:05}"),"namespace":"ns","resourceVersion":rv.to_string()},
                "spec":{"payload":payload,"rv":rv}}),
            &SelectableFields::none(),
        )
        .unwrap()
    }

    fn list_rv(&self) -> u64 {
        self.versions
            .lock()
            .unwrap()
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
    }
}

/// The lister-watcher handle the reflector owns.
struct Lw(Arc<Generated>);

#[async_trait]
impl ListerWatcher for Lw {
    type Object = Object;

    async fn list(&self, r: &ListRequest) -> Result<Page<Object>, Error> {
        let start: usize = r
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let limit = r.limit.unwrap() as usize;
        let versions = self.0.versions.lock().unwrap().clone();
        let end = (start + limit).min(versions.len());
        Ok(Page {
            items: (start..end)
                .map(|i| Generated::object(i, versions[i]))
                .collect(),
            resource_version: self.0.list_rv(),
            continue_token: (end < versions.len()).then(|| end.to_string()),
        })
    }

    async fn watch(&self, _: &WatchRequest) -> Result<WatchStream<Object>, Error> {
        let mut expire = self.0.expire.subscribe();
        expire.mark_unchanged();
        Ok(futures::stream::once(async move {
            let _ = expire.changed().await;
            Err(Error::Api(Box::new(Status::failure(
                410,
                reason::EXPIRED,
                "too old resource version",
            ))))
        })
        .boxed())
    }
}

#[test]
fn relist_peak_memory_when_everything_changed_is_the_store_plus_one_copy() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let (expire, _) = watch::channel(0);
        let lw = Arc::new(Generated { versions: Mutex::new((1..=OBJECTS as u64).collect()), expire });
        let baseline = ALLOC.allocated();

        let writer = Writer::default();
        let store = writer.store();
        tokio::spawn(reflector(writer, watcher(Lw(Arc::clone(&lw)), Config::default().page_size(PAGE))).for_each(|_| async {}));
        store.wait_until_synced().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let synced = ALLOC.allocated();
        let store_bytes = synced - baseline;
        let initial_peak = ALLOC.max_allocated() - baseline;

        // Every object changes while the watch is down; then it expires.
        {
            let mut v = lw.versions.lock().unwrap();
            let next = OBJECTS as u64 + 1;
            for (i, rv) in v.iter_mut().enumerate() {
                *rv = next + i as u64;
            }
        }
        let want_rv = lw.list_rv();
        lw.expire.send_modify(|e| *e += 1);
        for _ in 0..1000 {
            if store.resource_version() == want_rv {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(store.resource_version(), want_rv, "relist did not complete");
        assert_eq!(store.len(), OBJECTS);
        assert_eq!(store.get_by_name(Some("ns"), "pod-00005").unwrap().resource_version(), OBJECTS as u64 + 6);

        // The allocator's maximum covers the initial list and the relist alike.
        let peak = ALLOC.max_allocated() - baseline;
        let ratio = peak as f64 / store_bytes as f64;
        eprintln!("store {store_bytes} B, initial list peak {initial_peak} B, peak {peak} B, ratio {ratio:.3}");
        // Store + one full copy, plus the page in flight: bounded, never more than that.
        assert!(ratio > 1.5, "everything changed, so a second copy is staged: {ratio:.2}");
        assert!(ratio <= 2.2, "peak {peak} B is {ratio:.2}× the store's {store_bytes} B");
    });
}
