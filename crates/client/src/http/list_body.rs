//! List bodies decoded as they arrive: the `items` of a `…List` come out one object at a time,
//! so a relist holds one object's bytes, never the whole body or a tree of it.
//!
//! [`ListSplitter`] is an incremental scanner of the list envelope: it checks the top level
//! (`{`, keys, `:`, `,`, `}`), hands out each element of `items` as the complete bytes of one
//! JSON value, and keeps every other top-level value (`kind`, `apiVersion`, `metadata`) only
//! until it is parsed. It never recurses and does not validate inside values: serde parses
//! each item and envelope value it hands out, with its own nesting limit, so malformed JSON
//! anywhere is still an error, as with a whole-body parse. A gzipped body (one member or
//! several) is undone chunk by chunk by `gzip::Inflater`, its output bounded per step.
//!
//! Bounds (every input-driven allocation): the body's bytes, compressed and inflated, at most
//! the config's `max_list_bytes`; one item at most [`MAX_ITEM`]; one envelope value at most
//! [`MAX_ENVELOPE_VALUE`]; a top-level key is kept for comparison only up to 64 bytes. The
//! whole body is read within one budget (the request timeout) of time spent *waiting for the
//! server*, counted per chunk from the response headers: a server that stalls mid-body
//! cannot hold the list forever, and a consumer that does slow work per object (the time
//! between two polls of the stream) does not use the server's budget up — client-go reads
//! the body whole before decoding it, so only the server's time counts there too.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use listwatch_api::ListMeta;
use serde::de::IgnoredAny;

use crate::{Error, Result};
use crate::{PageEnd, PageItem, PageStream};

use super::gzip::Inflater;

/// The largest list item accepted (as a watch frame: kube-apiserver's objects are at most a
/// few MiB).
pub(crate) const MAX_ITEM: usize = super::decode::MAX_FRAME;

/// The largest top-level value of a list other than `items` (`metadata`, `kind`, …).
pub(crate) const MAX_ENVELOPE_VALUE: usize = 1 << 20;

/// Longest top-level key kept for comparison: `"items"` and `"metadata"` fit even with every
/// character `\u`-escaped (8 × 6 bytes).
const MAX_KEY: usize = 64;

/// Which top-level value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Items,
    Metadata,
    Other,
}

/// Where the scanner is in the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Before the opening `{`.
    Start,
    /// After `{`: a key or `}`.
    FirstKey,
    /// After a top-level `,`: a key.
    NextKey,
    /// Inside a key (its bytes, quotes included, go to `key`).
    Key,
    /// After a key: `:`.
    Colon,
    /// After `:`: the start of a value.
    Value,
    /// Inside a top-level value other than the `items` array (bytes to `cur`).
    Envelope,
    /// After `"items": [`: an item or `]`.
    FirstItem,
    /// After `,` in `items`: an item.
    NextItem,
    /// Inside an item (bytes to `cur`).
    Item,
    /// After an item: `,` or `]`.
    AfterItem,
    /// After a top-level value: `,` or `}`.
    AfterValue,
    /// After the closing `}`: only whitespace.
    Done,
}

/// The scan of one JSON value, to find where it ends.
#[derive(Debug, Clone, Copy, Default)]
struct ValueScan {
    started: bool,
    /// A container (`{`/`[`) at `depth` levels, a string, or a literal/number.
    container: bool,
    string: bool,
    depth: u64,
    in_str: bool,
    esc: bool,
}

