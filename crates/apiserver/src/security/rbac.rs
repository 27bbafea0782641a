//! The RBAC resources at run time: the informers the authorizer reads (and the
//! ServiceAccount informer token verification reads), the bootstrap policy kept in place
//! (created at start, reconciled whenever one of its objects changes), ClusterRole
//! aggregation, and the admission hook that validates RBAC writes and refuses escalation.
//!
//! Invariants: the informers read the resources through their cachers (in process), never
//! per request; writes made here go through the same storage as API writes; the admission
//! hook runs on the object that is about to be stored.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::Object;
use listwatch_api::status::Status;
use listwatch_auth::rbac::{
    self, GROUP, Rbac, RbacStores, Role, RoleBinding,
    bootstrap::{self, Reconcile},
};
use listwatch_cacher::StorageListerWatcher;
use listwatch_endpoints::admission::{Admission, AdmissionRequest, MutationRequest, Operation};
use listwatch_endpoints::{ApiError, ApiResult, Resource};
use listwatch_registry::fieldmanager::FieldManager;
use listwatch_registry::{CreateOptions, Store, StoreError};
use listwatch_runtime::{Informer, InformerConfig, Typed};
use listwatch_schema::Catalog;
use listwatch_storage::{Key, no_validation};
use serde_json::Value;

use super::Security;
use super::filter::Identity;

fn find<'a>(resources: &'a [Resource], group: &str, plural: &str) -> Option<&'a Resource> {
    resources
        .iter()
        .find(|r| r.info.group == group && r.info.plural == plural)
}

fn lister(r: &Resource) -> Option<StorageListerWatcher> {
    let key = Key::collection(&r.info.storage_resource, None).ok()?;
    Some(StorageListerWatcher::new(Arc::clone(&r.storage), key))
}

/// An informer configuration over a [`StorageListerWatcher`]: no idle deadline (its watch
/// never times out, so a deadline would only re-watch every 5–10 minutes).
fn informer_config<K>() -> InformerConfig<K> {
    InformerConfig {
        reflector: StorageListerWatcher::reflector_config(listwatch_runtime::Config::default()),
        ..InformerConfig::default()
    }
}

/// The running informers; dropping them stops them.
pub struct Informers {
    roles: Informer<Role>,
    cluster_roles: Informer<Role>,
    role_bindings: Informer<RoleBinding>,
    cluster_role_bindings: Informer<RoleBinding>,
    /// ServiceAccounts, for token verification.
    pub service_accounts: Option<Informer<Object>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    /// Starts the informers over the served resources (`None` if the RBAC resources are not
    /// served).
    pub fn start(resources: &[Resource]) -> Option<Self> {
        let typed_role = |plural| -> Option<Informer<Role>> {
            let lw = lister(find(resources, GROUP, plural)?)?;
            Some(Informer::spawn(Typed::new(lw), informer_config()))
        };
        let typed_binding = |plural| -> Option<Informer<RoleBinding>> {
            let lw = lister(find(resources, GROUP, plural)?)?;
            let (name, f) = rbac::subject_index();
            Some(Informer::spawn(
                Typed::new(lw),
                informer_config().index(name, f),
            ))
        };
        let service_accounts = find(resources, "", "serviceaccounts")
            .and_then(lister)
            .map(|lw| Informer::spawn(lw, informer_config()));
        Some(Self {
            roles: typed_role("roles")?,
            cluster_roles: typed_role("clusterroles")?,
            role_bindings: typed_binding("rolebindings")?,
            cluster_role_bindings: typed_binding("clusterrolebindings")?,
            service_accounts,
        })
    }

    /// The RBAC authorizer over these informers' stores.
    pub fn rbac(&self) -> Rbac {
        Rbac::new(RbacStores {
            roles: self.roles.store(),
            cluster_roles: self.cluster_roles.store(),
            role_bindings: self.role_bindings.store(),
            cluster_role_bindings: self.cluster_role_bindings.store(),
        })
    }

