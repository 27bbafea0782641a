//! P2: one HTTP watcher of small pods, fed faster than one event at a time, against the
//! physical limit of the same delivery: a bare tokio task that receives the same pre-encoded
//! frames from an mpsc and writes them to a TCP socket, at the same event rate, in the same
//! run.
//!
//! Two ways of feeding the watch, each with its own baseline:
//! - live, saturating writers: [`WRITERS`] connections create pods as fast as the server
//!   takes them while the watch is open; the server's CPU per delivered event is its CPU with
//!   the watcher minus its CPU for the same creates without it. The baseline's mpsc is fed
//!   at the event rate the watch achieved, by a thread that wakes when the next frames are
//!   due and sends every frame due (events arrive one by one, as from the writers);
//! - a backlog: a watch opened at a resource version [`m`] events back, so that all of them
//!   are queued for it at once (from the watch cache's window); the server's CPU until the
//!   last one arrived, per event ([`backlog_watches`] such watches one after the other). The
//!   baseline's mpsc holds the same frames before its task starts.
//!
//! The baseline task drains what is queued (up to 256 frames) and writes it with one
//! `write_all`, as a server that coalesces queued events into one write would; its CPU is
//! that of the one thread its current-thread runtime runs on (`CLOCK_THREAD_CPUTIME_ID`).
//! The server's CPU is read to the nanosecond from a cgroup of its own (`sys::CpuMeter`).
//!
//! With `$LISTWATCH_BASELINE_APISERVER_BIN` (another build of the server, e.g. main before a
//! change), the backlog is also measured on that build in the same run: both servers get the
//! same creates, then rounds alternate [`backlog_watches`] backlog watches on each.
//!
//! Both configurations of `crate::realistic` run in the same run, on two servers set up
//! side by side, their rounds alternating: the easy one (in memory, plaintext, no auth; the
//! rows judged against the bare task) and the realistic one (`--data-dir` on a real disk,
//! TLS, a bearer token checked by the token authenticator and RBAC), whose rows are
//! reported beside the easy configuration's figure of the same round.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::http::{Conn, Target, Watch};
use crate::inproc::{bar, list};
use crate::realistic::{self, Config, Deployed};
use crate::report::{Bound, Goal, Metric, Report, Spread};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";
/// Concurrent writer connections.
const WRITERS: usize = 4;

/// Creates per phase (scaled by `$LISTWATCH_BENCH_SCALE`).
fn m() -> usize {
    crate::meta::scaled(20_000, 1_000)
}
/// Rounds (each: creates without the watch, the same number with it, then the backlog;
/// scaled by `$LISTWATCH_BENCH_SCALE`).
fn rounds_n() -> usize {
    crate::meta::scaled(5, 2)
}
/// Watches replaying the backlog per round, one after the other (scaled).
fn backlog_watches() -> usize {
    crate::meta::scaled(10, 2)
}

fn small_pod(i: usize) -> String {
    format!(
        r#"{{"metadata":{{"name":"p{i}","labels":{{"app":"load"}}}},"spec":{{"nodeName":"n{}","containers":[{{"name":"c","image":"x"}}]}}}}"#,
        i % 10
    )
}

/// Creates pods `first..first + m()` over [`WRITERS`] connections at once.
async fn create_burst(conns: &mut [Conn], path: &str, first: usize) -> Result<()> {
    let m = m();
    let jobs = conns.iter_mut().enumerate().map(|(k, c)| async move {
        for i in (first + k..first + m).step_by(WRITERS) {
            c.expect(201, "POST", path, JSON, small_pod(i).as_bytes())
                .await?;
        }
        Ok::<(), String>(())
    });
    for r in futures::future::join_all(jobs).await {
        r?;
    }
    Ok(())
}

async fn list_rv(conn: &mut Conn, path: &str) -> Result<String> {
    let body = conn
        .expect(200, "GET", &format!("{path}?limit=1"), JSON, b"")
        .await?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "list without resourceVersion".into())
}

