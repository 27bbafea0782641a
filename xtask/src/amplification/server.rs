//! The server under test: the listwatch-apiserver binary as a child process, its CPU and
//! memory read from /proc, and a blocking HTTP/1.1 client for it.
//!
//! Invariants: the child is killed when [`Server`] drops; every read and write on a socket
//! has a deadline ([`IO_DEADLINE`]); a response body is read whole (Content-Length or
//! chunked) so that a keep-alive connection stays in step.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long one read or write on a socket may block.
pub const IO_DEADLINE: Duration = Duration::from_secs(300);

/// A running apiserver; killed on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Starts `bin` on a free loopback port (embedded store) with `args`, waits for `/readyz`.
    pub fn start(bin: &Path, args: &[&str]) -> Result<Self, String> {
        let mut child = Command::new(bin)
            .args(["--bind", "127.0.0.1:0", "--log-level", "warn"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(out).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    let found = l
                        .contains("listening on")
                        .then(|| l.split("://").nth(1))
                        .flatten()
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|a| a.parse().ok());
                    if let Some(a) = found {
                        break a;
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("the apiserver exited before listening".into());
                }
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let server = Self { child, addr };
        for _ in 0..600 {
            let ready = Conn::open(server.addr)
                .and_then(|mut c| c.request("GET", "/readyz", &[], &[]))
                .is_ok_and(|(code, _)| code == 200);
            if ready {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("the apiserver did not become ready in 60 s".into())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds (user + system) the server has used so far.
    pub fn cpu(&self) -> Result<f64, String> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        // The command name may hold spaces: fields are counted after its closing paren.
        let rest = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..))
            .ok_or("malformed /proc stat")?;
        let f: Vec<&str> = rest.split(' ').collect();
        let field = |i: usize| -> Result<f64, String> {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("no field {i} in {path}"))
        };
        // After the paren: state is index 0, utime 11 and stime 12.
        Ok((field(11)? + field(12)?) / ticks_per_sec())
    }

    /// A `Vm*` line of /proc/PID/status in bytes.
    pub fn vm(&self, key: &str) -> Result<u64, String> {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| format!("no {key} in {path}"))
    }

    /// Resets the peak RSS (`VmHWM`) to the current RSS (`echo 5 > /proc/PID/clear_refs`).
    pub fn reset_peak(&self) -> Result<(), String> {
        let path = format!("/proc/{}/clear_refs", self.pid());
        std::fs::write(&path, "5").map_err(|e| format!("{path}: {e}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second of /proc's utime and stime.
fn ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// One keep-alive HTTP/1.1 connection.
pub struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Result<Self, String> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = s.set_nodelay(true);
        s.set_read_timeout(Some(IO_DEADLINE))
            .and_then(|()| s.set_write_timeout(Some(IO_DEADLINE)))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            r: BufReader::new(s),
        })
    }

    /// Sends one request with `headers`; returns the status and the whole (de-chunked) body.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), String> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        let io = |e: std::io::Error| format!("{method} {}: {e}", short(path));
        self.r.get_mut().write_all(&req).map_err(io)?;
        let mut status = String::new();
        self.r.read_line(&mut status).map_err(io)?;
        let code = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {status:?}"))?;
        let (mut len, mut chunked) = (0usize, false);
        loop {
            let mut line = String::new();
            if self.r.read_line(&mut line).map_err(io)? == 0 {
                return Err("connection closed in the response head".into());
            }
            if line == "\r\n" {
                break;
            }
            let l = line.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if l.starts_with("transfer-encoding:") && l.contains("chunked") {
                chunked = true;
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                if self.r.read_line(&mut size).map_err(io)? == 0 {
                    return Err("connection closed in a chunked body".into());
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| format!("bad chunk size {size:?}"))?;
                let start = out.len();
                out.resize(start + n, 0);
                self.r.read_exact(&mut out[start..]).map_err(io)?;
                let mut crlf = [0u8; 2];
                self.r.read_exact(&mut crlf).map_err(io)?;
                if n == 0 {
                    break;
                }
            }
        } else {
            out.resize(len, 0);
            self.r.read_exact(&mut out).map_err(io)?;
        }
        Ok((code, out))
    }
}

/// The first 120 characters of a path, for messages.
pub fn short(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}
