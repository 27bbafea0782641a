//! The server driven by real external clients: kubectl, the Python `kubernetes` client,
//! curl and openssl, and the docs' shell blocks. Each test starts its own
//! `listwatch-apiserver` on a free loopback port; tests that drive a tool are `#[ignore]`d
//! for a bare machine (`common::require` fails them when the tool is missing) and `cargo
//! xtask test` runs them with everything provisioned.
//!
//! One test binary for what used to be one binary per file (issue 27); each former file is a
//! module (`cargo test -p listwatch-apiserver --test clients -- --include-ignored kubectl::`).
//! Tests here share the process: kubectl runs with its test's own cache dir and kubeconfig
//! (or `--server`), the environment a client must see is set on its child process only
//! (never `std::env::set_var`), and a test that re-runs itself in a child process names
//! itself by its module path (`common::test_name`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod apiservices_secrets;
mod audit;
mod auth;
mod auth_defaults;
mod binding_reviews;
mod bootstrap;
mod builtin_defaults;
mod builtin_kinds;
mod cbor_kubectl;
mod client_credentials;
mod component_statuses;
mod compression;
mod container_validation;
mod crd_read_defaults;
mod crd_schema;
mod crds;
mod csr_requester;
mod doc_shell_blocks;
mod events_api;
mod field_validation;
mod garbage_collector;
mod hpa_v1;
mod http2;
mod kind_validation;
mod kubectl;
mod lifecycle;
mod managed_fields_opt_out;
mod namespaces;
mod pki_dir;
mod pod_deletion;
mod pod_eviction;
mod printer_columns;
mod python_client;
mod registry_strategies;
mod schemas;
mod selectable_fields;
mod server_side_apply;
mod ssa_noop;
mod system_priority_classes;
mod tls;
mod typed_canonical;
mod typed_validation;
mod workload_validation;
