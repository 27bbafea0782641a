//! Shared helpers of the end-to-end tests: the built server on a free port, a raw HTTP/1.1
//! client, and kubectl.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod consistency;
pub mod fault_proxy;
pub mod metrics;
pub mod python;
pub mod replicas;
pub mod view_proxy;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest wait for anything a test waits on; only a hang reaches it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Flags for a server whose old versions expire after a few writes: a short embedded
/// history, served without the watch cache (whose event window grows while events are
/// young, so it would keep answering for versions the backend has compacted away).
pub const SHORT_HISTORY: &[&str] = &[
    "--watch-cache=false",
    "--embedded-retain-revisions",
    "20",
    "--embedded-retain-window",
    "0",
];

/// A running `listwatch-apiserver`, killed on drop.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its stdout lines, when started with [`Server::spawn_at`] (the first is the
    /// announcement of its address once it serves).
    lines: Option<mpsc::Receiver<String>>,
}

impl Server {
    /// Starts the binary on a free loopback port with extra flags.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_at("127.0.0.1:0", extra)
    }

    /// Starts the binary listening on `bind` (e.g. the address of a server that stopped).
    pub fn start_at(bind: &str, extra: &[&str]) -> Self {
        Self::spawn(bind, extra, None, &[])
    }

    /// Starts the binary on a free loopback port with extra flags and environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn("127.0.0.1:0", extra, None, env)
    }

    /// Starts the binary listening on `bind` and keeps what it prints: the stdout lines
    /// after the first (the start-up hint) and every stderr line (also copied to the test's
    /// stderr).
    pub fn start_logged(bind: &str, extra: &[&str]) -> (Self, Logs) {
        let logs = Logs::default();
        (Self::spawn(bind, extra, Some(logs.clone()), &[]), logs)
    }

    fn spawn(bind: &str, extra: &[&str], logs: Option<Logs>, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
            .args(["--bind", bind, "--log-level", "warn"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(if logs.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start listwatch-apiserver");
        if let (Some(logs), Some(stderr)) = (&logs, child.stderr.take()) {
            let lines = std::sync::Arc::clone(&logs.stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("{line}");
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        // Owned from here on, so that a failed start below still kills the process.
        let mut server = Self {
            child,
            addr: String::new(),
            url: String::new(),
            lines: None,
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(PATIENCE)
            .expect("the server prints its address");
        if let Some(logs) = logs {
            std::thread::spawn(move || {
                while let Ok(line) = rx.recv() {
                    logs.stdout.lock().unwrap().push(line);
                }
            });
        }
        server.url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        server.addr = server
            .url
            .split("://")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        server
    }

    /// Starts the binary listening on `bind` (a fixed address) and returns at once, without
    /// waiting for it to serve (it listens at once, with `/readyz` failing until it is
    /// ready): for tests that watch the start from outside, as a load balancer does.
    pub fn spawn_at(bind: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
            .args(["--bind", bind, "--log-level", "warn"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start listwatch-apiserver");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            addr: bind.to_owned(),
            url: format!("http://{bind}"),
            lines: Some(rx),
        }
    }

    /// Waits (at most [`PATIENCE`]) for a server started with [`Server::spawn_at`] to
    /// announce that it serves; returns the announcement.
    pub fn wait_announced(&self) -> String {
        self.lines
            .as_ref()
            .expect("started with spawn_at")
            .recv_timeout(PATIENCE)
            .expect("the server announces its address")
    }

    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGTERM without waiting.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit; returns whether it exited successfully.
    pub fn terminate(self) -> bool {
        self.sigterm();
        self.wait_exit()
    }

    /// Waits (at most [`PATIENCE`]) for the process to exit; returns whether it exited
    /// successfully.
    pub fn wait_exit(mut self) -> bool {
        let (tx, rx) = mpsc::channel();
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        rx.recv_timeout(PATIENCE)
            .expect("the server exits after SIGTERM")
            .unwrap()
            .success()
    }

    /// A kubectl command against this server, with its own cache dir.
    pub fn kubectl(&self, cache: &std::path::Path) -> Command {
        let mut c = Command::new("kubectl");
        c.args(["--server", &self.url, "--cache-dir"]).arg(cache);
        c
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a server of [`Server::start_logged`] printed so far.
#[derive(Clone, Default)]
pub struct Logs {
    stdout: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Logs {
    /// The stderr lines so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The stdout lines after the first, once there are at least `n` (within [`PATIENCE`]).
    pub fn stdout(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let lines = self.stdout.lock().unwrap().clone();
            if lines.len() >= n {
                return lines;
            }
            assert!(Instant::now() < deadline, "only {lines:?} on stdout");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `try: COMMAND` hint the server prints at start, split into its words (the
    /// program first).
    pub fn hint(&self) -> Vec<String> {
        let lines = self.stdout(1);
        let hint = lines
            .iter()
            .find_map(|l| l.strip_prefix("try: "))
            .unwrap_or_else(|| panic!("no hint in {lines:?}"));
        hint.split_whitespace().map(str::to_owned).collect()
    }
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// Newline-separated JSON documents (a watch body).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to the end.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading a large body; a failed write is fine then.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

/// Parses a raw HTTP/1.1 response (head and body, chunked or not).
pub fn parse_response(raw: &[u8]) -> Response {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        let mut out = Vec::new();
        loop {
            let nl = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk size line");
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16).unwrap();
            rest = &rest[nl + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        out
    } else {
        rest.to_vec()
    };
    Response {
        status,
        headers,
        body,
    }
}

/// Panics unless `program` is on PATH. Tests that drive a real tool are `#[ignore]`d so that a
/// plain `cargo test` on a bare machine passes; `cargo xtask test` provisions the tools and
/// runs them, and there a missing tool is a failure, never a silent pass.
pub fn require(program: &str) {
    assert!(
        have(program),
        "{program} is not on PATH: `cargo xtask test` provisions it (or install it)"
    );
}

/// The name libtest knows a test by: `module` (the test's `module_path!()`, whose first
/// segment is the test binary's crate) without the crate, then `function` — e.g.
/// `client_credentials::with_no_ca_the_system_roots_are_trusted` in the `clients` binary.
/// What `--exact` matches when a test re-runs itself in a child process (`current_exe`),
/// whichever binary the test's module is in.
pub fn test_name(module: &str, function: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{function}"),
        None => function.to_owned(),
    }
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Runs a command to completion, panicking with its output on failure; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must fail; returns stderr.
pub fn run_err(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run command");
    assert!(!out.status.success(), "{cmd:?} unexpectedly succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// Spawns a long-running command whose stdout lines arrive on a channel.
pub fn spawn_lines(cmd: &mut Command) -> (Child, mpsc::Receiver<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Opens a streaming request and reads only the response head (a watch's headers are
/// flushed at once); returns the open connection and the status code.
pub fn open_stream(addr: &str, path: &str) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("response head");
        assert_eq!(n, 1, "connection closed before the response head");
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (s, status)
}

/// Waits for a line containing every needle; returns it.
pub fn expect_line(
    rx: &std::sync::mpsc::Receiver<String>,
    needles: &[&str],
    seen: &mut Vec<String>,
) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no line with {needles:?}; saw {seen:#?}"));
        seen.push(line.clone());
        if needles
            .iter()
            .all(|n| line.split_whitespace().any(|w| w == *n))
        {
            return line;
        }
    }
}

/// The events of a chunked watch response, one JSON line each, read off a raw stream (the
/// stream's read timeout, if any, bounds each wait).
pub struct WatchEvents {
    r: BufReader<TcpStream>,
    buf: Vec<u8>,
}

impl WatchEvents {
    pub fn new(stream: TcpStream) -> Self {
        Self {
            r: BufReader::new(stream),
            buf: Vec::new(),
        }
    }

    /// The next event; `None` once the stream ends, breaks (e.g. the server was killed) or
    /// says nothing for its read timeout.
    pub fn next(&mut self) -> Option<serde_json::Value> {
        loop {
            if let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let mut size = String::new();
            if self.r.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            if n == 0 {
                return None;
            }
            let mut chunk = vec![0u8; n + 2];
            self.r.read_exact(&mut chunk).ok()?;
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Lists `path` (a collection) and opens a watch of it from the list's resource version,
/// so that every later change arrives; each read of the watch waits at most `hang` (the
/// hang detector: a silent watch reads as its end).
pub fn watch_from_list(addr: &str, path: &str, hang: std::time::Duration) -> WatchEvents {
    let list = http(addr, "GET", path, &[], b"");
    assert_eq!(list.status, 200, "{}", String::from_utf8_lossy(&list.body));
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (stream, status) = open_stream(
        addr,
        &format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600"),
    );
    assert_eq!(status, 200);
    stream.set_read_timeout(Some(hang)).unwrap();
    WatchEvents::new(stream)
}

/// `VmRSS:` or `VmHWM:` of `/proc/PID/status`, in KiB.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A server that also serves the schemaless kind Blob (`example.com/v1`, `blobs`, which
/// keeps any field): for tests whose objects need shapes no typed kind accepts.
pub fn blob_server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let decl = dir.path().join("resources.yaml");
    std::fs::write(
        &decl,
        "resources:\n- {group: example.com, version: v1, kind: Blob}\n",
    )
    .unwrap();
    Server::start(&["--resources", decl.to_str().unwrap()])
}

/// A connection to `addr` from the loopback address `local` (127.0.0.x: the server tells
/// clients apart by address), blocking, each read bounded by [`PATIENCE`].
pub fn connect_from(local: &str, addr: &str) -> TcpStream {
    connect_with(local, addr, None)
}

/// [`connect_from`] with the socket's receive buffer set to `recv_buffer` bytes before
/// connecting, when given.
pub fn connect_with(local: &str, addr: &str, recv_buffer: Option<u32>) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stream = rt
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(format!("{local}:0").parse().unwrap())?;
            if let Some(n) = recv_buffer {
                socket.set_recv_buffer_size(n)?;
            }
            socket.connect(addr.parse().unwrap()).await
        })
        .unwrap();
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}
