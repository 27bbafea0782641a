//! Audit logging for listwatch, after upstream's `k8s.io/apiserver/pkg/audit`: which
//! requests are recorded and how much of them ([`Policy`], `--audit-policy-file`), the
//! `audit.k8s.io/v1` [`Event`], and the log backend ([`LogBackend`], `--audit-log-path`) that
//! writes one JSON event per line and rotates by size.
//!
//! Invariants:
//! - events go through a queue bounded by events and by bytes to a writer thread; while it
//!   is full a request waits for room, at most a bounded time, as upstream's blocking log
//!   backend ([`Mode::Blocking`], the default), or its event is dropped at once
//!   ([`Mode::Batch`]); a dropped event is counted (`apiserver_audit_error_total{plugin="log"}`);
//! - the log file is created `0600` (its directory `0700`);
//! - an event records the level actually applied: `RequestResponse` is recorded as
//!   `Request` (no response bodies are recorded);
//! - every event written is one complete line of JSON;
//! - a rule's level applies to the first matching rule only; no match is `None` (nothing
//!   recorded), as upstream's policy checker.
//!
//! It depends on `listwatch-auth` for the user and the request attributes, and on nothing
//! HTTP: the server builds [`Event`]s and hands them to the backend.
//!
//! ```
//! use listwatch_audit::{Level, Policy};
//! use listwatch_auth::{Attributes, UserInfo};
//!
//! let policy = Policy::from_yaml(br#"
//! apiVersion: audit.k8s.io/v1
//! kind: Policy
//! rules:
//! - level: None
//!   users: ["system:kube-proxy"]
//! - level: Request
//!   resources: [{group: "", resources: ["configmaps"]}]
//! - level: Metadata
//! "#).unwrap();
//! let alice = UserInfo::new("alice", ["system:authenticated"]);
//! let cm = Attributes::resource("create", "", "configmaps", "demo");
//! assert_eq!(policy.level(&alice, &cm).0, Level::Request);
//! ```

mod backend;
mod event;
mod policy;

pub use backend::{
    AuditMetrics, DEFAULT_BLOCK_WAIT, DEFAULT_QUEUE_BYTES, LogBackend, LogConfig, Mode,
};
pub use event::{Event, ObjectRef, ResponseStatus, Stage, timestamp};
pub use policy::{Level, Policy, PolicyError};
