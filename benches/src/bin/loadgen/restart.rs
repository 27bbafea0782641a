//! **P20 — cold restart to ready with 150 000 pods** (issue 31 item 4), on etcd and on the
//! embedded store's `--data-dir`: the time from spawning a fresh `listwatch-apiserver`
//! process until `/readyz` answers 200 (every watch cache initialised), with the pods already
//! stored, beside the same server starting on an empty store of the same kind in the same run,
//! the two alternating over rounds. P7 measures the watch cache's part alone, in-process.
//!
//! On etcd the pods are written by a first server (over HTTP) into etcd, which then outlives
//! every server of the run (the empty store is another `--etcd-prefix` of the same etcd). On
//! `--data-dir` a first server writes them into a directory on a real disk (tmpfs refused, as
//! the realistic configuration's); the empty store is a second, empty directory. After each
//! start the number of pods is checked (a paged list of all).
//!
//! The etcd of this scenario runs on tmpfs (the test harness's), so its figure does not
//! include a disk; `--data-dir`'s does. Sizes scale with `$LISTWATCH_BENCH_SCALE`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::http::Conn;
use crate::netscen::create_pods;
use crate::realistic::{DirGuard, fresh_dir, fs_type};
use crate::report::{Metric, Report, Spread};
use crate::sys::{Server, apiserver_bin};

type Result<T> = std::result::Result<T, String>;

/// Whether the page cache was dropped before the last timed start.
static COLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pods in the whole store, from a paged list of all.
async fn count_pods(server: &Server) -> Result<u64> {
    let mut c = Conn::open(server.addr).await?;
    crate::memory::stored_json(&mut c)
        .await
        .map(|(n, _)| n as u64)
}

/// Spawns a server with `args` and times it to ready; checks it holds `want` pods.
async fn timed_start(bin: &Path, args: &[String], want: u64) -> Result<f64> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A cold start: the files the last server wrote are not in the page cache (for etcd,
    // whose data is on tmpfs here, this changes nothing).
    COLD.store(
        crate::sys::drop_page_cache(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let t = Instant::now();
    let server = tokio::task::block_in_place(|| Server::start_bin(bin, &args))?;
    let secs = t.elapsed().as_secs_f64();
    let have = count_pods(&server).await?;
    if have != want {
        return Err(format!(
            "P20: a restarted server holds {have} pods, want {want}"
        ));
    }
    Ok(secs)
}

/// One backend: (ready times with the pods, ready times empty).
async fn backend(
    bin: &Path,
    full: Vec<String>,
    empty: Vec<String>,
    n: usize,
    rounds: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    {
        let args: Vec<&str> = full.iter().map(String::as_str).collect();
        let writer = Server::start_bin(bin, &args)?;
        create_pods(writer.addr, n, 1_000, 4).await?;
        // Dropped: killed, as a crashed or rebooted server is.
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                with.push(timed_start(bin, &full, n as u64).await?);
            } else {
                without.push(timed_start(bin, &empty, 0).await?);
            }
        }
    }
    Ok((with, without))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// P20: cold restart to ready with the pods on etcd and on `--data-dir`.
pub(crate) async fn p20() -> Result<Report> {
    let n = crate::meta::scaled(150_000, 3_000);
    let rounds = crate::meta::scaled(3, 2);
    let mut r = Report::new(
        "P20",
        "cold restart to ready",
        &format!("{n} pods stored; {rounds} starts each with the pods and empty, alternating"),
    );
    let bin = apiserver_bin()?;
    let etcd = listwatch_etcd::testing::EtcdServer::start()
        .await
        .map_err(|e| e.to_string())?;
    let ep = etcd.endpoint();
    let on_etcd = |prefix: &str| {
        strings(&[
            "--storage",
            "etcd",
            "--etcd-servers",
            &ep,
            "--etcd-prefix",
            prefix,
        ])
    };
    let (e_with, e_without) =
        backend(&bin, on_etcd("/registry"), on_etcd("/empty"), n, rounds).await?;
    drop(etcd);
    let (full_dir, empty_dir): (PathBuf, PathBuf) = (fresh_dir()?, fresh_dir()?);
    let _guards = (DirGuard(full_dir.clone()), DirGuard(empty_dir.clone()));
    let fs = fs_type(&full_dir);
    if fs.as_deref() == Some("tmpfs") {
        return Err(format!(
            "{} is on tmpfs: set LISTWATCH_BENCH_DATA_DIR to a directory on a real disk",
            full_dir.display()
        ));
    }
    let on_dir = |d: &Path| {
        vec![
            "--storage".to_owned(),
            "embedded".to_owned(),
            "--data-dir".to_owned(),
            // A directory the server creates itself (with the mode it requires).
            d.join("data").display().to_string(),
        ]
    };
    let (d_with, d_without) =
        backend(&bin, on_dir(&full_dir), on_dir(&empty_dir), n, rounds).await?;
    for (what, with, without) in [
        ("etcd (on tmpfs)", &e_with, &e_without),
        ("--data-dir (on disk)", &d_with, &d_without),
    ] {
        let (w, o) = (Spread::of(with), Spread::of(without));
        r.push(
            Metric::new(
                &format!("{what}: process start to /readyz with {n} pods, median"),
                "s",
                w.median,
            )
            .baseline(o.median, "the same start on an empty store, same run")
            .note(format!("with pods {}; empty {}", w.text("s"), o.text("s"))),
        );
    }
    r.notes.push(format!(
        "Time from spawning the process to /readyz 200 (polled every 20 ms; the server announces its \
         address once every watch cache is ready). The pods are benches' realistic pod (~3.3 KB of stored JSON, P15), \
         written by a first server over HTTP, which is then killed. --data-dir on a {} file system \
         ($LISTWATCH_BENCH_DATA_DIR or target/bench-data). {} P7 measures the cache initialisation \
         alone, in-process.",
        fs.as_deref().unwrap_or("unknown"),
        if COLD.load(std::sync::atomic::Ordering::Relaxed) {
            "Before each timed start the page cache was dropped (sync; drop_caches), so the data \
             directory is read from the disk (etcd's data is on tmpfs here: its start reads memory)."
        } else {
            "The page cache could NOT be dropped before the starts (not root): the data directory's \
             files the writer had just written may be read from memory."
        }
    ));
    Ok(r)
}
