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

/// CPU seconds (user + system) a process has used so far; `None` if it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_at(&format!("/proc/{pid}/stat"))
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
        let server = Self { child, addr, https };
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
        cpu_seconds(self.pid()).unwrap_or(0.0)
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

/// Whether the server build at `bin` lists `flag` in its `--help`.
fn has_flag(bin: &std::path::Path, flag: &str) -> bool {
    Command::new(bin)
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
}
