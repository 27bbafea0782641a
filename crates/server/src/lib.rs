//! The server infrastructure of listwatch's API: what decides whether, when and where a
//! request runs, apart from what it means (the registry) and how it is spoken (the
//! endpoints' HTTP layer).
//!
//! It owns, a module each (moved whole from the endpoints, which use them for every request):
//! - [`flowcontrol`]: who gets the request seats, watch slots and request-body memory, and in
//!   which order, per client flow ([`flowcontrol::ClientKey`]): a small version of upstream's
//!   API Priority and Fairness;
//! - [`compute`]: the request compute pool (a second tokio runtime where the CPU of writes,
//!   Tables and YAML runs, off the threads that drive the sockets) and its fair admission
//!   gate by client;
//! - [`metrics`]: the request, watch, flow-control and pool metrics, registered in the one
//!   shared prometheus-client registry (upstream's `apiserver_*` names).
//!
//! # Invariants
//! - every seat, queue place, watch slot, body byte and pool place is released exactly once,
//!   by a guard's `Drop`, also when a request is cancelled;
//! - state is bounded by the limits, never by the number of clients: a flow exists only
//!   while it holds or waits for something;
//! - gauges are decremented by guards, so a dropped request or watch never leaves them high.
//!
//! # Layers
//! It depends on no workspace crate (tokio and prometheus-client only). It must never depend
//! on HTTP serving (axum), storage, the registry or the endpoints; the endpoints build it
//! from their `Config` and the binary registers its metrics.
//!
//! ```
//! use listwatch_server::flowcontrol::{ClientKey, FlowControl, Limits};
//! use listwatch_server::metrics::Metrics;
//!
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = Metrics::register(&mut registry);
//! let limits = Limits {
//!     max_requests_inflight: 400,
//!     max_mutating_requests_inflight: 200,
//!     max_watches: 1000,
//!     max_watches_per_client: 100,
//!     max_queued_requests_per_client: 50,
//!     max_buffered_body_bytes: 64 << 20,
//! };
//! let flow = FlowControl::new(&limits, &metrics);
//! // A watch holds its slot for its whole life; the slot is released when dropped.
//! let slot = flow.watches.try_open(&ClientKey::user("alice")).unwrap();
//! drop(slot);
//! ```

pub mod compute;
pub mod flowcontrol;
pub mod metrics;
