//! Response compression: which clients get gzip, the gzip encoder, the budget of compressors
//! running at once, and the adapter that gzips a watch-list stream.
//!
//! What upstream's `APIResponseCompression` does (k8s.io/apiserver, `responsewriters`), and
//! where this module differs:
//! - a response is gzipped only when the client's `Accept-Encoding` names `gzip` and the
//!   body is over [`GZIP_THRESHOLD`] (128 KiB, upstream's `defaultGzipThresholdBytes`); a
//!   smaller one goes out as is, with its length. Compression level 1 (upstream's
//!   `gzipContentEncodingLevel`: the least CPU for nearly the same ratio). A gzipped
//!   response carries `Content-Encoding: gzip` and `Vary: Accept-Encoding`;
//! - `Accept-Encoding` ([`accepts_gzip`]): upstream takes the first header line, splits it on
//!   commas and accepts only a bare `gzip` token. Here every line counts, the coding name is
//!   case-insensitive (`x-gzip` is `gzip`, RFC 9110), parameters are allowed and `q=0` (or
//!   any weight that is not a valid qvalue) refuses it; `*` is not taken as `gzip` (upstream
//!   neither). At most [`MAX_CODINGS`] list elements are read, so a huge header costs a
//!   bounded scan and no allocation;
//! - a watch-list (`sendInitialEvents=true`) response is gzipped when the client accepts it
//!   (`GzipWatch`), whatever its size, as upstream 1.37's `WatchListCompression` (beta, on):
//!   its initial events are one large burst, the same size as a list; plain watches are not.
//!   Events are flushed (a deflate sync flush) whenever the watch has nothing more ready, so
//!   a client never waits for bytes the server holds back. Upstream ends a gzip member at
//!   every flush (a body of many members, live events compressed too); here the body is
//!   one member, so a client that reads only one member reads it whole.
//!
//! Bounds (per response and in total):
//! - CPU: level 1, and at most `MAX_INPUT_PER_POLL` (256 KiB) bytes compressed per poll of a body, so
//!   a large response never holds a runtime thread for long;
//! - memory: a deflate compressor is a few hundred KiB; at most
//!   [`crate::Config::max_gzip_streams`] exist at once (`GzipBudget`). A response that
//!   finds none free goes out uncompressed (identity is always acceptable, as upstream
//!   assumes). A watch-list's compressor is released once its initial events are out (the
//!   first time the watch has nothing ready after the initial-events-end bookmark): the rest
//!   of the stream is written as stored (uncompressed) deflate blocks, which keeps it one
//!   valid gzip member at the cost of 5 bytes per write, so an idle watch holds no
//!   compressor;
//! - output is handed on per poll; nothing accumulates beyond one poll's worth.
//!
//! Invariants: every gzip body is one complete gzip member (header, deflate stream ending in
//! a final block, CRC-32 and length trailer) when its stream ends normally; a body that ends
//! with an error (deadline, failed encoding) ends without the final block and trailer, so the
//! client sees a broken stream, never a shorter valid one.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Responses at most this long are not compressed (upstream's `defaultGzipThresholdBytes`).
pub const GZIP_THRESHOLD: usize = 128 * 1024;

/// List elements of `Accept-Encoding` read at most (over all its lines).
pub const MAX_CODINGS: usize = 64;

/// Bytes of input compressed at most per poll of a body.
pub(crate) const MAX_INPUT_PER_POLL: usize = 256 * 1024;

/// Deflate level (upstream's `gzipContentEncodingLevel`).
const LEVEL: u32 = 1;

/// The gzip member header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Whether the client accepts a gzipped response (see the module docs for the rules).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut accepted = false;
    let mut seen = 0usize;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for element in value.split(',') {
            seen += 1;
            if seen > MAX_CODINGS {
                return accepted;
            }
            let mut parts = element.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if !coding.eq_ignore_ascii_case("gzip") && !coding.eq_ignore_ascii_case("x-gzip") {
                continue;
            }
            let mut weight = Some(true);
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    weight = None;
                    break;
                };
                if k.trim().eq_ignore_ascii_case("q") {
                    weight = qvalue_positive(v.trim());
                }
            }
            match weight {
                Some(true) => accepted = true,
                // An explicit refusal wins over an acceptance elsewhere in the header.
                Some(false) => return false,
                None => {}
            }
        }
    }
    accepted
}

