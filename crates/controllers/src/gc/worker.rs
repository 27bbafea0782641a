//! The collector's decisions, taken on live reads (upstream's `attemptToDeleteItem`,
//! `processDeletingDependentsItem` and `attemptToOrphanWorker`).
//!
//! An object's owner references are classified, each by a live read of the owner (the
//! resource resolved from `apiVersion`/`kind`; a namespaced owner in the dependent's
//! namespace): **dangling** when no object of that name has the reference's uid (absent, or
//! replaced by another object of the same name), **waiting** when the owner is being deleted
//! in the foreground, else **solid**. Then:
//! - some solid owner: the references to dangling and waiting owners are removed, nothing
//!   is deleted;
//! - no solid owner, some waiting, and the object has dependents of its own: it is deleted
//!   in the foreground (after unblocking its own references when one of its dependents is
//!   itself deleting in the foreground: a cycle, which must not wait on itself);
//! - else (every owner dangling or waiting): it is deleted, with the propagation its own
//!   finalizers ask for (`orphan`, `foregroundDeletion`), else in the background.
//!
//! An object being deleted in the foreground loses its `foregroundDeletion` finalizer once
//! no cached dependent blocks it (`blockOwnerDeletion: true`); until then its blocking
//! dependents are queued. An owner being deleted with `orphan` has the references to it
//! removed from every cached dependent, then loses the finalizer.
//!
//! An owner found solid by its live read but not in the collector's caches (with that uid)
//! is *unobserved*: the object is verified again later (the item re-queued with its backoff,
//! [`GcError::OwnerNotObserved`]) until the owner's informer shows it — from then on its
//! deletion reaches the collector as an event, or as a relist's `final_state_unknown`
//! deletion — or a live read finds it gone. Without this, an owner created and deleted while
//! its informer could not watch (a just-created custom resource's cache answering 429, then
//! 410 and a relist after the deletion) was never seen at all, and its dependents, checked
//! once while it lived, stayed forever. Upstream's collector re-queues such "virtual" owners
//! the same way until an informer observes them (`processAttemptToDeleteWorker`, kubernetes
//! issue 56121).
//!
//! Absent owners are remembered (by namespace and uid, at most [`ABSENT_CAPACITY`]), so that
//! a thousand dependents of one deleted owner cost one read of it. So are owners that were
//! deleted with orphaning (same bound): a dependent the caches had not seen yet when its
//! owner was orphaning (created just before) would otherwise be found later with an absent
//! owner and deleted; a reference to such an owner is removed instead, and does not count
//! against the object. (Upstream's collector has that window; a restarted collector, or one
//! that has forgotten the owner, has it too.)

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::gc::GcError;
use crate::gc::calls::{Calls, Decided, Policy};
use crate::gc::graph::{Graph, Item, Queues};
use crate::gc::meta::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN, Fields, OwnerRef};

/// How many absent owners (and, separately, orphaned owners) are remembered.
pub(crate) const ABSENT_CAPACITY: usize = 1024;

/// Owners known by (namespace, uid) — absent ones, or ones deleted with orphaning: bounded,
/// oldest forgotten first.
#[derive(Debug, Default)]
pub(crate) struct AbsentOwners {
    set: HashSet<(Option<Arc<str>>, Arc<str>)>,
    order: VecDeque<(Option<Arc<str>>, Arc<str>)>,
}

impl AbsentOwners {
    fn contains(&self, ns: Option<&str>, uid: &str) -> bool {
        self.set.contains(&(ns.map(Arc::from), Arc::from(uid)))
    }

