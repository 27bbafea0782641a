//! [`Connector`]: the TCP layer of every client, direct or through an HTTP proxy with
//! `CONNECT` (a kubeconfig cluster's `proxy-url`, as client-go).
//!
//! Invariants: the proxy's answer is read with a deadline (the connect timeout) and at most
//! [`MAX_PROXY_HEADER`] bytes; anything but a 2xx is an error naming the proxy's status; the
//! tunnel carries TLS end to end (the proxy sees only the target's host and port).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;

use crate::{Error, Result};

/// Largest proxy answer header read.
const MAX_PROXY_HEADER: usize = 8 << 10;

/// An HTTP proxy to tunnel through.
#[derive(Clone)]
pub(crate) struct Proxy {
    uri: Uri,
    /// `Proxy-Authorization` from the URL's user info.
    auth: Option<HeaderValue>,
    timeout: Duration,
}

impl Proxy {
    /// Parses `proxy-url` (`http://[user:pass@]host:port`).
    pub(crate) fn parse(url: &str, timeout: Option<Duration>) -> Result<Self> {
        let uri: Uri = url
            .parse()
            .map_err(|e| Error::Config(format!("proxy-url {url:?}: {e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(s) => {
                return Err(Error::Config(format!(
                    "proxy-url scheme {s:?} is not supported (only http:// with CONNECT)"
                )));
            }
            None => return Err(Error::Config(format!("proxy-url {url:?} has no scheme"))),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| Error::Config(format!("proxy-url {url:?} has no host")))?;
        let auth = match authority.as_str().rsplit_once('@') {
            Some((userinfo, _)) => {
                use base64::Engine;
                let decoded: String = userinfo
                    .split(':')
                    .map(|p| {
                        percent_decode(p).ok_or_else(|| Error::Config("proxy-url user info".into()))
                    })
                    .collect::<Result<Vec<_>>>()?
                    .join(":");
                let v = base64::engine::general_purpose::STANDARD.encode(decoded);
                let mut h = HeaderValue::from_str(&format!("Basic {v}"))
                    .map_err(|_| Error::Config("proxy-url user info".into()))?;
                h.set_sensitive(true);
                Some(h)
            }
            None => None,
        };
        let host_port = authority.as_str().rsplit('@').next().unwrap_or_default();
        let uri: Uri = format!("http://{host_port}")
            .parse()
            .map_err(|e| Error::Config(format!("proxy-url {url:?}: {e}")))?;
        Ok(Self {
            uri,
            auth,
            timeout: timeout.unwrap_or(Duration::from_secs(30)),
        })
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// TCP connections, directly or through a [`Proxy`].
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) tcp: HttpConnector,
    pub(crate) proxy: Option<Proxy>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let proxy = self.proxy.clone();
        Box::pin(async move {
            let Some(proxy) = proxy else {
                return tcp.call(dst).await.map_err(Into::into);
            };
            let io = tcp.call(proxy.uri.clone()).await?;
            let mut stream = io.into_inner();
            tokio::time::timeout(
                proxy.timeout,
                tunnel(&mut stream, &dst, proxy.auth.as_ref()),
            )
            .await
            .map_err(|_| -> BoxError {
                format!("proxy gave no CONNECT answer within {:?}", proxy.timeout).into()
            })??;
            Ok(TokioIo::new(stream))
        })
    }
}

/// Sends `CONNECT host:port` and reads the proxy's answer header.
async fn tunnel(
    stream: &mut TcpStream,
    dst: &Uri,
    auth: Option<&HeaderValue>,
) -> Result<(), BoxError> {
    let host = dst.host().ok_or("target without a host")?;
    let port = dst
        .port_u16()
        .unwrap_or(if dst.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(a) = auth {
        req.push_str("Proxy-Authorization: ");
        req.push_str(a.to_str().map_err(|_| "proxy credentials")?);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await?;
    // Read byte by byte up to the blank line, so nothing of the tunnel is consumed.
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_PROXY_HEADER {
            return Err(format!("proxy answer header larger than {MAX_PROXY_HEADER} bytes").into());
        }
        let b = stream.read_u8().await?;
        head.push(b);
    }
    let head = String::from_utf8_lossy(&head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("proxy answer is not HTTP")?;
    if !(200..300).contains(&status) {
        let line = head.lines().next().unwrap_or_default();
        return Err(format!("proxy refused CONNECT {target}: {line}").into());
    }
    Ok(())
}
