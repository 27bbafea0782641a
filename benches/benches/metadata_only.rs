//! Issue 33 item 7 (second half): the metadata-only cache path, per event, before and after.
//!
//! Before, a metadata consumer of an event paid for the whole object: an HTTP
//! `PartialObjectMetadata` watch decoded the stored object into a `serde_json::Value` (spec
//! and status too) and encoded its metadata again (once per event, shared by the watchers of
//! that format), and the garbage collector's informers decoded their metadata-only struct from
//! the object's whole wire JSON (building that JSON for the event when no JSON watcher had:
//! bytes the dispatcher's ring then keeps). After, both take the object's shared
//! metadata-only projection (`Object::partial_metadata_json`): the stored metadata bytes cut
//! out, spec and status never read.
//!
//! - `metadata_only/<pod>/http_projection_{before,after}`: one event's
//!   `PartialObjectMetadata` bytes (what N metadata watchers of the event share);
//! - `metadata_only/<pod>/gc_decode_{before,after}`: one event reaching one GC informer: the
//!   GC's metadata struct decoded from what it is given (the wire JSON built for the event;
//!   the projection built for the event);
//! - printed once: the bytes per event a metadata consumer makes the event hold (wire JSON
//!   vs projection) and the bytes of the projection per pod.
//!
//! `<pod>` is `small` (`listwatch_benches::pod`: ~2 KB, little metadata) and
//! `three_managers` (benches/fixtures/pod-three-managers.json: managedFields of three
//! managers and a last-applied annotation, so metadata is most of the object).
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_api::{Object, SelectableFields};
use serde::Deserialize;
use serde_json::Value;

const POD: &[u8] = include_bytes!("../fixtures/pod-three-managers.json");

/// The shape of the garbage collector's `Meta` (listwatch-controllers `gc::meta`): only what
/// the collector keeps is decoded, everything else skipped unread.
#[derive(Deserialize)]
#[allow(dead_code)]
struct GcMeta {
    #[serde(default)]
    metadata: Option<GcFields>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct GcFields {
    name: Option<Value>,
    namespace: Option<Value>,
    uid: Option<Value>,
    resource_version: Option<Value>,
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    finalizers: Option<Value>,
    owner_references: Option<Value>,
}

/// The projection as the server built it before: the whole object decoded, its metadata
/// encoded again (listwatch-endpoints `table::partial_metadata_json` over `Object::to_value`).
fn projection_before(o: &Object) -> Vec<u8> {
    let Ok(v) = o.to_value() else {
        return Vec::new();
    };
    let empty = Value::Object(serde_json::Map::new());
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(
        br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#,
    );
    let _ = serde_json::to_writer(&mut out, v.get("metadata").unwrap_or(&empty));
    out.push(b'}');
    out
}

fn one(c: &mut Criterion, label: &str, pod: &Object) {
    let pod = pod.with_resource_version(12_345);
    let wire = pod.to_json_bytes();
    let Ok(projection) = pod.partial_metadata_json() else {
        panic!("the fixture must project");
    };
    println!(
        "{label}: wire JSON {} B per event, metadata-only projection {} B ({:.0}% of it)",
        wire.len(),
        projection.len(),
        100.0 * projection.len() as f64 / wire.len() as f64
    );
    c.bench_function(
        &format!("metadata_only/{label}/http_projection_before"),
        |b| b.iter(|| projection_before(black_box(&pod))),
    );
    c.bench_function(
        &format!("metadata_only/{label}/http_projection_after"),
        |b| b.iter(|| black_box(&pod).partial_metadata_json()),
    );
    c.bench_function(&format!("metadata_only/{label}/gc_decode_before"), |b| {
        b.iter(|| {
            // A fresh event: the wire JSON built for it, then decoded.
            let ev = black_box(&pod).with_shared_encoding();
            serde_json::from_slice::<GcMeta>(&ev.to_json_bytes()).is_ok()
        })
    });
    c.bench_function(&format!("metadata_only/{label}/gc_decode_after"), |b| {
        b.iter(|| {
            let ev = black_box(&pod).with_shared_encoding();
            ev.partial_metadata_json()
                .is_ok_and(|p| serde_json::from_slice::<GcMeta>(&p).is_ok())
        })
    });
}

fn metadata_only(c: &mut Criterion) {
    let small = listwatch_benches::pod("default", "web-1", "node-7");
    let Ok(managers) = Object::from_json(POD, &SelectableFields::none()) else {
        panic!("the fixture must parse");
    };
    one(c, "small", &small);
    one(c, "three_managers", &managers);
}

criterion_group!(benches, metadata_only);
criterion_main!(benches);
