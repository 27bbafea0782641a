//! The server over a real etcd (`--storage etcd`, Debian's `etcd-server`; `LISTWATCH_ETCD_BIN`
//! names the binary): the backend end to end, TLS to etcd, compaction, history reset, writes
//! of unknown outcome, a frozen member and a lost quorum, and replicas sharing one cluster.
//! Every test starts its own etcd (or cluster) in a temp dir on free ports and its own
//! servers; they are `#[ignore]`d for a bare machine and `cargo xtask test` runs them.
//!
//! One test binary for what used to be one binary per file (issue 27); each former file is a
//! module (`cargo test -p listwatch-apiserver --test etcd -- --include-ignored replicas::`).
//! Signals (`kill -STOP`, `-KILL`) go to the pids of a test's own children only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod etcd_backend;
mod etcd_cache_consistency;
mod etcd_cache_reinit;
mod etcd_compaction;
mod etcd_frozen_member;
mod etcd_history_reset;
mod etcd_quorum_loss;
mod etcd_tls;
mod etcd_write_outcome;
mod registry_writers;
mod replicas;
mod replicas_failover;
mod singletons;
