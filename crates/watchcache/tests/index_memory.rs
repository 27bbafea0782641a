//! What a secondary index costs per cached object, measured with a counting global allocator
//! (this file is its own test binary, so the allocator is test-only; it counts every thread,
//! so the binary holds a single test).
//!
//! An index's members are the objects themselves (a key handle and an object handle per
//! member, shared with the state), so an index costs a fixed number of bytes per object,
//! whatever the object's size: the figure docs/benchmarks.md states beside P8's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use listwatch_api::{Object, SelectableFields};
use listwatch_watchcache::{Config, Index, WatchCache};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Upstream's data shape, scaled down tenfold: 30 pods per node, 50 namespaces.
const PODS: usize = 15_000;
const NODES: usize = 500;

fn held_bytes(region: &Region<'_, System>) -> isize {
    let s = region.change();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Bytes a cache built from `objects` by one list holds beyond the objects themselves.
fn held(config: Config, objects: &[Object]) -> isize {
    let mut cache = WatchCache::new(config);
    let region = Region::new(GLOBAL);
    cache.replace(objects.to_vec(), PODS as u64 + 1).unwrap();
    // The list's own vector is not the cache's.
    let held = held_bytes(&region) - std::mem::size_of_val(objects) as isize;
    assert_eq!(cache.view().len(), PODS);
    held
}

#[test]
fn an_index_costs_a_fixed_few_dozen_bytes_per_object() {
    let fields = SelectableFields::new(["spec.nodeName"]);
    let objects: Vec<Object> = (0..PODS)
        .map(|i| {
            let json = serde_json::json!({
                "metadata": {"name": format!("pod-{i:05}"), "namespace": format!("ns-{:02}", i % 50)},
                "spec": {"nodeName": format!("node-{:04}", i % NODES)},
            });
            Object::from_value(json, &fields).unwrap()
        })
        .collect();
    let config = || Config::new("pods").with_snapshots(false);
    let none = held(config(), &objects);
    let by_node = held(config().with_index(Index::field("spec.nodeName")), &objects);
    let per_object = (by_node - none) as f64 / PODS as f64;
    eprintln!(
        "{PODS} pods on {NODES} nodes: state without index {none} bytes ({:.0} per pod), \
         with a spec.nodeName index {by_node} ({per_object:.1} per pod for the index)",
        none as f64 / PODS as f64
    );
    // A member is a key handle and an object handle (40 bytes) in a B-tree node; the value's
    // own entry is shared by its 30 members.
    assert!(
        (40.0..=120.0).contains(&per_object),
        "the index costs {per_object:.1} bytes per object"
    );
}
