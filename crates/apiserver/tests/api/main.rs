//! The server through raw HTTP and the Rust clients (listwatch-client, kube-rs), on the
//! embedded store: each test starts its own `listwatch-apiserver` on a free loopback port
//! (`common::Server`) and needs no external tool, so plain `cargo test` runs nearly all of
//! them. Fast: seconds each (the authorization matrix, about a minute, is `#[ignore]`d for
//! plain `cargo test`).
//!
//! One test binary for what used to be one binary per file, so that the server and its
//! dependencies are linked once (issue 27); each former file is a module and keeps its name
//! (`cargo test -p listwatch-apiserver --test api kube_rs::`). Tests here share the process:
//! none may set environment variables, change the current directory, install a global
//! subscriber or bind a fixed port — a server is told its port, a child process gets its own
//! environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod authz_escalation;
mod authz_matrix;
mod cache_consistency;
mod cbor;
mod client_certificates;
mod client_http2;
mod client_toolkit;
mod controller_example;
mod crd_manifest;
mod crd_pattern_memory;
mod crd_red_team;
mod crds_kube_rs;
mod create_authz;
mod csr_requestor;
mod drain;
mod embedded_store;
mod error_echo_bounds;
mod flags;
mod flow_control_fairness;
mod health;
mod http_errors;
mod impersonation;
mod insecure_origin;
mod kube_derive;
mod kube_rs;
mod kube_rs_http2;
mod listwatch_client;
mod metadata_only;
mod pod_ephemeral_containers;
mod registry_resttest;
mod secret_writes;
mod service_defaults;
mod service_type_changes;
mod sharded_list_watch;
mod start_logs;
mod token_review_audiences;
mod typed_api;
mod upstream_fixtures;
mod watch_cache;
mod watch_frames;
mod watch_latency;
mod website_operator;
mod website_operator_sieve;
mod websocket;
