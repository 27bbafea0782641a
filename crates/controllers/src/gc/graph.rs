//! The collector's view of the object graph: one metadata-only informer per followed
//! resource, each store indexed by the uids of its objects' owners (so "the dependents of
//! uid U" is one index read per resource), and the rules that turn informer events into
//! work (upstream's `GraphBuilder.processGraphChanges`, over caches instead of a graph of
//! its own):
//! - an object appears, or its owner references change, and one of its owners is not in the
//!   caches with that uid (absent, replaced, not synced yet) or is being deleted in the
//!   foreground → the object is checked (`attempt to delete`: live reads decide);
//! - an object starts being deleted with the `orphan` finalizer → `attempt to orphan`;
//! - an object starts being deleted with `foregroundDeletion` → it and all its dependents
//!   are checked;
//! - an object goes away (or its owner references change) → its dependents are checked, and
//!   its owners that wait for dependents are checked (one fewer may block them).
//!
//! The caches are only hints: every decision that deletes or rewrites something is taken
//! by the workers on live reads (see `worker`). What the caches must get right is the set
//! of dependents of an owner, which orphaning and foreground deletion act on; they are
//! complete once every informer has synced (the workers wait for that), up to the events
//! still in flight — the same window upstream's graph has.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use listwatch_cacher::{MetadataListerWatcher, StorageListerWatcher};
use listwatch_endpoints::Resource;
use listwatch_runtime::{Delta, Informer, InformerConfig, Store, WorkQueue};

use crate::gc::catalog::Catalog;
use listwatch_storage::Key;

use crate::gc::meta::{Fields, Meta, OwnerRef};

/// The index of each store: an object under each of its owners' uids.
const BY_OWNER: &str = "ownerUID";
/// The index of each store: objects being deleted with a collector finalizer, under
/// `orphan` or `foregroundDeletion` (what the periodic sweep rereads).
const BY_GC_FINALIZER: &str = "gcFinalizer";

/// One object, as the work queues name it: resource (catalog index), namespace, name, uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Item {
    pub(crate) res: usize,
    pub(crate) namespace: Option<Arc<str>>,
    pub(crate) name: Arc<str>,
    pub(crate) uid: Arc<str>,
}

impl Item {
    /// The item of a cached object of resource `res`; `None` without a name or uid.
    pub(crate) fn of(res: usize, m: &Fields) -> Option<Self> {
        Some(Self {
            res,
            namespace: m.namespace.as_deref().map(Arc::from),
            name: Arc::from(m.name.as_deref().filter(|n| !n.is_empty())?),
            uid: Arc::from(m.uid.as_deref().filter(|u| !u.is_empty())?),
        })
    }