/// Whether a qvalue (RFC 9110: `0[.ddd]` or `1[.000]`) is above zero; `None` when malformed.
fn qvalue_positive(q: &str) -> Option<bool> {
    let (int, frac) = q.split_once('.').unwrap_or((q, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match int {
        "0" => Some(frac.bytes().any(|b| b != b'0')),
        "1" if frac.bytes().all(|b| b == b'0') => Some(true),
        _ => None,
    }
}

/// How many deflate compressors may exist at once; each response that compresses holds one
/// permit for as long as its compressor lives.
#[derive(Clone)]
pub(crate) struct GzipBudget(Option<Arc<Semaphore>>);

impl GzipBudget {
    /// `max == 0` disables compression.
    pub(crate) fn new(max: usize) -> Self {
        Self((max > 0).then(|| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS)))))
    }

    /// A compressor's permit, if one is free.
    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(self.0.as_ref()?).try_acquire_owned().ok()
    }
}

/// A compression failure (the encoder's state is broken; the body must end with an error).
#[derive(Debug, thiserror::Error)]
#[error("gzip compression failed: {0}")]
pub(crate) struct GzipError(String);

impl From<GzipError> for std::io::Error {
    fn from(e: GzipError) -> Self {
        std::io::Error::other(e)
    }
}

/// An incremental gzip encoder: bytes in, compressed bytes out, one member in all.
pub(crate) struct Gzip {
    /// `None` once the encoder writes stored blocks (the compressor and its permit are gone).
    deflate: Option<(Box<Compress>, Option<OwnedSemaphorePermit>)>,
    crc: crc32fast::Hasher,
    /// Input length modulo 2^32 (the trailer's ISIZE).
    len: u32,
    out: Vec<u8>,
    /// Input since the last flush.
    unflushed: bool,
}

impl Gzip {
    /// An encoder whose compressor holds `permit` (its share of the [`GzipBudget`]).
    pub(crate) fn new(permit: Option<OwnedSemaphorePermit>) -> Self {
        let mut out = Vec::with_capacity(32 * 1024);
        out.extend_from_slice(&HEADER);
        Self {
            deflate: Some((
                Box::new(Compress::new(Compression::new(LEVEL), false)),
                permit,
            )),
            crc: crc32fast::Hasher::new(),
            len: 0,
            out,
            unflushed: false,
        }
    }

    /// Compresses `data` (output may lag behind until a flush).
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<(), GzipError> {
        if data.is_empty() {
            return Ok(());
        }
        self.crc.update(data);
        // ISIZE is the length modulo 2^32 (RFC 1952): truncation is the format.
        self.len = self.len.wrapping_add(data.len() as u32);
        self.unflushed = true;
        match &mut self.deflate {
            Some((c, _)) => run(c, data, FlushCompress::None, &mut self.out),
            None => {
                stored(data, &mut self.out);
                Ok(())
            }
        }
    }

    /// Makes everything written so far decodable by the client (a deflate sync flush).
    pub(crate) fn flush(&mut self) -> Result<(), GzipError> {
        if !self.unflushed {
            return Ok(());
        }
        self.unflushed = false;
        match &mut self.deflate {
            Some((c, _)) => run(c, &[], FlushCompress::Sync, &mut self.out),
            None => Ok(()),
        }
    }

    /// Flushes, then drops the compressor (and its permit): what follows is written as
    /// stored blocks.
    pub(crate) fn stop_compressing(&mut self) -> Result<(), GzipError> {
        if self.deflate.is_some() {
            self.unflushed = true;
            self.flush()?;
            self.deflate = None;
        }
        Ok(())
    }

    /// Whether the encoder still compresses.
    pub(crate) fn compressing(&self) -> bool {
        self.deflate.is_some()
    }

    /// Ends the member: the final deflate block and the trailer.
    pub(crate) fn finish(&mut self) -> Result<(), GzipError> {
        match &mut self.deflate {
            Some((c, _)) => run(c, &[], FlushCompress::Finish, &mut self.out)?,
            // An empty final stored block (we are byte-aligned after a flush or a stored block).
            None => self.out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]),
        }
        self.deflate = None;
        let crc = std::mem::take(&mut self.crc).finalize();
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out.extend_from_slice(&self.len.to_le_bytes());
        Ok(())
    }

    /// Compressed bytes ready to send.
    pub(crate) fn ready(&self) -> usize {
        self.out.len()
    }

    /// Takes the compressed bytes ready to send.
    pub(crate) fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::replace(
            &mut self.out,
            Vec::with_capacity(32 * 1024),
        ))
    }
}

