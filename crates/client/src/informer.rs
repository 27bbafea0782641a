//! [`Informer`]: one reflector, one store, many subscribers.
//!
//! The informer runs the [`watcher`](crate::watcher) loop in a task, applies each event to its
//! store and hands the resulting [`Delta`]s to every subscriber, in order. Handlers
//! ([`EventHandler`]) are subscribers driven by a task of their own.
//!
//! # Ordering and late subscribers
//!
//! A subscriber first receives the store's current state as `Added { in_initial_list: true }`
//! and then every delta applied after that state, with nothing missed and nothing twice:
//! the driver applies an event to the store and takes the list of subscribers under one
//! lock, and [`Informer::subscribe`] snapshots the store and registers under the same lock.
//!
//! # Back-pressure
//!
//! Each subscriber has a bounded queue ([`InformerConfig::subscriber_buffer`]). A subscriber
//! that does not keep up makes the driver wait (client-go buffers without bound instead);
//! while it waits the reflector reads nothing, so a very slow handler eventually makes the
//! server close the watch and the reflector relist. Dropping a subscription unregisters it.
//!
//! # Resync
//!
//! With a resync period, every object in the store is re-delivered as [`Delta::Sync`] on
//! that period, once the store has synced (client-go's resync; at least 1 s apart).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::lister::ListerWatcher;
use crate::reflector::{Config, watcher};
use crate::resource::Resource;
use crate::store::{Delta, IndexFn, Store, Writer, WriterDropped};

/// client-go `minimumResyncPeriod`.
const MIN_RESYNC: Duration = Duration::from_secs(1);

/// Informer configuration.
#[derive(Clone)]
pub struct InformerConfig<K> {
    /// The reflector's configuration.
    pub reflector: Config,
    /// Re-deliver the whole store this often (`None`: never). At least 1 s.
    pub resync_period: Option<Duration>,
    /// Queue length of each subscriber.
    pub subscriber_buffer: usize,
    /// Index functions of the store.
    pub indexers: Vec<(String, IndexFn<K>)>,
}

impl<K> Default for InformerConfig<K> {
    fn default() -> Self {
        Self {
            reflector: Config::default(),
            // client-go: a resync period of 0 means no resync
            resync_period: None,
            // ours: client-go's processorListener buffers without bound (see the module doc)
            subscriber_buffer: 1024,
            indexers: Vec::new(),
        }
    }
}

impl<K> InformerConfig<K> {
    /// Sets the reflector configuration.
    #[must_use]
    pub fn reflector(mut self, config: Config) -> Self {
        self.reflector = config;
        self
    }

    /// Sets the resync period (clamped to at least 1 s).
    #[must_use]
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync_period = Some(period.max(MIN_RESYNC));
        self
    }

    /// Sets each subscriber's queue length (at least 1).
    #[must_use]
    pub fn subscriber_buffer(mut self, n: usize) -> Self {
        self.subscriber_buffer = n.max(1);
        self
    }

    /// Adds an index function.
    #[must_use]
    pub fn index(mut self, name: impl Into<String>, f: IndexFn<K>) -> Self {
        self.indexers.push((name.into(), f));
        self
    }
}

/// Callbacks for changes, client-go's `ResourceEventHandler`.
pub trait EventHandler<K>: Send + 'static {
    /// A key appeared (`in_initial_list`: it came with a relist or a late subscription).
    fn on_add(&mut self, object: &Arc<K>, in_initial_list: bool) {
        let _ = (object, in_initial_list);
    }
    /// A key's object changed; on resync `old` and `new` are the same object.
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }
    /// A key went away; `final_state_unknown` when it vanished across a relist.
    fn on_delete(&mut self, object: &Arc<K>, final_state_unknown: bool) {
        let _ = (object, final_state_unknown);
    }
}

/// Delivers a delta to a handler.
pub fn dispatch<K, H: EventHandler<K> + ?Sized>(handler: &mut H, delta: &Delta<K>) {
    match delta {
        Delta::Added {
            object,
            in_initial_list,
        } => handler.on_add(object, *in_initial_list),
        Delta::Updated { old, new } => handler.on_update(old, new),
        Delta::Deleted {
            object,
            final_state_unknown,
        } => handler.on_delete(object, *final_state_unknown),
        Delta::Sync(o) => handler.on_update(o, o),
    }
}

struct Registry<K> {
    /// Registered subscribers; entries whose receiver is gone are pruned by the driver.
    senders: Vec<mpsc::Sender<Delta<K>>>,
    buffer: usize,
}

