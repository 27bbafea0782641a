//! A raw HTTP/1.1 client cheap enough not to be the bottleneck: keep-alive requests, and
//! watches read as a chunked body split into newline-delimited frames; over plain TCP or,
//! for the realistic configuration (`crate::realistic`), over TLS with a bearer token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

type Result<T> = std::result::Result<T, String>;

/// A byte stream to the server: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// TLS toward the server: one connector without ALPN (HTTP/1.1) and one offering `h2`.
pub(crate) struct Tls {
    pub h1: tokio_rustls::TlsConnector,
    pub h2: tokio_rustls::TlsConnector,
}

/// Where and how to reach the server: its address, TLS if it serves HTTPS, and the bearer
/// token every request carries. A plain address converts into a target without either.
#[derive(Clone)]
pub(crate) struct Target {
    pub addr: SocketAddr,
    pub tls: Option<Arc<Tls>>,
    pub token: Option<Arc<str>>,
}

impl From<SocketAddr> for Target {
    fn from(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: None,
            token: None,
        }
    }
}

impl Target {
    /// A connected stream (TLS with ALPN `h2` when `h2`).
    async fn connect(&self, h2: bool) -> Result<Box<dyn Io>> {
        let addr = self.addr;
        let tcp = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connect {addr}: no answer in 10 s"))?
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => {
                let connector = if h2 { &tls.h2 } else { &tls.h1 };
                let name = rustls_pki_types::ServerName::from(addr.ip());
                let s = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
                    .await
                    .map_err(|_| format!("TLS handshake with {addr}: no answer in 10 s"))?
                    .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
                Ok(Box::new(s))
            }
        }
    }

    /// The `Authorization` header line (with its CRLF), or nothing.
    fn auth_line(&self) -> String {
        self.token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default()
    }
}

/// One keep-alive connection for requests.
pub(crate) struct Conn {
    conn: BufReader<Box<dyn Io>>,
    auth: String,
}

impl Conn {
    pub(crate) async fn open(to: impl Into<Target>) -> Result<Self> {
        let to = to.into();
        Ok(Self {
            conn: BufReader::new(to.connect(false).await?),
            auth: to.auth_line(),
        })
    }

    /// Sends one request; returns the status code and the body.
    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>)> {
        let (code, out, _) = self
            .exchange(method, path, content_type, body, true)
            .await?;
        Ok((code, out))
    }

    /// As [`Conn::request`], reading the response body without keeping it (a thousand
    /// clients' lists at once need not be held by this process): the status code, the
    /// body's first 64 KiB (for an error's message) and its length.
    pub(crate) async fn request_discard(
        &mut self,
        method: &str,
        path: &str,
    ) -> Result<(u16, Vec<u8>, usize)> {
        self.exchange(method, path, "application/json", b"", false)
            .await
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
        keep: bool,
    ) -> Result<(u16, Vec<u8>, usize)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{}Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.auth,
            body.len()
        );
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        let io = |e: std::io::Error| format!("{method} {path}: {e}");
        self.conn.get_mut().write_all(&req).await.map_err(io)?;
        self.conn.get_mut().flush().await.map_err(io)?;
        let mut status = String::new();
        self.conn.read_line(&mut status).await.map_err(io)?;
        let code = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{method} {path}: bad status line {status:?}"))?;
        let mut len = 0usize;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if self.conn.read_line(&mut line).await.map_err(io)? == 0 {
                return Err("connection closed in headers".into());
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
        let mut total = 0usize;
        // Without `keep`, the body's first 64 KiB are kept and the rest read into a scratch.
        const HEAD: usize = 64 * 1024;
        let mut scratch = Vec::new();
        let take = |out: &mut Vec<u8>, bytes: &[u8]| {
            if keep {
                out.extend_from_slice(bytes);
            } else if out.len() < HEAD {
                let n = (HEAD - out.len()).min(bytes.len());
                out.extend_from_slice(&bytes[..n]);
            }
        };
        if chunked {
            loop {
                let mut size = String::new();
                self.conn.read_line(&mut size).await.map_err(io)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                scratch.resize(n + 2, 0);
                self.conn.read_exact(&mut scratch).await.map_err(io)?;
                take(&mut out, &scratch[..n]);
                total += n;
                if n == 0 {
                    break;
                }
            }
        } else if keep {
            out.resize(len, 0);
            self.conn.read_exact(&mut out).await.map_err(io)?;
            total = len;
        } else {
            while total < len {
                let n = (len - total).min(HEAD);
                scratch.resize(n, 0);
                self.conn.read_exact(&mut scratch).await.map_err(io)?;
                take(&mut out, &scratch);
                total += n;
            }
        }
        Ok((code, out, total))
    }

    /// A request that must answer `want`.
    pub(crate) async fn expect(
        &mut self,
        want: u16,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Vec<u8>> {
        let (code, out) = self.request(method, path, content_type, body).await?;
        if code == want {
            Ok(out)
        } else {
            Err(format!(
                "{method} {path}: {code} (want {want}): {}",
                String::from_utf8_lossy(&out)
            ))
        }
    }
}

