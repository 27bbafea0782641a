//! The embedded store through its public API: its own behaviour, the storage conformance
//! suite in memory and durable, the write-ahead log and snapshots on disk (damage,
//! `--data-dir` handling, durability), a stress run and wake-ups. Each test has its own
//! store and, when durable, its own temp dir.
//!
//! One test binary for what used to be one per file (issue 27); each former file is a
//! module under its old name (`cargo test -p listwatch-memstore --test store durable::`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod behaviour;
mod conformance;
mod conformance_durable;
mod damage;
mod data_dir;
mod durable;
mod stress;
mod wakeups;
