//! The CRD controller: serves the resource each CustomResourceDefinition defines, as
//! upstream's apiextensions-apiserver (its naming, establishing and finalizer controllers and
//! its custom resource handler) does for a single-version-storage server.
//!
//! It owns, for every CRD it watches:
//! - **names** (`names`): `NamesAccepted` is `True` (`NoConflicts`) when each name of
//!   `spec.names` is free in the group — not another CRD's accepted name, not a name of a
//!   kind served otherwise nor of a resource answered outside the kind set
//!   ([`CrdController::reserve`]: the review APIs) — else `False` with upstream's reason (`PluralConflict`,
//!   `SingularConflict`, `ShortNamesConflict`, `KindConflict`, `ListKindConflict`);
//! - **serving**: once the names are accepted, a kind per served version joins the live kind
//!   set ([`listwatch_endpoints::Api::add_resource`]): discovery, the OpenAPI documents,
//!   the cache, watch, SSA, `/status`, `/scale`, printer columns and selectable fields are
//!   then the generic ones. The storage version's storage (and cache) comes from the
//!   [`StorageFactory`] the binary supplies; every other served version reads and writes the
//!   same objects with their `apiVersion` rewritten ([`versions::Versioned`], the `None`
//!   conversion). Every object read from the storage is decoded by the schema of the
//!   version it is stored in (pruned, defaulted: [`decode`]) before the cache takes it. An
//!   update of the CRD replaces its kinds; their storage is kept unless the update changed
//!   a schema, which builds a new one (and cache) decoding by the new schemas;
//! - **status**, written through the registry's store of the CRD kind (`calls`, a merge
//!   patch of `/status`) as the server's manager (`kube-apiserver` in managedFields):
//!   `acceptedNames`, `NamesAccepted`, `Established` (`InitialNamesAccepted`) and, by the
//!   CRD strategy, `storedVersions`;
//! - **deletion**: a CRD's first DELETE adds the `customresourcecleanup.apiextensions.k8s.io`
//!   finalizer and `Terminating` (the CRD kind's strategy); the controller then sets
//!   `Terminating` to `InstanceDeletionInProgress`, refuses creates of the custom resources
//!   from then on (405, as upstream's handler while `Terminating` is true; other writes are
//!   served), deletes every custom resource (the registry's deletion lifecycle, as a
//!   DELETE), waits for them to be gone (those held by
//!   finalizers are waited for, checked again every [`RETRY`]), waits (at most
//!   `DISPATCH_WAIT`, 5 s) until the watch cache has handed the deletions to the open watches
//!   (which send what they were handed before they end), stops serving the kinds
//!   (404, and gone from discovery) and removes the finalizer, which removes the CRD.
//!   A CRD found deleting at start (the server stopped during its cleanup) is served again
//!   under its accepted names until the cleanup ends, and every retry of a cleanup uses
//!   one storage (a fresh cache answers "initializing" until it has listed).
//!
//! # Invariants
//! - it runs on every replica (each serves from its own kind set); its writes are
//!   conditional on the resourceVersion they were computed from, so replicas and restarts
//!   only repeat each other's idempotent steps;
//! - a CRD's resource is served before `Established` is written, so a client that waited
//!   for the condition finds it;
//! - bounded: one watch, state per CRD, each read and write with a deadline
//!   (30 s); a failed step is retried
//!   on the next event or every [`RETRY`]; a broken watch is re-listed with a backoff of at
//!   most 5 s.

mod calls;
pub mod decode;
mod names;
pub mod versions;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_endpoints::{Api, KindSpec, Resource};
use listwatch_kinds::builtin::apiextensions::customresourcedefinition::{
    condition_true, set_condition,
};
use listwatch_kinds::crd::{self, CLEANUP_FINALIZER, Definition, Names};
use listwatch_registry::{Store, StoreError, options::DeleteRequest};
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use serde_json::{Value, json};

use calls::Calls;
use decode::ReadSchemas;
use names::Taken;

/// Builds the storage (with its cache) of a custom resource's storage version: the
/// backend's storage of `spec`, made by [`ReadSchemas::over`] into one whose reads are
/// decoded as upstream's (pruned, defaulted), under the cache, so that the cache holds and
/// every read answers decoded objects ([`decode`]).
pub type StorageFactory = Arc<dyn Fn(&KindSpec, &ReadSchemas) -> Arc<dyn Storage> + Send + Sync>;