/// A refused watch: the status line, the Status message and the Retry-After seconds.
struct Refused {
    head: String,
    message: String,
    retry_after: Option<u64>,
}

impl Refused {
    /// Reads what the refusal's body holds within a second (at most 64 KiB) for its message.
    async fn read(w: &mut Watch, head: &str, body_start: usize) -> Self {
        let retry_after = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("retry-after"))
            .and_then(|(_, v)| v.trim().parse().ok());
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while w.raw.len() < body_start + 64 * 1024 && !w.raw[body_start..].contains(&b'}') {
                if w.fill().await.is_err() {
                    break;
                }
            }
        })
        .await;
        let body = w.raw.get(body_start..).unwrap_or_default();
        let text = String::from_utf8_lossy(body);
        let message = text
            .find('{')
            .and_then(|i| {
                // A chunked body has its framing after the object: read the first value only.
                serde_json::Deserializer::from_str(text.get(i..)?)
                    .into_iter::<serde_json::Value>()
                    .next()?
                    .ok()
            })
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.chars().take(200).collect());
        Self {
            head: head.lines().next().unwrap_or("").to_owned(),
            message,
            retry_after,
        }
    }
}

/// A watch: a chunked response read frame by frame.
pub(crate) struct Watch {
    stream: Box<dyn Io>,
    raw: Vec<u8>,
    /// Start of the unread part of `raw`.
    pos: usize,
    /// Bytes left in the current chunk (plus its CRLF), `None` when a size line is due.
    left: Option<usize>,
    body: Vec<u8>,
    buf: Box<[u8]>,
}

impl Watch {
    /// Opens `GET path` (a `watch=1` URL) and reads the response head. A 429 with
    /// Retry-After is waited out and the watch opened again (at most 10 times, each wait at
    /// most 10 s), as client-go's reflector does; every such retry is printed with the
    /// refusal's message, and any other refusal fails with it.
    pub(crate) async fn open(to: impl Into<Target>, path: &str) -> Result<Self> {
        let to = to.into();
        let mut attempt = 0;
        loop {
            match Self::open_once(&to, path).await? {
                Ok(w) => return Ok(w),
                Err(Refused {
                    head,
                    message,
                    retry_after: Some(wait),
                }) if attempt < 10 => {
                    attempt += 1;
                    eprintln!("watch {path}: {head} ({message}); retry {attempt} after {wait} s");
                    tokio::time::sleep(Duration::from_secs(wait.min(10))).await;
                }
                Err(r) => return Err(format!("watch {path}: {} ({})", r.head, r.message)),
            }
        }
    }

    async fn open_once(to: &Target, path: &str) -> Result<std::result::Result<Self, Refused>> {
        let mut stream = to.connect(false).await?;
        stream
            .write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
                    to.auth_line()
                )
                .as_bytes(),
            )
            .await
            .map_err(|e| format!("watch {path}: {e}"))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("watch {path}: {e}"))?;
        let mut w = Self {
            stream,
            raw: Vec::new(),
            pos: 0,
            left: None,
            body: Vec::new(),
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        loop {
            if let Some(end) = w.raw.windows(4).position(|x| x == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&w.raw[..end]).into_owned();
                if !head.starts_with("HTTP/1.1 200") {
                    return Ok(Err(Refused::read(&mut w, &head, end + 4).await));
                }
                w.pos = end + 4;
                return Ok(Ok(w));
            }
            w.fill().await?;
        }
    }

    async fn fill(&mut self) -> Result<()> {
        let n = self
            .stream
            .read(&mut self.buf)
            .await
            .map_err(|e| format!("watch read: {e}"))?;
        if n == 0 {
            return Err("watch closed".into());
        }
        // Drop what was consumed, so the buffer holds at most a partial size line or head.
        if self.pos > 0 {
            self.raw.drain(..self.pos);
            self.pos = 0;
        }
        self.raw.extend_from_slice(&self.buf[..n]);
        Ok(())
    }

    /// Moves whatever is complete from `raw` into `body` (de-chunking).
    fn dechunk(&mut self) -> Result<()> {
        loop {
            match self.left {
                None => {
                    let rest = &self.raw[self.pos..];
                    let Some(eol) = rest.windows(2).position(|x| x == b"\r\n") else {
                        return Ok(());
                    };
                    let line = String::from_utf8_lossy(&rest[..eol]);
                    let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                        .map_err(|_| format!("bad chunk size {line:?}"))?;
                    if n == 0 {
                        return Err("watch ended".into());
                    }
                    self.pos += eol + 2;
                    self.left = Some(n + 2);
                }
                Some(left) => {
                    let avail = self.raw.len() - self.pos;
                    if avail == 0 {
                        return Ok(());
                    }
                    let take = avail.min(left);
                    // The chunk's trailing CRLF is not body.
                    let body_part = take.min(left.saturating_sub(2));
                    self.body
                        .extend_from_slice(&self.raw[self.pos..self.pos + body_part]);
                    self.pos += take;
                    self.left = if take == left {
                        None
                    } else {
                        Some(left - take)
                    };
                }
            }
        }
    }

    /// The next complete frames (each one JSON line), waiting for at least one.
    pub(crate) async fn frames(&mut self, out: &mut Vec<Vec<u8>>) -> Result<()> {
        loop {
            self.dechunk()?;
            if let Some(last) = self.body.iter().rposition(|b| *b == b'\n') {
                let rest = self.body.split_off(last + 1);
                let done = std::mem::replace(&mut self.body, rest);
                out.extend(
                    done.split(|b| *b == b'\n')
                        .filter(|l| !l.is_empty())
                        .map(<[u8]>::to_vec),
                );
                return Ok(());
            }
            self.fill().await?;
        }
    }

    /// Counts complete frames received, waiting for at least one; cheaper than `frames`.
    pub(crate) async fn count(&mut self) -> Result<usize> {
        loop {
            self.dechunk()?;
            let n = self.body.iter().filter(|b| **b == b'\n').count();
            if n > 0 {
                let last = self.body.iter().rposition(|b| *b == b'\n').unwrap_or(0);
                self.body.drain(..=last);
                return Ok(n);
            }
            self.fill().await?;
        }
    }
}

