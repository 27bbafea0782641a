//! What the cacher's behaviour tests share: pods, writes, bounded reads, and [`Probe`], a
//! backend over the embedded store that tests can hold up, break and count.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::MemStore;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, ValidateDeleteFn, WatchEvent, WatchStream,
};

pub fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

pub fn pod(ns: &str, name: &str, node: &str, generation: u64) -> Object {
    let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":ns},
        "spec":{"nodeName":node,"generation":generation}});
    Object::from_value(v, &fields()).unwrap()
}

/// Creates or replaces `o` under `resource`; returns it as stored.
pub async fn put_in(s: &(impl Storage + ?Sized), resource: &str, o: Object) -> Object {
    let key = Key::object(resource, o.namespace(), o.name()).unwrap();
    let mut update = |_: Option<&Object>| Ok(o.clone().into());
    s.guaranteed_update(&key, None, true, &mut update, None)
        .await
        .unwrap()
}

/// Creates or replaces the pod `o`.
pub async fn put(s: &(impl Storage + ?Sized), o: Object) -> Object {
    put_in(s, "pods", o).await
}

/// The next event, failing the test after 10 s.
pub async fn next(w: &mut WatchStream) -> Option<WatchEvent> {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("no event in time")
}

/// Whatever arrives within `d` (bounded, for "nothing arrives" checks).
pub async fn drain_for(w: &mut WatchStream, d: Duration) -> Vec<WatchEvent> {
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + d;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, w.next()).await {
        got.push(ev);
    }
    got
}

/// The version and match a list asked for.
pub type ListedAt = (Option<u64>, Option<ResourceVersionMatch>);

/// The page size a cacher over a [`Probe`] should list with for `hold_lists` to hold it.
pub const HELD_PAGE_SIZE: u64 = 777;

/// The embedded store, with knobs: lists can be held or failed, progress requests counted
/// or ignored, and every open watch cut with 410 (which makes a reflector relist).
#[derive(Clone)]
pub struct Probe {
    pub inner: MemStore,
    pub lists_fail: Arc<AtomicBool>,
    /// While true, lists with the held limit wait.
    lists_held: Arc<tokio::sync::watch::Sender<bool>>,
    /// The page size of the lists that `hold_lists` holds (the cacher's reflector's).
    pub held_limit: u64,
    /// Lists started (held or not).
    pub lists: Arc<AtomicUsize>,
    /// The version and match of every first page listed with the held limit (the cacher's
    /// reflector's lists), in order.
    pub reflector_lists: Arc<std::sync::Mutex<Vec<ListedAt>>>,
    pub progress_requests: Arc<AtomicUsize>,
    /// When false, progress requests are counted and otherwise ignored.
    pub progress_answered: Arc<AtomicBool>,
    cuts: Arc<tokio::sync::watch::Sender<u64>>,
    /// Watches opened so far (each subscribed to `cut_watches` before it counts).
    pub watches: Arc<AtomicUsize>,
    /// When set, the next object event a watch forwards is forwarded twice.
    pub duplicate_next: Arc<AtomicBool>,
    /// When set, `cut_watches` ends watches as a lost backend does (Unreachable), not 410.
    pub cut_unreachable: Arc<AtomicBool>,
    /// While true, watches forward nothing (their events wait, in order).
    events_held: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Probe {
    pub fn new(inner: MemStore) -> Self {
        Self {
            inner,
            lists_fail: Arc::default(),
            lists_held: Arc::new(tokio::sync::watch::channel(false).0),
            held_limit: HELD_PAGE_SIZE,
            lists: Arc::default(),
            reflector_lists: Arc::default(),
            progress_requests: Arc::default(),
            progress_answered: Arc::new(AtomicBool::new(true)),
            cuts: Arc::new(tokio::sync::watch::channel(0).0),
            watches: Arc::default(),
            duplicate_next: Arc::default(),
            cut_unreachable: Arc::default(),
            events_held: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Holds (or releases) every watch's events: a cache lagging its backend.
    pub fn hold_events(&self, held: bool) {
        self.events_held.send_replace(held);
    }

    /// Holds (or releases) the lists of pages of `held_limit` (configure the cacher's
    /// `list_page_size` to it) until told otherwise; other lists pass.
    pub fn hold_lists(&self, held: bool) {
        self.lists_held.send_replace(held);
    }

    /// Ends every open watch with 410 Expired. A watch opened after this is not cut: wait
    /// for it first with [`Probe::wait_for_watches`].
    pub fn cut_watches(&self) {
        self.cuts.send_modify(|c| *c += 1);
    }

    /// Waits (at most 30 s) until `n` watches have been opened on this backend.
    pub async fn wait_for_watches(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(30), async {
            while self.watches.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} watches opened, waited for {n}",
                self.watches.load(Ordering::SeqCst)
            )
        });
    }