/// A watch whose frames are collected; the counter says how many arrived.
struct Collector {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
    got: Arc<AtomicU64>,
    /// Reads that returned frames (frames ÷ reads: how many arrived together).
    reads: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn open(to: &Target, path: &str) -> Result<Self> {
        let mut w = Watch::open(to.clone(), path).await?;
        let frames = Arc::new(Mutex::new(Vec::with_capacity(m())));
        let got = Arc::new(AtomicU64::new(0));
        let reads = Arc::new(AtomicU64::new(0));
        let task = {
            let (frames, got, reads) = (Arc::clone(&frames), Arc::clone(&got), Arc::clone(&reads));
            tokio::spawn(async move {
                let mut batch = Vec::new();
                while w.frames(&mut batch).await.is_ok() {
                    reads.fetch_add(1, Ordering::Relaxed);
                    got.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    if let Ok(mut f) = frames.lock() {
                        f.append(&mut batch);
                    }
                    batch.clear();
                }
            })
        };
        Ok(Self {
            frames,
            got,
            reads,
            task,
        })
    }

    async fn wait(&self, want: u64, limit: Duration) -> Result<Instant> {
        let end = Instant::now() + limit;
        while self.got.load(Ordering::Relaxed) < want {
            if Instant::now() > end {
                return Err(format!(
                    "the watcher got {} of {want} events in {limit:?}",
                    self.got.load(Ordering::Relaxed)
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(Instant::now())
    }

    fn finish(self) -> (Vec<Vec<u8>>, f64) {
        self.task.abort();
        let reads = self.reads.load(Ordering::Relaxed).max(1) as f64;
        let frames = self.frames.lock().map(|f| f.clone()).unwrap_or_default();
        let per_read = frames.len() as f64 / reads;
        (frames, per_read)
    }
}

/// The frames as the server's HTTP/1.1 body carries them: one chunk each.
fn chunked(frames: &[Vec<u8>]) -> Vec<bytes::Bytes> {
    frames
        .iter()
        .map(|f| {
            let mut c = format!("{:x}\r\n", f.len() + 1).into_bytes();
            c.extend_from_slice(f);
            c.extend_from_slice(b"\n\r\n");
            bytes::Bytes::from(c)
        })
        .collect()
}

/// CPU per frame of a bare tokio task (on a current-thread runtime of its own) receiving
/// `frames` from an mpsc and writing them to a loopback socket, coalescing what is queued.
/// With `rate`, a feeder thread sends each frame when it is due at that rate; without, the
/// channel holds every frame before the task starts.
fn bare_task_cost(frames: &[bytes::Bytes], rate: Option<f64>) -> Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || {
        let mut total = 0usize;
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n;
            }
        }
        total
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<bytes::Bytes>();
    let feeder = match rate {
        None => {
            for f in frames {
                tx.send(f.clone()).map_err(|_| "receiver gone".to_owned())?;
            }
            drop(tx);
            None
        }
        Some(rate) => {
            let frames = frames.to_vec();
            Some(std::thread::spawn(move || {
                let start = Instant::now();
                let mut sent = 0usize;
                while sent < frames.len() {
                    let due =
                        ((start.elapsed().as_secs_f64() * rate) as usize + 1).min(frames.len());
                    for f in frames.get(sent..due).unwrap_or_default() {
                        if tx.send(f.clone()).is_err() {
                            return;
                        }
                    }
                    sent = sent.max(due);
                    let next = start + Duration::from_secs_f64((sent + 1) as f64 / rate);
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                }
            }))
        }
    };
    let n = frames.len();
    let writer = std::thread::spawn(move || -> Result<f64> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let mut s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = s.set_nodelay(true);
            let cpu0 = sys::thread_cpu_seconds().unwrap_or(0.0);
            let mut batch = Vec::with_capacity(256);
            let mut out = Vec::new();
            while rx.recv_many(&mut batch, 256).await > 0 {
                out.clear();
                for f in batch.drain(..) {
                    out.extend_from_slice(&f);
                }
                s.write_all(&out).await.map_err(|e| e.to_string())?;
            }
            let cpu = sys::thread_cpu_seconds().unwrap_or(0.0) - cpu0;
            Ok(cpu / n.max(1) as f64 * 1e6)
        })
    });
    let cost = writer.join().map_err(|_| "writer panicked".to_owned())??;
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let _ = reader.join();
    Ok(cost)
}

