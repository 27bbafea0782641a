//! The reflector's local copy: one [`Writer`], many cheap [`Store`] readers, with indexes.
//!
//! # Semantics
//!
//! The writer applies reflector [`Event`]s and reports what changed as [`Delta`]s (the
//! informer hands those to its subscribers). Readers share the state through an `Arc`; every
//! read takes a short read lock and returns `Arc`s of objects, never copies of them. No lock
//! is ever held across an `.await`.
//!
//! # Relists: atomic, and never two full copies
//!
//! A relist (`Init`, many `InitApply`, `InitDone`) must look atomic to readers: they see the
//! old state until the new one is complete. Building a second map and swapping it in would
//! hold two full copies at the peak, so the writer does this instead:
//! - an incoming object whose key is present **at the same resource version** is the object
//!   already held: the store only marks the entry with the relist's generation and drops the
//!   incoming copy at once;
//! - any other object is *staged* beside the live map (only objects that changed or are new);
//! - `InitDone` takes the write lock once: staged objects replace or join the live ones, and
//!   entries not marked by this relist are removed and reported as deleted with
//!   `final_state_unknown` (client-go's `DeletedFinalStateUnknown`).
//!
//! So the peak during a relist is the store plus the objects that changed since the last
//! sync; only when everything changed does it approach two copies, which any atomic
//! replacement needs (readers must keep seeing the old objects until the end).
//!
//! # Indexes
//!
//! Index functions are fixed when the writer is built; each maps an object to the values it
//! is indexed under. Index entries are kept in step with the objects under the same lock.
//!
//! # No caller code under the write lock
//!
//! Index functions are the caller's code and may panic. The writer computes every index value
//! a change needs (the new object's, the replaced or removed object's) *before* it takes the
//! write lock, reading the current objects under a read lock first: the writer is the only
//! one that changes the state, so what it read is still there when it writes. Under the write
//! lock only map operations run. A panicking index function therefore unwinds before
//! anything changed: readers keep the whole previous state (a relist is never half applied),
//! and the lock is not poisoned.
//!
//! # Waiting for the first sync can fail
//!
//! [`Store::wait_until_synced`] returns once the first relist completed, and fails with
//! [`SyncError::Fatal`] while the feeder has reported ([`Writer::report_sync_failure`]) that
//! the first list fails in a way retries do not mend (a 403 for missing RBAC, a 404 for a
//! resource the server does not serve): every reader, not only the informer, sees the
//! failure instead of waiting for good (client-go's `WaitForCacheSync` and kube-rs's
//! `wait_until_ready` wait). The [`reflector`](crate::reflector()) and the
//! [`Informer`](crate::Informer) report such failures; a failure is cleared by a later
//! non-fatal one and never reported once synced.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use crate::informer_error::{InformerError, SyncError};
use crate::reflector::Event;
use crate::resource::{ObjectKey, Resource};

/// An index function: the values an object is indexed under.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The name of the index by namespace that [`namespace_index`] builds.
pub const NAMESPACE_INDEX: &str = "namespace";

/// client-go's `MetaNamespaceIndexFunc`: objects indexed by their namespace.
pub fn namespace_index<K: Resource>() -> (String, IndexFn<K>) {
    (
        NAMESPACE_INDEX.to_owned(),
        Arc::new(|k: &K| {
            k.namespace()
                .map(|ns| vec![ns.to_owned()])
                .unwrap_or_default()
        }),
    )
}

/// A change the writer made, as handlers see it.
#[derive(Debug)]
pub enum Delta<K> {
    /// A key appeared.
    Added {
        /// The new object.
        object: Arc<K>,
        /// Whether it is part of the first list, the state the store started from
        /// (client-go's `isInInitialList`); keys that appear in later relists are not.
        in_initial_list: bool,
    },
    /// A key's object changed.
    Updated {
        /// The object before.
        old: Arc<K>,
        /// The object now.
        new: Arc<K>,
    },
    /// A key went away.
    Deleted {
        /// The last state the store held.
        object: Arc<K>,
        /// The key vanished across a relist: the delete itself was never seen, so `object`
        /// may not be its final state (client-go's `DeletedFinalStateUnknown`).
        final_state_unknown: bool,
    },
    /// A periodic resync re-delivers an unchanged object.
    Sync(Arc<K>),
}