/// Runs the compressor over `input` with `flush`, growing `out` as needed.
fn run(
    c: &mut Compress,
    mut input: &[u8],
    flush: FlushCompress,
    out: &mut Vec<u8>,
) -> Result<(), GzipError> {
    loop {
        if out.capacity() - out.len() < 4096 {
            out.reserve((input.len() / 2).max(32 * 1024));
        }
        let before = c.total_in();
        let status = c
            .compress_vec(input, out, flush)
            .map_err(|e| GzipError(e.to_string()))?;
        let consumed = usize::try_from(c.total_in() - before).unwrap_or(usize::MAX);
        input = input.get(consumed..).unwrap_or_default();
        let room_left = out.len() < out.capacity();
        match (flush, status) {
            (_, Status::StreamEnd) => return Ok(()),
            (FlushCompress::Finish, _) => {}
            // Done with the input, and (when flushing) the compressor had room to spare,
            // which is zlib's sign that the flush is complete.
            (FlushCompress::None, _) if input.is_empty() => return Ok(()),
            (_, _) if input.is_empty() && room_left => return Ok(()),
            _ => {}
        }
    }
}

/// Appends `data` as stored (uncompressed) deflate blocks, non-final.
fn stored(data: &[u8], out: &mut Vec<u8>) {
    for piece in data.chunks(usize::from(u16::MAX)) {
        // `chunks` keeps every piece within u16.
        let n = u16::try_from(piece.len()).unwrap_or(u16::MAX);
        out.push(0);
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&(!n).to_le_bytes());
        out.extend_from_slice(piece);
    }
}

/// Watch bytes gathered before they are compressed together.
const STAGE_BYTES: usize = 64 * 1024;

/// The annotation of the bookmark that ends a watch-list's initial events.
const INITIAL_EVENTS_END: &[u8] = b"\"k8s.io/initial-events-end\":\"true\"";

/// A watch body, gzipped (see the module docs): the watch's chunks are compressed and
/// flushed whenever the watch has nothing more ready; after the initial-events-end bookmark
/// has gone out, the compressor is released and the rest is sent in stored blocks.
pub(crate) struct GzipWatch<S> {
    inner: Pin<Box<S>>,
    gz: Gzip,
    /// Chunks not compressed yet: a watch's frames come in small pieces (a prefix, the
    /// object, a suffix), compressed together once [`STAGE_BYTES`] are waiting or the watch
    /// pauses.
    stage: Vec<u8>,
    /// Whether the initial-events-end bookmark has been seen.
    initial_done: bool,
    ended: bool,
}

impl<S> GzipWatch<S>
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send,
{
    pub(crate) fn new(inner: S, permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner: Box::pin(inner),
            gz: Gzip::new(Some(permit)),
            stage: Vec::new(),
            initial_done: false,
            ended: false,
        }
    }
}

