//! The load generator behind `cargo xtask bench`: runs the performance scenarios P1..P20 of
//! docs/benchmarks.md, each beside its baseline in the same run, and writes the results as
//! JSON, a Markdown table and an SVG plot per scenario into `docs/bench/`.
//!
//! ```text
//! cargo run --release -p listwatch-benches --bin loadgen -- [--out DIR] [P1 P2 ...]
//! ```
//!
//! Benchmarks are not tests: nothing here asserts a timing. Scenarios that talk HTTP start
//! `listwatch-apiserver` (from beside this binary, or `$LISTWATCH_APISERVER_BIN`) as a child
//! process; those on etcd start a throwaway etcd (`$LISTWATCH_ETCD_BIN` or `etcd` on PATH).
#![allow(clippy::print_stdout)]

mod asked;
mod http;
mod inproc;
mod lists;
mod memory;
mod meta;
mod netscen;
mod p10;
mod p12;
mod p14;
mod p2;
mod p3;
mod p5;
mod realistic;
mod report;
mod restart;
mod sizes;
mod slow;
mod sys;
mod w2;
mod writepath;

use std::alloc::System;
use std::path::PathBuf;
use std::time::Instant;

use cap::Cap;

use report::Report;

/// Counts live heap bytes: the memory scenarios (P8, P9, P11) read it.
#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Heap bytes live now.
pub(crate) fn heap() -> usize {
    ALLOC.allocated()
}

/// Most heap bytes live at once so far.
pub(crate) fn heap_peak() -> usize {
    ALLOC.max_allocated()
}

const ALL: [&str; 21] = [
    "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12", "P13", "P14", "P15",
    "P16", "P17", "P18", "P19", "P20", "W2",
];

async fn run(id: &str) -> Result<Report, String> {
    match id {
        "P1" => inproc::p1().await,
        "P2" => p2::p2().await,
        "P3" => p3::p3().await,
        "P4" => inproc::p4().await,
        "P5" => inproc::p5().await,
        "P6" => lists::p6().await,
        "P13" => slow::p13().await,
        "P14" => p14::p14().await,
        "P7" => inproc::p7().await,
        "P8" => inproc::p8().await,
        "P9" => netscen::p9().await,
        "P10" => p10::p10().await,
        "P11" => inproc::p11().await,
        "P12" => p12::p12().await,
        "P16" => asked::p16().await,
        "P17" => asked::p17().await,
        "P15" => memory::p15().await,
        "P18" => memory::p18().await,
        "P19" => sizes::p19().await,
        "P20" => restart::p20().await,
        // Not in `ALL`: it needs a baseline build of the server (see `writepath`).
        "W1" => writepath::w1().await,
        "W2" => w2::w2().await,
        other => Err(format!(
            "unknown scenario {other:?} (known: {})",
            ALL.join(" ")
        )),
    }
}

fn main() -> std::process::ExitCode {
    let mut out = PathBuf::from("docs/bench");
    let mut ids = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from).unwrap_or(out),
            "-h" | "--help" => {
                eprintln!(
                    "usage: loadgen [--out DIR] [SCENARIO..]  (scenarios: {})",
                    ALL.join(" ")
                );
                return std::process::ExitCode::SUCCESS;
            }
            id => ids.push(id.to_ascii_uppercase()),
        }
    }
    if ids.is_empty() {
        ids = ALL.iter().map(|s| (*s).to_owned()).collect();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut failed = Vec::new();
    for id in &ids {
        eprintln!("== {id}");
        let t = Instant::now();
        match rt.block_on(run(id)) {
            Ok(mut r) => {
                r.seconds = t.elapsed().as_secs_f64();
                if let Err(e) = r.write(&out) {
                    eprintln!("{id}: {e}");
                    failed.push(id.clone());
                }
                let missed = r.missed_slos();
                if !missed.is_empty() {
                    eprintln!("== {id} missed its SLO: {}", missed.join("; "));
                    failed.push(id.clone());
                }
                eprintln!(
                    "== {id} done in {:.1} s; results in {}/{id}.json",
                    r.seconds,
                    out.display()
                );
            }
            Err(e) => {
                eprintln!("== {id} FAILED: {e}");
                failed.push(id.clone());
            }
        }
    }
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("loadgen: failed: {}", failed.join(" "));
        std::process::ExitCode::FAILURE
    }
}