/// How often pending work (a deleting CRD whose resources are not all gone, a failed
/// write) is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// Why a step of the controller failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] listwatch_storage::Error),
    /// An API call was refused.
    #[error("{message} ({code})")]
    Api {
        /// The HTTP status.
        code: u16,
        /// The Status message.
        message: String,
    },
    /// The registry refused a delete.
    #[error("{0}")]
    Registry(String),
    /// A call took longer than its deadline.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The watch ended.
    #[error("the watch of CRDs ended")]
    WatchEnded,
}

impl From<StoreError> for CrdError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Storage(s) => Self::Storage(s),
            StoreError::Rejected(r) => Self::Registry(r.to_string()),
        }
    }
}

/// What is served for one CRD.
#[derive(Clone)]
struct Installed {
    uid: String,
    /// The storage of the objects (the storage version's, with its cache).
    base: Arc<dyn Storage>,
    /// What `base` decodes the objects it reads by.
    read: ReadSchemas,
    /// Its key segment.
    storage_resource: String,
    generation: i64,
    names: Names,
    /// `(group, version, plural)` of each served version.
    keys: Vec<(String, String, String)>,
    /// Shared by the specs of every served version: set once the CRD is terminating.
    terminating: listwatch_kinds::Terminating,
}

/// The CRD controller; see the module doc.
pub struct CrdController {
    api: Api,
    factory: StorageFactory,
    calls: Calls,
    /// The latest state of every CRD seen, by name.
    known: HashMap<String, Value>,
    installed: HashMap<String, Installed>,
    /// The storage (with its cache) a deleting CRD that is not served is cleaned up
    /// through, by CRD name with its uid: kept across the cleanup's retries, since a new
    /// cache answers "initializing" until it has listed.
    cleanup: HashMap<String, (String, Arc<dyn Storage>)>,
    /// Resources the server answers outside the kind set (`group`, `plural`, `kind`: the
    /// review APIs' routes): their names are taken in their group, as a served kind's are.
    reserved: Vec<(String, String, String)>,
    /// CRDs to look at again at the next [`RETRY`].
    pending: HashSet<String>,
    /// Turns `true` once the CRDs stored at start have been looked at (their resources
    /// served): upstream's `crd-informer-synced` readiness.
    synced: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for CrdController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdController")
            .field("installed", &self.installed.len())
            .finish_non_exhaustive()
    }
}

fn meta_str<'a>(o: &'a Value, k: &str) -> &'a str {
    o.get("metadata")
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn now() -> String {
    listwatch_registry::clock::format_rfc3339(listwatch_registry::clock::now_unix())
}