    fn insert(&mut self, ns: Option<&str>, uid: &str) {
        let k = (ns.map(Arc::from), Arc::<str>::from(uid));
        if self.set.insert(k.clone()) {
            self.order.push_back(k);
            while self.order.len() > ABSENT_CAPACITY {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

/// How an owner reference stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Solid,
    Dangling,
    Waiting,
    /// Absent, and deleted with orphaning: the reference goes, the object stays.
    Orphaned,
}

/// The shared state of the workers.
pub(crate) struct Workers {
    pub(crate) graph: Graph,
    pub(crate) calls: Calls,
    pub(crate) queues: Queues,
    pub(crate) absent: Mutex<AbsentOwners>,
    pub(crate) orphaned: Mutex<AbsentOwners>,
}

/// The live object an item names, as its metadata and JSON; `None` when it is gone or
/// replaced (another uid).
struct Live {
    meta: Fields,
    /// The resourceVersion and owner references read, the preconditions of a DELETE.
    decided: Decided,
}

impl Workers {
    async fn live(&self, item: &Item) -> Result<Option<Live>, GcError> {
        // A kind no longer served: its objects are gone as far as the collector can tell.
        let Some(res) = self.graph.catalog.get(item.res) else {
            return Ok(None);
        };
        let res = &res;
        let Some(v) = self.calls.get(res, item.ns(), &item.name).await? else {
            return Ok(None);
        };
        let raw = v.get("metadata").unwrap_or(&Value::Null);
        let meta = Fields::from_metadata(raw);
        let decided = Decided {
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            owner_references: raw.get("ownerReferences").cloned().unwrap_or(Value::Null),
        };
        Ok((meta.uid.as_deref() == Some(&*item.uid)).then_some(Live { meta, decided }))
    }

    fn resource(&self, i: usize) -> Result<listwatch_endpoints::Resource, GcError> {
        self.graph
            .catalog
            .get(i)
            .ok_or_else(|| GcError::Request(format!("no resource {i}")))
    }

    /// Should `item` go (or, being deleted in the foreground, may it go)?
    pub(crate) async fn attempt_to_delete(&self, item: &Item) -> Result<(), GcError> {
        let Some(live) = self.live(item).await? else {
            // Gone or replaced: whatever depended on this uid is to be checked.
            for (d, _) in self.graph.dependents(&item.uid) {
                self.queues.delete.add(d);
            }
            return Ok(());
        };
        let m = &live.meta;
        if m.deleting {
            if m.deleting_dependents() {
                return self.process_deleting_dependents(item).await;
            }
            // On its way out: its dependents are checked when it is gone.
            return Ok(());
        }
        if m.owner_references.is_empty() {
            return Ok(());
        }
        let (mut solid, mut dangling, mut waiting, mut orphaned) =
            (0usize, Vec::new(), Vec::new(), Vec::new());
        // Owners found live that the caches have not shown yet (see the module doc).
        let mut unobserved = None;
        for r in &m.owner_references {
            match self.classify(item, r).await? {
                None => {
                    // A cluster-scoped object naming a namespaced owner: invalid, and no
                    // retry will change that (upstream leaves such objects alone).
                    tracing::debug!(item = %item.name, owner = %r.name, "garbage collector: a cluster-scoped object refers to a namespaced owner");
                    return Ok(());
                }
                Some(Owner::Solid) => {
                    solid += 1;
                    if unobserved.is_none() && self.graph.cached_owner(item.ns(), r).is_none() {
                        unobserved = Some(r);
                    }
                }
                Some(Owner::Dangling) => dangling.push(r.uid.clone()),
                Some(Owner::Waiting) => waiting.push(r.uid.clone()),
                Some(Owner::Orphaned) => orphaned.push(r.uid.clone()),
            }
        }
        let res = &self.resource(item.res)?;
        if solid > 0 || (dangling.is_empty() && waiting.is_empty()) {
            dangling.extend(waiting);
            dangling.extend(orphaned);
            if !dangling.is_empty() {
                tracing::debug!(item = %item.name, owners = ?dangling, "garbage collector: removing references to absent or deleting owners");
                self.calls
                    .remove_owner_refs(res, item.ns(), &item.name, &item.uid, &dangling)
                    .await?;
            }
            return match unobserved {
                // Its deletion might never reach the caches: verified again, with backoff,
                // until the caches show it or a live read finds it gone.
                Some(r) => Err(GcError::OwnerNotObserved {
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                }),
                None => {
                    tracing::debug!(item = %item.name, "garbage collector: its owners exist: kept");
                    Ok(())
                }
            };
        }
        if !waiting.is_empty() && self.graph.has_dependents(&item.uid) {
            let cycle = self
                .graph
                .dependents(&item.uid)
                .iter()
                .any(|(_, d)| d.metadata.deleting_dependents());
            if cycle {
                tracing::debug!(item = %item.name, "garbage collector: a dependent of this object waits for its own dependents: unblocking this object's owner references");
                self.calls
                    .unblock_owner_refs(res, item.ns(), &item.name, &item.uid)
                    .await?;
            }
            tracing::debug!(item = %item.name, "garbage collector: deleting in the foreground");
            return self
                .calls
                .delete(
                    res,
                    item.ns(),
                    &item.name,
                    &item.uid,
                    Some(&live.decided),
                    Policy::Foreground,
                )
                .await;
        }
        let policy = if m.has_finalizer(FINALIZER_ORPHAN) {
            Policy::Orphan
        } else if m.has_finalizer(FINALIZER_FOREGROUND) {
            Policy::Foreground
        } else {
            Policy::Background
        };
        tracing::debug!(item = %item.name, ?policy, "garbage collector: deleting an object whose owners are gone");
        self.calls
            .delete(
                res,
                item.ns(),
                &item.name,
                &item.uid,
                Some(&live.decided),
                policy,
            )
            .await
    }

    /// How owner reference `r` of `item` stands (`None`: a namespaced owner of a
    /// cluster-scoped object).
    async fn classify(&self, item: &Item, r: &OwnerRef) -> Result<Option<Owner>, GcError> {
        let res_i = self
            .graph
            .catalog
            .resolve(&r.api_version, &r.kind)
            .ok_or_else(|| GcError::Unresolvable {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
            })?;
        let res = &self.resource(res_i)?;
        if res.info.namespaced && item.namespace.is_none() {
            return Ok(None);
        }
        let ns = item.ns().filter(|_| res.info.namespaced);
        let absent = if remembered(&self.orphaned, ns, &r.uid) {
            Owner::Orphaned
        } else {
            Owner::Dangling
        };
        if remembered(&self.absent, ns, &r.uid) {
            return Ok(Some(absent));
        }
        let Some(v) = self.calls.get(res, ns, &r.name).await? else {
            remember(&self.absent, ns, &r.uid);
            return Ok(Some(absent));
        };
        let owner = Fields::from_metadata(v.get("metadata").unwrap_or(&Value::Null));
        if owner.uid.as_deref() != Some(r.uid.as_str()) {
            remember(&self.absent, ns, &r.uid);
            return Ok(Some(absent));
        }
        Ok(Some(if owner.deleting_dependents() {
            Owner::Waiting
        } else {
            Owner::Solid
        }))
    }

    /// An object deleted in the foreground: its finalizer goes once nothing blocks it.
    async fn process_deleting_dependents(&self, item: &Item) -> Result<(), GcError> {
        let blocking: Vec<(Item, Arc<crate::gc::meta::Meta>)> = self
            .graph
            .dependents(&item.uid)
            .into_iter()
            .filter(|(_, d)| {
                d.metadata
                    .reference_to(&item.uid)
                    .is_some_and(|r| r.block_owner_deletion)
            })
            .collect();
        if blocking.is_empty() {
            tracing::debug!(item = %item.name, "garbage collector: no blocking dependents left: removing foregroundDeletion");
            let res = &self.resource(item.res)?;
            return self
                .calls
                .remove_finalizer(res, item.ns(), &item.name, &item.uid, FINALIZER_FOREGROUND)
                .await;
        }
        for (d, m) in blocking {
            if !m.metadata.deleting_dependents() {
                self.queues.delete.add(d);
            }
        }
        Ok(())
    }

    /// An owner deleted with `orphan`: its dependents lose their references to it, then it
    /// loses the finalizer.
    pub(crate) async fn attempt_to_orphan(&self, item: &Item) -> Result<(), GcError> {
        let Some(live) = self.live(item).await? else {
            return Ok(());
        };
        if !live.meta.orphaning() {
            return Ok(());
        }
        // Dependents the caches have not seen yet are orphaned when they show up.
        let owner_ns = item
            .ns()
            .filter(|_| self.resource(item.res).is_ok_and(|r| r.info.namespaced));
        remember(&self.orphaned, owner_ns, &item.uid);
        let owners = [item.uid.to_string()];
        for (d, _) in self.graph.dependents(&item.uid) {
            let res = &self.resource(d.res)?;
            self.calls
                .remove_owner_refs(res, d.ns(), &d.name, &d.uid, &owners)
                .await?;
        }
        tracing::debug!(item = %item.name, "garbage collector: dependents orphaned: removing the orphan finalizer");
        let res = &self.resource(item.res)?;
        self.calls
            .remove_finalizer(res, item.ns(), &item.name, &item.uid, FINALIZER_ORPHAN)
            .await
    }
}

fn remembered(set: &Mutex<AbsentOwners>, ns: Option<&str>, uid: &str) -> bool {
    set.lock().is_ok_and(|a| a.contains(ns, uid))
}

fn remember(set: &Mutex<AbsentOwners>, ns: Option<&str>, uid: &str) {
    if let Ok(mut a) = set.lock() {
        a.insert(ns, uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_owners_are_bounded_and_keyed_by_namespace() {
        let mut a = AbsentOwners::default();
        a.insert(Some("a"), "u");
        assert!(a.contains(Some("a"), "u"));
        assert!(!a.contains(Some("b"), "u"), "another namespace's owner");
        assert!(!a.contains(None, "u"));
        for i in 0..ABSENT_CAPACITY {
            a.insert(None, &i.to_string());
        }
        assert!(!a.contains(Some("a"), "u"), "the oldest is forgotten");
        assert_eq!(a.set.len(), ABSENT_CAPACITY);
        assert_eq!(a.order.len(), ABSENT_CAPACITY);
    }
}
