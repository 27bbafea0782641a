//! Process figures from /proc, and the apiserver as a child process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Clock ticks per second of /proc's utime and stime (100 on every Linux we run on).
fn ticks_per_sec() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(100.0)
}

/// CPU seconds (user + system) a process has used so far; `None` if it is gone. /proc
/// counts in 10 ms ticks: for another process's phases shorter than a few seconds use a
/// [`CpuMeter`]; for this process, [`own_cpu_seconds`].
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_at(&format!("/proc/{pid}/stat"))
}

/// CPU seconds this process (every thread, exited ones included) has used, to the
/// nanosecond (`CLOCK_PROCESS_CPUTIME_ID`).
pub(crate) fn own_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Another process's CPU time to the nanosecond: the process is moved into a cgroup of its
/// own (cgroup v1 `cpuacct`, else v2), whose counter the kernel keeps for every thread,
/// exited ones included. Where no cgroup can be made (not root, no such hierarchy) it
/// falls back to /proc's 10 ms ticks and [`CpuMeter::precise`] says so.
///
/// Invariant: the cgroup is removed on drop once empty (drop it after the process ended).
pub(crate) struct CpuMeter {
    pid: u32,
    group: Option<(PathBuf, bool)>,
}

impl CpuMeter {
    pub(crate) fn of(pid: u32) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        for (root, v2) in [
            ("/sys/fs/cgroup/cpuacct", false),
            ("/sys/fs/cgroup/unified", true),
            ("/sys/fs/cgroup", true),
        ] {
            let root = std::path::Path::new(root);
            let probe = if v2 {
                "cgroup.controllers"
            } else {
                "cpuacct.usage"
            };
            if !root.join(probe).exists() {
                continue;
            }
            let dir = root.join(format!(
                "listwatch-loadgen-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let meter = Self {
                pid,
                group: Some((dir.clone(), v2)),
            };
            if std::fs::write(dir.join("cgroup.procs"), pid.to_string()).is_ok()
                && meter.group_seconds().is_some()
            {
                return meter;
            }
            drop(meter);
        }
        Self { pid, group: None }
    }

    /// Whether the figures are to the nanosecond (a cgroup) or in /proc's ticks.
    pub(crate) fn precise(&self) -> bool {
        self.group.is_some()
    }

