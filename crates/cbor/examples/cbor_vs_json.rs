//! Bytes and CPU per watch event, CBOR against JSON, for one pod as listwatch-apiserver stores
//! it after `kubectl apply`, `kubectl label` and `kubectl annotate`
//! (`benches/fixtures/pod-three-managers.json`). Light enough to build in release on a
//! shared machine (`cargo run --release -p listwatch-cbor --example cbor_vs_json`); the
//! criterion form is `cargo xtask bench --criterion wire_variants` (`cbor/*`).
//!
//! Per event the server makes each format once: JSON is the stored bytes with the resource
//! version spliced in (timed here as a copy of the wire bytes, an upper bound on the
//! splice), CBOR is listwatch-cbor's transcoding of that JSON. Printed: the median and the
//! spread (min–max) of 11 runs of 20 000 events each, in ns per event.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

const POD: &[u8] = include_bytes!("../../../benches/fixtures/pod-three-managers.json");
const EVENTS: u32 = 20_000;

fn ns_per_event(mut f: impl FnMut()) -> (f64, f64, f64) {
    let mut runs: Vec<f64> = (0..11)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..EVENTS {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(EVENTS)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    (runs[5], runs[0], runs[10])
}

fn main() {
    let json = POD.trim_ascii_end().to_vec();
    let object = listwatch_cbor::from_json(&json).unwrap();
    let mut item = listwatch_cbor::event_prefix("ADDED");
    item.extend_from_slice(&object);
    let json_frame = br#"{"type":"ADDED","object":"#.len() + json.len() + 2;
    println!(
        "bytes per event: JSON frame {json_frame}, CBOR item {} ({:.1}% less)",
        item.len(),
        100.0 * (json_frame - item.len()) as f64 / json_frame as f64
    );
    let report = |what: &str, (median, min, max): (f64, f64, f64)| {
        println!("{what}: median {median:.0} ns/event (spread {min:.0}-{max:.0})");
    };
    report(
        "server, JSON object (copy of the wire bytes)",
        ns_per_event(|| {
            black_box(black_box(&json).clone());
        }),
    );
    report(
        "server, CBOR object (transcoded from the wire JSON)",
        ns_per_event(|| {
            black_box(listwatch_cbor::from_json(black_box(&json)).unwrap());
        }),
    );
    report(
        "client, JSON frame parsed (serde_json::Value)",
        ns_per_event(|| {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(&json)).unwrap());
        }),
    );
    report(
        "client, CBOR item decoded (listwatch_cbor::decode)",
        ns_per_event(|| {
            black_box(listwatch_cbor::decode(black_box(&item)).unwrap());
        }),
    );
}
