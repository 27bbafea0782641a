//! Bounded, deadlined reads of response bodies: whole bodies up to a limit (gzip inflated
//! within the same limit) and the prefix of an error body.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;

use crate::{Error, Result};

/// `fut` within `timeout` (`None`: no deadline); past it, an [`Error::Http`] naming `what`.
pub(crate) async fn within<T>(
    timeout: Option<Duration>,
    what: &str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, fut)
            .await
            .map_err(|_| Error::Http(format!("{what} not complete within {t:?}").into()))?,
        None => fut.await,
    }
}

/// Reads a whole body of at most `limit` bytes; a longer one is an error.
/// A gzip-encoded answer (`Content-Encoding: gzip`, any number of members) is decompressed, also to at most
/// `limit` bytes: a small body that inflates past it is the same error.
pub(crate) async fn read_body(
    res: hyper::Response<hyper::body::Incoming>,
    limit: usize,
    what: &str,
) -> Result<Bytes> {
    let gzip = is_gzip(&res);
    let body = match http_body_util::Limited::new(res.into_body(), limit)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(Error::Decode(format!(
                "{what} body larger than {limit} bytes"
            )));
        }
        Err(e) => return Err(Error::Http(e)),
    };
    if !gzip {
        return Ok(body);
    }
    super::gzip::gunzip(&body, limit).map_err(|e| Error::Decode(format!("{what} body: {e}")))
}

pub(crate) fn is_gzip<B>(res: &hyper::Response<B>) -> bool {
    res.headers()
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"))
}

/// Reads the first `limit` bytes of a body (or all of a shorter one).
pub(crate) async fn read_prefix(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes> {
    let mut out = bytes::BytesMut::new();
    while out.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(data.get(..take).unwrap_or_default());
                }
            }
            Some(Err(e)) => return Err(Error::Http(Box::new(e))),
            None => break,
        }
    }
    Ok(out.freeze())
}
