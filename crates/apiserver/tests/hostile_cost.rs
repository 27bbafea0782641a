//! Cost amplification (issue 24): requests whose work or memory could grow faster than
//! their size. Each test sends the reproduction (or a scaled-down one that would
//! still cost hundreds of MiB or seconds of CPU without its fix) to the built server and
//! asserts on bounded work: the server's peak resident memory (`VmHWM` of
//! `/proc/PID/status`), the CPU time it spent (`utime + stime` of `/proc/PID/stat`, with
//! slack of an order of magnitude over what the fixed server spends on a loaded debug build),
//! or the exact refusal. Never on wall-clock time. Needs no external tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, http};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// `VmRSS` or `VmHWM` of `/proc/PID/status`, in KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// CPU seconds the process has spent (user + system).
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Linux reports in USER_HZ, 100 on every architecture this runs on.
    ticks as f64 / 100.0
}

fn json_body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn send(s: &Server, method: &str, path: &str, ct: &str, body: &[u8]) -> (u16, Value) {
    let r = http(&s.addr, method, path, &[("Content-Type", ct)], body);
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

/// An object nested `depth` levels under keys of `key_len` characters, with `leaves`
/// non-empty objects at the bottom (each one a node every walk visits).
fn deep_long_keys(depth: usize, key_len: usize, leaves: usize) -> Value {
    let mut v = Value::Object(
        (0..leaves)
            .map(|i| (format!("l{i}"), json!({"a": "v"})))
            .collect(),
    );
    for d in 0..depth {
        let mut m = serde_json::Map::new();
        m.insert(format!("k{d}{}", "x".repeat(key_len)), v);
        v = Value::Object(m);
    }
    v
}

/// Issue 24, field manager path cache: every write walks the object through the field
/// manager, which looked each node's schema up by its full path (one cache entry per
/// node, each as long as the path): 48 levels of 10 000-character keys over 1 000 leaves
/// (a 0.5 MB dry-run create) grew the server by 484 MiB and took 10 s of CPU; an apply
/// (JSON body, 96 levels of 1 000-character keys, 2 000 leaves) likewise. With the schema
/// walked alongside the value, both cost a few MiB.
#[test]
fn field_manager_walk_is_linear_in_the_body() {
    let s = Server::start(&[]);
    let pid = s.pid();
    let hwm0 = proc_kib(pid, "VmHWM:");
    let cpu0 = cpu_secs(pid);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"},
        "x": deep_long_keys(48, 10_000, 1_000)});
    let (code, v) = send(
        &s,
        "POST",
        &format!("{CM}?dryRun=All"),
        "application/json",
        &json_body(&cm),
    );
    assert_eq!(code, 201, "{v}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"},
        "x": deep_long_keys(96, 1_000, 2_000)});
    let (code, v) = send(
        &s,
        "PATCH",
        &format!("{CM}/deep?dryRun=All&fieldManager=m"),
        "application/apply-patch+yaml",
        &json_body(&cm),
    );
    assert_eq!(code, 201, "{v}");
    let grown = proc_kib(pid, "VmHWM:").saturating_sub(hwm0);
    let cpu = cpu_secs(pid) - cpu0;
    eprintln!("field manager walk: peak grew {grown} KiB, {cpu:.2} s CPU");
    assert!(grown < 100 * 1024, "the server grew by {grown} KiB");
    assert!(cpu < 5.0, "the server spent {cpu:.2} s of CPU");
}
