//! The installed router in process, against the embedded store: requests as clients send
//! them, through flow control, admission, the registry store and the watch server, without
//! a socket or a process of their own.
//!
//! One test binary for what used to be one per file (issue 27: the crate and its
//! dependencies are linked once); each former file is a module under its old name (`cargo
//! test -p listwatch-endpoints --test router lifecycle::`). `yaml_replay_memory` stays a
//! binary of its own: its counting global allocator counts every thread of the process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod api;
mod apply;
mod create_recheck;
mod flowcontrol;
mod lifecycle;
mod limits;
mod live_kinds;
mod paths;
mod schemas;
mod writes;
