//! What a result was measured on: the commit, the date, the machine, the kernel and the
//! versions of everything on the other end of the measurement (etcd, the server build, the
//! client libraries and tools), recorded in every results JSON (`"run"`), and the scale
//! factor of a scaled-down run (`$LISTWATCH_BENCH_SCALE`).
//!
//! Invariants: gathering never fails a scenario (a missing tool is recorded as `null`), is
//! done once per process, and runs no program for longer than its `--version` takes.

use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The scale of this run: `$LISTWATCH_BENCH_SCALE`, a fraction in (0, 1] that scenarios
/// multiply their sizes and durations by (1 unless set; anything else is ignored).
pub(crate) fn scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| {
        std::env::var("LISTWATCH_BENCH_SCALE")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 1.0)
            .unwrap_or(1.0)
    })
}

/// `n` scaled by [`scale`], at least `min` (and never above `n`).
pub(crate) fn scaled(n: usize, min: usize) -> usize {
    ((n as f64 * scale()).round() as usize).clamp(min.min(n), n)
}

/// The first line a program prints for `args`, if it runs.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

/// Every line a program prints for `args` (a server's `--version`: version, commit, build
/// date), joined with `; `.
fn all_lines(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// The output of `git` in the current directory (the workspace root under `cargo xtask`).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The versions of `names` in the workspace's Cargo.lock (all of them where several are
/// locked), read from the current directory.
fn locked_versions(names: &[&str]) -> Value {
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut found = serde_json::Map::new();
    let mut name: Option<&str> = None;
    for line in lock.lines() {
        if line == "[[package]]" {
            name = None;
        } else if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name)
            && names.contains(&n)
        {
            let v = v.trim_matches('"');
            match found.get_mut(n) {
                Some(Value::String(s)) => *s = format!("{s}, {v}"),
                _ => {
                    found.insert(n.to_owned(), v.into());
                }
            }
        }
    }
    Value::Object(found)
}

/// `/proc/cpuinfo`'s first model name.
fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_owned())
    })
}

/// The etcd binary the scenarios start (as `listwatch_etcd::testing` finds it).
fn etcd_bin() -> String {
    std::env::var("LISTWATCH_ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned())
}

/// Facts about this run that do not change while it lasts.
fn fixed() -> &'static Value {
    static FIXED: OnceLock<Value> = OnceLock::new();
    FIXED.get_or_init(|| {
        let server = crate::sys::apiserver_bin().ok();
        let server_version = server
            .as_ref()
            .and_then(|p| all_lines(&p.to_string_lossy(), &["--version"]));
        let baseline = std::env::var("LISTWATCH_BASELINE_APISERVER_BIN").ok();
        let baseline_version = baseline.as_ref().and_then(|p| all_lines(p, &["--version"]));
        let python = std::env::var("LISTWATCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        // The knobs that change what a scenario measures, as set for this run.
        let knobs: serde_json::Map<String, Value> = std::env::vars()
            .filter(|(k, _)| {
                k.starts_with("LISTWATCH_BENCH_")
                    || k.starts_with("LISTWATCH_W2_")
                    || k.starts_with("LISTWATCH_P10_")
                    || k == "LISTWATCH_BASELINE_APISERVER_BIN"
            })
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        json!({
            "environment": knobs,
            "commit": git(&["rev-parse", "HEAD"]),
            // Changes to what was measured only: the run itself rewrites docs/bench.
            "commit_dirty": git(&[
                "status", "--porcelain", "--untracked-files=no", "--",
                "crates", "benches", "xtask", "Cargo.toml", "Cargo.lock",
            ])
            .map(|s| !s.is_empty()),
            "machine": {
                "cpu": cpu_model(),
                "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
                "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .ok().map(|s| s.trim().to_owned()),
                "memory": std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
                    s.lines().find(|l| l.starts_with("MemTotal:")).map(|l| {
                        l.trim_start_matches("MemTotal:").trim().to_owned()
                    })
                }),
            },
            "versions": {
                "etcd": first_line(&etcd_bin(), &["--version"]),
                "server": server.map(|p| p.display().to_string()),
                "server_version": server_version,
                "baseline_server": baseline,
                "baseline_server_version": baseline_version,
                "rustc": first_line("rustc", &["--version"]),
                "kubectl": first_line("kubectl", &["version", "--client"]),
                "python_kubernetes": first_line(
                    &python,
                    &["-c", "import kubernetes; print(kubernetes.__version__)"],
                ),
                "client_libraries": locked_versions(&[
                    "h2", "hyper", "tokio", "tonic", "rustls", "tokio-rustls",
                ]),
            },
        })
    })
}

/// Today's date and time in UTC, RFC 3339, from the system clock.
pub(crate) fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// The civil date (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The `"run"` object of a results JSON: [`fixed`] facts, the date, the machine's load
/// average when the results were written, and the scale.
pub(crate) fn run() -> Value {
    let mut v = fixed().clone();
    v["date"] = now_utc().into();
    v["loadavg"] = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .into();
    v["scale"] = scale().into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_records_commit_date_machine_kernel_and_versions() {
        let v = run();
        let date = v["date"].as_str().unwrap_or_default();
        assert!(date.len() == 20 && date.ends_with('Z'), "{date}");
        assert!(v["machine"]["cores"].as_u64().unwrap_or(0) >= 1, "{v}");
        for key in ["cpu", "kernel"] {
            assert!(v["machine"].get(key).is_some(), "{key}: {v}");
        }
        for key in ["etcd", "rustc", "kubectl", "client_libraries", "server"] {
            assert!(v["versions"].get(key).is_some(), "{key}: {v}");
        }
        assert!(v.get("commit").is_some() && v["scale"].as_f64() == Some(scale()));
    }

    #[test]
    fn the_civil_date_is_right_at_known_instants() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_794), (2026, 12, 7));
        assert!(now_utc().starts_with("20"));
    }

    #[test]
    fn scaled_sizes_stay_within_their_bounds() {
        // Whatever the environment's scale, a size never exceeds itself nor drops below its
        // floor.
        assert!(scaled(1000, 10) <= 1000 && scaled(1000, 10) >= 10);
        assert_eq!(scaled(5, 10), 5);
    }
}