impl<K> Delta<K> {
    /// The object the delta is about (the new one of an update).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Delta::Added { object, .. } | Delta::Deleted { object, .. } | Delta::Sync(object) => {
                object
            }
            Delta::Updated { new, .. } => new,
        }
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        match self {
            Delta::Added {
                object,
                in_initial_list,
            } => Delta::Added {
                object: Arc::clone(object),
                in_initial_list: *in_initial_list,
            },
            Delta::Updated { old, new } => Delta::Updated {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Delta::Deleted {
                object,
                final_state_unknown,
            } => Delta::Deleted {
                object: Arc::clone(object),
                final_state_unknown: *final_state_unknown,
            },
            Delta::Sync(o) => Delta::Sync(Arc::clone(o)),
        }
    }
}

struct Entry<K> {
    object: Arc<K>,
    /// The relist generation that last confirmed this entry; entries below the current
    /// relist's generation at `InitDone` are gone from the server.
    generation: u64,
}

struct State<K> {
    objects: HashMap<ObjectKey, Entry<K>>,
    /// One per index function, in [`Shared::indexers`]' order: value → keys; kept equal to
    /// what the index functions give for `objects`.
    indices: Vec<HashMap<String, HashSet<ObjectKey>>>,
    /// The resource version of the last completed sync, applied event or bookmark, as the
    /// server sent it (opaque: the latest one replaces it, the reflector delivers them in the
    /// server's order; `""` before the first sync).
    resource_version: String,
}

struct Shared<K> {
    /// Written only by the [`Writer`], under the write lock, never across an await.
    state: RwLock<State<K>>,
    /// Fixed at construction.
    indexers: Vec<(String, IndexFn<K>)>,
}

impl<K> Shared<K> {
    fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        // Nothing that can panic runs under the write lock: index values are computed before
        // it is taken (see the module doc), and map inserts and removes do not panic (an
        // allocation failure aborts). So the lock is never poisoned with a half-made change;
        // should it be poisoned anyway, readers carry on rather than fail.
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// Where the index `name` is in `indexers` and `State::indices`.
    fn index_position(&self, name: &str) -> Option<usize> {
        self.indexers.iter().position(|(n, _)| n == name)
    }
    fn write(&self) -> RwLockWriteGuard<'_, State<K>> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A relist in progress: the objects that differ from the live map.
struct Relist<K> {
    generation: u64,
    staged: HashMap<ObjectKey, Arc<K>>,
}

/// Where a store is on its way to its first sync; readers wait on it.
#[derive(Debug, Clone)]
enum SyncState {
    /// Not synced; the feeder has not reported a fatal failure (or a later try cleared it).
    Pending,
    /// Not synced; the first list's last try failed in a way retries do not mend.
    Failed(InformerError),
    /// The first relist completed.
    Synced,
}

/// The one writer of a store. Not `Clone`: exactly one reflector feeds a store.
pub struct Writer<K> {
    shared: Arc<Shared<K>>,
    /// The way to the first sync; readers wait on it.
    synced: watch::Sender<SyncState>,
    generation: u64,
    relist: Option<Relist<K>>,
}

/// A cheap, cloneable reader of a store.
pub struct Store<K> {
    shared: Arc<Shared<K>>,
    synced: watch::Receiver<SyncState>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            synced: self.synced.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.shared.read();
        f.debug_struct("Store")
            .field("len", &s.objects.len())
            .field("resource_version", &s.resource_version)
            .finish()
    }
}

