//! Recovery of the embedded store's data directory (`MemStore::open` through an in-memory
//! file layer): a first byte of 0 makes the rest the only log segment (arbitrary bytes);
//! anything else is a damage script (`fuzzing::mutate`: bit flips, zeroed ranges, truncation
//! to zeros, copied ranges) applied to the files of a real store after a short workload.
//! Recovery never panics, and either refuses naming a file or yields a revision-prefix of
//! what the workload wrote (`fuzzing::recover`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use listwatch_memstore::fuzzing::{self, History};

type Sample = (Vec<(String, Vec<u8>)>, History);

static SAMPLE: OnceLock<Sample> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (files, history) =
        SAMPLE.get_or_init(|| fuzzing::sample(11).unwrap_or_else(|e| panic!("sample: {e}")));
    let outcome = match data.split_first() {
        Some((0, raw)) => {
            fuzzing::recover(&[("0000000000000000.wal".to_owned(), raw.to_vec())], None)
        }
        _ => {
            let mut damaged = files.clone();
            fuzzing::mutate(&mut damaged, data);
            fuzzing::recover(&damaged, Some(history))
        }
    };
    if let Err(e) = outcome {
        panic!("{e}");
    }
});
