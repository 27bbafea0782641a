//! `cargo xtask amplification`: the amplification harness (issue 24, deliverable 3).
//!
//! Starts the release `listwatch-apiserver` (embedded store, a schemaless `Blob` custom
//! resource declared), then for every family of [`families`] — each a body type × verb ×
//! content type with one dimension scaled (deep, wide, long keys, list items, patch
//! operations, selector terms, conditions, managedFields) — sends the request at 1×, 4× and
//! 16× its base size and measures, per request, the server's CPU time (utime + stime from
//! /proc/PID/stat, before and after a round of repeats on an otherwise idle server, median of
//! the rounds), its peak RSS growth (VmHWM after the request less VmRSS before it, the peak
//! reset through /proc/PID/clear_refs before each round; the largest seen) and the response
//! bytes. A family fails when its cost grows faster than its input ([`verdict`]'s ratio of
//! ratios) or one request exceeds the budget; the run fails when any family does, naming it.
//! Results: a table on stdout and JSON (commit, date, machine, kernel) in
//! `docs/bench/amplification.json`.
//!
//! Invariants: every family gets a fresh server (no allocator state or stored objects from
//! another family); measured writes are dry runs (or fail), so rounds are repeatable; each
//! server is killed when its family ends, whatever happens; every socket operation has a
//! deadline.

mod bodies;
mod families;
mod server;
mod verdict;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use families::{Family, Req};
use server::{Conn, Server};
use verdict::{Budgets, Point, Verdict};

pub const HELP: &str = "amplification [--bin PATH] [--factors 1,4,16] [--scale K] [--rounds R]
                   [--only SUBSTR] [--out FILE]
                   send size-scaled families of nasty requests to the release apiserver
                   (built first unless --bin), measure server CPU, peak RSS and response
                   bytes per request; fails on super-linear growth or a budget overrun";

struct Options {
    bin: Option<PathBuf>,
    factors: Vec<u64>,
    scale: u64,
    rounds: usize,
    only: Vec<String>,
    out: PathBuf,
}