    /// Waits until every informer has listed.
    pub async fn wait_synced(&self) {
        let _ = futures::future::join4(
            self.roles.wait_until_synced(),
            self.cluster_roles.wait_until_synced(),
            self.role_bindings.wait_until_synced(),
            self.cluster_role_bindings.wait_until_synced(),
        )
        .await;
        if let Some(sa) = &self.service_accounts {
            let _ = sa.wait_until_synced().await;
        }
    }

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

/// Whether `new` differs from the stored `old` only in the fields the garbage collector
/// manages (`metadata.ownerReferences`, `metadata.finalizers`) and the server's own
/// bookkeeping of a write (`managedFields`, `resourceVersion`), none of which grants
/// anything (upstream's `IsOnlyMutatingGCFields`).
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
            ] {
                meta.remove(field);
            }
        }
        v
    };
    strip(old) == strip(new)
}

/// Validates RBAC writes and refuses escalation (upstream's RBAC registry checks).
pub struct RbacAdmission(pub std::sync::OnceLock<Arc<Security>>);

fn invalid(kind: &str, name: &str, errors: &[rbac::FieldError]) -> ApiError {
    let name = listwatch_api::echo::echo(name);
    let summary = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = Status::failure(
        422,
        "Invalid",
        format!("{kind}.{GROUP} {name:?} is invalid: {summary}"),
    )
    .with_target(GROUP, kind, &name);
    for e in errors {
        s = s.with_cause("FieldValueInvalid", &e.detail, &e.field);
    }
    ApiError::from_status(s)
}

fn forbidden(plural: &str, name: &str, message: &str) -> ApiError {
    let name = listwatch_api::echo::echo(name);
    let mut s = Status::failure(
        403,
        "Forbidden",
        format!("{plural}.{GROUP} {name:?} is forbidden: {message}"),
    );
    s = s.with_target(GROUP, plural, &name);
    ApiError::from_status(s)
}

