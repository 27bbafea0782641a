//! The bootstrap policy kept in place and ClusterRoles aggregated: the reconciler task
//! ([`Informers::spawn_reconciler`]), one pass of it ([`reconcile`]) and the writes a pass
//! makes (create, update of the fields the policy owns, recreate, and the aggregated
//! `rules`).
//!
//! Invariants: a pass decides on the informer stores the authorizer reads and writes
//! through the resources' storage, as the API does; an aggregation write lands only while
//! the stored object still has the `aggregationRule` its rules were gathered for; the
//! reconciler reports the policy in force only after a pass that had nothing to write.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::Object;
use listwatch_auth::rbac::{
    self, GROUP, Role, RoleBinding,
    bootstrap::{self, Reconcile},
};
use listwatch_endpoints::Resource;
use listwatch_registry::fieldmanager::FieldManager;
use listwatch_registry::{CreateOptions, Store, StoreError};
use listwatch_schema::Catalog;
use listwatch_storage::{Key, no_validation};
use serde_json::Value;

use super::{Informers, find};

impl Informers {
    /// Keeps the bootstrap policy in place and ClusterRoles aggregated: once at start, then
    /// after every change to ClusterRoles or ClusterRoleBindings (debounced), and again a
    /// second after a pass whose writes failed. Runs until the informers stop.
    ///
    /// The receiver turns `true` once a pass finds the whole policy in the informer stores
    /// the authorizer reads (upstream's `rbac/bootstrap-roles` readiness hook): the server
    /// announces itself only then, so its first request is authorized against the policy.
    pub fn spawn_reconciler(
        &self,
        resources: &[Resource],
    ) -> Option<(
        tokio::task::JoinHandle<()>,
        tokio::sync::watch::Receiver<bool>,
    )> {
        let roles_res = find(resources, GROUP, "clusterroles")?.clone();
        let bindings_res = find(resources, GROUP, "clusterrolebindings")?.clone();
        let roles = self.cluster_roles.store();
        let bindings = self.cluster_role_bindings.store();
        let mut role_changes = self.cluster_roles.subscribe();
        let mut binding_changes = self.cluster_role_bindings.subscribe();
        let (in_force_tx, in_force) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            // Only a stopped informer ends the reconciler: it outlasts failed lists.
            if roles.wait_until_synced_ignoring_failures().await.is_err()
                || bindings
                    .wait_until_synced_ignoring_failures()
                    .await
                    .is_err()
            {
                return;
            }
            loop {
                let (settled, written) =
                    reconcile(&roles_res, &bindings_res, &roles, &bindings).await;
                if settled {
                    in_force_tx.send_if_modified(|v| !std::mem::replace(v, true));
                } else if written.any() {
                    // A pass that wrote is followed by another as soon as the informers
                    // hold its writes (start-up goes through a few: the policy, then
                    // aggregation rounds, before the server may announce itself): waited
                    // for by their versions, event by event, not by a sleep.
                    let deadline = tokio::time::Instant::now() + OWN_WRITES_DEADLINE;
                    while !written.seen_by(&roles, &bindings) {
                        tokio::select! {
                            d = role_changes.next() => if d.is_none() { return },
                            d = binding_changes.next() => if d.is_none() { return },
                            () = tokio::time::sleep_until(deadline) => break,
                        }
                    }
                    if written.seen_by(&roles, &bindings) {
                        while futures::FutureExt::now_or_never(role_changes.next())
                            .flatten()
                            .is_some()
                        {}
                        while futures::FutureExt::now_or_never(binding_changes.next())
                            .flatten()
                            .is_some()
                        {}
                        continue;
                    }
                }
                // Wait for a change (the writes of this pass come back as changes), or
                // retry after a second when this pass had to write (a write may have
                // failed); then let a burst of changes settle.
                let retry = async {
                    if settled {
                        std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                };
                tokio::select! {
                    d = role_changes.next() => if d.is_none() { return },
                    d = binding_changes.next() => if d.is_none() { return },
                    () = retry => {}
                }
                // After a pass that could not write everything (or whose writes did not
                // come back in time), a short wait; a change from elsewhere gets the
                // longer one, for a burst (`kubectl apply` of many roles) to settle.
                let debounce = if settled { 100 } else { 10 };
                tokio::time::sleep(Duration::from_millis(debounce)).await;
                while futures::FutureExt::now_or_never(role_changes.next())
                    .flatten()
                    .is_some()
                {}
                while futures::FutureExt::now_or_never(binding_changes.next())
                    .flatten()
                    .is_some()
                {}
            }
        });
        Some((task, in_force))
    }
}