impl<S> Stream for GzipWatch<S>
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let mut input = 0usize;
        loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    input += chunk.len();
                    if !this.initial_done && contains(&chunk, INITIAL_EVENTS_END) {
                        this.initial_done = true;
                    }
                    this.stage.extend_from_slice(&chunk);
                    if this.stage.len() >= STAGE_BYTES {
                        this.gz.write(&this.stage)?;
                        this.stage.clear();
                    }
                    if input >= MAX_INPUT_PER_POLL && this.gz.ready() > 0 {
                        return Poll::Ready(Some(Ok(this.gz.take())));
                    }
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    this.gz.write(&this.stage)?;
                    this.stage = Vec::new();
                    this.gz.finish()?;
                    return Poll::Ready(Some(Ok(this.gz.take())));
                }
                Poll::Pending => {
                    this.gz.write(&this.stage)?;
                    // An idle watch keeps no staging buffer.
                    this.stage = Vec::new();
                    this.gz.flush()?;
                    if this.initial_done && this.gz.compressing() {
                        this.gz.stop_compressing()?;
                    }
                    if this.gz.ready() > 0 {
                        return Poll::Ready(Some(Ok(this.gz.take())));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::io::Read;

    fn gunzip(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn accept_encoding_rules() {
        for (values, want) in [
            (&["gzip"][..], true),
            (&["deflate, gzip"], true),
            (&["gzip, deflate, br, zstd"], true),
            (&["GZip"], true),
            (&["x-gzip"], true),
            (&["gzip;q=0.5"], true),
            (&["gzip ; q=1.000"], true),
            (&["br", "gzip"], true),
            (&[], false),
            (&[""], false),
            (&["*"], false),
            (&["identity"], false),
            (&["gzip;q=0"], false),
            (&["gzip;q=0.000"], false),
            (&["gzip, gzip;q=0"], false),
            (&["gzip;q=2"], false),
            (&["gzip;q=0.5000"], false),
            (&["gzip;q=abc"], false),
            (&["gzip;q"], false),
            (&["gzipx"], false),
            (&[",,,;;;=,="], false),
        ] {
            assert_eq!(accepts_gzip(&headers(values)), want, "{values:?}");
        }
    }

    #[test]
    fn a_huge_accept_encoding_is_read_only_so_far() {
        let mut v = "br, ".repeat(MAX_CODINGS);
        v.push_str("gzip");
        assert!(!accepts_gzip(&headers(&[&v])), "past the element cap");
        let v = format!("gzip, {}", "a".repeat(200_000));
        assert!(accepts_gzip(&headers(&[&v])));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        #[test]
        fn arbitrary_accept_encodings_never_panic(v in "[ -~]{0,200}") {
            if let Ok(v) = HeaderValue::from_str(&v) {
                let mut h = HeaderMap::new();
                h.insert(header::ACCEPT_ENCODING, v);
                let _ = accepts_gzip(&h);
            }
        }

        #[test]
        fn compressed_then_stored_is_one_valid_member(
            parts in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..70_000), 0..5),
            switch_at in 0usize..6,
        ) {
            let mut gz = Gzip::new(None);
            let mut wire = Vec::new();
            let mut plain = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                if i == switch_at {
                    gz.stop_compressing().unwrap();
                }
                gz.write(p).unwrap();
                plain.extend_from_slice(p);
                if i % 2 == 0 {
                    gz.flush().unwrap();
                    // Everything so far decodes, before the member ends.
                    wire.extend_from_slice(&gz.take());
                }
            }
            gz.finish().unwrap();
            wire.extend_from_slice(&gz.take());
            proptest::prop_assert_eq!(gunzip(&wire), plain);
        }
    }

    #[test]
    fn a_flush_makes_everything_written_decodable() {
        let mut gz = Gzip::new(None);
        gz.write(b"{\"type\":\"ADDED\"}\n").unwrap();
        gz.flush().unwrap();
        let wire = gz.take();
        let mut d = flate2::read::GzDecoder::new(&wire[..]);
        let mut got = [0u8; 17];
        d.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"{\"type\":\"ADDED\"}\n");
    }

    #[tokio::test]
    async fn a_watch_list_releases_its_compressor_after_the_initial_events() {
        use futures::StreamExt;
        let budget = GzipBudget::new(1);
        let permit = budget.try_take().unwrap();
        assert!(budget.try_take().is_none(), "one compressor at a time");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let inner = tokio_stream_from(rx);
        let mut body = GzipWatch::new(inner, permit);
        let added = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{}}\n");
        let end = Bytes::from_static(
            b"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
        );
        tx.send(added.clone()).unwrap();
        tx.send(end.clone()).unwrap();
        let first = body.next().await.unwrap().unwrap();
        assert!(
            !body.gz.compressing(),
            "released at the first pause after the bookmark"
        );
        assert!(budget.try_take().is_some(), "its permit is back");
        tx.send(added.clone()).unwrap();
        let second = body.next().await.unwrap().unwrap();
        drop(tx);
        let last = body.next().await.unwrap().unwrap();
        assert!(body.next().await.is_none());
        let wire = [first, second, last].concat();
        assert_eq!(gunzip(&wire), [added.clone(), end, added].concat());
    }

    fn tokio_stream_from(
        mut rx: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok)))
    }
}
