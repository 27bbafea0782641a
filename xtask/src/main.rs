//! Developer workflows for listwatch: `cargo xtask <task>`.
//!
//! - `test`  — every test of the workspace, including the ones that need a real etcd and the
//!   real clients; provisions what they need first (etcd, openssl, the Python `kubernetes`
//!   client) and checks that kubectl is there. `test -p CRATE ..` runs only those packages.
//!   Tests that need a tool are `#[ignore]`d for plain `cargo test`; here they all run, and a
//!   missing tool fails them.
//! - `e2e`   — only the end-to-end tests (the apiserver binary and real clients).
//! - `ci`    — `deps`, `fmt --check`, `clippy --all-targets -D warnings`, `doc` with warnings
//!   denied, then `test`, then `python-e2e` on the apiserver the tests built. This is what
//!   `.ci/run` and the GitHub workflow run. The names and first output lines of failed tests are
//!   said again at the end ([`mod@failures`]).
//! - `deps`  — the layering rule: every edge between workspace crates in `cargo metadata` must
//!   be in the table of [`mod@deps`] (which says why each is there); fails naming each
//!   forbidden edge.
//! - `bench [SCENARIO..]` — the performance scenarios P1..P20 and W2 (docs/benchmarks.md) with the
//!   load generator (`listwatch-benches`' `loadgen`), each in its own process, after building
//!   the apiserver it starts; results as JSON, Markdown and SVG in docs/bench/.
//!   `bench --criterion [NAME..]` runs the criterion micro-benchmarks instead. After the
//!   scenarios, the summary table of docs/benchmarks.md is regenerated from docs/bench/*.json
//!   ([`mod@bench_summary`]); `bench --summary` regenerates it alone.
//! - `amplification [..]` — the amplification harness (issue 24): size-scaled families of
//!   legal-but-nasty requests against the release apiserver, failing on a family whose server
//!   CPU, peak memory or response grows faster than its input, or on a request over budget
//!   (docs/endpoints.md, "Amplification harness"; [`mod@amplification`]).
//! - `python-e2e [--bin PATH] [-- PYTEST-ARGS]` — the Python `kubernetes` client's own e2e
//!   suite (vendored in suites/python-e2e/) against the apiserver, kubelet tests deselected
//!   ([`mod@python_e2e`]; docs/testing.md, "Other projects' test suites").
//! - `kube-rs-suite` — kube-rs's own `#[ignore]`d cluster tests (kube, kube-client and
//!   kube-runtime 5.0.0) against a fresh apiserver, kubelet-dependent ones excluded with
//!   their reasons ([`mod@kube_rs_suite`], docs/testing.md).
//! - `fuzz [TARGET] [SECONDS]` — `cargo +nightly fuzz run` on one fuzz target of fuzz/, or
//!   on each in turn, for SECONDS (default 60) each (docs/fuzzing.md).
//!
//! Kept light on purpose: std and serde_json (to read `cargo metadata`) only, no async
//! runtime.