    pub(crate) fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// The work queues the graph feeds and the workers drain.
#[derive(Clone)]
pub(crate) struct Queues {
    /// Objects to check: should they go, or (being deleted in the foreground) may they go?
    pub(crate) delete: WorkQueue<Item>,
    /// Owners being deleted with the `orphan` finalizer.
    pub(crate) orphan: WorkQueue<Item>,
}

/// The base configuration of the graph's informers: no idle deadline, since the storage watch
/// never times out (see `StorageListerWatcher::NO_IDLE_DEADLINE`).
fn informer_config() -> InformerConfig<Meta> {
    InformerConfig {
        reflector: StorageListerWatcher::reflector_config(listwatch_runtime::Config::default()),
        ..InformerConfig::default()
    }
}

/// The informers and their stores, by catalog index (`None` where the kind is no longer
/// followed).
pub(crate) struct Graph {
    pub(crate) catalog: Catalog,
    slots: RwLock<Vec<Slot>>,
    /// Whether a set of kinds was applied yet (the workers wait for it and for the
    /// informers of those kinds to list once).
    kinds_known: AtomicBool,
}

/// The informer and store of one catalog index (`None` once its kind is not followed).
type Slot = Option<(Informer<Meta>, Store<Meta>)>;

/// The events of one informer, tagged with its catalog index.
pub(crate) type Events = futures::stream::BoxStream<'static, (usize, Delta<Meta>)>;

/// The informer of one followed resource.
fn informer(r: &Resource, key: &Key) -> Informer<Meta> {
    let lw = StorageListerWatcher::new(Arc::clone(&r.storage), key.clone());
    let config = informer_config()
        .index(
            BY_OWNER,
            Arc::new(|m: &Meta| {
                m.metadata
                    .owner_references
                    .iter()
                    .map(|r| r.uid.clone())
                    .collect()
            }),
        )
        .index(
            BY_GC_FINALIZER,
            Arc::new(|m: &Meta| {
                let f = &m.metadata;
                let mut v = Vec::new();
                if f.orphaning() {
                    v.push(crate::gc::meta::FINALIZER_ORPHAN.to_owned());
                }
                if f.deleting_dependents() {
                    v.push(crate::gc::meta::FINALIZER_FOREGROUND.to_owned());
                }
                v
            }),
        );
    Informer::spawn(MetadataListerWatcher::<Meta>::new(lw), config)
}

impl Graph {
    /// A graph following nothing yet: [`Graph::follow`] gives it its kinds.
    pub(crate) fn new() -> Self {
        Self {
            catalog: Catalog::default(),
            slots: RwLock::new(Vec::new()),
            kinds_known: AtomicBool::new(false),
        }
    }

    fn slots(&self) -> std::sync::RwLockReadGuard<'_, Vec<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `served` (the whole set of served resources) the followed set: starts an
    /// informer (on the current runtime) for each resource new to it and stops those of the
    /// resources gone from it. Returns the events of the new informers, for the caller to
    /// feed to [`Graph::on_delta`]; the stopped ones' streams end.
    pub(crate) fn follow(&self, served: &[Resource]) -> Vec<Events> {
        use futures::StreamExt;
        let changed = self.catalog.apply(served);
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for i in changed.removed {
            if let Some(slot) = slots.get_mut(i) {
                *slot = None;
            }
        }
        let mut events = Vec::with_capacity(changed.added.len());
        for (i, r, key) in changed.added {
            let inf = informer(&r, &key);
            events.push(inf.subscribe().map(move |d| (i, d)).boxed());
            let store = inf.store();
            if slots.len() <= i {
                slots.resize_with(i + 1, || None);
            }
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some((inf, store));
            }
        }
        self.kinds_known.store(true, Ordering::Release);
        events
    }

    /// Whether a set of kinds is known and every informer has listed once.
    pub(crate) fn synced(&self) -> bool {
        self.kinds_known.load(Ordering::Acquire)
            && self.slots().iter().flatten().all(|(i, _)| i.has_synced())
    }