fn parse(args: &[String], root: &std::path::Path) -> Result<Options, String> {
    let mut o = Options {
        bin: None,
        factors: vec![1, 4, 16],
        scale: 1,
        rounds: 3,
        only: Vec::new(),
        out: root.join("docs").join("bench").join("amplification.json"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--bin" => o.bin = Some(PathBuf::from(val()?)),
            "--factors" => {
                o.factors = val()?
                    .split(',')
                    .map(|f| {
                        f.trim()
                            .parse::<u64>()
                            .map_err(|e| format!("--factors {f:?}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                if o.factors.len() < 2
                    || o.factors.windows(2).any(|w| w[0] >= w[1])
                    || o.factors[0] == 0
                {
                    return Err("--factors needs at least two ascending positive factors".into());
                }
            }
            "--scale" => o.scale = val()?.parse().map_err(|e| format!("--scale: {e}"))?,
            "--rounds" => o.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--only" => o.only.push(val()?.clone()),
            "--out" => o.out = PathBuf::from(val()?),
            other => return Err(format!("unknown argument {other:?}\n{HELP}")),
        }
    }
    if o.scale == 0 || o.rounds == 0 {
        return Err("--scale and --rounds must be positive".into());
    }
    Ok(o)
}

/// The measured points of one family and its verdict (or the error that stopped it).
struct Outcome {
    family: Family,
    ns: Vec<u64>,
    points: Vec<Point>,
    codes: Vec<u16>,
    verdict: Result<Verdict, String>,
}

/// Runs the harness against `bin`; `Err` names every failing family.
pub fn run(args: &[String], root: &std::path::Path, default_bin: PathBuf) -> Result<(), String> {
    let o = parse(args, root)?;
    let bin = o.bin.clone().unwrap_or(default_bin);
    let dir = std::env::temp_dir().join(format!("listwatch-amplification-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let resources = dir.join("resources.yaml");
    std::fs::write(&resources, families::RESOURCES).map_err(|e| e.to_string())?;
    let resources_arg = resources.to_string_lossy().into_owned();
    let result = measure_all(&o, &bin, &["--resources", &resources_arg], root);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Starts a fresh server with the selector families' objects stored, and measures its idle
/// CPU rate.
fn fresh_server(bin: &std::path::Path, args: &[&str]) -> Result<(Server, f64), String> {
    let server = Server::start(bin, args)?;
    let mut conn = Conn::open(server.addr)?;
    for r in families::selector_objects() {
        send_ok(&mut conn, &r, &[201])?;
    }
    let idle = idle_cpu_rate(&server)?;
    Ok((server, idle))
}

fn measure_all(
    o: &Options,
    bin: &std::path::Path,
    args: &[&str],
    root: &std::path::Path,
) -> Result<(), String> {
    let budgets = Budgets::DEFAULT;
    let mut outcomes = Vec::new();
    for family in families::all() {
        if !o.only.is_empty() && !o.only.iter().any(|s| family.name.contains(s.as_str())) {
            continue;
        }
        // A server of its own per family: memory an earlier family's requests left with the
        // allocator would hide this family's peak.
        let (server, idle) = fresh_server(bin, args)?;
        let mut conn = Conn::open(server.addr)?;
        let started = Instant::now();
        let outcome = measure_family(&server, &mut conn, family, o, idle, &budgets);
        drop(server);
        print_progress(&outcome, idle, started.elapsed());
        outcomes.push(outcome);
    }
    let table = table(&outcomes, &o.factors);
    println!("{table}");
    let json = json(&outcomes, o, bin, &budgets, root);
    if let Some(parent) = o.out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    std::fs::write(&o.out, json).map_err(|e| format!("{}: {e}", o.out.display()))?;
    eprintln!("results: {}", o.out.display());
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|oc| match &oc.verdict {
            Ok(v) if v.passed() => None,
            Ok(v) => Some(format!("{}: {}", oc.family.name, v.failures.join("; "))),
            Err(e) => Some(format!("{}: error: {e}", oc.family.name)),
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} families failed:\n  {}",
            failed.len(),
            outcomes.len(),
            failed.join("\n  ")
        ))
    }
}

/// The server's CPU seconds per second while idle (subtracted from every round).
fn idle_cpu_rate(server: &Server) -> Result<f64, String> {
    let (c0, t0) = (server.cpu()?, Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    Ok(((server.cpu()? - c0) / t0.elapsed().as_secs_f64()).max(0.0))
}

fn send(conn: &mut Conn, r: &Req) -> Result<(u16, Vec<u8>), String> {
    conn.request(
        r.method,
        &r.path,
        &[("Content-Type", r.content_type), ("Accept", r.accept)],
        &r.body,
    )
}

fn send_ok(conn: &mut Conn, r: &Req, ok: &[u16]) -> Result<(u16, Vec<u8>), String> {
    let (code, body) = send(conn, r)?;
    if ok.contains(&code) {
        Ok((code, body))
    } else {
        Err(format!(
            "{} {}: {code} (want {ok:?}): {}",
            r.method,
            server::short(&r.path),
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ))
    }
}

/// A measured request: its family's statuses, or 413 (a size limit, reachable with
/// `--scale`; the table shows the status of every size).
fn send_measured(conn: &mut Conn, r: &Req, ok: &[u16]) -> Result<(u16, Vec<u8>), String> {
    let (code, body) = send(conn, r)?;
    if ok.contains(&code) || code == 413 {
        Ok((code, body))
    } else {
        Err(format!(
            "{} {}: {code} (want {ok:?}): {}",
            r.method,
            server::short(&r.path),
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ))
    }
}

/// Most requests in one round, and the wall time after which a round stops repeating.
const ROUND_REQUESTS: usize = 100;
const ROUND_TIME: Duration = Duration::from_millis(300);
/// A /proc CPU tick (USER_HZ is 100 on every Linux this runs on).
const TICK: f64 = 0.01;

fn measure_family(
    server: &Server,
    conn: &mut Conn,
    family: Family,
    o: &Options,
    idle: f64,
    budgets: &Budgets,
) -> Outcome {
    // The deep families are bounded by the 100-level nesting limit: --scale leaves them be.
    let scale = if family.base == families::DEEP_LEVELS {
        1
    } else {
        o.scale
    };
    let ns: Vec<u64> = o.factors.iter().map(|f| family.base * scale * f).collect();
    let mut points = Vec::new();
    let mut codes = Vec::new();
    let mut error = None;
    for (&factor, &n) in o.factors.iter().zip(&ns) {
        match measure_point(server, conn, &family, n, o.rounds, idle) {
            Ok((mut p, code)) => {
                p.factor = factor;
                points.push(p);
                codes.push(code);
            }
            Err(e) => {
                error = Some(format!("at {factor}× (N = {n}): {e}"));
                break;
            }
        }
    }
    let verdict = match error {
        Some(e) => Err(e),
        None => Ok(verdict::judge(&points, budgets)),
    };
    Outcome {
        family,
        ns,
        points,
        codes,
        verdict,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn measure_point(
    server: &Server,
    conn: &mut Conn,
    family: &Family,
    n: u64,
    rounds: usize,
    idle: f64,
) -> Result<(Point, u16), String> {
    let mut stored = 0u64;
    for r in (family.setup)(n) {
        // 409: stored by an earlier family at the same size.
        send_ok(conn, &r, &[200, 201, 409])?;
        stored += r.body.len() as u64;
    }
    let req = (family.request)(n);
    let input = (req.path.len() + req.body.len()) as u64 + stored;
    // The first request at this size: its status, response size and memory growth.
    let mem_first = {
        server.reset_peak()?;
        let before = server.vm("VmRSS")?;
        let (code, body) = send_measured(conn, &req, family.ok)?;
        let grew = server.vm("VmHWM")?.saturating_sub(before);
        (grew, code, body.len() as u64)
    };
    let (mut cpus, mut mems) = (Vec::new(), vec![mem_first.0]);
    let mut resolution = 0.0f64;
    for _ in 0..rounds {
        server.reset_peak()?;
        let rss = server.vm("VmRSS")?;
        let (c0, t0) = (server.cpu()?, Instant::now());
        let mut reps = 0usize;
        loop {
            send_measured(conn, &req, family.ok)?;
            if reps == 0 {
                mems.push(server.vm("VmHWM")?.saturating_sub(rss));
            }
            reps += 1;
            if reps >= ROUND_REQUESTS || t0.elapsed() >= ROUND_TIME {
                break;
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        let used = (server.cpu()? - c0 - idle * wall).max(0.0);
        cpus.push(used / reps as f64);
        // /proc counts in ticks: one tick over this round's requests is what it can resolve.
        resolution = resolution.max(TICK / reps as f64);
    }
    let point = Point {
        factor: 0,
        bytes: input,
        response_bytes: mem_first.2,
        cpu: median(cpus),
        mem: mems.into_iter().max().unwrap_or(0),
        cpu_resolution: resolution,
    };
    Ok((point, mem_first.1))
}

fn print_progress(o: &Outcome, idle: f64, took: Duration) {
    let status = match &o.verdict {
        Ok(v) if v.passed() => "ok".to_owned(),
        Ok(v) => format!("FAIL: {}", v.failures.join("; ")),
        Err(e) => format!("ERROR {e}"),
    };
    let cpu: Vec<String> = o
        .points
        .iter()
        .map(|p| format!("{:.2}", p.cpu * 1e3))
        .collect();
    eprintln!(
        "{:<28} cpu ms {:<24} ({:.0?}, idle {:.2} ms/s) {status}",
        o.family.name,
        cpu.join(" / "),
        took,
        idle * 1e3
    );
}

fn join<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
    v.iter().map(f).collect::<Vec<_>>().join(" / ")
}

fn growth(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{x:.1}×"))
}

/// The Markdown table of a run (what docs/endpoints.md records).
fn table(outcomes: &[Outcome], factors: &[u64]) -> String {
    let mut t = String::new();
    let f = join(factors, |f| format!("{f}×"));
    let _ = writeln!(
        t,
        "| family | request | watches | N at {f} | input KiB | CPU ms per request | peak RSS growth MiB | response KiB | growth CPU / mem / resp (× linear) | verdict |"
    );
    let _ = writeln!(
        t,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for o in outcomes {
        let (growths, verdict) = match &o.verdict {
            Ok(v) => (
                format!(
                    "{} / {} / {}",
                    growth(v.cpu_excess),
                    growth(v.mem_excess),
                    growth(v.bytes_excess)
                ),
                if v.passed() {
                    "pass".to_owned()
                } else {
                    format!("**FAIL**: {}", v.failures.join("; "))
                },
            ),
            Err(e) => ("–".to_owned(), format!("**ERROR**: {e}")),
        };
        let codes = join(&o.codes, u16::to_string);
        let _ = writeln!(
            t,
            "| {} | {} ({codes}) | {} | {} | {} | {} | {} | {} | {growths} | {verdict} |",
            o.family.name,
            o.family.what,
            o.family.watches,
            join(&o.ns, u64::to_string),
            join(&o.points, |p| format!("{:.1}", p.bytes as f64 / 1024.0)),
            join(&o.points, |p| format!("{:.2}", p.cpu * 1e3)),
            join(&o.points, |p| format!(
                "{:.1}",
                p.mem as f64 / (1 << 20) as f64
            )),
            join(&o.points, |p| format!(
                "{:.1}",
                p.response_bytes as f64 / 1024.0
            )),
        );
    }
    t
}

/// A JSON string literal.
fn js(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn num(x: Option<f64>) -> String {
    x.filter(|x| x.is_finite())
        .map_or_else(|| "null".to_owned(), |x| format!("{x:.3}"))
}

fn command_out(program: &str, args: &[&str], dir: &std::path::Path) -> String {
    std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The results as JSON: the run's commit, date and machine, the budgets, every family.
fn json(
    outcomes: &[Outcome],
    o: &Options,
    bin: &std::path::Path,
    b: &Budgets,
    root: &std::path::Path,
) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let commit = command_out("git", &["rev-parse", "HEAD"], root);
    // Dirty: the sources the measurement depends on (the server's and the harness's).
    let dirty = !command_out(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "crates",
            "xtask",
            "Cargo.lock",
        ],
        root,
    )
    .is_empty();
    let date = command_out("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"], root);
    let mut s = String::from("{\n");
    let _ = writeln!(s, "  \"commit\": {},\n  \"dirty\": {dirty},", js(&commit));
    let _ = writeln!(s, "  \"date\": {},", js(&date));
    let _ = writeln!(
        s,
        "  \"machine\": {{\"cpu\": {}, \"cores\": {cores}, \"kernel\": {}}},",
        js(&model),
        js(kernel.trim())
    );
    let _ = writeln!(s, "  \"binary\": {},", js(&bin.to_string_lossy()));
    let _ = writeln!(
        s,
        "  \"factors\": [{}], \"scale\": {}, \"rounds\": {},",
        o.factors
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        o.scale,
        o.rounds
    );
    let _ = writeln!(
        s,
        "  \"budgets\": {{\"cpu_per_request_s\": {}, \"mem_per_byte\": {}, \"mem_floor_bytes\": {}, \"growth_tolerance\": {}, \"cpu_noise_s\": {}, \"mem_noise_bytes\": {}, \"response_noise_bytes\": {}}},",
        b.cpu_per_request,
        b.mem_per_byte,
        b.mem_floor,
        b.tolerance,
        b.cpu_noise,
        b.mem_noise,
        b.bytes_noise
    );
    s.push_str("  \"families\": [\n");
    let fams: Vec<String> = outcomes
        .iter()
        .map(|oc| {
            let pts: Vec<String> = oc
                .points
                .iter()
                .zip(&oc.ns)
                .zip(&oc.codes)
                .map(|((p, n), code)| {
                    format!(
                        "{{\"factor\": {}, \"n\": {n}, \"status\": {code}, \"input_bytes\": {}, \"cpu_s\": {:.6}, \"cpu_resolution_s\": {:.6}, \"peak_rss_growth_bytes\": {}, \"response_bytes\": {}}}",
                        p.factor, p.bytes, p.cpu, p.cpu_resolution, p.mem, p.response_bytes
                    )
                })
                .collect();
            let (verdict, cpu_x, mem_x, resp_x, failures) = match &oc.verdict {
                Ok(v) => (
                    if v.passed() { "pass" } else { "fail" },
                    num(v.cpu_excess),
                    num(v.mem_excess),
                    num(v.bytes_excess),
                    v.failures.clone(),
                ),
                Err(e) => ("error", num(None), num(None), num(None), vec![e.clone()]),
            };
            format!(
                "    {{\"name\": {}, \"request\": {}, \"watches\": {}, \"points\": [{}], \"cpu_growth\": {cpu_x}, \"mem_growth\": {mem_x}, \"response_growth\": {resp_x}, \"verdict\": {}, \"failures\": [{}]}}",
                js(oc.family.name),
                js(oc.family.what),
                js(oc.family.watches),
                pts.join(", "),
                js(verdict),
                failures.iter().map(|f| js(f)).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    s.push_str(&fams.join(",\n"));
    s.push_str("\n  ]\n}\n");
    s
}