impl CrdController {
    /// The controller of `api`'s CRDs, building storage with `factory`.
    pub fn new(api: &Api, factory: StorageFactory) -> Self {
        Self {
            api: api.clone(),
            factory,
            calls: Calls::new(api),
            known: HashMap::new(),
            installed: HashMap::new(),
            cleanup: HashMap::new(),
            reserved: Vec::new(),
            pending: HashSet::new(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Takes the names of `plural` (kind `kind`) in `group`, a resource the server answers
    /// outside the kind set (upstream's review APIs): a CRD naming it gets `NamesAccepted`
    /// `False`, as one naming a served kind does.
    #[must_use]
    pub fn reserve(mut self, group: &str, plural: &str, kind: &str) -> Self {
        self.reserved
            .push((group.to_owned(), plural.to_owned(), kind.to_owned()));
        self
    }

    /// Turns `true` once the CRDs stored when the controller started have been looked at
    /// (each accepted one served), or at once when the CRD kind is not served: what a
    /// server waits for before it reports ready, so that a restarted server does not answer
    /// 404 for custom resources it serves a moment later.
    pub fn synced(&self) -> tokio::sync::watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Runs until dropped (returns at once when the CRD kind is not served).
    pub async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.watch().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "CRD controller: relisting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn crds(&self) -> Option<Resource> {
        self.api
            .resources()
            .get(crd::GROUP, crd::VERSION, "customresourcedefinitions")
            .cloned()
    }

    /// One list and watch of the CRDs; `Ok` only when the kind is not served.
    async fn watch(&mut self) -> Result<(), CrdError> {
        let Some(crds) = self.crds() else {
            self.synced.send_replace(true);
            return Ok(());
        };
        let key = Key::collection(&crds.info.storage_resource, None)?;
        let list = within(
            "list CRDs",
            crds.storage.list(&key, &ListOptions::recursive()),
        )
        .await??;
        let listed: HashMap<String, Value> = list
            .items
            .iter()
            .filter_map(|o| o.to_value().ok())
            .map(|v| (meta_str(&v, "name").to_owned(), v))
            .collect();
        let gone: Vec<String> = self
            .installed
            .keys()
            .filter(|n| !listed.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.uninstall(&name);
        }
        self.known = listed;
        self.sync_all().await;
        self.synced.send_replace(true);
        let opts = ListOptions::recursive().at(Some(list.resource_version), None);
        let mut events = within("watch CRDs", crds.storage.watch(&key, &opts)).await??;
        let mut retry = tokio::time::interval(RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = events.next() => match ev {
                    None => return Err(CrdError::WatchEnded),
                    Some(WatchEvent::Error(e)) => return Err(e.into()),
                    Some(WatchEvent::Added(o) | WatchEvent::Modified { object: o, .. }) => {
                        let Ok(v) = o.to_value() else { continue };
                        let name = meta_str(&v, "name").to_owned();
                        self.known.insert(name.clone(), v);
                        self.sync(&name).await;
                    }
                    Some(WatchEvent::Deleted(o)) => {
                        let name = o.name().to_owned();
                        self.known.remove(&name);
                        self.uninstall(&name);
                        // Its names are free again: others may be accepted now.
                        self.sync_all().await;
                    }
                    Some(WatchEvent::Bookmark(_)) => {}
                },
                _ = retry.tick(), if !self.pending.is_empty() => {
                    for name in std::mem::take(&mut self.pending) {
                        self.sync(&name).await;
                    }
                }
            }
        }
    }

    async fn sync_all(&mut self) {
        let mut names: Vec<String> = self.known.keys().cloned().collect();
        // The oldest first: of two CRDs claiming a name, the older keeps it.
        names.sort_by_key(|n| {
            self.known
                .get(n)
                .map(|v| meta_str(v, "creationTimestamp").to_owned())
        });
        for name in names {
            self.sync(&name).await;
        }
    }

    /// Reconciles the CRD `name` (its latest known state); a failure is retried later.
    async fn sync(&mut self, name: &str) {
        let Some(obj) = self.known.get(name).cloned() else {
            return;
        };
        match self.reconcile(&obj).await {
            Ok(true) => {
                self.pending.insert(name.to_owned());
            }
            Ok(false) => {
                self.pending.remove(name);
            }
            // A conflict: the event of the newer state follows.
            Err(CrdError::Api { code: 409, .. }) => {}
            Err(e) => {
                tracing::warn!(crd = name, error = %e, "CRD controller: retrying");
                self.pending.insert(name.to_owned());
            }
        }
    }

    /// One step for `obj`; `Ok(true)` when it must be looked at again later.
    async fn reconcile(&mut self, obj: &Value) -> Result<bool, CrdError> {
        let name = meta_str(obj, "name").to_owned();
        let def = match Definition::read(obj) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "CRD controller: not readable");
                return Ok(false);
            }
        };
        let deleting = obj
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        if deleting {
            return self.finalize(&name, obj, &def).await;
        }
        let mut new = obj.clone();
        let now = now();
        let conflict = self.taken(&name, &def.group).conflict(&def.names);
        match conflict {
            None => {
                self.install(&name, obj, &def, &def.names);
                if let Some(st) = new.get_mut("status").and_then(Value::as_object_mut) {
                    st.insert("acceptedNames".into(), def.names.to_value());
                } else if let Some(o) = new.as_object_mut() {
                    o.insert(
                        "status".into(),
                        json!({"acceptedNames": def.names.to_value()}),
                    );
                }
                set_condition(
                    &mut new,
                    "NamesAccepted",
                    "True",
                    "NoConflicts",
                    "no conflicts found",
                    &now,
                );
                set_condition(
                    &mut new,
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                    &now,
                );
            }
            Some((reason, message)) => {
                set_condition(&mut new, "NamesAccepted", "False", reason, &message, &now);
                if !condition_true(obj, "Established") {
                    set_condition(
                        &mut new,
                        "Established",
                        "False",
                        "NotAccepted",
                        "not all names are accepted",
                        &now,
                    );
                }
            }
        }
        if new.get("status") != obj.get("status") {
            let status = new.get("status").cloned().unwrap_or_else(|| json!({}));
            self.calls
                .put_status(&name, meta_str(obj, "resourceVersion"), &status)
                .await?;
        }
        Ok(false)
    }

    /// The names taken in `group` by other CRDs and by kinds served otherwise.
    fn taken(&self, name: &str, group: &str) -> Taken {
        let mut taken = Taken::default();
        let mine: HashSet<&(String, String, String)> = self
            .installed
            .get(name)
            .map(|i| i.keys.iter().collect())
            .unwrap_or_default();
        let theirs: HashSet<&(String, String, String)> = self
            .installed
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .flat_map(|(_, i)| i.keys.iter())
            .collect();
        for r in self.api.resources().iter() {
            let i = &r.info;
            let key = (i.group.clone(), i.version.clone(), i.plural.clone());
            if i.group != group || mine.contains(&key) || theirs.contains(&key) {
                continue;
            }
            taken.add(
                &i.plural,
                &i.singular,
                &i.short_names,
                &i.kind,
                &i.list_kind(),
            );
        }
        for (g, plural, kind) in &self.reserved {
            if g == group {
                taken.add(
                    plural,
                    &kind.to_ascii_lowercase(),
                    &[],
                    kind,
                    &format!("{kind}List"),
                );
            }
        }
        for (other, i) in &self.installed {
            if other != name && i.keys.first().is_some_and(|k| k.0 == group) {
                taken.add_names(&i.names);
            }
        }
        for (other, v) in &self.known {
            if other == name || v.pointer("/spec/group").and_then(Value::as_str) != Some(group) {
                continue;
            }
            if let Some(accepted) = v.pointer("/status/acceptedNames") {
                let names = Names::read(accepted);
                if !names.plural.is_empty() {
                    taken.add_names(&names);
                }
            }
        }
        taken
    }

    /// Serves the CRD's versions under `names` (nothing when already served at this
    /// generation).
    fn install(&mut self, name: &str, obj: &Value, def: &Definition, names: &Names) {
        let uid = meta_str(obj, "uid").to_owned();
        let generation = obj
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let prev = self.installed.get(name).cloned();
        if let Some(i) = &prev
            && i.uid == uid
            && i.generation == generation
            && i.names == *names
        {
            return;
        }
        let specs = def.kind_specs(names);
        let Some(first) = specs.first() else {
            self.uninstall(name);
            return;
        };
        // The storage (and cache) of the objects: kept across updates of the same CRD that
        // leave its schemas as they were; one that changes them gets a new storage, whose
        // cache lists again and so holds the objects as the new schemas decode them (new
        // defaults, fields no longer declared pruned), as upstream rebuilds a CRD's storage
        // on an update. The old cache stops once no kind holds it (its watches end).
        let read = ReadSchemas::of(def, first.selectable_fields.clone());
        let base = prev
            .as_ref()
            .filter(|i| {
                i.uid == uid
                    && i.storage_resource == first.storage_resource
                    && i.read.same_as(&read)
            })
            .map(|i| Arc::clone(&i.base))
            .unwrap_or_else(|| (self.factory)(first, &read));
        let stored_api_version = first.api_version();
        let base_resource = first.storage_resource.clone();
        let terminating = listwatch_kinds::Terminating::default();
        let mut keys = Vec::new();
        // With more than one version, objects may be stored under a version that is no longer
        // the storage version (written before the storage version moved), so even the
        // storage version's route converts what it reads, as upstream's codec converts every
        // object to the requested version.
        let several_versions = def.versions.len() > 1;
        for mut spec in specs {
            spec.terminating = terminating.clone();
            keys.push((
                spec.group.clone(),
                spec.version.clone(),
                spec.plural.clone(),
            ));
            let storage: Arc<dyn Storage> =
                if spec.api_version() == stored_api_version && !several_versions {
                    Arc::clone(&base)
                } else {
                    Arc::new(versions::Versioned::new(
                        Arc::clone(&base),
                        &stored_api_version,
                        &spec.api_version(),
                        spec.selectable_fields.clone(),
                    ))
                };
            self.api.add_resource(spec, storage);
        }
        if let Some(i) = prev {
            for (g, v, p) in i.keys.iter().filter(|k| !keys.contains(k)) {
                let _ = self.api.remove_resource(g, v, p);
            }
            // The old schemas' patterns no other schema holds are freed with them.
            listwatch_kinds::custom::schema::release_unused_patterns();
        }
        tracing::info!(
            crd = name,
            versions = keys.len(),
            "serving a custom resource"
        );
        self.installed.insert(
            name.to_owned(),
            Installed {
                uid,
                storage_resource: base_resource,
                base,
                read,
                generation,
                names: names.clone(),
                keys,
                terminating,
            },
        );
    }

    /// Stops serving the CRD's kinds.
    fn uninstall(&mut self, name: &str) {
        self.cleanup.remove(name);
        if let Some(i) = self.installed.remove(name) {
            for (g, v, p) in &i.keys {
                let _ = self.api.remove_resource(g, v, p);
            }
            // Its patterns no other schema holds are freed with its kinds.
            listwatch_kinds::custom::schema::release_unused_patterns();
            tracing::info!(crd = name, "no longer serving a custom resource");
        }
    }

    /// A deleting CRD: its custom resources deleted, then its kinds and finalizer removed.
    async fn finalize(
        &mut self,
        name: &str,
        obj: &Value,
        def: &Definition,
    ) -> Result<bool, CrdError> {
        let has = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(CLEANUP_FINALIZER)));
        if condition_true(obj, "Terminating")
            && let Some(i) = self.installed.get(name)
        {
            // Creates are refused from now on (upstream's handler reads the condition).
            i.terminating.set();
        }
        if !has {
            // Held by others' finalizers: still served until it is gone.
            return Ok(false);
        }
        let mut new = obj.clone();
        set_condition(
            &mut new,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            &now(),
        );
        if new.get("status") != obj.get("status") {
            let status = new.get("status").cloned().unwrap_or_else(|| json!({}));
            self.calls
                .put_status(name, meta_str(obj, "resourceVersion"), &status)
                .await?;
            // The next event (the status written) carries on.
            return Ok(false);
        }
        // A CRD found deleting (the server restarted during its cleanup) is served under
        // the names it had accepted, as upstream serves a terminating CRD: its remaining
        // objects can be read and their finalizers removed, and the cleanup goes through
        // one storage whose cache gets to list.
        if !self.installed.contains_key(name) {
            let accepted = obj.pointer("/status/acceptedNames").map(Names::read);
            if let Some(accepted) = accepted.filter(|n| !n.plural.is_empty()) {
                self.install(name, obj, def, &accepted);
            }
        }
        let names = self
            .installed
            .get(name)
            .map_or_else(|| def.names.clone(), |i| i.names.clone());
        // Every version's spec is held until the finalizer is removed: that last write
        // validates the CRD again, and finds its patterns compiled.
        let specs = def.kind_specs(&names);
        let Some(spec) = specs.first().cloned() else {
            return Ok(false);
        };
        let uid = meta_str(obj, "uid");
        let storage = match self
            .installed
            .get(name)
            .filter(|i| i.storage_resource == spec.storage_resource)
        {
            Some(i) => Arc::clone(&i.base),
            None => match self.cleanup.get(name).filter(|(u, _)| u == uid) {
                Some((_, s)) => Arc::clone(s),
                None => {
                    let s = (self.factory)(
                        &spec,
                        &ReadSchemas::of(def, spec.selectable_fields.clone()),
                    );
                    self.cleanup
                        .insert(name.to_owned(), (uid.to_owned(), Arc::clone(&s)));
                    s
                }
            },
        };
        let remaining = delete_instances(&spec, &storage).await?;
        if remaining > 0 {
            tracing::debug!(crd = name, remaining, "waiting for custom resources to go");
            return Ok(true);
        }
        // Open watches get their DELETED events before the resource stops being served.
        dispatched(&spec, &storage).await;
        self.uninstall(name);
        // A create that raced the deletion (served until now) goes too: no object of the
        // CRD may outlive it, to reappear when a CRD of the same name is created again.
        let raced = delete_instances(&spec, &storage).await?;
        if raced > 0 {
            tracing::warn!(
                crd = name,
                raced,
                "custom resources created during the CRD's deletion are held by finalizers"
            );
            return Ok(true);
        }
        let rest: Vec<Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter(|x| x.as_str() != Some(CLEANUP_FINALIZER))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        self.calls
            .put_finalizers(name, meta_str(obj, "resourceVersion"), rest)
            .await?;
        // The CRD is gone: its patterns that no other schema holds are freed.
        drop((spec, specs));
        listwatch_kinds::custom::schema::release_unused_patterns();
        Ok(false)
    }
}