impl ValueScan {
    /// Scans `buf` (the value's first byte is its first, when not started); returns how many
    /// bytes belong to the value and whether it is complete. A literal ends before the
    /// delimiter that follows it, which is not counted.
    fn scan(&mut self, buf: &[u8]) -> (usize, bool) {
        let mut i = 0;
        if !self.started {
            let Some(&b) = buf.first() else {
                return (0, false);
            };
            self.started = true;
            i = 1;
            match b {
                b'{' | b'[' => {
                    self.container = true;
                    self.depth = 1;
                }
                b'"' => {
                    self.string = true;
                    self.in_str = true;
                }
                _ => {}
            }
        }
        while let Some(rest) = buf.get(i..) {
            if rest.is_empty() {
                break;
            }
            if self.in_str {
                if self.esc {
                    self.esc = false;
                    i += 1;
                    continue;
                }
                match rest.iter().position(|c| *c == b'"' || *c == b'\\') {
                    None => return (buf.len(), false),
                    Some(p) => {
                        i += p + 1;
                        if rest.get(p) == Some(&b'\\') {
                            self.esc = true;
                        } else {
                            self.in_str = false;
                            if self.string {
                                return (i, true);
                            }
                        }
                    }
                }
                continue;
            }
            let b = rest.first().copied().unwrap_or_default();
            if self.container {
                match b {
                    b'"' => self.in_str = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return (i + 1, true);
                        }
                    }
                    _ => {}
                }
                i += 1;
            } else {
                // A literal or number: it ends at the next delimiter.
                if matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                    return (i, true);
                }
                i += 1;
            }
        }
        (buf.len(), false)
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn malformed(what: &str) -> Error {
    Error::Decode(format!("list: {what}"))
}

/// The incremental scanner of a list body (see the module doc).
pub(crate) struct ListSplitter {
    st: St,
    scan: ValueScan,
    /// The bytes of the item or envelope value being read.
    cur: Vec<u8>,
    /// The key being read, quotes included, up to [`MAX_KEY`] bytes.
    key: Vec<u8>,
    key_long: bool,
    key_esc: bool,
    field: Field,
    seen_items: bool,
    metadata: Option<ListMeta>,
    /// Items complete and not yet taken.
    ready: VecDeque<Bytes>,
}

impl Default for ListSplitter {
    fn default() -> Self {
        Self {
            st: St::Start,
            scan: ValueScan::default(),
            cur: Vec::new(),
            key: Vec::new(),
            key_long: false,
            key_esc: false,
            field: Field::Other,
            seen_items: false,
            metadata: None,
            ready: VecDeque::new(),
        }
    }
}

impl ListSplitter {
    /// The next complete item, if one is ready.
    pub(crate) fn next_item(&mut self) -> Option<Bytes> {
        self.ready.pop_front()
    }

