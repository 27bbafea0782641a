//! The cacher over the embedded store (or a `common::Probe` around it): its behaviour,
//! bookmarks, consistent reads, continue tokens, readiness, the window of a (re)initialized
//! cache (`init_window`), the dispatch model and
//! metrics, the window budget, encoding once, and the storage conformance suite over a
//! Cacher on a MemStore.
//!
//! One test binary for what used to be one per file (issue 27); each former file is a
//! module under its old name (`cargo test -p listwatch-cacher --test in_memory bookmarks::`).
//! Metrics are read from a registry of each test's own. The memory tests
//! (`catch_up_memory`, `idle_watcher_memory`, `initial_state_memory`) stay binaries of their
//! own: their counting global allocator counts every thread of the process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod behaviour;
mod bookmarks;
mod conformance_memstore;
mod consistency;
mod consistent_reads;
mod continue_pages;
mod dispatch_latency;
mod dispatch_model;
mod encode_once;
mod init_window;
mod readiness;
mod window_budget;
