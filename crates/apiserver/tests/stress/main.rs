//! The long and heavy ones: the chaos test against etcd, the soak, the adversarial suites
//! (hostile, hostile_conn, hostile_cost), the connection layer under floods, and the request
//! compute pool under load (request_compute, body_compute, stalled_readers). Each starts its
//! own server (and etcd) on free ports.
//!
//! One test binary for what used to be one binary per file (issue 27); each former file is a
//! module (`cargo test -p listwatch-apiserver --test stress -- --include-ignored chaos::`).
//! They share the machine with each other as they did before (libtest runs as many tests
//! at once as there are cores), so no assertion here may depend on how busy the machine is:
//! they assert causality (what was in flight, what completed meanwhile) or use deadlines
//! generous enough only to catch a hang.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod body_compute;
mod chaos;
mod connections;
mod etcd_soak;
mod hostile;
mod hostile_conn;
mod hostile_cost;
mod request_compute;
mod stalled_readers;
