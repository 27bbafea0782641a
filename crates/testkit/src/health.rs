//! [`HealthCheck`]: the HTTP health check a load balancer runs against each of its backends
//! (`GET /readyz` every interval; a run of failures takes a backend out of rotation, a run
//! of successes brings it back), and [`probe`], one such check.
//!
//! Invariants:
//! - a check is one `GET <path>` on a new connection with `Connection: close`; the whole
//!   exchange (connect, request, status line) runs under the check's timeout; it succeeds
//!   exactly when the status is 200 (docs/deployment.md: "HTTP 200 = send traffic; anything
//!   else = take the replica out"); any other status, a refused or reset connection, a
//!   timeout or an answer that is not HTTP is a failure;
//! - at most [`MAX_STATUS_LINE`] bytes of an answer are read, whatever the backend sends;
//! - a backend starts unhealthy (as a cloud balancer's new target: nothing is sent to it
//!   before it passed a check) and becomes healthy after `healthy_threshold` consecutive
//!   successes; a healthy backend becomes unhealthy after `unhealthy_threshold` consecutive
//!   failures; a result that agrees with the current state resets the opposite run.
//!
//! Plain HTTP only: the tests that put the balancer in front of replicas serve HTTP.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most bytes of a health-check answer read (its status line fits).
pub const MAX_STATUS_LINE: usize = 1024;

/// How a [`Balancer`](crate::Balancer) checks its backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The path asked for (`/readyz`).
    pub path: String,
    /// Time between the starts of two checks of a backend (a check longer than this is
    /// followed by the next at once).
    pub interval: Duration,
    /// Longest a check may take, connect included.
    pub timeout: Duration,
    /// Consecutive failures that take a healthy backend out of rotation.
    pub unhealthy_threshold: u32,
    /// Consecutive successes that bring an unhealthy backend (back) into rotation.
    pub healthy_threshold: u32,
}

impl HealthCheck {
    /// docs/deployment.md's load-balancer check: `GET /readyz` every second ("every 1–2
    /// s"), out after 2 failures, back after 2 successes; each check times out after a
    /// second.
    pub fn readyz() -> Self {
        Self {
            path: "/readyz".to_owned(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            unhealthy_threshold: 2,
            healthy_threshold: 2,
        }
    }
}

/// One backend's health as the checks found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Health {
    pub(crate) healthy: bool,
    /// Consecutive results against the current state.
    run: u32,
}

impl Health {
    /// Records a check's result; returns the new state when it changed.
    pub(crate) fn record(&mut self, ok: bool, check: &HealthCheck) -> Option<bool> {
        if ok == self.healthy {
            self.run = 0;
            return None;
        }
        self.run = self.run.saturating_add(1);
        let needed = if ok {
            check.healthy_threshold
        } else {
            check.unhealthy_threshold
        };
        if self.run < needed.max(1) {
            return None;
        }
        self.healthy = ok;
        self.run = 0;
        Some(ok)
    }
}

/// One check: `GET path` on a new connection to `addr`; the status code, or why there is
/// none. Bounded by `timeout` and [`MAX_STATUS_LINE`].
pub async fn probe(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<u16> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: listwatch-testkit-balancer\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        s.write_all(request.as_bytes()).await?;
        let mut head = Vec::with_capacity(64);
        let mut buf = [0u8; 256];
        while !head.windows(2).any(|w| w == b"\r\n") {
            if head.len() >= MAX_STATUS_LINE {
                return Err(invalid("no status line within the first bytes"));
            }
            let room = (MAX_STATUS_LINE - head.len()).min(buf.len());
            let n = s.read(buf.get_mut(..room).unwrap_or_default()).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            head.extend_from_slice(buf.get(..n).unwrap_or_default());
        }
        status_code(&head)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// The code of an `HTTP/1.x NNN ...` status line at the start of `head`.
fn status_code(head: &[u8]) -> std::io::Result<u16> {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| invalid("status line is not UTF-8"))?;
    let mut words = line.split(' ');
    let version = words.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(invalid("not an HTTP/1 answer"));
    }
    let code = words.next().unwrap_or_default();
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("no three-digit status code"));
    }
    code.parse().map_err(|_| invalid("no status code"))
}

fn invalid(what: &'static str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use tokio::net::TcpListener;

    #[test]
    fn runs_of_failures_and_successes_move_a_backend_out_and_back() {
        let check = HealthCheck::readyz();
        let mut h = Health::default();
        assert!(!h.healthy, "a new backend starts out of rotation");
        assert_eq!(h.record(true, &check), None);
        assert_eq!(h.record(false, &check), None, "a failure resets the run");
        assert_eq!(h.record(true, &check), None);
        assert_eq!(h.record(true, &check), Some(true));
        assert!(h.healthy);
        assert_eq!(h.record(false, &check), None, "one failure is not enough");
        assert_eq!(h.record(true, &check), None, "a success resets the run");
        assert_eq!(h.record(false, &check), None);
        assert_eq!(h.record(false, &check), Some(false));
        assert_eq!(h.record(false, &check), None);
        assert_eq!(h.record(true, &check), None);
        assert_eq!(h.record(true, &check), Some(true));

        let eager = HealthCheck {
            unhealthy_threshold: 0,
            healthy_threshold: 1,
            ..check
        };
        let mut h = Health::default();
        assert_eq!(h.record(true, &eager), Some(true));
        assert_eq!(h.record(false, &eager), Some(false), "0 acts as 1");
    }

    #[test]
    fn status_lines_are_parsed_strictly() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n").unwrap(), 200);
        assert_eq!(status_code(b"HTTP/1.0 500 x\r\n").unwrap(), 500);
        for bad in [
            &b"HTTP/2 200\r\n"[..],
            b"HTTP/1.1 20 OK\r\n",
            b"HTTP/1.1 2000 OK\r\n",
            b"HTTP/1.1 +20 OK\r\n",
            b"SSH-2.0-x\r\n",
            b"\xff\xfe\r\n",
            b"\r\n",
        ] {
            assert!(status_code(bad).is_err(), "{bad:?}");
        }
    }

    /// A backend that answers every connection with `answer` (after reading the request
    /// head), or holds it open without a word when `answer` is empty.
    async fn backend(answer: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    let _ = s.read(&mut b).await;
                    if answer.is_empty() {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    let _ = s.write_all(answer).await;
                });
            }
        });
        a
    }

    #[tokio::test]
    async fn a_probe_is_bounded_and_only_reads_a_status_line() {
        let t = Duration::from_secs(5);
        let ok = backend(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        assert_eq!(probe(ok, "/readyz", t).await.unwrap(), 200);
        let failing = backend(b"HTTP/1.1 500 Internal Server Error\r\n\r\n").await;
        assert_eq!(probe(failing, "/readyz", t).await.unwrap(), 500);
        // A hung backend: the timeout ends the check.
        let hung = backend(b"").await;
        let e = probe(hung, "/readyz", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        // An endless line without CRLF: cut at MAX_STATUS_LINE.
        let endless: &'static [u8] = Box::leak(vec![b'H'; 64 << 10].into_boxed_slice());
        let e = probe(backend(endless).await, "/readyz", t)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        // Closed without an answer; nothing listening.
        let e = probe(backend(b"x").await, "/readyz", t).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
        let dead = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(probe(dead, "/readyz", t).await.is_err());
    }
}
