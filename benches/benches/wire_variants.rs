//! Issue 33's wire variants, per watched object: the managedFields opt-out (KEP-5958) and
//! the shard selector (KEP-5866).
//!
//! - `managed_fields/*`: a pod as listwatch-apiserver stored it after `kubectl apply`,
//!   `kubectl label` and `kubectl annotate` (benches/fixtures/pod-three-managers.json, read
//!   from the server), framed as a watch event with and without `metadata.managedFields`.
//!   The bytes per watched pod both ways are printed once (docs/benchmarks.md); the timed
//!   part is the cut, which a server does once per event for all watchers that opt out.
//! - `shard/*`: matching an event against 100 watchers' shard selectors with the hash kept
//!   on the object (the server: one FNV-1a per event) against hashing per watcher.
//! - `cbor/*` (KEP-4222): the same pod's watch frame as JSON and as an `application/cbor-seq`
//!   item; bytes both ways are printed once; the timed parts are what the server does once
//!   per event and format: the wire JSON (a splice of the stored bytes) and its CBOR
//!   (listwatch-cbor's transcoding of that JSON), and a CBOR client's decoding of a frame.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_api::shard::{ShardField, fnv1a64};
use listwatch_api::{Object, SelectableFields, ShardSelector};

const POD: &[u8] = include_bytes!("../fixtures/pod-three-managers.json");

fn frame(obj: &[u8]) -> usize {
    // `{"type":"ADDED","object":` + object + `}\n`, as the watch server writes it.
    26 + obj.len() + 2
}

fn managed_fields(c: &mut Criterion) {
    let Ok(pod) = Object::from_json(POD, &SelectableFields::none()) else {
        panic!("the fixture must parse");
    };
    let pod = pod.with_resource_version(12_345);
    let full = pod.to_json_bytes();
    let cut = pod.to_json_bytes_without_managed_fields();
    let (f, d) = (frame(&full), frame(&cut));
    println!(
        "bytes per watched pod: {f} with managedFields, {d} with drop=metadata.managedFields ({:.0}% less)",
        100.0 * (f - d) as f64 / f as f64
    );
    c.bench_function("managed_fields/full_frame_bytes", |b| {
        b.iter(|| black_box(&pod).to_json_bytes())
    });
    c.bench_function("managed_fields/dropped_frame_bytes", |b| {
        b.iter(|| black_box(&pod).to_json_bytes_without_managed_fields())
    });
}

fn shard(c: &mut Criterion) {
    let pod = listwatch_benches::pod("default", "web-1", "node-7");
    let watchers: Vec<ShardSelector> = (0..100)
        .map(|i| ShardSelector::nth_of(ShardField::Uid, i % 10, 10).unwrap_or_default())
        .collect();
    c.bench_function("shard/100_watchers_hash_kept_on_the_object", |b| {
        b.iter(|| {
            let o = black_box(&pod).with_shared_encoding();
            watchers.iter().filter(|s| o.in_shard(s)).count()
        })
    });
    c.bench_function("shard/100_watchers_hash_per_watcher", |b| {
        b.iter(|| {
            let uid = black_box(&pod).uid().unwrap_or("");
            watchers
                .iter()
                .filter(|s| s.contains(fnv1a64(uid.as_bytes())))
                .count()
        })
    });
}

fn cbor(c: &mut Criterion) {
    let Ok(pod) = Object::from_json(POD, &SelectableFields::none()) else {
        panic!("the fixture must parse");
    };
    let pod = pod.with_resource_version(12_345);
    let json = pod.to_json_bytes();
    let Ok(object) = listwatch_cbor::from_json(&json) else {
        panic!("the fixture must encode");
    };
    let cbor_frame = listwatch_cbor::event_prefix("ADDED").len() + object.len();
    let json_frame = frame(&json);
    println!(
        "bytes per watched pod: {json_frame} as a JSON frame, {cbor_frame} as a CBOR item ({:.0}% less)",
        100.0 * (json_frame - cbor_frame) as f64 / json_frame as f64
    );
    c.bench_function("cbor/json_object_per_event", |b| {
        b.iter(|| black_box(&pod).to_json_bytes())
    });
    c.bench_function("cbor/cbor_object_per_event", |b| {
        b.iter(|| listwatch_cbor::from_json(&black_box(&pod).to_json_bytes()))
    });
    let mut item = listwatch_cbor::event_prefix("ADDED");
    item.extend_from_slice(&object);
    c.bench_function("cbor/client_decodes_a_cbor_item", |b| {
        b.iter(|| listwatch_cbor::decode(black_box(&item)))
    });
}

criterion_group!(benches, managed_fields, shard, cbor);
criterion_main!(benches);