/// Server CPU per event of [`backlog_watches`] watches, one after the other, each replaying
/// the `m()` events after `rv`; and the median number of frames per client read.
async fn backlog_round(server: &Server, to: &Target, path: &str, rv: &str) -> Result<(f64, f64)> {
    let cpu0 = server.cpu();
    let mut reads = Vec::new();
    for _ in 0..backlog_watches() {
        let watch = Collector::open(to, &format!("{path}?watch=1&resourceVersion={rv}")).await?;
        watch.wait(m() as u64, Duration::from_secs(120)).await?;
        reads.push(watch.finish().1);
    }
    let cpu = server.cpu() - cpu0;
    Ok((
        cpu / (m() * backlog_watches()) as f64 * 1e6,
        Spread::of(&reads).median,
    ))
}

/// A server from `bin` with namespace p2 and `m()` pods created after the version returned.
async fn backlog_server(bin: &std::path::Path, path: &str) -> Result<(Server, String)> {
    let server = Server::start_bin(bin, &["--storage", "embedded"])?;
    let mut conn = Conn::open(server.addr).await?;
    conn.expect(
        201,
        "POST",
        "/api/v1/namespaces",
        JSON,
        br#"{"metadata":{"name":"p2"}}"#,
    )
    .await?;
    let rv = list_rv(&mut conn, path).await?;
    let mut writers = Vec::with_capacity(WRITERS);
    for _ in 0..WRITERS {
        writers.push(Conn::open(server.addr).await?);
    }
    create_burst(&mut writers, path, 0).await?;
    Ok((server, rv))
}

/// The backlog on this build and on the build at `base`, in the same run: per round, ours
/// then the baseline's (or the other way round, alternating).
async fn backlog_vs_build(r: &mut Report, base: &std::path::Path) -> Result<()> {
    let path = "/api/v1/namespaces/p2/pods";
    let (ours, ours_rv) = backlog_server(&sys::apiserver_bin()?, path).await?;
    let (theirs, theirs_rv) = backlog_server(base, path).await?;
    let (ours_to, theirs_to) = (Target::from(ours.addr), Target::from(theirs.addr));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..rounds_n() {
        if round % 2 == 0 {
            a.push(backlog_round(&ours, &ours_to, path, &ours_rv).await?.0);
            b.push(
                backlog_round(&theirs, &theirs_to, path, &theirs_rv)
                    .await?
                    .0,
            );
        } else {
            b.push(
                backlog_round(&theirs, &theirs_to, path, &theirs_rv)
                    .await?
                    .0,
            );
            a.push(backlog_round(&ours, &ours_to, path, &ours_rv).await?.0);
        }
    }
    let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y.max(1e-9)).collect();
    let (sa, sb, sr) = (Spread::of(&a), Spread::of(&b), Spread::of(&ratios));
    r.push(
        Metric::new(
            &format!(
                "backlog, this build vs the baseline build: server CPU per delivered event, {} events queued at once (median of {})",
                m(),
                rounds_n()
            ),
            "µs",
            sa.median,
        )
        .baseline(sb.median, "the baseline build of the server, same run")
        .note(format!(
            "ours {}; baseline build {}; ratio per round {}",
            sa.text("µs"),
            sb.text("µs"),
            sr.text("")
        )),
    );
    r.notes.push(format!(
        "Backlog against the baseline build ({}), per round: this build µs per event {}, baseline build {}, ratio {}.",
        base.display(),
        list(&a),
        list(&b),
        list(&ratios),
    ));
    Ok(())
}

/// One configuration's server and what its rounds measured.
struct Side {
    server: Deployed,
    config: Config,
    conn: Conn,
    writers: Vec<Conn>,
    next: usize,
    live: Vec<f64>,
    live_base: Vec<f64>,
    rates: Vec<f64>,
    per_read: Vec<f64>,
    cpus: Vec<(f64, f64)>,
    backlog: Vec<f64>,
    backlog_base: Vec<f64>,
    backlog_per_read: Vec<f64>,
}

const PATH: &str = "/api/v1/namespaces/p2/pods";

impl Side {
    async fn start(config: Config) -> Result<Self> {
        let server =
            realistic::start(&sys::apiserver_bin()?, config, &["--storage", "embedded"]).await?;
        let mut conn = Conn::open(server.target.clone()).await?;
        conn.expect(
            201,
            "POST",
            "/api/v1/namespaces",
            JSON,
            br#"{"metadata":{"name":"p2"}}"#,
        )
        .await?;
        let mut writers = Vec::with_capacity(WRITERS);
        for _ in 0..WRITERS {
            writers.push(Conn::open(server.target.clone()).await?);
        }
        Ok(Self {
            server,
            config,
            conn,
            writers,
            next: 0,
            live: Vec::new(),
            live_base: Vec::new(),
            rates: Vec::new(),
            per_read: Vec::new(),
            cpus: Vec::new(),
            backlog: Vec::new(),
            backlog_base: Vec::new(),
            backlog_per_read: Vec::new(),
        })
    }