mod amplification;
mod bench_summary;
mod deps;
mod failures;
mod kube_rs_suite;
mod python_e2e;

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((t, r)) => (t.as_str(), r),
        None => ("help", &[][..]),
    };
    let started = Instant::now();
    let result = match task {
        "test" => test(rest),
        "e2e" => run_tests(&["-p", "listwatch-apiserver"], rest),
        "ci" => ci(rest),
        "deps" => deps::run(&root()),
        "bench" => bench(rest),
        "provision" => provision().map(|_| ()),
        "fuzz" => fuzz(rest),
        "amplification" => amplification(rest),
        "python-e2e" => python_e2e::run(rest, &root(), &target_dir()),
        "kube-rs-suite" => kube_rs_suite(rest),
        "help" | "--help" | "-h" => {
            eprintln!("{}", HELP);
            Ok(())
        }
        other => Err(format!("unknown task {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => {
            eprintln!("xtask {task}: ok in {:.0?}", started.elapsed());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask {task}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "usage: cargo xtask <task>
  test [ARGS]      run every test (provisions etcd, openssl and the Python client first);
                   ARGS go to `cargo test` before `--` (`-p CRATE` narrows it to packages)
  e2e [ARGS]       only the end-to-end tests: the apiserver binary driven by kubectl,
                   kube-rs, the Python client and raw HTTP, on both backends
  ci               deps, fmt --check, clippy -D warnings, doc -D warnings, test, python-e2e
  deps             check the edges between workspace crates against the layering table
                   (xtask/src/deps.rs); fails naming each forbidden edge
  bench [SCENARIO..]  run the performance scenarios P1..P20 and W2 (all, or the named ones)
                   with the load generator; results in docs/bench/
  bench --criterion [NAME..]  run the criterion micro-benchmarks (all, or the named targets)
  bench --summary  regenerate docs/benchmarks.md's summary table from docs/bench/*.json
  fuzz [TARGET] [SECONDS]  run one fuzz target (or each in turn) for SECONDS (default 60)
                   with `cargo +nightly fuzz`; see docs/fuzzing.md
  amplification [--bin PATH] [--factors 1,4,16] [--scale K] [--rounds R] [--only SUBSTR]
                   [--out FILE]  the amplification harness: size-scaled nasty requests
                   against the release apiserver (built first unless --bin); fails on
                   super-linear CPU, memory or response growth or a request over budget;
                   results in docs/bench/amplification.json (docs/endpoints.md)
  python-e2e [--bin PATH] [-- PYTEST-ARGS..]  the Python kubernetes client's e2e suite
                   (suites/python-e2e) against the debug apiserver (or PATH), in memory;
                   kubelet tests deselected (suites/python-e2e/deselected.txt)
  kube-rs-suite    kube-rs's own cluster tests (kube, kube-client, kube-runtime 5.0.0,
                   `--ignored`) against a fresh debug apiserver; kubelet-dependent ones are
                   skipped (xtask/src/kube_rs_suite/excluded.rs); see docs/testing.md
  provision        only install/check etcd and the Python kubernetes client";

fn root() -> PathBuf {
    // xtask lives one level below the workspace root.
    let manifest = env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    manifest
        .and_then(|m| m.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    if CI_MODE.load(Ordering::Relaxed) {
        // A CI run builds once: incremental caches would only fill the disk. They were ~10 GB
        // of the workspace's ~20 GB test build, and a CI run died of a full disk in rustc.
        c.env("CARGO_INCREMENTAL", "0");
    }
    c
}

/// Set by `ci`: every cargo it starts builds without incremental caches.
static CI_MODE: AtomicBool = AtomicBool::new(false);

fn run(mut cmd: Command) -> Result {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} exited with {status}"))
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Finds etcd, installing Debian's `etcd-server` when missing and running as root.
fn ensure_etcd() -> Result<PathBuf> {
    if let Some(p) = env::var_os("LISTWATCH_ETCD_BIN")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
    {
        return Ok(p);
    }
    // etcd-client brings etcdctl, handy when a fault test needs a look at the cluster.
    ensure_debian_program("etcd", &["etcd-server", "etcd-client"])
        .map_err(|e| format!("{e} (or set LISTWATCH_ETCD_BIN)"))
}

/// Finds `program` on PATH, installing Debian's `packages` when it is missing and we run as
/// root with apt-get.
fn ensure_debian_program(program: &str, packages: &[&str]) -> Result<PathBuf> {
    if let Some(p) = which(program) {
        return Ok(p);
    }
    let list = packages.join(" ");
    if !is_root() || which("apt-get").is_none() {
        return Err(format!(
            "{program} is not installed: install Debian's {list} (apt-get install -y {list})"
        ));
    }
    eprintln!("{program} missing: installing Debian's {list}");
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run(update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-qq"]).args(packages);
    install.env("DEBIAN_FRONTEND", "noninteractive");
    run(install)?;
    which(program).ok_or_else(|| format!("{list} installed but no `{program}` on PATH"))
}

/// kubectl drives the end-to-end tests. It is on every machine this project builds on (a
/// dispatcher choosing its 1.27–1.33 build by the server's `/version`); Debian's
/// `kubernetes-client` is 1.20, too old for what the tests check, so it is not installed
/// here: a missing kubectl is an error that names it.
fn ensure_kubectl() -> Result<PathBuf> {
    which("kubectl").ok_or_else(|| {
        "kubectl is not installed: the end-to-end tests need it (a 1.27 or newer kubectl on PATH)"
            .into()
    })
}

/// Makes sure the Python `kubernetes` client is importable (end-to-end tests drive it), and
/// what its HTTP/2 test needs beside it: urllib3's experimental `urllib3.http2` (2.3 and
/// later) and the `h2` package it runs on (4.x, the only major version urllib3 accepts).
fn ensure_python_client() -> Result<PathBuf> {
    const MODULES: &str = "import kubernetes, h2, urllib3.http2";
    const PACKAGES: [&str; 3] = ["kubernetes", "h2>=4,<5", "urllib3>=2.3"];
    let python = which("python3").ok_or("python3 is not installed")?;
    let has = |py: &Path| {
        Command::new(py)
            .args(["-c", MODULES])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !has(&python) {
        eprintln!(
            "installing the Python kubernetes client and HTTP/2 support ({})",
            PACKAGES.join(" ")
        );
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]);
        pip.args(PACKAGES);
        run(pip)?;
        if !has(&python) {
            return Err(format!(
                "pip installed {PACKAGES:?} but python3 cannot `{MODULES}`"
            ));
        }
    }
    Ok(python)
}

fn provision() -> Result<Vec<(&'static str, PathBuf)>> {
    let etcd = ensure_etcd()?;
    let python = ensure_python_client()?;
    let openssl = ensure_debian_program("openssl", &["openssl"])?;
    // The doc-test harness (doc_shell_blocks) runs the docs' curl commands.
    let curl = ensure_debian_program("curl", &["curl"])?;
    let kubectl = ensure_kubectl()?;
    eprintln!(
        "using etcd at {}, python at {}, openssl at {}, curl at {}, kubectl at {}",
        etcd.display(),
        python.display(),
        openssl.display(),
        curl.display(),
        kubectl.display()
    );
    Ok(vec![
        ("LISTWATCH_ETCD_BIN", etcd),
        ("LISTWATCH_PYTHON", python),
    ])
}

fn test(extra: &[String]) -> Result {
    let narrowed = extra
        .iter()
        .any(|a| a == "-p" || a == "--package" || a.starts_with("--package="));
    run_tests(if narrowed { &[] } else { &["--workspace"] }, extra)
}

/// `cargo test` of `packages`, everything provisioned and ignored tests included.
fn run_tests(packages: &[&str], extra: &[String]) -> Result {
    let env = provision()?;
    let mut cmd = cargo();
    cmd.args(["test", "--locked"]);
    cmd.args(packages);
    cmd.args(extra);
    // Tests that need etcd or real clients are #[ignore]d so that plain `cargo test` passes on
    // a bare machine; here everything is provisioned, so they all run.
    cmd.args(["--", "--include-ignored"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if CI_MODE.load(Ordering::Relaxed) {
        // Kept to be said again at the end of the log, where a reader of its tail looks.
        failures::run_teed(cmd)
    } else {
        run(cmd)
    }
}

fn ci(extra: &[String]) -> Result {
    CI_MODE.store(true, Ordering::Relaxed);
    report_free_disk();
    // The layering first: it reads the manifests only, so a forbidden edge fails in seconds.
    deps::run(&root())?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps", "--locked"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    run(doc)?;
    // Every test binary runs even after one fails, so one CI run reports every failure.
    let mut all = vec!["--no-fail-fast".to_string()];
    all.extend_from_slice(extra);
    let tests = test(&all);
    // The Python client's own e2e suites (about 40 s), on the apiserver the tests just built:
    // built alone, its features would differ from the workspace's and it would build again.
    let bin = target_dir().join("debug").join("listwatch-apiserver");
    let args: Vec<String> = if bin.is_file() {
        vec!["--bin".into(), bin.display().to_string()]
    } else {
        Vec::new()
    };
    let python = python_e2e::run(&args, &root(), &target_dir());
    eprint!("{}", failures::summary());
    match (tests, python) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(t), Err(p)) => Err(format!("{t}\npython-e2e: {p}")),
    }
}

/// Prints the free space where the build goes, so that a CI run that dies of a full disk
/// says so at its start (best effort: `df` missing is not an error).
fn report_free_disk() {
    let out = Command::new("df")
        .args(["-h", "--output=avail,target"])
        .arg(root())
        .output();
    if let Ok(out) = out {
        eprintln!(
            "xtask ci: free disk:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

fn bench(args: &[String]) -> Result {
    match args.split_first() {
        Some((first, rest)) if first == "--criterion" => criterion(rest),
        Some((first, [])) if first == "--summary" => bench_summary::regenerate(&root(), &SCENARIOS),
        _ => scenarios(args),
    }
}

fn criterion(names: &[String]) -> Result {
    let env = provision()?;
    let mut cmd = cargo();
    cmd.args(["bench", "-p", "listwatch-benches"]);
    for n in names {
        cmd.args([OsStr::new("--bench"), OsStr::new(n)]);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd)
}

/// Every scenario of the load generator, in the order docs/benchmarks.md lists them.
const SCENARIOS: [&str; 21] = [
    "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12", "P13", "P14", "P15",
    "P16", "P17", "P18", "P19", "P20", "W2",
];

/// Builds the apiserver and the load generator (release), then runs each scenario in a
/// process of its own, so that one scenario's heap and RSS never count in another's.
fn scenarios(names: &[String]) -> Result {
    let etcd = ensure_etcd()?;
    let wanted: Vec<String> = if names.is_empty() {
        SCENARIOS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        names.iter().map(|n| n.to_ascii_uppercase()).collect()
    };
    if let Some(bad) = wanted.iter().find(|n| !SCENARIOS.contains(&n.as_str())) {
        return Err(format!(
            "unknown scenario {bad:?} (known: {})",
            SCENARIOS.join(" ")
        ));
    }
    // One build per package: built together, cargo would unify their dependencies' features
    // and build everything again in a second flavour.
    for (package, bin) in [
        ("listwatch-apiserver", "listwatch-apiserver"),
        ("listwatch-benches", "loadgen"),
        // W2's bare baseline (same package: no second flavour of its dependencies).
        ("listwatch-benches", "write-bare"),
    ] {
        let mut build = cargo();
        build.args([
            "build",
            "--release",
            "--locked",
            "-p",
            package,
            "--bin",
            bin,
        ]);
        run(build)?;
    }
    let bin = target_dir().join("release");
    let out = root().join("docs").join("bench");
    let mut failed = Vec::new();
    for id in &wanted {
        let mut cmd = Command::new(bin.join("loadgen"));
        cmd.current_dir(root());
        cmd.arg("--out").arg(&out).arg(id);
        cmd.env("LISTWATCH_ETCD_BIN", &etcd);
        cmd.env("LISTWATCH_APISERVER_BIN", bin.join("listwatch-apiserver"));
        if let Err(e) = run(cmd) {
            eprintln!("scenario {id}: {e}");
            failed.push(id.clone());
        }
    }
    // The summary from every results file there, including this run's (a failed scenario's
    // results are written before it is reported failed).
    let summary = bench_summary::regenerate(&root(), &SCENARIOS);
    if failed.is_empty() {
        eprintln!("results: {}/<scenario>.json, .md and .svg", out.display());
        summary
    } else {
        if let Err(e) = summary {
            eprintln!("{e}");
        }
        Err(format!("scenarios failed: {}", failed.join(" ")))
    }
}

/// Builds the release apiserver (unless `--bin` names one) and runs the harness.
fn amplification(args: &[String]) -> Result {
    if !args.iter().any(|a| a == "--bin") {
        let mut build = cargo();
        build.args([
            "build",
            "--release",
            "--locked",
            "-p",
            "listwatch-apiserver",
            "--bin",
            "listwatch-apiserver",
        ]);
        run(build)?;
    }
    let bin = target_dir().join("release").join("listwatch-apiserver");
    amplification::run(args, &root(), bin)
}

/// kube-rs's cluster tests against the binary ([`mod@kube_rs_suite`]); curl polls `/readyz`.
fn kube_rs_suite(args: &[String]) -> Result {
    if let Some(a) = args.first() {
        return Err(format!("kube-rs-suite takes no arguments (got {a:?})"));
    }
    ensure_debian_program("curl", &["curl"])?;
    kube_rs_suite::run(&root(), &target_dir())
}

/// The targets of fuzz/ (its Cargo.toml `[[bin]]`s), in the order `fuzz` runs them.
const FUZZ_TARGETS: [&str; 12] = [
    "label_selector",
    "field_selector",
    "resource_version",
    "object_json",
    "continue_token",
    "query",
    "api_path",
    "body_decode",
    "patch_apply",
    "create_prepare",
    "watch_request",
    "wal_recover",
];

/// Runs `cargo +nightly fuzz run` for one target or every target, each for a bounded time.
fn fuzz(args: &[String]) -> Result {
    let (targets, seconds): (Vec<&str>, &str) = match args {
        [] => (FUZZ_TARGETS.to_vec(), "60"),
        [s] if s.parse::<u64>().is_ok() => (FUZZ_TARGETS.to_vec(), s),
        [t] => (vec![t.as_str()], "60"),
        [t, s] => (vec![t.as_str()], s),
        _ => return Err(format!("too many arguments\n\n{HELP}")),
    };
    if seconds.parse::<u64>().is_err() {
        return Err(format!("SECONDS must be a whole number, not {seconds:?}"));
    }
    if let Some(bad) = targets.iter().find(|t| !FUZZ_TARGETS.contains(t)) {
        return Err(format!(
            "unknown fuzz target {bad:?} (known: {})",
            FUZZ_TARGETS.join(" ")
        ));
    }
    // Probe through rustup's `+nightly` so that a missing toolchain and a missing cargo-fuzz
    // each get their own message instead of a cargo usage error.
    let works = |args: &[&str]| {
        Command::new("cargo")
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !works(&["+nightly", "--version"]) {
        return Err("no nightly toolchain: rustup toolchain install nightly".into());
    }
    if !works(&["+nightly", "fuzz", "--version"]) {
        return Err("cargo-fuzz is missing: cargo install cargo-fuzz --locked".into());
    }
    for t in targets {
        // Plain `cargo` (not $CARGO) so that rustup resolves `+nightly`.
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root());
        cmd.args(["+nightly", "fuzz", "run", t, "--"]);
        cmd.arg(format!("-max_total_time={seconds}"));
        run(cmd)?;
    }
    Ok(())
}

/// Cargo's target directory ($CARGO_TARGET_DIR or target/ under the workspace root).
fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        Some(p) => root().join(p),
        None => root().join("target"),
    }
}
