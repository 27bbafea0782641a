//! Singletons: the background controllers that must run once across every replica of the
//! server over one storage — the namespace controller (`listwatch-endpoints`) and the garbage
//! collector (the [`gc`](crate::gc) module, unless `--enable-garbage-collector=false`), and whatever else is
//! added to [`Singletons`].
//!
//! With `--storage etcd` several replicas may share the storage, so the singletons run under
//! a leader election (`--leader-elect`, on by default): client-go's protocol, as implemented
//! by `listwatch_runtime::leaderelection`, on the `coordination.k8s.io/v1` Lease
//! `--leader-elect-resource-namespace`/`--leader-elect-resource-name`
//! (`kube-system/listwatch-controllers`), read and written in process through the leases
//! resource's storage ([`StorageLeaseLock`]: creates, and updates conditional on the
//! resourceVersion read, as the Lease's HTTP API would do them). The embedded store is one
//! process's by construction, so there (and with `--leader-elect=false`) they simply run.
//!
//! Invariants (those of the elector, see its module): at most one replica runs the
//! singletons at a time, except for requests a leader sent before its renew deadline; a
//! leader that cannot renew drops them at its renew deadline, before its lease can expire
//! for anyone else; a replica shutting down stops them first, then releases the lease so
//! that another replica takes over at its next try (≤ 2.2 retry periods). Whether this
//! replica leads is `leader_election_master_status{name}` on `/metrics` (1 or 0), as
//! upstream's.
//!
//! What the singletons must tolerate: a run cut at any await point (a lost lease or
//! shutdown drops the future) and a successor redoing its last steps; both hold for the
//! namespace controller, whose every step is an idempotent, conditional storage write, and
//! for the garbage collector, whose every write is a request with a uid precondition or a
//! resourceVersion-conditional patch, decided on fresh reads (a successor starts from its
//! own informers' full lists).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::{Object, Status};
use listwatch_endpoints::{KindSpec, Resource};
use listwatch_registry::fieldmanager::FieldManager;
use listwatch_registry::{CreateOptions, Store, StoreError};
use listwatch_runtime::leaderelection::{
    LeaderElectionConfig, LeaderElector, LeaseLock, LeaseRecord, LeaseState,
};
use listwatch_schema::Catalog;
use listwatch_storage::{Error as StorageError, GetOptions, Key, Preconditions, Storage, Updated};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};

/// A singleton: called each time this replica starts leading; the future runs until
/// leadership ends (then it is dropped).
pub type Work = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The singletons of this server, by name.
#[derive(Default)]
pub struct Singletons {
    work: Vec<(&'static str, Work)>,
}

impl std::fmt::Debug for Singletons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.work.iter().map(|(n, _)| n))
            .finish()
    }
}

impl Singletons {
    /// Adds a singleton.
    pub fn add(&mut self, name: &'static str, work: Work) {
        self.work.push((name, work));
    }

    /// Every singleton at once, as one future.
    fn run_all(&self) -> impl Future<Output = ()> + Send + use<> {
        let names: Vec<&'static str> = self.work.iter().map(|(n, _)| *n).collect();
        let all: Vec<_> = self.work.iter().map(|(_, w)| w()).collect();
        async move {
            tracing::info!(singletons = ?names, "starting the singletons");
            futures::future::join_all(all).await;
        }
    }
}

/// How the singletons are coordinated (from the flags).
#[derive(Debug, Clone)]
pub struct ElectionOptions {
    /// The elector's configuration (identity, durations).
    pub config: LeaderElectionConfig,
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
}

/// The running singletons (or their election); stops them when dropped.
pub struct Running {
    task: tokio::task::JoinHandle<()>,
    /// Resolves the election's shutdown (the elector releases its lease).
    stop: Arc<tokio::sync::Notify>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    /// Stops the singletons and, when leading, releases the lease; waits at most `bound`.
    pub async fn stop(&mut self, bound: Duration) {
        self.stop.notify_one();
        if tokio::time::timeout(bound, &mut self.task).await.is_err() {
            tracing::warn!("the singletons did not stop in time");
            self.task.abort();
        }
    }
}

/// Registers `leader_election_master_status` on `registry`.
pub fn register_metrics(
    registry: &mut prometheus_client::registry::Registry,
) -> Family<Vec<(String, String)>, Gauge> {
    let status = Family::<Vec<(String, String)>, Gauge>::default();
    registry.register(
        "leader_election_master_status",
        "Whether this replica leads (1) or not (0), by lease name; the singletons run only \
         where it is 1",
        status.clone(),
    );
    status
}

/// Starts the singletons: under an election on `leases` when `election` is given, else at
/// once.
pub fn start(
    singletons: Singletons,
    election: Option<(ElectionOptions, &Resource)>,
    status: Family<Vec<(String, String)>, Gauge>,
) -> Result<Running, String> {
    let stop = Arc::new(tokio::sync::Notify::new());
    let Some((opts, leases)) = election else {
        let work = singletons.run_all();
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            tokio::select! {
                () = work => {}
                () = stopped.notified() => {}
            }
        });
        return Ok(Running { task, stop });
    };
    let lock = StorageLeaseLock::new(leases, &opts.namespace, &opts.name)?;
    let elector = LeaderElector::new(lock, opts.config.clone()).map_err(|e| e.to_string())?;
    let gauge = status
        .get_or_create(&vec![("name".to_owned(), opts.name.clone())])
        .clone();
    let mut leading = elector.leading();
    let stopped = Arc::clone(&stop);
    tracing::info!(identity = %opts.config.identity, lease = %format!("{}/{}", opts.namespace, opts.name),
        "leader election: a candidate for the singletons");
    let task = tokio::spawn(async move {
        let report = async move {
            while leading.changed().await.is_ok() {
                gauge.set(i64::from(*leading.borrow_and_update()));
            }
            std::future::pending::<()>().await;
        };
        let singletons = Arc::new(singletons);
        let elect = elector.run(move || singletons.run_all(), stopped.notified());
        tokio::select! {
            () = elect => {}
            () = report => {}
        }
    });
    Ok(Running { task, stop })
}