    /// The creates alone: the server's CPU for them.
    async fn alone(&mut self, pb: &indicatif::ProgressBar) -> Result<f64> {
        let server = &self.server.server;
        let m = m();
        let cpu0 = server.cpu();
        create_burst(&mut self.writers, PATH, self.next).await?;
        self.next += m;
        pb.inc(m as u64);
        Ok(server.cpu() - cpu0)
    }

    /// One round: the creates alone and as many with the watch open (in round `k`'s order:
    /// alone first in even rounds, second in odd ones, so that a drift of the creates' cost
    /// over the run — the store grows — does not fall on one side), then the backlog.
    async fn round(&mut self, pb: &indicatif::ProgressBar, k: usize) -> Result<()> {
        let alone_first = k.is_multiple_of(2);
        let mut cpu_writes = if alone_first {
            self.alone(pb).await?
        } else {
            0.0
        };
        let (server, to) = (&self.server.server, &self.server.target);
        let m = m();
        // As many creates with the watch open.
        let rv = list_rv(&mut self.conn, PATH).await?;
        let watch = Collector::open(to, &format!("{PATH}?watch=1&resourceVersion={rv}")).await?;
        let cpu0 = server.cpu();
        let t = Instant::now();
        create_burst(&mut self.writers, PATH, self.next).await?;
        self.next += m;
        pb.inc(m as u64);
        let done = watch.wait(m as u64, Duration::from_secs(120)).await?;
        let cpu_watch = server.cpu() - cpu0;
        let (frames, reads) = watch.finish();
        let rate = m as f64 / (done - t).as_secs_f64();
        let live_at = self.live.len();
        self.rates.push(rate);
        self.per_read.push(reads);
        let encoded = chunked(&frames);
        self.live_base.push(bare_task_cost(&encoded, Some(rate))?);
        // The same events again, all queued at once: watches from before them, one after
        // the other (several, so that each round measures a second or more of CPU).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (cpu, reads) = backlog_round(server, to, PATH, &rv).await?;
        self.backlog.push(cpu);
        self.backlog_per_read.push(reads);
        self.backlog_base.push(bare_task_cost(&encoded, None)?);
        if !alone_first {
            cpu_writes = self.alone(pb).await?;
        }
        // Not clamped: a round whose creates cost less with the watcher than without shows
        // as a negative figure, which is what tells the difference is within the noise.
        self.live
            .insert(live_at, (cpu_watch - cpu_writes) / m as f64 * 1e6);
        self.cpus.push((cpu_writes, cpu_watch));
        Ok(())
    }
}

pub(crate) async fn p2() -> Result<Report> {
    let (m, rounds) = (m(), rounds_n());
    let mut r = Report::new(
        "P2",
        "HTTP watch, 1 watcher, small pods, fed faster than one at a time; easy and realistic configurations",
        &format!(
            "{rounds} rounds of {m} creates without and {m} with the watcher, then {} backlog watches",
            backlog_watches()
        ),
    );
    let mut sides = Vec::new();
    for c in realistic::configs() {
        eprintln!("P2: setting up {}", c.label());
        sides.push(Side::start(c).await?);
    }
    let pb = bar((2 * m * rounds * sides.len()) as u64, "creates");
    for round in 0..rounds {
        // Alternating which configuration goes first.
        let n = sides.len();
        for k in 0..n {
            sides[(round + k) % n].round(&pb, round).await?;
        }
    }
    pb.finish_and_clear();
    let easy_live = sides
        .iter()
        .find(|s| s.config == Config::Easy)
        .map(|s| (Spread::of(&s.live).median, Spread::of(&s.backlog).median));
    let mut fs = None;
    for side in &sides {
        push_side(&mut r, side, easy_live);
        if side.config == Config::Realistic {
            fs = side.server.fs_type.clone();
        }
    }
    if sides.iter().any(|s| s.config == Config::Realistic) {
        r.notes.push(realistic::note(fs.as_deref()));
    }
    drop(sides);
    if let Some(base) = std::env::var_os("LISTWATCH_BASELINE_APISERVER_BIN") {
        backlog_vs_build(&mut r, std::path::Path::new(&base)).await?;
    }
    Ok(r)
}