impl Admission for RbacAdmission {
    fn mutate(&self, req: &MutationRequest<'_>, object: &mut Value) -> ApiResult<()> {
        if super::certificates::is_csr(req.info) {
            super::certificates::mutate(req, object);
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>) -> ApiResult<()> {
        if super::certificates::applies(req) {
            return match (self.0.get(), req.extensions.get::<Identity>()) {
                (Some(sec), Some(id)) => super::certificates::check(sec.authz.as_ref(), &id.0, req),
                _ => Ok(()),
            };
        }
        if req.info.group != GROUP {
            return Ok(());
        }
        let name = req
            .object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespaced = req.info.namespaced;
        let ns = req.namespace.unwrap_or("");
        let bad = |e: serde_json::Error| {
            invalid(
                &req.info.kind,
                name,
                &[rbac::FieldError {
                    field: "(body)".into(),
                    detail: format!(
                        "Invalid value: {}",
                        listwatch_api::echo::echo(&e.to_string())
                    ),
                }],
            )
        };
        let sec = self.0.get();
        // An update of only the garbage collector's fields is not checked for escalation
        // (upstream's `IsOnlyMutatingGCFields`): removing a finalizer from (say) an
        // aggregating ClusterRole being deleted needs the update verb, nothing more.
        let user = match req.old {
            Some(old) if only_gc_fields_change(old, req.object) => None,
            _ => req.extensions.get::<Identity>().map(|i| Arc::clone(&i.0)),
        };
        match req.info.plural.as_str() {
            "roles" | "clusterroles" => {
                let role: Role = serde_json::from_value(req.object.clone()).map_err(bad)?;
                let errors = rbac::validate_role(&role, namespaced);
                if !errors.is_empty() {
                    return Err(invalid(&req.info.kind, name, &errors));
                }
                if let (Some(sec), Some(user)) = (sec, user)
                    && sec.rbac.is_some()
                {
                    // The stored version counts (a ClusterRole that aggregated before the
                    // write needs full authority too); it parsed when it was stored, so a
                    // failure here is refused rather than guessed at.
                    let old = match req.old {
                        Some(old) => {
                            Some(serde_json::from_value::<Role>(old.clone()).map_err(|e| {
                                ApiError::internal(format!("the stored {}: {e}", req.info.kind))
                            })?)
                        }
                        None => None,
                    };
                    rbac::check_role_object(
                        sec.authz.as_ref(),
                        &user,
                        ns,
                        req.name.unwrap_or(""),
                        &role,
                        old.as_ref(),
                    )
                    .map_err(|e| forbidden(&req.info.plural, name, &e.0))?;
                }
            }
            "rolebindings" | "clusterrolebindings" => {
                let mut b: RoleBinding = serde_json::from_value(req.object.clone()).map_err(bad)?;
                // Validated as stored: defaulted first, as upstream decodes then validates.
                rbac::default_subjects(&mut b);
                let old_ref = match (req.operation, req.old) {
                    (Operation::Update, Some(old)) => {
                        serde_json::from_value::<RoleBinding>(old.clone())
                            .ok()
                            .map(|o| o.role_ref)
                    }
                    _ => None,
                };
                let errors = rbac::validate_binding(&b, namespaced, old_ref.as_ref());
                if !errors.is_empty() {
                    return Err(invalid(&req.info.kind, name, &errors));
                }
                if let (Some(sec), Some(user)) = (sec, user)
                    && let Some(r) = &sec.rbac
                {
                    rbac::check_binding_write(r, sec.authz.as_ref(), &user, ns, &b.role_ref)
                        .map_err(|e| forbidden(&req.info.plural, name, &e.0))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The ServiceAccounts token verification looks up: the informer's store first, then the
/// resource's storage when the store misses or holds another uid (upstream's token getter:
/// lister, then a live GET). The read goes through the resource's storage with no
/// resource version — through a cacher that is a read of the backend, never of the cache.
pub struct Accounts {
    store: listwatch_runtime::Store<Object>,
    storage: Arc<dyn listwatch_storage::Storage>,
    storage_resource: String,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts")
            .field("storage_resource", &self.storage_resource)
            .finish_non_exhaustive()
    }
}

impl Accounts {
    /// A lookup over this informer store and the serviceaccounts resource's storage (and
    /// its storage resource name, for keys).
    pub fn new(
        store: listwatch_runtime::Store<Object>,
        storage: Arc<dyn listwatch_storage::Storage>,
        storage_resource: String,
    ) -> Self {
        Self {
            store,
            storage,
            storage_resource,
        }
    }
}

/// What token verification needs of a stored ServiceAccount: its uid, and when it is
/// marked for deletion. Only an object whose JSON names `deletionTimestamp` is parsed (the
/// informer path stays a map look-up).
fn account(o: &Object) -> listwatch_auth::authn::Account {
    const MARK: &[u8] = b"\"deletionTimestamp\"";
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default, rename = "deletionTimestamp")]
        deletion_timestamp: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Marked {
        metadata: Meta,
    }
    let deleted_at = if o.stored_json().windows(MARK.len()).any(|w| w == MARK) {
        o.deserialize::<Marked>()
            .ok()
            .and_then(|m| m.metadata.deletion_timestamp)
            .and_then(|t| listwatch_endpoints::clock::parse_rfc3339(&t))
    } else {
        None
    };
    listwatch_auth::authn::Account {
        uid: o.uid().unwrap_or("").to_owned(),
        deleted_at,
    }
}

impl listwatch_auth::authn::ServiceAccountLookup for Accounts {
    fn cached(&self, namespace: &str, name: &str) -> Option<listwatch_auth::authn::Account> {
        self.store
            .get_by_name(Some(namespace), name)
            .map(|o| account(&o))
    }

    fn stored<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> listwatch_auth::authn::BoxFuture<'a, Result<Option<listwatch_auth::authn::Account>, String>>
    {
        Box::pin(async move {
            let key = Key::object(&self.storage_resource, Some(namespace), name)
                .map_err(|e| e.to_string())?;
            let opts = listwatch_storage::GetOptions {
                resource_version: None,
                ignore_not_found: true,
            };
            let found = self
                .storage
                .get(&key, &opts)
                .await
                .map_err(|e| e.to_string())?;
            Ok(found.as_ref().map(account))
        })
    }
}

/// The ServiceAccount lookup of token verification (see [`Accounts`]).
pub fn accounts(
    informers: &Informers,
    resources: &[Resource],
) -> Option<Box<dyn listwatch_auth::authn::ServiceAccountLookup>> {
    let store = informers.service_accounts.as_ref()?.store();
    let resource = find(resources, "", "serviceaccounts")?;
    Some(Box::new(Accounts::new(
        store,
        Arc::clone(&resource.storage),
        resource.info.storage_resource.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_auth::authn::service_account::verification_keys;
    use listwatch_auth::authn::{
        ServiceAccountTokens, TokenAuthenticator, TokenIssuer, TokenRequestSpec,
    };
    use listwatch_storage::Storage;

    const ISS: &str = "https://kubernetes.default.svc.cluster.local";

    /// The informers' watch never times out: an idle deadline (the reflector's default, the
    /// server timeout plus 30 s) re-watched every 5–10 minutes.
    #[test]
    fn the_informers_have_no_idle_deadline() {
        let config = informer_config::<Role>();
        assert_eq!(
            config.reflector.watch_idle_margin,
            StorageListerWatcher::NO_IDLE_DEADLINE
        );
    }

    async fn create(storage: &dyn Storage, name: &str, uid: &str) {
        create_marked(storage, name, uid, None).await;
    }

    /// Creates an account, marked for deletion `deleted_ago` seconds ago if given.
    async fn create_marked(storage: &dyn Storage, name: &str, uid: &str, deleted_ago: Option<i64>) {
        let key = Key::object("serviceaccounts", Some("demo"), name).unwrap();
        let mut v = serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": "demo", "uid": uid, "finalizers": ["example.com/hold"]},
        });
        if let Some(ago) = deleted_ago {
            let at = listwatch_endpoints::clock::now_unix() - ago;
            v["metadata"]["deletionTimestamp"] =
                listwatch_endpoints::clock::format_rfc3339(at).into();
        }
        storage
            .create(
                &key,
                Object::from_value(v, &Default::default()).unwrap(),
                None,
            )
            .await
            .unwrap();
    }

    /// The race of issue 14 over real storage: the informer has not seen the account
    /// (here: it never sees anything), storage holds it. Before the storage read the token
    /// was refused (401) although the account existed.
    #[tokio::test]
    async fn tokens_of_accounts_the_informer_has_not_seen_are_checked_in_storage() {
        let storage: Arc<dyn Storage> = Arc::new(listwatch_memstore::MemStore::new());
        let held_back = listwatch_runtime::Writer::<Object>::default();
        let accounts = Accounts::new(
            held_back.store(),
            Arc::clone(&storage),
            "serviceaccounts".into(),
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer =
            TokenIssuer::from_pem(key.serialize_pem().as_bytes(), ISS, vec![ISS.into()]).unwrap();
        let tokens = ServiceAccountTokens::new(
            verification_keys(key.public_key_pem().as_bytes()).unwrap(),
            vec![ISS.into()],
            vec![ISS.into()],
            Box::new(accounts),
        );
        create(storage.as_ref(), "builder", "uid-1").await;
        let (token, _) = issuer
            .issue("demo", "builder", "uid-1", &TokenRequestSpec::default())
            .unwrap();
        let user = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "system:serviceaccount:demo:builder");

        // Deleted, then re-created under the same name: storage says "another uid".
        let k = Key::object("serviceaccounts", Some("demo"), "builder").unwrap();
        storage
            .delete(&k, None, no_validation(), None)
            .await
            .unwrap();
        let e = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has been deleted"), "{e}");
        create(storage.as_ref(), "builder", "uid-2").await;
        let e = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");

        // Held by a finalizer after a delete: the tokens last the 60 s leeway (upstream).
        create_marked(storage.as_ref(), "leaving", "uid-3", Some(10)).await;
        create_marked(storage.as_ref(), "left", "uid-4", Some(120)).await;
        let (leaving, _) = issuer
            .issue("demo", "leaving", "uid-3", &TokenRequestSpec::default())
            .unwrap();
        let (left, _) = issuer
            .issue("demo", "left", "uid-4", &TokenRequestSpec::default())
            .unwrap();
        assert!(tokens.authenticate_token(&leaving).resolve().await.is_ok());
        let e = tokens
            .authenticate_token(&left)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has been deleted"), "{e}");
    }
}
