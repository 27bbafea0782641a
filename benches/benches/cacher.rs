//! Cacher fan-out against a bare tokio fan-out of the same events, in the same run.
//!
//! - `fanout_10k/cacher`: one write through the Cacher delivered to 10 000 watchers (each a
//!   task draining its stream and taking the wire bytes, as the HTTP layer does);
//! - `fanout_10k/bare_mpsc`: the same number of Arc'd events sent to 10 000 tasks over
//!   bounded tokio channels — the floor any dispatcher pays;
//! - `one_mb_object_5k_watchers`: a 1 MB object updated with 5 000 watchers; the bench
//!   prints the encodes per event (1 expected).
//!
//! The fan-out code is shared with the load generator (`listwatch_benches::fanout`).
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_api::wire_encode_count;
use listwatch_benches::fanout::{bare_fanout, big_pod, cacher_fanout};

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a runtime: {e}"),
    }
}

fn fanout(c: &mut Criterion) {
    const WATCHERS: usize = 10_000;
    let rt = runtime();
    let versions = [
        listwatch_benches::pod("default", "web", "node-1"),
        listwatch_benches::pod("default", "web", "node-2"),
    ];
    let mut g = c.benchmark_group("fanout_10k");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    g.throughput(Throughput::Elements(WATCHERS as u64));
    g.bench_function("cacher", |b| {
        b.iter_custom(|iters| rt.block_on(cacher_fanout(WATCHERS, iters, &versions)))
    });
    g.bench_function("bare_mpsc", |b| {
        b.iter_custom(|iters| rt.block_on(bare_fanout(WATCHERS, iters, &versions[0])))
    });
    g.finish();
}

fn big_object(c: &mut Criterion) {
    const WATCHERS: usize = 5_000;
    let rt = runtime();
    let versions = [big_pod("a"), big_pod("b")];
    let mut g = c.benchmark_group("one_mb_object_5k_watchers");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    g.throughput(Throughput::Elements(WATCHERS as u64));
    let mut encodes = (0u64, 0u64);
    g.bench_function("cacher", |b| {
        b.iter_custom(|iters| {
            let before = wire_encode_count();
            let t = rt.block_on(cacher_fanout(WATCHERS, iters, &versions));
            encodes.0 += wire_encode_count() - before;
            encodes.1 += iters;
            t
        })
    });
    g.finish();
    eprintln!(
        "one_mb_object_5k_watchers: {} encodes for {} events ({:.2} per event)",
        encodes.0,
        encodes.1,
        encodes.0 as f64 / encodes.1.max(1) as f64
    );
}

criterion_group!(benches, fanout, big_object);
criterion_main!(benches);
