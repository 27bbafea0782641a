//! Events per second through the Cacher to 10 000 watchers, some with 100-requirement label
//! selectors (issue 24: selectors on the dispatcher's path), in rounds; prints each round and
//! the median and range.
//!
//! ```text
//! cargo run --release -p listwatch-benches --example selector_fanout -- [ROUNDS] [ITERS]
//! ```
//!
//! Two mixes: `matching` (1 000 watchers with the 100-requirement selector, 9 000 with
//! none: every watcher gets every event) and `non_matching` (the same 1 000, and 9 000 whose
//! one-requirement selector the pod never matches: only the 1 000 get events).
#![allow(missing_docs, clippy::print_stdout)]

use std::time::Duration;

use listwatch_benches::fanout::{heavy_selector, selector_fanout};

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let iters: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a runtime: {e}"),
    };
    let versions = [
        listwatch_benches::pod("default", "web", "node-1"),
        listwatch_benches::pod("default", "web", "node-2"),
    ];
    let heavy = heavy_selector(100);
    for (mix, plain_selector, plain_matches) in [
        ("matching", None, true),
        ("non_matching", Some("app=db"), false),
    ] {
        let mut per_sec = Vec::new();
        for _ in 0..rounds {
            let t: Duration = rt.block_on(selector_fanout(
                1_000,
                &heavy,
                9_000,
                plain_selector,
                plain_matches,
                iters,
                &versions,
            ));
            per_sec.push(iters as f64 / t.as_secs_f64());
        }
        let rounds_text: Vec<String> = per_sec.iter().map(|x| format!("{x:.1}")).collect();
        per_sec.sort_by(f64::total_cmp);
        let median = per_sec.get(per_sec.len() / 2).copied().unwrap_or(f64::NAN);
        let lo = per_sec.first().copied().unwrap_or(f64::NAN);
        let hi = per_sec.last().copied().unwrap_or(f64::NAN);
        println!(
            "{mix}: events/s median {median:.1} [min {lo:.1}, max {hi:.1}] over {rounds} rounds of {iters} writes; rounds: [{}]",
            rounds_text.join(", ")
        );
    }
}