/// A [`LeaseLock`] on a Lease in this server's own storage (the leases resource's), so that
/// the replicas elect through the storage they share without an HTTP round trip to
/// themselves. Creates and conditional updates as the HTTP API does them.
pub struct StorageLeaseLock {
    storage: Arc<dyn Storage>,
    info: Arc<KindSpec>,
    namespace: String,
    name: String,
    key: Key,
}

/// The manager the lease lock's writes are recorded under: upstream's leader election runs
/// in kube-controller-manager, whose client's user agent (`kube-controller-manager/<version>
/// ... leader-election`) names its managedFields entry.
pub const LEADER_ELECTION_MANAGER: &str = "kube-controller-manager";

impl StorageLeaseLock {
    /// The registry store of the leases (creates go through its create rules).
    fn store(&self) -> Store {
        Store::new(Arc::clone(&self.info), Arc::clone(&self.storage))
    }

    /// The lock on Lease `namespace/name` of the `leases` resource.
    pub fn new(leases: &Resource, namespace: &str, name: &str) -> Result<Self, String> {
        let key = Key::object(&leases.info.storage_resource, Some(namespace), name)
            .map_err(|e| format!("lease {namespace}/{name}: {e}"))?;
        Ok(Self {
            storage: Arc::clone(&leases.storage),
            info: Arc::clone(&leases.info),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key,
        })
    }

    fn state(&self, o: &Object) -> listwatch_runtime::Result<LeaseState> {
        let v = o
            .to_value()
            .map_err(|e| listwatch_runtime::Error::Decode(e.to_string()))?;
        Ok(LeaseState {
            record: LeaseRecord::from_spec(v.get("spec").unwrap_or(&Value::Null)),
            resource_version: o.resource_version().to_string(),
        })
    }
}

/// A storage error as the HTTP API would answer it (409 for conflicts and existing objects,
/// so that the elector sees what it would see over HTTP).
fn client_error(e: &StorageError) -> listwatch_runtime::Error {
    let (code, reason) = if e.is_conflict() {
        (409, "Conflict")
    } else if matches!(e, StorageError::AlreadyExists { .. }) {
        (409, "AlreadyExists")
    } else if e.is_not_found() {
        (404, "NotFound")
    } else {
        (500, "InternalError")
    };
    listwatch_runtime::Error::Api(Box::new(Status::failure(code, reason, e.to_string())))
}

fn internal(e: impl std::fmt::Display) -> StorageError {
    StorageError::internal(e.to_string())
}

#[async_trait]
impl LeaseLock for StorageLeaseLock {
    async fn get(&self) -> listwatch_runtime::Result<Option<LeaseState>> {
        let found = self
            .storage
            .get(
                &self.key,
                &GetOptions {
                    resource_version: None,
                    ignore_not_found: true,
                },
            )
            .await
            .map_err(|e| client_error(&e))?;
        found.map(|o| self.state(&o)).transpose()
    }

    async fn create(&self, record: &LeaseRecord) -> listwatch_runtime::Result<LeaseState> {
        let value = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        });
        let Value::Object(map) = value else {
            return Err(client_error(&internal("not an object")));
        };
        let created = self
            .store()
            .create(
                Some(&self.namespace),
                map,
                &CreateOptions::by(LEADER_ELECTION_MANAGER),
            )
            .await
            .map_err(|e| match e {
                StoreError::Storage(e) => client_error(&e),
                StoreError::Rejected(e) => client_error(&internal(e)),
            })?;
        self.state(&created)
    }

    async fn update(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> listwatch_runtime::Result<LeaseState> {
        let rv: u64 = resource_version.parse().map_err(|_| {
            listwatch_runtime::Error::Request(format!("resourceVersion {resource_version:?}"))
        })?;
        let pre = Preconditions {
            uid: None,
            resource_version: Some(rv),
        };
        let spec = record.to_spec();
        let info = Arc::clone(&self.info);
        let key = self.key.clone();
        let catalog = Catalog::builtin();
        let mut step = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
            let cur = cur.ok_or_else(|| key.not_found())?;
            let old = cur.to_value().map_err(internal)?;
            let mut v = old.clone();
            v["spec"] = spec.clone();
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            // Recorded as the leader-election client's update, as through the API.
            FieldManager::new(&info, "", &catalog).update(
                Some(&old),
                &mut v,
                LEADER_ELECTION_MANAGER,
            );
            Object::from_value(v, &info.selectable_fields)
                .map(Updated::from)
                .map_err(internal)
        };
        let updated = self
            .storage
            .guaranteed_update(&self.key, Some(&pre), false, &mut step, None)
            .await
            .map_err(|e| client_error(&e))?;
        self.state(&updated)
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