    pub fn progress_requests(&self) -> usize {
        self.progress_requests.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Storage for Probe {
    async fn create(&self, k: &Key, o: Object, t: Option<Duration>) -> Result<Object> {
        self.inner.create(k, o, t).await
    }
    async fn get(&self, k: &Key, o: &GetOptions) -> Result<Option<Object>> {
        self.inner.get(k, o).await
    }
    async fn list(&self, k: &Key, o: &ListOptions) -> Result<ObjectList> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        if o.limit == Some(self.held_limit) && o.continue_token.is_none() {
            self.reflector_lists
                .lock()
                .unwrap()
                .push((o.resource_version, o.resource_version_match));
        }
        if o.limit == Some(self.held_limit) {
            let mut held = self.lists_held.subscribe();
            let _ = held.wait_for(|h| !*h).await;
        }
        if self.lists_fail.load(Ordering::SeqCst) {
            return Err(Error::Unreachable {
                message: "down".into(),
            });
        }
        self.inner.list(k, o).await
    }
    async fn watch(&self, k: &Key, o: &ListOptions) -> Result<WatchStream> {
        let mut cuts = self.cuts.subscribe();
        cuts.borrow_and_update();
        let mut events = self.inner.watch(k, o).await?;
        self.watches.fetch_add(1, Ordering::SeqCst);
        let duplicate = Arc::clone(&self.duplicate_next);
        let unreachable = Arc::clone(&self.cut_unreachable);
        let mut held = self.events_held.subscribe();
        let stream = async_stream(move |tx| async move {
            loop {
                tokio::select! {
                    ev = events.next() => match ev {
                        Some(ev) => {
                            if held.wait_for(|h| !*h).await.is_err() {
                                return;
                            }
                            let again = ev.object().is_some()
                                && duplicate.swap(false, Ordering::SeqCst);
                            if again && tx.send(ev.clone()).await.is_err() {
                                return;
                            }
                            if tx.send(ev).await.is_err() {
                                return;
                            }
                        }
                        None => return,
                    },
                    _ = cuts.changed() => {
                        let e = if unreachable.load(Ordering::SeqCst) {
                            Error::Unreachable { message: "gone".into() }
                        } else {
                            Error::too_old(0, 1)
                        };
                        let _ = tx.send(WatchEvent::Error(e)).await;
                        return;
                    }
                }
            }
        });
        Ok(stream)
    }
    async fn guaranteed_update(
        &self,
        k: &Key,
        p: Option<&Preconditions>,
        i: bool,
        u: &mut UpdateFn<'_>,
        s: Option<Object>,
    ) -> Result<Object> {
        self.inner.guaranteed_update(k, p, i, u, s).await
    }
    async fn delete(
        &self,
        k: &Key,
        p: Option<&Preconditions>,
        v: &ValidateDeleteFn<'_>,
        s: Option<Object>,
    ) -> Result<Object> {
        self.inner.delete(k, p, v, s).await
    }
    async fn stats(&self, k: &Key) -> Result<Stats> {
        self.inner.stats(k).await
    }
    async fn request_watch_progress(&self) -> Result<()> {
        self.progress_requests.fetch_add(1, Ordering::SeqCst);
        if self.progress_answered.load(Ordering::SeqCst) {
            self.inner.request_watch_progress().await
        } else {
            Ok(())
        }
    }
    async fn current_resource_version(&self) -> Result<u64> {
        self.inner.current_resource_version().await
    }
    async fn readiness(&self) -> Result<()> {
        self.inner.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.inner.compacted_revision()
    }
}

/// A stream fed by a task running `f` with the sending half of a small channel.
fn async_stream<F, Fut>(f: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<WatchEvent>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(f(tx));
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