impl<K: Resource> Default for Writer<K> {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl<K: Resource> Writer<K> {
    /// A writer with the given index functions (name, function).
    pub fn new(indexers: Vec<(String, IndexFn<K>)>) -> Self {
        let indices = indexers.iter().map(|_| HashMap::new()).collect();
        let (synced, _) = watch::channel(SyncState::Pending);
        Self {
            shared: Arc::new(Shared {
                state: RwLock::new(State {
                    objects: HashMap::new(),
                    indices,
                    resource_version: String::new(),
                }),
                indexers,
            }),
            synced,
            generation: 0,
            relist: None,
        }
    }

    /// A reader of this store.
    pub fn store(&self) -> Store<K> {
        Store {
            shared: Arc::clone(&self.shared),
            synced: self.synced.subscribe(),
        }
    }

    /// Whether the first relist has completed.
    pub fn has_synced(&self) -> bool {
        matches!(*self.synced.borrow(), SyncState::Synced)
    }

    /// Reports that the first list failed in a way retries do not mend (`Some`), so that
    /// [`Store::wait_until_synced`] fails with [`SyncError::Fatal`] instead of waiting, or
    /// that it no longer is (`None`: a later try failed otherwise). Ignored once synced.
    pub fn report_sync_failure(&self, failure: Option<InformerError>) {
        self.synced
            .send_if_modified(|state| match (&*state, failure) {
                (SyncState::Synced, _) | (SyncState::Pending, None) => false,
                (_, Some(e)) => {
                    *state = SyncState::Failed(e);
                    true
                }
                (SyncState::Failed(_), None) => {
                    *state = SyncState::Pending;
                    true
                }
            });
    }

    /// Applies one reflector event and returns what changed, in order.
    pub fn apply(&mut self, event: Event<K>) -> Vec<Delta<K>> {
        let mut out = Vec::new();
        self.apply_into(event, &mut out);
        out
    }

    /// [`Writer::apply`] appending to a caller's buffer.
    pub fn apply_into(&mut self, event: Event<K>, out: &mut Vec<Delta<K>>) {
        match event {
            Event::Init => {
                // A new relist abandons any unfinished one (e.g. a 410 mid-pagination).
                self.generation += 1;
                self.relist = Some(Relist {
                    generation: self.generation,
                    staged: HashMap::new(),
                });
            }
            Event::InitApply(obj) => self.stage(obj),
            Event::InitDone { resource_version } => self.commit(resource_version, out),
            Event::Apply(obj) => {
                let rv = obj.resource_version().into_owned();
                let indexers = &self.shared.indexers;
                let obj = Arc::new(obj);
                let key = obj.key();
                // Index values first, outside the write lock (see the module doc).
                let new = index_values(indexers, &obj);
                let old = self.current(&key).map(|o| index_values(indexers, &o));
                let mut s = self.shared.write();
                let gen_ = self.generation;
                if let Some(d) = upsert(&mut s, key, obj, new, old, gen_, false) {
                    out.push(d);
                }
                advance(&mut s.resource_version, rv);
            }
            Event::Delete(obj) => {
                let rv = obj.resource_version().into_owned();
                let key = obj.key();
                let old = self
                    .current(&key)
                    .map(|o| index_values(&self.shared.indexers, &o));
                let mut s = self.shared.write();
                if let Some(values) = old {
                    if remove(&mut s, &key, &values).is_some() {
                        out.push(Delta::Deleted {
                            object: Arc::new(obj),
                            final_state_unknown: false,
                        });
                    }
                }
                advance(&mut s.resource_version, rv);
            }
            Event::Bookmark { resource_version } => {
                let mut s = self.shared.write();
                advance(&mut s.resource_version, resource_version);
            }
        }
    }

    /// Removes `key`: a watch delete whose object did not decode
    /// ([`Error::SkippedDelete`](crate::Error::SkippedDelete)), so its last cached state is
    /// reported deleted with `final_state_unknown`; the store's version moves to
    /// `resource_version` (when not empty). Nothing when the key is not held.
    pub fn delete_key(&mut self, key: &ObjectKey, resource_version: &str) -> Option<Delta<K>> {
        let old = self
            .current(key)
            .map(|o| index_values(&self.shared.indexers, &o));
        let mut s = self.shared.write();
        let removed = old.and_then(|values| remove(&mut s, key, &values));
        advance(&mut s.resource_version, resource_version.to_owned());
        removed.map(|object| Delta::Deleted {
            object,
            final_state_unknown: true,
        })
    }