/// Prepares a new object like an API create (uid, timestamps) and stores it. Metadata the
/// server sets is dropped first, so a copy of a stored object creates cleanly (a create
/// with a `resourceVersion` is refused).
/// Creates the object `value`; `Ok(Some(rv))` with the version written, `Ok(None)` when it
/// already exists (another pass or replica wrote it first: nothing was written here).
async fn create(res: &Resource, value: Value) -> listwatch_storage::Result<Option<u64>> {
    let Value::Object(mut map) = value else {
        return Ok(None);
    };
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    let store = Store::new(Arc::clone(&res.info), Arc::clone(&res.storage));
    match store
        .create(
            None,
            map,
            &CreateOptions::by(listwatch_endpoints::SERVER_MANAGER),
        )
        .await
    {
        Ok(o) => Ok(Some(o.resource_version())),
        Err(e) if e.is_already_exists() => Ok(None),
        Err(StoreError::Storage(e)) => Err(e),
        Err(StoreError::Rejected(e)) => Err(listwatch_storage::Error::internal(e.to_string())),
    }
}

/// Replaces the stored object's fields with those of `value` (keeping server-set metadata);
/// the version stored.
async fn update(res: &Resource, name: &str, value: Value) -> listwatch_storage::Result<u64> {
    update_fields(res, name, value, false).await
}

/// Sets the stored object's fields to those of `value`: every field the bootstrap policy
/// owns, or (`aggregation`) only `rules`, and only while the stored object still has the
/// `aggregationRule` the rules were gathered for — the informer's copy may be stale, and a
/// stale copy must neither bring back a selector an administrator removed nor hand its
/// rules to a role that no longer aggregates (a conflict instead; the next pass recomputes).
async fn update_fields(
    res: &Resource,
    name: &str,
    value: Value,
    aggregation: bool,
) -> listwatch_storage::Result<u64> {
    let selectors = |v: &Value| {
        serde_json::from_value::<Role>(v.clone())
            .ok()
            .map(|r| r.aggregation_rule)
    };
    let gathered_for = selectors(&value);
    let key = Key::object(&res.info.storage_resource, None, name)?;
    let info = Arc::clone(&res.info);
    let catalog = Catalog::builtin();
    // Recorded as upstream's writers: the bootstrap reconcile is kube-apiserver's (its
    // loopback client), the aggregation kube-controller-manager's (its clusterrole
    // aggregation controller).
    let manager = if aggregation {
        "kube-controller-manager"
    } else {
        listwatch_endpoints::SERVER_MANAGER
    };
    let record = |old: &Value, new: &mut Value| {
        FieldManager::new(&info, "", &catalog).update(Some(old), new, manager);
    };
    let mut step = |cur: Option<&Object>| -> listwatch_storage::Result<listwatch_storage::Updated> {
        let cur = cur.ok_or_else(|| key.not_found())?;
        let mut v = cur
            .to_value()
            .map_err(|e| listwatch_storage::Error::internal(e.to_string()))?;
        let old = v.clone();
        if aggregation {
            if gathered_for.is_none() || selectors(&v) != gathered_for {
                return Err(key.conflict(
                    "the aggregationRule changed since the rules were gathered".to_owned(),
                ));
            }
            if let Some(x) = value.get("rules") {
                v["rules"] = x.clone();
            }
            record(&old, &mut v);
            return Object::from_value(v, &info.selectable_fields)
                .map(Into::into)
                .map_err(|e| listwatch_storage::Error::internal(e.to_string()));
        }
        for field in ["rules", "aggregationRule", "subjects", "roleRef"] {
            if let Some(x) = value.get(field) {
                v[field] = x.clone();
            }
        }
        for field in ["labels", "annotations"] {
            if let Some(x) = value["metadata"].get(field) {
                v["metadata"][field] = x.clone();
            }
        }
        record(&old, &mut v);
        Object::from_value(v, &info.selectable_fields)
            .map(Into::into)
            .map_err(|e| listwatch_storage::Error::internal(e.to_string()))
    };
    res.storage
        .guaranteed_update(&key, None, false, &mut step, None)
        .await
        .map(|o| o.resource_version())
}

