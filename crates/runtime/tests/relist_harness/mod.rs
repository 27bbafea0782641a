//! The harness the relist-memory test binaries share: a lister-watcher that generates every
//! page afresh (as a network decode would) and one measured relist, pages of 50
//! (`relist_memory.rs`, `relist_memory_worst.rs`). listwatch-client's relist-memory tests over
//! loopback HTTP (`crates/client/tests/relist_memory_default*.rs`) include this file too, for
//! [`Measured`] and the sizes. Each binary declares its own counting global allocator (its
//! maximum is process-wide) and passes it in.
#![allow(dead_code)]

use std::alloc::System;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cap::Cap;
use futures::StreamExt;
use listwatch_api::status::reason;
use listwatch_api::{Object, SelectableFields, Status};
use listwatch_runtime::{
    Config, Error, ListRequest, ListerWatcher, Page, WatchRequest, WatchStream, Writer, reflector,
    watcher,
};
use tokio::sync::watch;

pub(crate) const OBJECTS: usize = 4000;
pub(crate) const PAYLOAD: usize = 1024;
/// Small pages keep the initial list's own transient peak (one decoded page) far below
/// what a relist holding a second copy would reach, so the allocator's all-time maximum
/// measures the relist.
pub(crate) const PAGE: u32 = 50;

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
            resource_version: self.0.list_rv().to_string(),
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

/// What one relist cost, in bytes of live heap above the baseline before the first list.
pub(crate) struct Measured {
    /// The synced store.
    pub(crate) store_bytes: usize,
    /// The allocator's maximum during the initial list.
    pub(crate) initial_peak: usize,
    /// The allocator's maximum over the initial list and the relist.
    pub(crate) peak: usize,
}

impl Measured {
    /// `peak` as a multiple of the store.
    pub(crate) fn ratio(&self) -> f64 {
        self.peak as f64 / self.store_bytes as f64
    }
}

/// Syncs a reflector over `OBJECTS` objects, changes every `change_every`-th object while
/// the watch is down, expires the watch and waits for the relist to complete (on a paused
/// clock); asserts the store's final state and returns what it cost.
pub(crate) fn measure_relist(alloc: &'static Cap<System>, change_every: usize) -> Measured {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let (expire, _) = watch::channel(0);
        let lw = Arc::new(Generated {
            versions: Mutex::new((1..=OBJECTS as u64).collect()),
            expire,
        });
        let baseline = alloc.allocated();

        let writer = Writer::default();
        let store = writer.store();
        tokio::spawn(
            reflector(
                writer,
                watcher(Lw(Arc::clone(&lw)), Config::default().page_size(PAGE)),
            )
            .for_each(|_| async {}),
        );
        store.wait_until_synced().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let store_bytes = alloc.allocated() - baseline;
        let initial_peak = alloc.max_allocated() - baseline;

        // The changed objects get fresh versions after every existing one; then the watch
        // expires.
        let next = OBJECTS as u64 + 1;
        {
            let mut v = lw.versions.lock().unwrap();
            for (n, i) in (0..OBJECTS).step_by(change_every).enumerate() {
                v[i] = next + n as u64;
            }
        }
        let want_rv = lw.list_rv().to_string();
        lw.expire.send_modify(|e| *e += 1);
        for _ in 0..1000 {
            if store.resource_version() == want_rv {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(store.resource_version(), want_rv, "relist did not complete");
        assert_eq!(store.len(), OBJECTS);
        let want_5 = if 5 % change_every == 0 {
            next + (5 / change_every) as u64
        } else {
            6
        };
        assert_eq!(
            store
                .get_by_name(Some("ns"), "pod-00005")
                .unwrap()
                .resource_version(),
            want_5
        );

        let peak = alloc.max_allocated() - baseline;
        let m = Measured {
            store_bytes,
            initial_peak,
            peak,
        };
        eprintln!(
            "store {store_bytes} B, initial list peak {initial_peak} B, peak {peak} B, ratio {:.3}",
            m.ratio()
        );
        m
    })
}