    /// What a reflector failure means for the store: a fatal one before the first sync
    /// fails its waits ([`Writer::report_sync_failure`]), any other clears that; a skipped
    /// delete ([`Error::SkippedDelete`](crate::Error::SkippedDelete)) removes its key.
    /// Returns the delta of that removal.
    pub fn apply_error(&mut self, e: &crate::Error) -> Option<Delta<K>> {
        self.report_sync_failure(
            crate::informer_error::fatal_copy(e).map(|f| InformerError::Reflector(Arc::new(f))),
        );
        let key = e.deleted_key()?;
        self.delete_key(&key, e.skipped_resource_version().unwrap_or(""))
    }

    fn stage(&mut self, obj: K) {
        let Some(relist) = self.relist.as_mut() else {
            // InitApply outside a relist cannot come from the reflector; treat it as a
            // relist of its own so nothing is lost.
            self.apply_into(Event::Init, &mut Vec::new());
            return self.stage(obj);
        };
        let key = obj.key();
        {
            let mut s = self.shared.write();
            if let Some(e) = s.objects.get_mut(&key) {
                let rv = obj.resource_version();
                if !rv.is_empty() && e.object.resource_version() == rv {
                    // Same version: the object we already hold. Keep ours, drop the copy.
                    e.generation = relist.generation;
                    relist.staged.remove(&key);
                    return;
                }
            }
        }
        relist.staged.insert(key, Arc::new(obj));
    }

    fn commit(&mut self, resource_version: String, out: &mut Vec<Delta<K>>) {
        let Some(Relist { generation, staged }) = self.relist.take() else {
            tracing::debug!("InitDone without a relist in progress, ignored");
            return;
        };
        let indexers = &self.shared.indexers;
        let first = !self.has_synced();
        if indexers.is_empty() {
            // No caller code to keep out of the lock: apply the staged objects and drop the
            // vanished keys in one pass, with no list of them beside the store.
            let mut s = self.shared.write();
            for (key, obj) in staged {
                if let Some(d) = upsert(&mut s, key, obj, Vec::new(), None, generation, first) {
                    out.push(d);
                }
            }
            let gone: Vec<ObjectKey> = s
                .objects
                .iter()
                .filter(|(_, e)| e.generation < generation)
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                if let Some(object) = remove(&mut s, &key, &[]) {
                    out.push(Delta::Deleted {
                        object,
                        final_state_unknown: true,
                    });
                }
            }
            s.resource_version = resource_version;
            drop(s);
            self.synced.send_replace(SyncState::Synced);
            return;
        }
        // Everything the change needs from the caller's index functions, before the write
        // lock: the staged objects' values and those of the live objects they replace or
        // that vanished (see the module doc). The live objects are read under a read lock;
        // only this writer changes them, so they are the same under the write lock.
        let (replaced, gone) = {
            let s = self.shared.read();
            let replaced: Vec<Option<Arc<K>>> = staged
                .keys()
                .map(|k| s.objects.get(k).map(|e| Arc::clone(&e.object)))
                .collect();
            let gone: Vec<(ObjectKey, Arc<K>)> = s
                .objects
                .iter()
                .filter(|(k, e)| e.generation < generation && !staged.contains_key(*k))
                .map(|(k, e)| (k.clone(), Arc::clone(&e.object)))
                .collect();
            (replaced, gone)
        };
        let upserts: Vec<_> = staged
            .into_iter()
            .zip(replaced)
            .map(|((key, obj), old)| {
                let new = index_values(indexers, &obj);
                let old = old.map(|o| index_values(indexers, &o));
                (key, obj, new, old)
            })
            .collect();
        let removals: Vec<_> = gone
            .into_iter()
            .map(|(key, old)| {
                let values = index_values(indexers, &old);
                (key, values)
            })
            .collect();
        let mut s = self.shared.write();
        for (key, obj, new, old) in upserts {
            if let Some(d) = upsert(&mut s, key, obj, new, old, generation, first) {
                out.push(d);
            }
        }
        for (key, values) in removals {
            if let Some(object) = remove(&mut s, &key, &values) {
                out.push(Delta::Deleted {
                    object,
                    final_state_unknown: true,
                });
            }
        }
        s.resource_version = resource_version;
        drop(s);
        self.synced.send_replace(SyncState::Synced);
    }

