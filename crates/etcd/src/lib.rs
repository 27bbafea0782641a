//! The etcd v3 adapter of listwatch: the [`Storage`](listwatch_storage::Storage) interface
//! over a real etcd (a single member or a cluster), with Kubernetes' `storage/etcd3`
//! semantics.
//!
//! It owns
//! - the gRPC client for the part of etcd's v3 API listwatch uses, generated at build time
//!   from this crate's `proto/` with a vendored `protoc` ([`proto`]);
//! - [`EtcdClient`]: connections to several endpoints with dial, keepalive and request
//!   timeouts, failover for reads, readiness;
//! - [`EtcdStore`]: one resource's storage — key layout `/registry/{resource}/{ns}/{name}`,
//!   JSON values without `resourceVersion`, resource version = `mod_revision`, optimistic
//!   transactions, paginated consistent lists with continue tokens, TTLs via leases, watches
//!   with `prev_kv` and progress notifications turned into bookmarks (guarded against etcd
//!   issue 15220, see the `watch` module);
//! - [`Compactor`]: periodic history compaction coordinated between servers;
//! - with the `test-util` feature, `testing`: a throwaway etcd server and a fault proxy.
//!
//! It sits beside the embedded store, under the cacher: `listwatch-storage` defines what it
//! implements. It must never depend on the watch cache, the cacher, HTTP serving or the
//! apiserver; of listwatch's crates it uses only `listwatch-api` and `listwatch-storage`.
//!
//! ```no_run
//! use listwatch_api::{Object, SelectableFields};
//! use listwatch_etcd::{EtcdClient, EtcdConfig, EtcdStore};
//! use listwatch_storage::{Key, ListOptions, Storage};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = EtcdClient::new(EtcdConfig::new(["http://127.0.0.1:2379"]))?;
//! let fields = SelectableFields::new(["spec.nodeName"]);
//! let pods = EtcdStore::new(client, "/registry", fields.clone());
//! let pod = Object::from_json(br#"{"metadata":{"name":"a","namespace":"ns"}}"#, &fields)?;
//! let created = pods.create(&Key::object("pods", Some("ns"), "a")?, pod, None).await?;
//! let list = pods.list(&Key::collection("pods", Some("ns"))?, &ListOptions::recursive()).await?;
//! assert!(list.resource_version >= created.resource_version());
//! # Ok(()) }
//! ```

mod client;
mod compactor;
mod progress;
pub mod proto;
mod store;
#[cfg(feature = "test-util")]
pub mod testing;
mod watch;

pub use client::{
    ConfigError, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT, EtcdClient, EtcdConfig,
    EtcdTls, MAX_WINDOW, ServerVersion,
};
pub use compactor::{
    Compactor, CompactorState, DEFAULT_COMPACT_KEY, DEFAULT_COMPACTION_INTERVAL, OBSERVE_INTERVAL,
    RoundOutcome, compact_now, compact_round, compaction_time, observe_compaction,
};
pub use store::EtcdStore;