    fn group_seconds(&self) -> Option<f64> {
        let (dir, v2) = self.group.as_ref()?;
        if *v2 {
            let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
            let usec: f64 = stat
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))?
                .trim()
                .parse()
                .ok()?;
            Some(usec * 1e-6)
        } else {
            let ns: f64 = std::fs::read_to_string(dir.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(ns * 1e-9)
        }
    }

    /// CPU seconds the process has used since it joined the meter's cgroup (or since it
    /// started, in ticks, without one): use differences.
    pub(crate) fn seconds(&self) -> f64 {
        self.group_seconds()
            .or_else(|| cpu_seconds(self.pid))
            .unwrap_or(0.0)
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        if let Some((dir, _)) = &self.group {
            // A process still running (an etcd outliving its meter) goes back to the root
            // group, so that the directory can be removed.
            if let (Some(root), Ok(pids)) = (
                dir.parent(),
                std::fs::read_to_string(dir.join("cgroup.procs")),
            ) {
                for pid in pids.lines().filter(|l| !l.trim().is_empty()) {
                    let _ = std::fs::write(root.join("cgroup.procs"), pid.trim());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// CPU seconds of the calling thread, to the nanosecond (`CLOCK_THREAD_CPUTIME_ID`; /proc
/// counts in 10 ms ticks, too coarse for a baseline that runs for a few milliseconds).
pub(crate) fn thread_cpu_seconds() -> Option<f64> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

fn cpu_seconds_at(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may contain spaces: fields are counted after its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // After the paren: state(3) ppid(4) ... utime(14) stime(15), i.e. indexes 11 and 12.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_sec())
}

/// Resident set size of a process in bytes.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size of a process in bytes (`VmHWM`).
pub(crate) fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Raises the soft open-file limit to the hard one (the HTTP scenarios hold many sockets).
pub(crate) fn raise_nofile() -> u64 {
    // std has no setrlimit; `prlimit` from util-linux changes our own limit from outside.
    let pid = std::process::id().to_string();
    let _ = Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=unlimited:"])
        .output();
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(1024)
}

/// The listwatch-apiserver binary: $LISTWATCH_APISERVER_BIN, else beside this program.
pub(crate) fn apiserver_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LISTWATCH_APISERVER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me.with_file_name("listwatch-apiserver");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build --release -p listwatch-apiserver` or set LISTWATCH_APISERVER_BIN",
            p.display()
        ))
    }
}

/// A running listwatch-apiserver; killed on drop.
pub(crate) struct Server {
    child: Child,
    /// The child's CPU to the nanosecond where a cgroup could be made (dropped after it).
    meter: CpuMeter,
    pub addr: SocketAddr,
    /// It serves HTTPS (its readiness is then checked by the caller, over TLS).
    pub https: bool,
}

impl Server {
    /// Starts the server on a free loopback port with `args` and waits until it listens.
    pub(crate) fn start(args: &[&str]) -> Result<Self, String> {
        Self::start_bin(&apiserver_bin()?, args)
    }

    /// As [`Server::start`], with another build of the server (a baseline). One load
    /// generator stands for thousands of clients from one address: a build with a
    /// per-address connection cap (`--max-connections-per-client`) runs without it.
    pub(crate) fn start_bin(bin: &std::path::Path, args: &[&str]) -> Result<Self, String> {
        let uncapped: &[&str] = if has_flag(bin, "--max-connections-per-client") {
            &["--max-connections-per-client", "0"]
        } else {
            &[]
        };
        let mut child = Command::new(bin)
            .args(["--bind", "127.0.0.1:0", "--log-level", "warn"])
            .args(uncapped)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let meter = CpuMeter::of(child.id());
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(out).lines();
        let (addr, https) = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    let found = l
                        .contains("listening on")
                        .then(|| l.split("://").nth(1))
                        .flatten()
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|a| a.parse().ok());
                    if let Some(a) = found {
                        break (a, l.contains("https://"));
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("the apiserver exited before listening".into());
                }
            }
        };
        // A watchdog ends the server if this program dies without dropping it (e.g. killed).
        let _ = Command::new("sh")
            .args([
                "-c",
                "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; kill \"$2\" 2>/dev/null",
                "watchdog",
            ])
            .arg(std::process::id().to_string())
            .arg(child.id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let server = Self {
            child,
            meter,
            addr,
            https,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits for `/readyz` (plaintext), or only for the port to accept (HTTPS).
    fn wait_ready(&self) -> Result<(), String> {
        // Every 20 ms (P20 times a start to ready), for up to 5 minutes.
        for _ in 0..15_000 {
            if self.https {
                if std::net::TcpStream::connect(self.addr).is_ok() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            if let Ok(mut s) = std::net::TcpStream::connect(self.addr) {
                use std::io::{Read, Write};
                let _ = s.write_all(
                    b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                );
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                if buf.starts_with("HTTP/1.1 200") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("the apiserver did not become ready in 5 minutes".into())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn cpu(&self) -> f64 {
        self.meter.seconds()
    }

    /// Whether [`Server::cpu`] is to the nanosecond (else /proc's 10 ms ticks).
    pub(crate) fn cpu_precise(&self) -> bool {
        self.meter.precise()
    }

    pub(crate) fn rss(&self) -> u64 {
        rss_bytes(self.pid()).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the server build at `bin` lists `flag` in its `--help` (asked once per build and
/// flag: P20 times starts, which must not include a `--help` run).
fn has_flag(bin: &std::path::Path, flag: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashMap<(PathBuf, String), bool>>> = Mutex::new(None);
    let key = (bin.to_path_buf(), flag.to_owned());
    if let Some(known) = SEEN
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&key).copied()))
    {
        return known;
    }
    let has = Command::new(bin)
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag));
    if let Ok(mut m) = SEEN.lock() {
        m.get_or_insert_with(HashMap::new).insert(key, has);
    }
    has
}

/// Writes dirty pages out and drops the kernel's page cache (root only), so that the next
/// read of a data directory comes from the disk; whether it could.
pub(crate) fn drop_page_cache() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}