/// Makes the stored object what `what` says; returns whether there was nothing to do (the
/// informer's copy is already as wanted). A write that succeeded is counted in `written`
/// (logged once per pass by [`reconcile`], not once per object), its version raised into
/// `rv`.
async fn write<T: serde::Serialize>(
    res: &Resource,
    name: &str,
    what: Reconcile<T>,
    written: &mut usize,
    rv: &mut u64,
) -> bool {
    let to_value = |t: &T| serde_json::to_value(t).unwrap_or(Value::Null);
    let result = match &what {
        Reconcile::Keep => return true,
        Reconcile::Create(t) => create(res, to_value(t)).await,
        Reconcile::Update(t) => update(res, name, to_value(t)).await.map(Some),
        Reconcile::Recreate(t) => {
            let deleted = match Key::object(&res.info.storage_resource, None, name) {
                Ok(key) => res
                    .storage
                    .delete(&key, None, no_validation(), None)
                    .await
                    .map(|_| ()),
                Err(e) => Err(e),
            };
            match deleted {
                Ok(()) => create(res, to_value(t)).await,
                Err(e) => Err(e),
            }
        }
    };
    match result {
        // Already there (an informer not synced yet saw nothing): nothing written, not
        // counted — a second pass would otherwise log the whole policy again.
        Ok(None) => {}
        Ok(Some(v)) => {
            *rv = (*rv).max(v);
            *written += 1;
            tracing::debug!(resource = %res.info.plural, name, "bootstrap policy reconciled");
        }
        Err(e) => {
            tracing::warn!(resource = %res.info.plural, name, error = %e, "reconciling the bootstrap policy failed")
        }
    }
    false
}

/// The newest versions one reconciler pass wrote, per resource (0: nothing written there).
#[derive(Debug, Default, Clone, Copy)]
struct Written {
    roles: u64,
    bindings: u64,
}

impl Written {
    /// Whether the pass wrote anything.
    fn any(self) -> bool {
        self.roles > 0 || self.bindings > 0
    }

    /// Whether the informer stores reflect every write of the pass: their version (the
    /// server's own, a number) is at least the newest one written.
    fn seen_by(
        self,
        roles: &listwatch_runtime::Store<Role>,
        bindings: &listwatch_runtime::Store<RoleBinding>,
    ) -> bool {
        let at_least =
            |rv: String, want: u64| want == 0 || rv.parse::<u64>().is_ok_and(|v| v >= want);
        at_least(roles.resource_version(), self.roles)
            && at_least(bindings.resource_version(), self.bindings)
    }
}

/// How long the reconciler waits for its own writes to come back through the informers
/// before its next pass; they come back within milliseconds, the bound is for a stalled
/// watch (the next pass then writes what it does not see, as before).
const OWN_WRITES_DEADLINE: Duration = Duration::from_secs(1);

/// One pass over the bootstrap policy; returns whether it is in force, i.e. the informer
/// stores (which the authorizer reads) already held every role and binding as wanted, so
/// that nothing had to be written, and the versions it wrote.
async fn reconcile(
    roles_res: &Resource,
    bindings_res: &Resource,
    roles: &listwatch_runtime::Store<Role>,
    bindings: &listwatch_runtime::Store<RoleBinding>,
) -> (bool, Written) {
    let mut rv = Written::default();
    let mut in_force = true;
    let (mut roles_written, mut bindings_written) = (0, 0);
    for want in bootstrap::cluster_roles() {
        let name = want.metadata.name.clone().unwrap_or_default();
        let have = roles.get_by_name(None, &name);
        in_force &= write(
            roles_res,
            &name,
            bootstrap::reconcile_role(have.as_deref(), &want),
            &mut roles_written,
            &mut rv.roles,
        )
        .await;
    }
    for want in bootstrap::cluster_role_bindings() {
        let name = want.metadata.name.clone().unwrap_or_default();
        let have = bindings.get_by_name(None, &name);
        in_force &= write(
            bindings_res,
            &name,
            bootstrap::reconcile_binding(have.as_deref(), &want),
            &mut bindings_written,
            &mut rv.bindings,
        )
        .await;
    }
    if roles_written + bindings_written > 0 {
        tracing::info!(
            cluster_roles = roles_written,
            cluster_role_bindings = bindings_written,
            "bootstrap policy reconciled"
        );
    }
    for new in rbac::aggregation_pass(&roles.list()) {
        let name = new.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&new).unwrap_or(Value::Null);
        match update_fields(roles_res, &name, value, true).await {
            Ok(v) => rv.roles = rv.roles.max(v),
            Err(e) => tracing::warn!(name, error = %e, "aggregating a ClusterRole failed"),
        }
        in_force = false;
    }
    (in_force, rv)
}