    /// Scans the next bytes of the body; complete items become available to
    /// [`next_item`](Self::next_item).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<()> {
        let mut i = 0;
        while let Some(rest) = chunk.get(i..) {
            let Some(&b) = rest.first() else {
                break;
            };
            match self.st {
                St::Envelope | St::Item => {
                    let (n, done) = self.scan.scan(rest);
                    let limit = if self.st == St::Item {
                        MAX_ITEM
                    } else {
                        MAX_ENVELOPE_VALUE
                    };
                    if self.cur.len().saturating_add(n) > limit {
                        return Err(malformed(&format!(
                            "{} larger than {limit} bytes",
                            if self.st == St::Item {
                                "an item"
                            } else {
                                "a top-level value"
                            }
                        )));
                    }
                    self.cur
                        .extend_from_slice(rest.get(..n).unwrap_or_default());
                    i += n;
                    if done {
                        self.value_done()?;
                    }
                }
                St::Key => {
                    let (n, closed) = if self.key_esc {
                        self.key_esc = false;
                        (1, false)
                    } else {
                        match rest.iter().position(|c| *c == b'"' || *c == b'\\') {
                            None => (rest.len(), false),
                            Some(p) if rest.get(p) == Some(&b'\\') => {
                                self.key_esc = true;
                                (p + 1, false)
                            }
                            Some(p) => (p + 1, true),
                        }
                    };
                    let part = rest.get(..n).unwrap_or_default();
                    if self.key_long || self.key.len() + part.len() > MAX_KEY {
                        self.key_long = true;
                    } else {
                        self.key.extend_from_slice(part);
                    }
                    i += n;
                    if closed {
                        self.key_done()?;
                    }
                }
                _ if is_ws(b) => i += 1,
                St::Start => {
                    if b != b'{' {
                        return Err(malformed("the body is not a JSON object"));
                    }
                    self.st = St::FirstKey;
                    i += 1;
                }
                St::FirstKey | St::NextKey => {
                    match b {
                        b'"' => {
                            self.key.clear();
                            self.key.push(b);
                            self.key_long = false;
                            self.key_esc = false;
                            self.st = St::Key;
                        }
                        b'}' if self.st == St::FirstKey => self.st = St::Done,
                        _ => return Err(malformed("expected a key")),
                    }
                    i += 1;
                }
                St::Colon => {
                    if b != b':' {
                        return Err(malformed("expected ':'"));
                    }
                    self.st = St::Value;
                    i += 1;
                }
                St::Value => {
                    if self.field == Field::Items && b == b'[' {
                        self.st = St::FirstItem;
                        i += 1;
                    } else {
                        // Not consumed: the value's scan starts with this byte.
                        self.start_value(St::Envelope);
                    }
                }
                St::FirstItem | St::NextItem => {
                    if b == b']' && self.st == St::FirstItem {
                        self.st = St::AfterValue;
                        i += 1;
                    } else if matches!(b, b']' | b',' | b'}' | b':') {
                        return Err(malformed("expected an item"));
                    } else {
                        self.start_value(St::Item);
                    }
                }
                St::AfterItem => {
                    match b {
                        b',' => self.st = St::NextItem,
                        b']' => self.st = St::AfterValue,
                        _ => return Err(malformed("expected ',' or ']' after an item")),
                    }
                    i += 1;
                }
                St::AfterValue => {
                    match b {
                        b',' => self.st = St::NextKey,
                        b'}' => self.st = St::Done,
                        _ => return Err(malformed("expected ',' or '}'")),
                    }
                    i += 1;
                }
                St::Done => return Err(malformed("data after the end of the list")),
            }
        }
        Ok(())
    }

    fn start_value(&mut self, st: St) {
        self.cur.clear();
        self.scan = ValueScan::default();
        self.st = st;
    }

    fn key_done(&mut self) -> Result<()> {
        self.field = if self.key_long {
            Field::Other
        } else {
            let key: String = serde_json::from_slice(&self.key)
                .map_err(|e| malformed(&format!("bad key: {e}")))?;
            match key.as_str() {
                "items" => Field::Items,
                "metadata" => Field::Metadata,
                _ => Field::Other,
            }
        };
        if self.field == Field::Items {
            if self.seen_items {
                return Err(malformed("duplicate field `items`"));
            }
            self.seen_items = true;
        }
        self.st = St::Colon;
        Ok(())
    }

    fn value_done(&mut self) -> Result<()> {
        if self.st == St::Item {
            self.ready
                .push_back(Bytes::from(std::mem::take(&mut self.cur)));
            self.st = St::AfterItem;
            return Ok(());
        }
        match self.field {
            Field::Metadata => {
                if self.metadata.is_some() {
                    return Err(malformed("duplicate field `metadata`"));
                }
                let meta: ListMeta = serde_json::from_slice(&self.cur)
                    .map_err(|e| malformed(&format!("metadata: {e}")))?;
                self.metadata = Some(meta);
            }
            Field::Items => {
                // Not an array: only `null` is an empty list.
                let v: Option<IgnoredAny> = serde_json::from_slice(&self.cur)
                    .map_err(|e| malformed(&format!("items: {e}")))?;
                if v.is_some() {
                    return Err(malformed("`items` is not an array"));
                }
            }
            Field::Other => {
                serde_json::from_slice::<IgnoredAny>(&self.cur)
                    .map_err(|e| malformed(&e.to_string()))?;
            }
        }
        self.cur = Vec::new();
        self.st = St::AfterValue;
        Ok(())
    }

    /// The body ended: the list's version and continue token, if the list was complete.
    pub(crate) fn finish(&mut self) -> Result<PageEnd> {
        if self.st != St::Done {
            // A cut body (a close-delimited answer or a proxy's chunked reply ended early) is
            // a transport failure to retry, not a server answering something else (rtcl3).
            return Err(Error::Http(Box::new(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "list: the body ended before the list did",
            ))));
        }
        let meta = self.metadata.take().unwrap_or_default();
        // Opaque: kept as sent ("" when absent, which the reflector refuses).
        let resource_version = meta.resource_version.unwrap_or_default();
        Ok(PageEnd {
            resource_version,
            continue_token: meta.continue_token.filter(|t| !t.is_empty()),
        })
    }
}