/// Opens a watch stream on an h2c connection and returns its body once a 200 head arrived
/// within `deadline` (any other status is an error).
pub(crate) async fn h2_open_watch(
    client: &h2::client::SendRequest<bytes::Bytes>,
    uri: &str,
    deadline: Duration,
) -> Result<h2::RecvStream> {
    h2_open_watch_as(client, uri, None, deadline).await
}

/// As [`h2_open_watch`], with a bearer token.
pub(crate) async fn h2_open_watch_as(
    client: &h2::client::SendRequest<bytes::Bytes>,
    uri: &str,
    token: Option<&str>,
    deadline: Duration,
) -> Result<h2::RecvStream> {
    let mut req = http::Request::get(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(()).map_err(|e| e.to_string())?;
    let mut ready = client
        .clone()
        .ready()
        .await
        .map_err(|e| format!("h2 stream: {e}"))?;
    let (resp, _) = ready
        .send_request(req, true)
        .map_err(|e| format!("h2 request: {e}"))?;
    let resp = tokio::time::timeout(deadline, resp)
        .await
        .map_err(|_| format!("no h2 watch response within {deadline:?}"))?
        .map_err(|e| format!("h2 watch: {e}"))?;
    if resp.status() != http::StatusCode::OK {
        return Err(format!("h2 watch: status {}", resp.status()));
    }
    Ok(resp.into_body())
}

/// An HTTP/2 connection (h2c with prior knowledge, or TLS with ALPN `h2`); its driver task
/// is the second half.
pub(crate) async fn h2_connect(
    to: impl Into<Target>,
) -> Result<(
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
)> {
    let tcp = to.into().connect(true).await?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .map_err(|e| format!("h2 handshake: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((send, driver))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Serves `head` then `body` in pieces of `step` bytes (flushing each), then closes.
    async fn serve(head: &'static str, body: Vec<u8>, step: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            for piece in body.chunks(step) {
                s.write_all(piece).await.unwrap();
                s.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        addr
    }

    /// Two frames, each sent as three chunks (prefix, object, newline) as the server does.
    fn chunked_frames() -> (Vec<u8>, Vec<Vec<u8>>) {
        let frames = [
            r#"{"type":"ADDED","object":{"a":1}}"#,
            r#"{"type":"MODIFIED","object":{"b":22}}"#,
        ];
        let mut body = Vec::new();
        for f in frames {
            let (left, right) = f.split_at(10);
            for part in [left.as_bytes(), right.as_bytes(), b"\n"] {
                body.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                body.extend_from_slice(part);
                body.extend_from_slice(b"\r\n");
            }
        }
        (body, frames.iter().map(|f| f.as_bytes().to_vec()).collect())
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";

    #[tokio::test]
    async fn frames_are_reassembled_from_chunks_split_anywhere() {
        for step in [1, 3, 7, 1000] {
            let (body, want) = chunked_frames();
            let addr = serve(OK, body, step).await;
            let mut w = Watch::open(addr, "/x?watch=1").await.unwrap();
            let mut got = Vec::new();
            while got.len() < want.len() {
                w.frames(&mut got).await.unwrap();
            }
            assert_eq!(got, want, "read in pieces of {step} bytes");
        }
    }

    #[tokio::test]
    async fn count_counts_complete_frames_only() {
        let (mut body, _) = chunked_frames();
        // A third frame whose newline never arrives is not counted.
        body.extend_from_slice(b"3\r\n{\"x\r\n");
        let addr = serve(OK, body, 5).await;
        let mut w = Watch::open(addr, "/x?watch=1").await.unwrap();
        let mut n = 0;
        while let Ok(k) = w.count().await {
            n += k;
        }
        assert_eq!(n, 2);
    }

    #[tokio::test]
    async fn a_watch_refused_with_an_error_status_fails_to_open() {
        let addr = serve(
            "HTTP/1.1 410 Gone\r\ncontent-length: 0\r\n\r\n",
            Vec::new(),
            1,
        )
        .await;
        let err = Watch::open(addr, "/x?watch=1").await.err().unwrap();
        assert!(err.contains("410"), "{err}");
    }
}
