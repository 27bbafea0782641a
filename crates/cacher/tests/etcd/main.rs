//! The cacher over a real etcd (`LISTWATCH_ETCD_BIN`; `#[ignore]`d for a bare machine, run
//! by `cargo xtask test`): the storage conformance suite in both etcd configurations, etcd
//! with its default flags, the consistency check after a compaction, and failover. Each test
//! starts its own etcd on free ports.
//!
//! One test binary for what used to be one per file (issue 27); each former file is a
//! module under its old name (`cargo test -p listwatch-cacher --test etcd -- --include-ignored
//! etcd_failover::`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance_etcd;
mod consistency_etcd;
mod etcd_default_flags;
mod etcd_failover;