    /// The live object at `key` (read lock only; the writer is the only one changing it).
    fn current(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.shared
            .read()
            .objects
            .get(key)
            .map(|e| Arc::clone(&e.object))
    }

    /// The resource version the store reflects, as the server sent it (opaque).
    pub fn resource_version(&self) -> String {
        self.shared.read().resource_version.clone()
    }
}

/// The values `obj` is indexed under, one list per index function in their order. Runs the
/// caller's code: never called under the write lock.
fn index_values<K>(indexers: &[(String, IndexFn<K>)], obj: &K) -> Vec<Vec<String>> {
    indexers.iter().map(|(_, f)| f(obj)).collect()
}

/// Inserts or replaces, with the index values computed beforehand (`new` for `obj`, `old` for
/// the object it replaces, `None` when there is none); returns the delta (`Added`, or
/// `Updated` with the old object). Map operations only: nothing here can panic.
fn upsert<K>(
    s: &mut State<K>,
    key: ObjectKey,
    obj: Arc<K>,
    new: Vec<Vec<String>>,
    old: Option<Vec<Vec<String>>>,
    generation: u64,
    in_initial_list: bool,
) -> Option<Delta<K>> {
    let indices = &mut s.indices;
    let previous = s.objects.insert(
        key.clone(),
        Entry {
            object: Arc::clone(&obj),
            generation,
        },
    );
    for (i, index) in indices.iter_mut().enumerate() {
        let now = new.get(i).map(Vec::as_slice).unwrap_or_default();
        if previous.is_some() {
            let before = old
                .as_ref()
                .and_then(|o| o.get(i))
                .map(Vec::as_slice)
                .unwrap_or_default();
            for v in before {
                if !now.contains(v) {
                    drop_from_index(index, v, &key);
                }
            }
        }
        for v in now {
            index.entry(v.clone()).or_default().insert(key.clone());
        }
    }
    match previous {
        None => Some(Delta::Added {
            object: obj,
            in_initial_list,
        }),
        Some(old) => Some(Delta::Updated {
            old: old.object,
            new: obj,
        }),
    }
}

/// Removes `key` and its index entries (`values`, computed beforehand). Map operations only.
fn remove<K>(s: &mut State<K>, key: &ObjectKey, values: &[Vec<String>]) -> Option<Arc<K>> {
    let old = s.objects.remove(key)?;
    for (i, index) in s.indices.iter_mut().enumerate() {
        for v in values.get(i).map(Vec::as_slice).unwrap_or_default() {
            drop_from_index(index, v, key);
        }
    }
    Some(old.object)
}

fn drop_from_index(index: &mut HashMap<String, HashSet<ObjectKey>>, value: &str, key: &ObjectKey) {
    if let Some(keys) = index.get_mut(value) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(value);
        }
    }
}