    /// Every store, by catalog index.
    fn stores(&self) -> Vec<(usize, Store<Meta>)> {
        self.slots()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|(_, st)| (i, st.clone())))
            .collect()
    }

    /// The cached dependents of owner `uid`, across every resource.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(Item, Arc<Meta>)> {
        let mut out = Vec::new();
        for (i, s) in self.stores() {
            for m in s.by_index(BY_OWNER, uid).unwrap_or_default() {
                if let Some(item) = Item::of(i, &m.metadata) {
                    out.push((item, m));
                }
            }
        }
        out
    }

    /// Whether any cached object has owner `uid`.
    pub(crate) fn has_dependents(&self, uid: &str) -> bool {
        self.stores()
            .iter()
            .any(|(_, s)| s.by_index(BY_OWNER, uid).is_some_and(|v| !v.is_empty()))
    }

    /// Every cached object being deleted with a collector finalizer: `(orphaning, in the
    /// foreground)`.
    pub(crate) fn held_by_collector(&self) -> (Vec<Item>, Vec<Item>) {
        let (mut orphan, mut foreground) = (Vec::new(), Vec::new());
        for (i, s) in self.stores() {
            for (f, out) in [
                (crate::gc::meta::FINALIZER_ORPHAN, &mut orphan),
                (crate::gc::meta::FINALIZER_FOREGROUND, &mut foreground),
            ] {
                out.extend(
                    s.by_index(BY_GC_FINALIZER, f)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|m| Item::of(i, &m.metadata)),
                );
            }
        }
        (orphan, foreground)
    }

    /// The cached owner `r` names, for a dependent in `ns`: the item and its metadata, when
    /// cached with that uid.
    pub(crate) fn cached_owner(&self, ns: Option<&str>, r: &OwnerRef) -> Option<(Item, Arc<Meta>)> {
        let res = self.catalog.resolve(&r.api_version, &r.kind)?;
        let namespaced = self.catalog.get(res)?.info.namespaced;
        let store = self.slots().get(res)?.as_ref().map(|(_, s)| s.clone())?;
        let m = store.get_by_name(ns.filter(|_| namespaced), &r.name)?;
        (m.metadata.uid.as_deref() == Some(r.uid.as_str()))
            .then(|| Item::of(res, &m.metadata).map(|i| (i, m)))
            .flatten()
    }

    /// What one informer event asks of the workers (see the module doc).
    pub(crate) fn on_delta(&self, res: usize, delta: &Delta<Meta>, q: &Queues) {
        match delta {
            Delta::Added { object, .. } | Delta::Sync(object) => self.present(res, None, object, q),
            Delta::Updated { old, new } => self.present(res, Some(old), new, q),
            Delta::Deleted { object, .. } => self.absent(res, object, q),
        }
    }

    fn present(&self, res: usize, old: Option<&Meta>, new: &Meta, q: &Queues) {
        let m = &new.metadata;
        let Some(item) = Item::of(res, m) else {
            return;
        };
        let refs_changed = old.is_none_or(|o| o.metadata.owner_references != m.owner_references);
        if refs_changed {
            let unsure = m.owner_references.iter().any(|r| {
                self.cached_owner(m.namespace.as_deref(), r)
                    .is_none_or(|(_, o)| o.metadata.deleting_dependents())
            });
            if unsure {
                tracing::debug!(res, item = %item.name, uid = %item.uid, "garbage collector: an owner is not cached (or deletes in the foreground): checking");
                q.delete.add(item.clone());
            }
            // Owners this object no longer blocks (or no longer has) may be free to go.
            if let Some(old) = old {
                self.wake_waiting_owners(&old.metadata, q);
            }
        }
        if m.orphaning() && !old.is_some_and(|o| o.metadata.orphaning()) {
            q.orphan.add(item.clone());
        }
        if m.deleting_dependents() && !old.is_some_and(|o| o.metadata.deleting_dependents()) {
            for (d, _) in self.dependents(&item.uid) {
                q.delete.add(d);
            }
            q.delete.add(item);
        }
    }

    fn absent(&self, res: usize, gone: &Meta, q: &Queues) {
        let m = &gone.metadata;
        if let Some(uid) = m.uid.as_deref() {
            let dependents = self.dependents(uid);
            tracing::debug!(res, item = ?m.name, uid, dependents = dependents.len(), "garbage collector: an object went away");
            for (d, _) in dependents {
                q.delete.add(d);
            }
        }
        self.wake_waiting_owners(m, q);
    }

    /// Queues the owners of `m` that are being deleted in the foreground.
    fn wake_waiting_owners(&self, m: &Fields, q: &Queues) {
        for r in &m.owner_references {
            if let Some((owner, o)) = self.cached_owner(m.namespace.as_deref(), r)
                && o.metadata.deleting_dependents()
            {
                q.delete.add(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle deadline (the reflector's default, the server timeout plus 30 s) re-watched
    /// every 5–10 minutes over a storage watch that never times out.
    #[test]
    fn the_informers_have_no_idle_deadline() {
        assert_eq!(
            informer_config().reflector.watch_idle_margin,
            StorageListerWatcher::NO_IDLE_DEADLINE
        );
    }
}