/// Deletes every custom resource of `spec` in `storage` (as a DELETE of each would); how
/// many are left (held by finalizers, or created meanwhile).
async fn delete_instances(spec: &KindSpec, storage: &Arc<dyn Storage>) -> Result<usize, CrdError> {
    let key = Key::collection(&spec.storage_resource, None)?;
    let store = Store::new(Arc::new(spec.clone()), Arc::clone(storage));
    let list = within(
        "list custom resources",
        storage.list(&key, &ListOptions::recursive()),
    )
    .await??;
    let mut left = 0usize;
    for o in &list.items {
        let marked = o.to_value().ok().is_some_and(|v| {
            v.pointer("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null())
        });
        if marked {
            left += 1;
            continue;
        }
        match within(
            "delete a custom resource",
            store.delete(o.namespace(), o.name(), &DeleteRequest::default()),
        )
        .await?
        {
            Ok(listwatch_registry::lifecycle::Deletion::Gone(_)) => {}
            Ok(listwatch_registry::lifecycle::Deletion::Pending(_)) => left += 1,
            Err(StoreError::Storage(e)) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(left)
}

/// How long [`dispatched`] waits for the watch cache to hand out the deletions.
const DISPATCH_WAIT: Duration = Duration::from_secs(5);
/// How often [`dispatched`] asks for progress again while it waits.
const PROGRESS_RETRY: Duration = Duration::from_millis(100);

/// Waits (at most [`DISPATCH_WAIT`]) until every change of `storage` up to its current
/// revision has been handed to the open watches of the resource, as upstream's watchers get
/// the finalizer's deletions before the storage is torn down: a progress-notifying watch
/// from that revision, and a progress request, whose bookmark the cache sends only once it
/// has dispatched everything up to the revision (its watchers get events in order). A
/// storage that never answers delays the removal by the bound only.
async fn dispatched(spec: &KindSpec, storage: &Arc<dyn Storage>) {
    let wait = async {
        let rev = storage.current_resource_version().await?;
        let key = Key::collection(&spec.storage_resource, None)?;
        let mut opts = ListOptions::recursive().at(Some(rev), None);
        opts.allow_watch_bookmarks = true;
        opts.progress_notify = true;
        let mut stream = storage.watch(&key, &opts).await?;
        loop {
            // Asked again until answered: a request that reaches the cache before this
            // watch is registered with it is answered to the others only.
            storage.request_watch_progress().await?;
            match tokio::time::timeout(PROGRESS_RETRY, stream.next()).await {
                Ok(Some(WatchEvent::Bookmark(b))) if b.resource_version >= rev => break,
                Ok(Some(WatchEvent::Error(e))) => return Err(e),
                Ok(None) => break,
                Ok(Some(_)) | Err(_) => {}
            }
        }
        Ok::<(), listwatch_storage::Error>(())
    };
    match tokio::time::timeout(DISPATCH_WAIT, wait).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(resource = %spec.storage_resource, error = %e,
            "could not wait for the deletions to reach the watches"),
        Err(_) => tracing::debug!(resource = %spec.storage_resource,
            "the deletions did not reach the watches in time"),
    }
}

/// `f`, or [`CrdError::Timeout`] after [`calls::CALL_TIMEOUT`].
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> Result<T, CrdError> {
    tokio::time::timeout(calls::CALL_TIMEOUT, f)
        .await
        .map_err(|_| CrdError::Timeout(what.to_owned()))
}