impl<K: Resource> Store<K> {
    /// The object at `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.shared
            .read()
            .objects
            .get(key)
            .map(|e| Arc::clone(&e.object))
    }

    /// The object `name` in `namespace`.
    pub fn get_by_name(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get(&ObjectKey::new(namespace, name))
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.shared
            .read()
            .objects
            .values()
            .map(|e| Arc::clone(&e.object))
            .collect()
    }

    /// Every object by key, read under one lock (the informer's view of a lagging
    /// subscriber).
    pub(crate) fn snapshot(&self) -> HashMap<ObjectKey, Arc<K>> {
        self.shared
            .read()
            .objects
            .iter()
            .map(|(k, e)| (k.clone(), Arc::clone(&e.object)))
            .collect()
    }

    /// Every key.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.shared.read().objects.keys().cloned().collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.shared.read().objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The resource version the store reflects (last sync, event or bookmark), as the
    /// server sent it: opaque, to be sent back, never compared (`""` before the first sync).
    pub fn resource_version(&self) -> String {
        self.shared.read().resource_version.clone()
    }

    /// Objects whose index `name` has `value`; `None` when there is no such index.
    pub fn by_index(&self, name: &str, value: &str) -> Option<Vec<Arc<K>>> {
        let i = self.shared.index_position(name)?;
        let s = self.shared.read();
        let index = s.indices.get(i)?;
        Some(
            index
                .get(value)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| s.objects.get(k))
                        .map(|e| Arc::clone(&e.object))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// The values index `name` currently holds.
    pub fn index_values(&self, name: &str) -> Option<Vec<String>> {
        let i = self.shared.index_position(name)?;
        self.shared
            .read()
            .indices
            .get(i)
            .map(|i| i.keys().cloned().collect())
    }

    /// Whether the first relist has completed.
    pub fn has_synced(&self) -> bool {
        matches!(*self.synced.borrow(), SyncState::Synced)
    }

    /// Waits until the first relist has completed. Fails with [`SyncError::Fatal`] when (or
    /// while) the first list fails in a way retries do not mend — 400, 401, 403, 404, 405,
    /// 406, or a transform or index function that panicked on it (see the module doc) —
    /// and with [`SyncError::Stopped`] when the writer went away first. The feeder keeps
    /// retrying after a fatal failure, so a later call succeeds once RBAC or the resource is
    /// fixed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing; call again to keep waiting.
    pub async fn wait_until_synced(&self) -> Result<(), SyncError> {
        let mut rx = self.synced.clone();
        let state = rx
            .wait_for(|s| !matches!(s, SyncState::Pending))
            .await
            .map_err(|_| SyncError::Stopped)?;
        match &*state {
            SyncState::Failed(e) => Err(SyncError::Fatal(e.clone())),
            SyncState::Synced | SyncState::Pending => Ok(()),
        }
    }

    /// [`wait_until_synced`](Self::wait_until_synced) for at most `deadline`: fails with
    /// [`SyncError::TimedOut`] when the first list keeps failing in ways retries may mend
    /// (refused connections, 5xx, 429) or is that slow. What an operator should call at
    /// start, so that a wrong server or an outage is an error, not a silent hang.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`wait_until_synced`](Self::wait_until_synced).
    pub async fn wait_until_synced_within(
        &self,
        deadline: std::time::Duration,
    ) -> Result<(), SyncError> {
        tokio::time::timeout(deadline, self.wait_until_synced())
            .await
            .unwrap_or(Err(SyncError::TimedOut(deadline)))
    }

    /// Waits until the first relist has completed however long the feeder keeps retrying
    /// failures, fatal ones included (client-go's `WaitForCacheSync`, kube-rs's
    /// `wait_until_ready`): fails only with [`SyncError::Stopped`]. For a wait that must
    /// outlast a fix made elsewhere (RBAC granted, a CRD installed); anything else should
    /// use [`wait_until_synced`](Self::wait_until_synced), which reports those failures.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`wait_until_synced`](Self::wait_until_synced).
    pub async fn wait_until_synced_ignoring_failures(&self) -> Result<(), SyncError> {
        let mut rx = self.synced.clone();
        rx.wait_for(|s| matches!(s, SyncState::Synced))
            .await
            .map(|_| ())
            .map_err(|_| SyncError::Stopped)
    }
}

/// Moves the store's version to `rv`, the latest the server sent; an event without one
/// (which the reflector does not pass on) leaves it.
fn advance(current: &mut String, rv: String) {
    if !rv.is_empty() {
        *current = rv;
    }
}

#[cfg(test)]
mod tests;