/// The registry lock orders store changes against subscriptions (see the module doc).
/// It is never held across an await.
fn lock<K>(m: &Mutex<Registry<K>>) -> MutexGuard<'_, Registry<K>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running informer. Dropping it stops the reflector and ends every subscription.
pub struct Informer<K> {
    store: Store<K>,
    registry: Arc<Mutex<Registry<K>>>,
    driver: JoinHandle<()>,
}

impl<K> Drop for Informer<K> {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl<K: Resource> Informer<K> {
    /// Starts an informer over `lw` on the current tokio runtime.
    ///
    /// ```no_run
    /// use listwatch_client::{EventHandler, HttpConfig, HttpListerWatcher, Informer, InformerConfig};
    /// use listwatch_api::Object;
    /// use std::sync::Arc;
    ///
    /// struct Print;
    /// impl EventHandler<Object> for Print {
    ///     fn on_add(&mut self, o: &Arc<Object>, _: bool) { println!("added {}", o.name()) }
    /// }
    /// # async fn demo() -> listwatch_client::Result<()> {
    /// let lw = HttpListerWatcher::new(HttpConfig::new("http://127.0.0.1:8080")?, "/api/v1/pods")?;
    /// let informer = Informer::spawn(lw, InformerConfig::default());
    /// informer.add_handler(Print);
    /// informer.store().wait_until_synced().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn spawn<L: ListerWatcher<Object = K>>(lw: L, config: InformerConfig<K>) -> Self {
        let writer = Writer::new(config.indexers);
        let store = writer.store();
        let registry = Arc::new(Mutex::new(Registry {
            senders: Vec::new(),
            buffer: config.subscriber_buffer.max(1),
        }));
        let driver = tokio::spawn(drive(
            lw,
            config.reflector,
            config.resync_period.map(|p| p.max(MIN_RESYNC)),
            writer,
            Arc::clone(&registry),
        ));
        Self {
            store,
            registry,
            driver,
        }
    }

    /// A reader of the informer's store.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        self.store.has_synced()
    }

    /// Waits for the first list.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Store::wait_until_synced`].
    pub async fn wait_until_synced(&self) -> Result<(), WriterDropped> {
        self.store.wait_until_synced().await
    }

    /// Subscribes: the current state as `Added { in_initial_list: true }`, then every change.
    pub fn subscribe(&self) -> Subscription<K> {
        let mut reg = lock(&self.registry);
        let initial = self.store.list();
        let (tx, rx) = mpsc::channel(reg.buffer);
        reg.senders.push(tx);
        Subscription {
            initial: initial.into_iter(),
            rx,
        }
    }

    /// Runs `handler` on its own task over a new subscription; the task ends with the
    /// informer.
    pub fn add_handler<H: EventHandler<K>>(&self, mut handler: H) -> JoinHandle<()> {
        let mut sub = self.subscribe();
        tokio::spawn(async move {
            while let Some(delta) = sub.next().await {
                dispatch(&mut handler, &delta);
            }
        })
    }
}

/// A subscriber's stream of deltas.
pub struct Subscription<K> {
    /// The snapshot taken at subscription, delivered first.
    initial: std::vec::IntoIter<Arc<K>>,
    rx: mpsc::Receiver<Delta<K>>,
}

impl<K> Stream for Subscription<K> {
    type Item = Delta<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delta<K>>> {
        if let Some(object) = self.initial.next() {
            return Poll::Ready(Some(Delta::Added {
                object,
                in_initial_list: true,
            }));
        }
        self.rx.poll_recv(cx)
    }
}

async fn drive<L: ListerWatcher>(
    lw: L,
    config: Config,
    resync: Option<Duration>,
    mut writer: Writer<L::Object>,
    registry: Arc<Mutex<Registry<L::Object>>>,
) {
    let store = writer.store();
    let mut events = std::pin::pin!(watcher(lw, config));
    let mut ticker = resync.map(|p| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let tick = async {
            match ticker.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let (deltas, senders) = tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => {
                    let reg = lock(&registry);
                    (writer.apply(event), reg.senders.clone())
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "reflector error, recovering");
                    continue;
                }
                None => return,
            },
            () = tick => {
                if !store.has_synced() {
                    continue;
                }
                let reg = lock(&registry);
                (store.list().into_iter().map(Delta::Sync).collect(), reg.senders.clone())
            }
        };
        if deltas.is_empty() || senders.is_empty() {
            continue;
        }
        let mut gone = false;
        for delta in &deltas {
            for tx in &senders {
                gone |= tx.send(delta.clone()).await.is_err();
            }
        }
        if gone {
            lock(&registry).senders.retain(|tx| !tx.is_closed());
        }
    }
}