/// The figures of one configuration. The easy one's are judged against the bare task; the
/// realistic one's are shown beside the easy one's (`easy`: live and backlog medians).
fn push_side(r: &mut Report, side: &Side, easy: Option<(f64, f64)>) {
    let (m, rounds) = (m(), rounds_n());
    let ratios = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)).collect()
    };
    let (l, lb, lr) = (
        Spread::of(&side.live),
        Spread::of(&side.live_base),
        Spread::of(&ratios(&side.live, &side.live_base)),
    );
    let (b, bb, br) = (
        Spread::of(&side.backlog),
        Spread::of(&side.backlog_base),
        Spread::of(&ratios(&side.backlog, &side.backlog_base)),
    );
    let rate = Spread::of(&side.rates);
    let prefix = match side.config {
        Config::Easy => String::new(),
        Config::Realistic => "realistic (TLS, token + RBAC, --data-dir): ".to_owned(),
    };
    let live = Metric::new(
        &format!(
            "{prefix}live: server CPU per delivered event, {WRITERS} writers creating at once (with watcher − without; median of {rounds})"
        ),
        "µs",
        l.median,
    );
    let backlog = Metric::new(
        &format!(
            "{prefix}backlog: server CPU per delivered event, {m} events queued at once (median of {rounds})"
        ),
        "µs",
        b.median,
    );
    let mut unjudged = None;
    let (live, backlog) = match (side.config, easy) {
        (Config::Realistic, Some((el, eb))) => (
            live.baseline(el, "the easy configuration, same run"),
            backlog.baseline(eb, "the easy configuration, same run"),
        ),
        (Config::Realistic, None) => (live, backlog),
        (Config::Easy, _) => (
            {
                let live = live.baseline(
                    lb.median,
                    "bare tokio task: the same frames from an mpsc to a TCP socket at the same event rate",
                );
                // The figure is a difference of two large CPU totals: judged only when its
                // rounds agree to within the bare task's own figure (else its sign and
                // size are the creates' noise, and a verdict either way would be chance).
                if l.max - l.min <= lb.median {
                    live.goal(Goal::Ratio(Bound::AtMost(2.0)))
                } else {
                    unjudged = Some(format!(
                        "not judged against its goal (≤ 2× the bare task): the rounds span {:.1} to {:.1} µs, \
                         wider than the bare task's {:.1} µs — the difference between the creates with and \
                         without the watcher is within the creates' own round-to-round noise",
                        l.min, l.max, lb.median
                    ));
                    live
                }
            },
            backlog
                .baseline(
                    bb.median,
                    "bare tokio task: the same frames, all queued in its mpsc, to a TCP socket",
                )
                .goal(Goal::Ratio(Bound::AtMost(2.0))),
        ),
    };
    r.push(live.note(format!(
        "{}ours {}; bare task {}; ratio to the bare task per round {}",
        unjudged.map(|u| format!("{u}. ")).unwrap_or_default(),
        l.text("µs"),
        lb.text("µs"),
        lr.text("")
    )));
    r.push(backlog.note(format!(
        "ours {}; bare task {}; ratio to the bare task per round {}",
        b.text("µs"),
        bb.text("µs"),
        br.text("")
    )));
    r.push(Metric::new(
        &format!("{prefix}live: events/s delivered to the watcher"),
        "events/s",
        rate.median,
    ));
    r.notes.push(format!(
        "{}: live, per round: server µs per event {}, bare task {}, ratio {}; events/s {}; frames per client read {}; \
         server CPU-s for {m} creates without / with the watcher {}. Backlog, per round: server µs per event {}, \
         bare task {}, ratio {}; frames per client read {}. Server CPU from a cgroup of its own, to the nanosecond.",
        side.config.label(),
        list(&side.live),
        list(&side.live_base),
        list(&ratios(&side.live, &side.live_base)),
        list(&side.rates),
        list(&side.per_read),
        side.cpus
            .iter()
            .map(|(a, b)| format!("({a:.2}, {b:.2})"))
            .collect::<Vec<_>>()
            .join(", "),
        list(&side.backlog),
        list(&side.backlog_base),
        list(&ratios(&side.backlog, &side.backlog_base)),
        list(&side.backlog_per_read),
    ));
}