/// A list response's body as a [`PageStream`], each item decoded by `decode` as soon as its
/// bytes are complete. The body is read under `timeout` (from now) and bounded by
/// `max_bytes`, compressed and inflated.
pub(crate) fn page_stream<K, F>(
    res: hyper::Response<hyper::body::Incoming>,
    max_bytes: usize,
    timeout: Option<Duration>,
    decode: F,
) -> PageStream<K>
where
    K: Send + 'static,
    F: Fn(&[u8]) -> Result<K> + Send + 'static,
{
    struct S<F> {
        body: hyper::body::Incoming,
        inflater: Option<Inflater>,
        splitter: ListSplitter,
        /// What is left of the request timeout for waiting on the server (`None`: no limit).
        left: Option<Duration>,
        timeout: Option<Duration>,
        max_bytes: usize,
        /// Body bytes received, and bytes after inflation.
        received: usize,
        inflated: usize,
        decode: F,
        /// The body has ended; what is left are the items already split.
        ended: bool,
        done: bool,
    }
    let gzip = super::body::is_gzip(&res);
    let s = S {
        body: res.into_body(),
        inflater: gzip.then(|| Inflater::new("list body")),
        splitter: ListSplitter::default(),
        left: timeout,
        timeout,
        max_bytes,
        received: 0,
        inflated: 0,
        decode,
        ended: false,
        done: false,
    };

    /// Feeds body bytes (inflated already) to the splitter, within the bound.
    fn feed(
        splitter: &mut ListSplitter,
        inflated: &mut usize,
        max_bytes: usize,
        bytes: &[u8],
    ) -> Result<()> {
        *inflated = inflated.saturating_add(bytes.len());
        if *inflated > max_bytes {
            return Err(Error::Decode(format!(
                "list body larger than {max_bytes} bytes once decompressed"
            )));
        }
        splitter.push(bytes)
    }

    futures::stream::unfold(s, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            if let Some(item) = s.splitter.next_item() {
                let decoded = (s.decode)(&item).map(PageItem::Object);
                // One object that does not fit the type is skipped; the list goes on.
                s.done = decoded.as_ref().is_err_and(|e| !e.is_skipped_object());
                return Some((decoded, s));
            }
            if s.ended {
                // Every item is out: the list's own end (or why it is incomplete).
                s.done = true;
                let end = s.splitter.finish().map(PageItem::End);
                return Some((end, s));
            }
            let frame = match s.left {
                Some(left) => {
                    // Only the wait for the server counts, not the consumer's time between
                    // polls.
                    let started = tokio::time::Instant::now();
                    let frame = tokio::time::timeout(left, s.body.frame()).await;
                    s.left = Some(left.saturating_sub(started.elapsed()));
                    match frame {
                        Ok(f) => f,
                        Err(_) => {
                            s.done = true;
                            let t = s.timeout.unwrap_or_default();
                            return Some((
                                Err(Error::Http(
                                    format!(
                                        "list not complete within {t:?} of waiting for the server"
                                    )
                                    .into(),
                                )),
                                s,
                            ));
                        }
                    }
                }
                None => s.body.frame().await,
            };
            let S {
                inflater,
                splitter,
                received,
                inflated,
                max_bytes,
                ended,
                ..
            } = &mut s;
            let step = match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    *received = received.saturating_add(data.len());
                    if *received > *max_bytes {
                        Err(Error::Decode(format!(
                            "list body larger than {max_bytes} bytes"
                        )))
                    } else {
                        match inflater {
                            Some(inf) => {
                                inf.push(&data, &mut |b| feed(splitter, inflated, *max_bytes, b))
                            }
                            // Not compressed: `received` is the bound that counts.
                            None => splitter.push(&data),
                        }
                    }
                }
                Some(Err(e)) => Err(Error::Http(Box::new(e))),
                None => {
                    *ended = true;
                    match inflater {
                        Some(inf) => inf.finish(&mut |b| feed(splitter, inflated, *max_bytes, b)),
                        None => Ok(()),
                    }
                }
            };
            if let Err(e) = step {
                s.done = true;
                return Some((Err(e), s));
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests;
