//! The crash-state harness and fault injection (in the spirit of ALICE and CrashMonkey).
//!
//! Workloads (a first start, concurrent creates, updates and deletes, compactions, segment
//! rolls every few writes and snapshots) run through the recording file layer
//! (`wal::simfs`). Then, for crash points over the whole operation log, the harness builds
//! what a power cut (or a `kill -9`) there leaves on disk — every synced write and name, any
//! subset of the rest at sector granularity, torn sectors — recovers it, and checks
//! (`fuzzing::check`): every acknowledged write present at its revision, nothing
//! unacknowledged visible after newer acknowledged data, revisions never backwards. Then it
//! writes again, crashes a second time anywhere in that second run (recovery included) and
//! checks again: what the first recovery served is acknowledged too, and nothing the first
//! crash left behind comes back.
//!
//! `LISTWATCH_CRASH_STATES` sets how many crash states each workload gets (default 2000,
//! three workloads).

use std::sync::Arc;
use std::time::Duration;

use listwatch_storage::Storage;

use crate::OpenError;
use crate::fuzzing::{self, History};
use crate::wal::simfs::{Fault, Keep, Kind, Rng, SimFs};

fn states() -> usize {
    std::env::var("LISTWATCH_CRASH_STATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn rt() -> tokio::runtime::Runtime {
    fuzzing::runtime().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a workload from an empty directory; returns the file system and the history.
fn run(seed: u64, writers: usize, n: usize) -> (SimFs, History) {
    let rt = rt();
    let fs = SimFs::default();
    let store = fuzzing::open(&fs, &fuzzing::dir()).unwrap_or_else(|e| panic!("first open: {e}"));
    let mut history = History {
        start: store.current_revision(),
        ..History::default()
    };
    rt.block_on(fuzzing::workload(
        &store,
        &fs,
        seed,
        writers,
        n,
        &mut history,
    ))
    .unwrap_or_else(|e| panic!("workload: {e}"));
    drop(store);
    (fs, history)
}

/// Recovers what `fs` holds, checks it against `history` (with `acked` acknowledged), writes
/// a few more, crashes that second run at a random point (after `from`, the operations `fs`
/// already holds) and checks again.
fn recover_twice(
    fs: SimFs,
    history: &History,
    acked: u64,
    rng: &mut Rng,
    what: &str,
) -> Result<(), String> {
    let rt = rt();
    let from = fs.ops();
    let store = fuzzing::open(&fs, &fuzzing::dir()).map_err(|e| format!("{what}: refused: {e}"))?;
    let served = rt
        .block_on(fuzzing::check(&store, history, acked))
        .map_err(|e| format!("{what}: {e}"))?;
    // What this start serves counts as acknowledged from here on.
    let mut h2 = History {
        start: history.start,
        writes: history
            .writes
            .iter()
            .filter(|w| w.rev <= served)
            .cloned()
            .collect(),
        acked: vec![(served, fs.ops())],
    };
    let seed = rng.next();
    rt.block_on(fuzzing::workload(&store, &fs, seed, 2, 2, &mut h2))
        .map_err(|e| format!("{what}: second run: {e}"))?;
    drop(store);
    let k = from + rng.below((fs.ops() - from) as u64 + 1) as usize;
    let keep = if rng.chance(4) {
        Keep::Synced
    } else {
        Keep::Random
    };
    let again = fs.crash(k, keep, rng);
    let acked2 = h2.acked_before(k);
    let fs3 = SimFs::from_image(again);
    let store = fuzzing::open(&fs3, &fuzzing::dir()).map_err(|e| {
        format!(
            "{what}, then a crash at op {k}/{} ({keep:?}) of the second run: refused: {e}",
            fs.ops()
        )
    })?;
    rt.block_on(fuzzing::check(&store, &h2, acked2))
        .map_err(|e| {
            format!(
                "{what}, then a crash at op {k}/{} ({keep:?}) of the second run: {e}",
                fs.ops()
            )
        })?;
    Ok(())
}

/// Crash states over one workload; panics with the first violation.
fn crash_states(seed: u64, writers: usize, n: usize) {
    let (fs, history) = run(seed, writers, n);
    let ops = fs.ops();
    let mut rng = Rng::new(seed ^ 0xC0FFEE);
    let total = states();
    let mut failures = Vec::new();
    for s in 0..total {
        // Every crash point in turn (more than once when there are more states than points).
        let k = s * (ops + 1) / total.max(1) + rng.below(2) as usize;
        let k = k.min(ops);
        let keep = match rng.below(8) {
            0 => Keep::All,
            1 => Keep::Synced,
            _ => Keep::Random,
        };
        // A kill -9 keeps the page cache: what was not synced can still be lost later.
        let after = match keep {
            Keep::All => fs.fork(k),
            _ => SimFs::from_image(fs.crash(k, keep, &mut rng)),
        };
        let acked = history.acked_before(k);
        let what = format!("seed {seed}: crash at op {k}/{ops} ({keep:?})");
        if let Err(e) = recover_twice(after, &history, acked, &mut rng, &what) {
            failures.push(e);
            if failures.len() >= 5 {
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} crash states failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One writer: one write per batch; crash points fall between every write and its sync,
/// in segment rolls, snapshots and the first start.
#[test]
fn every_crash_state_of_a_sequential_workload_recovers() {
    crash_states(1, 1, 60);
}

/// Three writers: batches of several records, so a crash tears a batch's sectors apart
/// (its first sector lost while later ones landed, and the reverse).
#[test]
fn every_crash_state_of_a_group_commit_workload_recovers() {
    crash_states(2, 3, 25);
}

#[test]
fn every_crash_state_of_another_group_commit_workload_recovers() {
    crash_states(3, 2, 35);
}

/// A `kill -9` at every operation (the first start included), a restart, more writes, then
/// power cuts anywhere in that second run: what the restart replayed from the page cache
/// (and the directory entries it relied on) must have been made durable before it served.
#[test]
fn every_kill_9_then_a_power_cut_recovers() {
    let (fs, history) = run(4, 2, 20);
    let mut rng = Rng::new(44);
    let mut failures = Vec::new();
    for k in 0..=fs.ops() {
        // The first start's few operations (directories made, segment 0 named) get more.
        let variants = if k < 16 { 16 } else { 4 };
        for _ in 0..variants {
            let what = format!("seed 4: kill -9 at op {k}/{}", fs.ops());
            if let Err(e) = recover_twice(
                fs.fork(k),
                &history,
                history.acked_before(k),
                &mut rng,
                &what,
            ) {
                failures.push(e);
            }
        }
        if failures.len() >= 5 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A compaction readers saw is never undone by a crash: once `compact` returned (and reads
/// below it are Expired), its record is on disk.
#[test]
fn a_compaction_is_durable_before_it_takes_effect() {
    let rt = rt();
    let mut rng = Rng::new(8);
    for round in 0..20 {
        let fs = SimFs::default();
        let store = fuzzing::open(&fs, &fuzzing::dir()).unwrap_or_else(|e| panic!("{e}"));
        let mut history = History {
            start: store.current_revision(),
            ..History::default()
        };
        rt.block_on(fuzzing::workload(&store, &fs, round, 1, 5, &mut history))
            .unwrap_or_else(|e| panic!("{e}"));
        let at = store.current_revision();
        store.compact(at).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.compacted_revision(), at);
        // A power cut right now: only what was synced survives.
        let image = fs.crash(fs.ops(), Keep::Synced, &mut rng);
        let again = fuzzing::open(&SimFs::from_image(image), &fuzzing::dir())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            again.compacted_revision() >= at,
            "round {round}: compacted at {at} before the crash, at {} after it",
            again.compacted_revision()
        );
    }
}

/// Writes until a fault stops the store; returns the history, the file system, and the
/// error readiness reports (`None`: the fault hit no write of the log).
fn faulted(fault: Fault) -> (SimFs, History, Option<String>) {
    let rt = rt();
    let fs = SimFs::default();
    let store = fuzzing::open(&fs, &fuzzing::dir()).unwrap_or_else(|e| panic!("open: {e}"));
    let mut history = History {
        start: store.current_revision(),
        ..History::default()
    };
    rt.block_on(fuzzing::workload(&store, &fs, 9, 1, 10, &mut history))
        .unwrap_or_else(|e| panic!("{e}"));
    fs.fail(fault);
    let before = history.writes.len();
    // Writes fail (never hang) once the fault hits; a deadline guards against hangs.
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            fuzzing::workload(&store, &fs, 10, 1, 40, &mut history),
        )
        .await
    })
    .unwrap_or_else(|_| panic!("{fault:?}: writes hung after the fault"))
    .unwrap_or_else(|e| panic!("{e}"));
    if history.writes.len() == before + 40 {
        // The fault hit no write of the log (a snapshot's file: the snapshot fails, the store
        // goes on): nothing failed, nothing to report.
        assert!(
            rt.block_on(store.readiness()).is_ok(),
            "{fault:?}: not ready"
        );
        return (fs, history, None);
    }
    let why = rt
        .block_on(store.readiness())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_else(|| panic!("{fault:?}: readiness is fine after the log failed"));
    // The write that failed had the next revision; it may or may not have reached the disk.
    let next = history.writes.last().map_or(history.start, |w| w.rev) + 1;
    history.writes.push(fuzzing::Write {
        rev: next,
        name: "unknown".into(),
        value: None,
    });
    drop(store);
    (fs, history, Some(why))
}

/// EIO and ENOSPC on write, sync, rename, open and directory sync: the store stops, readiness
/// names the cause, no acknowledged write is lost — after a restart in the same boot (the
/// page cache still holds the failed batch: it must not be served) and after a power cut.
#[test]
fn io_errors_stop_the_store_and_lose_no_acknowledged_write() {
    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;
    let mut rng = Rng::new(77);
    for kind in [
        Kind::Write,
        Kind::Sync,
        Kind::Rename,
        Kind::Open,
        Kind::SyncDir,
    ] {
        for errno in [EIO, ENOSPC] {
            for nth in [1, 2, 5] {
                for sticky in [false, true] {
                    let fault = Fault {
                        kind,
                        nth,
                        errno,
                        sticky,
                    };
                    let (fs, mut history, why) = faulted(fault);
                    let cause = std::io::Error::from_raw_os_error(errno).to_string();
                    if let Some(why) = &why {
                        assert!(
                            why.contains(&cause) && why.contains("/data/store"),
                            "{fault:?}: readiness says {why:?}, not the cause ({cause}) and file"
                        );
                    } else {
                        assert!(
                            kind != Kind::Sync || nth > 1,
                            "{fault:?}: the log never failed"
                        );
                    }
                    let acked = history.acked_before(usize::MAX);
                    // The failed write must not be served by a restart in the same boot.
                    let unknown = if why.is_some() {
                        history.writes.pop()
                    } else {
                        None
                    };
                    let same_boot = fs.fork(fs.ops());
                    let store = fuzzing::open(&same_boot, &fuzzing::dir())
                        .unwrap_or_else(|e| panic!("{fault:?}: same-boot restart: {e}"));
                    let rt = rt();
                    let rev = rt
                        .block_on(fuzzing::check(&store, &history, acked))
                        .unwrap_or_else(|e| panic!("{fault:?}: same-boot restart: {e}"));
                    assert_eq!(rev, acked, "{fault:?}: a failed write is served");
                    drop(store);
                    // That restart, more writes, then a power cut anywhere in them.
                    let what = format!("{fault:?}: same-boot restart");
                    recover_twice(fs.fork(fs.ops()), &history, acked, &mut rng, &what)
                        .unwrap_or_else(|e| panic!("{e}"));
                    history.writes.extend(unknown);
                    for keep in [Keep::Synced, Keep::Random] {
                        let image = fs.crash(fs.ops(), keep, &mut rng);
                        let store = fuzzing::open(&SimFs::from_image(image), &fuzzing::dir())
                            .unwrap_or_else(|e| panic!("{fault:?}: after a power cut: {e}"));
                        rt.block_on(fuzzing::check(&store, &history, acked))
                            .unwrap_or_else(|e| panic!("{fault:?}: after a power cut: {e}"));
                    }
                }
            }
        }
    }
}

/// A failed-sync marker whose removal a power cut lost is not honoured a second time (that
/// would drop every write acknowledged since).
#[test]
fn a_failed_sync_marker_that_comes_back_is_not_honoured_again() {
    let (fs, mut history, why) = faulted(Fault {
        kind: Kind::Sync,
        nth: 1,
        errno: 5,
        sticky: false,
    });
    assert!(why.is_some(), "the log did not fail");
    history.writes.pop();
    let marker = fs
        .volatile()
        .paths()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("FAILED-"))
        .unwrap_or_else(|| panic!("no marker"));
    let rt = rt();
    let same_boot = fs.fork(fs.ops());
    let store = fuzzing::open(&same_boot, &fuzzing::dir()).unwrap_or_else(|e| panic!("{e}"));
    let acked = history.acked_before(usize::MAX);
    history.acked.push((acked, same_boot.ops()));
    rt.block_on(fuzzing::workload(
        &store,
        &same_boot,
        31,
        1,
        10,
        &mut history,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    let mut image = same_boot.volatile();
    image.put_file(&marker, Vec::new());
    let store =
        fuzzing::open(&SimFs::from_image(image), &fuzzing::dir()).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(fuzzing::check(
        &store,
        &history,
        history.acked_before(usize::MAX),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A fault during a start fails the start (no panic) and damages nothing: the next start
/// without the fault recovers every acknowledged write.
#[test]
fn io_errors_during_a_start_refuse_it_and_damage_nothing() {
    let (fs, history) = run(5, 2, 30);
    let acked = history.acked_before(usize::MAX);
    let rt = rt();
    for kind in [
        Kind::Write,
        Kind::Sync,
        Kind::Rename,
        Kind::Open,
        Kind::SyncDir,
        Kind::Remove,
    ] {
        for nth in 1..4 {
            let faulty = SimFs::from_image(fs.volatile());
            faulty.fail(Fault {
                kind,
                nth,
                errno: 5,
                sticky: true,
            });
            let after = match fuzzing::open(&faulty, &fuzzing::dir()) {
                Ok(store) => {
                    rt.block_on(fuzzing::check(&store, &history, acked))
                        .unwrap_or_else(|e| panic!("{kind:?} #{nth}: {e}"));
                    drop(store);
                    faulty.volatile()
                }
                Err(OpenError::Io { .. }) => faulty.volatile(),
                Err(e) => panic!("{kind:?} #{nth}: {e}"),
            };
            let store = fuzzing::open(&SimFs::from_image(after), &fuzzing::dir())
                .unwrap_or_else(|e| panic!("{kind:?} #{nth}: next start: {e}"));
            rt.block_on(fuzzing::check(&store, &history, acked))
                .unwrap_or_else(|e| panic!("{kind:?} #{nth}: next start: {e}"));
        }
    }
}

/// Recovery over arbitrary bytes and damaged real directories never panics, and either
/// refuses naming a file or yields a revision-prefix of what was written (the `cargo test`
/// twin of the `wal_recover` fuzz target).
#[test]
fn recovery_of_damaged_directories_refuses_or_yields_a_prefix() {
    let (files, history) = fuzzing::sample(11).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = Rng::new(4242);
    let cases = states().max(300);
    for i in 0..cases {
        let mut damaged = files.clone();
        let len = 6 * (1 + rng.below(4) as usize);
        let script: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        fuzzing::mutate(&mut damaged, &script);
        fuzzing::recover(&damaged, Some(&history))
            .unwrap_or_else(|e| panic!("case {i} (script {script:?}): {e}"));
        // Arbitrary bytes as a segment (some starting like a batch).
        let mut bytes: Vec<u8> = (0..rng.below(2048)).map(|_| rng.next() as u8).collect();
        if rng.chance(2) && bytes.len() >= 4 {
            bytes[..4].copy_from_slice(&crate::wal::batch::MAGIC);
        }
        fuzzing::recover(&[("0000000000000000.wal".into(), bytes)], None)
            .unwrap_or_else(|e| panic!("case {i}: arbitrary bytes: {e}"));
    }
}

/// The log thread ending without being told to stop fails the store: writers fail at once
/// and readiness says why.
#[test]
fn a_log_thread_that_ends_fails_the_store() {
    let rt = rt();
    let fs = SimFs::default();
    let store = fuzzing::open(&fs, &fuzzing::dir()).unwrap_or_else(|e| panic!("{e}"));
    // Poison the sequencer lock: the log thread's next look at it ends it.
    let core = Arc::clone(&store.life.core);
    let _ = std::thread::spawn(move || {
        let _g = core.seq.lock();
        panic!("poisoning the sequencer lock on purpose");
    })
    .join();
    store.life.core.pending_cv.notify_all();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rt.block_on(store.readiness()).is_ok() {
        assert!(std::time::Instant::now() < deadline, "readiness still fine");
        std::thread::sleep(Duration::from_millis(5));
    }
    let why = rt.block_on(store.readiness()).err().map(|e| e.to_string());
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("log thread ended")),
        "{why:?}"
    );
}
