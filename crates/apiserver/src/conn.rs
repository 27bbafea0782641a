//! One connection's deadlines: an I/O wrapper that gives reads and writes the deadlines
//! hyper's HTTP/1 server does not (it has only a header timeout, which also runs while a
//! keep-alive connection is idle), and the per-connection state that tells it whether a
//! request is in progress.
//!
//! The phases of a connection, and the deadline of a read that has to wait:
//! - **first request**: its head must be complete within the read-header timeout of the
//!   connection's start (after TLS), as Go's `ReadHeaderTimeout`;
//! - **idle** between requests: the idle timeout (Go's `IdleTimeout`) until the first byte
//!   of the next request, then the read-header timeout from that byte;
//! - **busy** while a request is in progress — from the moment hyper hands its head to the
//!   service until its response body ends or is dropped: no read deadline (reading a body is
//!   bounded by the request's own deadline, a watch by its timeout); also for good after an
//!   upgrade (websocket watches);
//! - **any time**: a write that makes no progress for the write-stall timeout fails (the
//!   peer stopped reading);
//! - **sending a response** that is not long-running (not a watch, not an upgrade): it must
//!   be written out within the response timeout of its start, however slowly the peer
//!   keeps reading — else a client reading a large response a few bytes at a time would
//!   hold its memory for ever. The deadline ends once the last byte is flushed. On HTTP/2
//!   each such stream has its own deadline, ending when its body has been handed to hyper
//!   (whose send buffer per stream is bounded); the connection's deadline is the earliest
//!   of them, so a watch sharing the connection gets none, and a stream whose client grants
//!   no flow-control window is found by the read side's timer (no write may be pending):
//!   the connection is closed, its other streams with it, as on HTTP/1.1.
//!
//! A deadline that passes fails the pending read or write with `TimedOut`; hyper then closes
//! the connection without a response (as Go does for a header timeout).
//!
//! On HTTP/2 every stream is a request: the connection is busy while any stream's response
//! is in progress, and idle from the end of the last one. Bytes that arrive while idle do
//! not start a head deadline there, because they may be control frames (a PING or its ACK,
//! WINDOW_UPDATE, SETTINGS) rather than a request: the idle deadline keeps running from the
//! last stream's end, so a request head trickled on an idle HTTP/2 connection is bounded by
//! the idle timeout (and, on a new connection, by the read-header timeout from its start).
//!
//! Invariants: the per-connection state is touched when a request starts and when its
//! response ends, never per body frame; the wrapper's timers belong to the connection's own
//! task, so no lock or shared counter is touched per read, write or watch event.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use futures::task::AtomicWaker;
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::serve::ConnMetrics;

/// The deadlines of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) read_header: Duration,
    pub(crate) idle: Duration,
    pub(crate) write_stall: Duration,
}

/// What the service tells the I/O side about requests on this connection.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Requests whose response has not ended.
    active: AtomicUsize,
    /// Responses ended so far (a new value starts an idle period).
    finished: AtomicU64,
    /// Set once the connection was upgraded (a websocket).
    upgraded: AtomicBool,
    /// When the response being sent must be written out by: nanoseconds after `epoch`,
    /// plus one; 0 for none (no response, or a long-running one). On HTTP/2 the earliest
    /// of `stream_deadlines`.
    respond_by: AtomicU64,
    /// HTTP/2: the deadlines (encoded as `respond_by`, and a stream number) of the
    /// responses not yet handed over; touched when a response starts and ends.
    stream_deadlines: Mutex<BTreeSet<(u64, u64)>>,
    next_stream: AtomicU64,
    epoch: Instant,
    /// The read that waits without a deadline while a request is in progress: woken when
    /// the request ends, so that it takes up the idle deadline.
    read_waker: AtomicWaker,
    /// Set once the connection is known to speak HTTP/2 (by ALPN or its first request).
    http2: AtomicBool,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            active: AtomicUsize::new(0),
            finished: AtomicU64::new(0),
            upgraded: AtomicBool::new(false),
            respond_by: AtomicU64::new(0),
            stream_deadlines: Mutex::default(),
            next_stream: AtomicU64::new(0),
            epoch: Instant::now(),
            read_waker: AtomicWaker::new(),
            http2: AtomicBool::new(false),
        }
    }
}

impl Activity {
    /// A request starts; the guard ends it when dropped (with the response body).
    pub(crate) fn request_started(self: &Arc<Self>) -> RequestGuard {
        if !self.http2.load(Ordering::Acquire) {
            self.respond_by.store(0, Ordering::Release);
        }
        self.active.fetch_add(1, Ordering::AcqRel);
        RequestGuard {
            activity: Arc::clone(self),
            stream_deadline: None,
        }
    }

    fn encode(&self, deadline: Instant) -> u64 {
        u64::try_from(deadline.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// HTTP/2: adds or removes a stream's deadline and publishes the earliest.
    fn stream_deadline(&self, add: Option<(u64, u64)>, remove: Option<(u64, u64)>) {
        let mut set = self
            .stream_deadlines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = remove {
            set.remove(&k);
        }
        if let Some(k) = add {
            set.insert(k);
        }
        let earliest = set.first().map_or(0, |&(d, _)| d);
        self.respond_by.store(earliest, Ordering::Release);
    }

    /// The deadline of the response being sent, if it has one.
    fn respond_by(&self) -> Option<Instant> {
        if self.upgraded.load(Ordering::Acquire) {
            return None;
        }
        match self.respond_by.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.epoch + Duration::from_nanos(n - 1)),
        }
    }

    /// The connection speaks HTTP/2: bytes read while idle may be control frames.
    pub(crate) fn set_http2(&self) {
        if !self.http2.load(Ordering::Relaxed) {
            self.http2.store(true, Ordering::Release);
        }
    }
}

/// Ends its request when dropped.
#[derive(Debug)]
pub(crate) struct RequestGuard {
    activity: Arc<Activity>,
    /// HTTP/2: this stream's entry in `stream_deadlines`.
    stream_deadline: Option<(u64, u64)>,
}

impl RequestGuard {
    /// The response switches protocols: the connection leaves the HTTP read deadlines.
    pub(crate) fn upgraded(&self) {
        self.activity.upgraded.store(true, Ordering::Release);
    }

    /// The response (not a long-running one) must be written out by `deadline`.
    pub(crate) fn respond_by(&mut self, deadline: Instant) {
        let a = &self.activity;
        let encoded = a.encode(deadline);
        if a.http2.load(Ordering::Acquire) {
            let key = (encoded, a.next_stream.fetch_add(1, Ordering::Relaxed));
            a.stream_deadline(Some(key), self.stream_deadline.take());
            self.stream_deadline = Some(key);
            // The read side's timer enforces it while no write is pending.
            a.read_waker.wake();
        } else {
            a.respond_by.store(encoded, Ordering::Release);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let a = &self.activity;
        if let Some(key) = self.stream_deadline.take() {
            a.stream_deadline(None, Some(key));
        }
        // `finished` first: whoever sees `active` drop also sees the new idle period.
        a.finished.fetch_add(1, Ordering::AcqRel);
        a.active.fetch_sub(1, Ordering::AcqRel);
        // A read parked without a deadline (the connection was busy) must now get one.
        a.read_waker.wake();
    }
}

/// Largest piece an HTTP/2 response with a deadline is handed to hyper in. Hyper hands a
/// piece to h2 only once the stream has send capacity, and h2 queues the whole piece: in
/// pieces, the body (and its deadline) lives until all but the last piece has left, so a
/// client that grants no window holds at most about this much in h2's queue once the
/// deadline is gone, and the rest of the response only until its deadline.
pub(crate) const HTTP2_RESPONSE_PIECE: usize = 64 * 1024;

/// A response body that ends its request when it ends or is dropped.
pub(crate) struct TrackedBody {
    inner: Body,
    guard: Option<RequestGuard>,
    /// HTTP/2 with a deadline: what is left of a data frame cut into pieces.
    rest: bytes::Bytes,
}

impl TrackedBody {
    pub(crate) fn new(inner: Body, guard: RequestGuard) -> Self {
        Self {
            inner,
            guard: Some(guard),
            rest: bytes::Bytes::new(),
        }
    }

    fn in_pieces(&self) -> bool {
        self.guard
            .as_ref()
            .is_some_and(|g| g.stream_deadline.is_some())
    }
}

impl hyper::body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if !self.rest.is_empty() {
            let n = self.rest.len().min(HTTP2_RESPONSE_PIECE);
            let piece = self.rest.split_to(n);
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(None | Some(Err(_))) => {
                // The last frame is out: the connection may go idle before hyper drops us.
                self.guard = None;
                polled
            }
            Poll::Ready(Some(Ok(frame))) if self.in_pieces() => match frame.into_data() {
                Ok(mut data) if data.len() > HTTP2_RESPONSE_PIECE => {
                    self.rest = data.split_off(HTTP2_RESPONSE_PIECE);
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Ok(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Before the first request's head is complete, since the connection's start.
    First(Instant),
    /// Between requests, nothing received yet, since the last response ended.
    Idle(Instant),
    /// Between requests, receiving a head whose first byte came at this instant.
    Head(Instant),
    /// A request in progress.
    Busy,
}

/// An I/O stream with the deadlines of [`Timeouts`], following [`Activity`].
pub(crate) struct TimedIo<S> {
    inner: S,
    activity: Arc<Activity>,
    timeouts: Timeouts,
    phase: Phase,
    seen_finished: u64,
    read_timer: Option<Pin<Box<Sleep>>>,
    read_deadline: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
    /// When the pending write must have made progress by.
    write_deadline: Option<Instant>,
    metrics: ConnMetrics,
}

impl<S> TimedIo<S> {
    pub(crate) fn new(
        inner: S,
        activity: Arc<Activity>,
        timeouts: Timeouts,
        metrics: ConnMetrics,
    ) -> Self {
        Self {
            inner,
            activity,
            timeouts,
            phase: Phase::First(Instant::now()),
            seen_finished: 0,
            read_timer: None,
            read_deadline: None,
            write_timer: None,
            write_deadline: None,
            metrics,
        }
    }

    /// Brings the phase up to date with the service's view.
    fn refresh(&mut self) {
        if self.activity.active.load(Ordering::Acquire) > 0 {
            self.phase = Phase::Busy;
            return;
        }
        let finished = self.activity.finished.load(Ordering::Acquire);
        if finished != self.seen_finished || matches!(self.phase, Phase::Busy) {
            self.seen_finished = finished;
            self.phase = Phase::Idle(Instant::now());
        }
    }

    /// The deadline of a read that has to wait, and what it is called in metrics.
    fn read_deadline(&mut self) -> Option<(Instant, &'static str)> {
        if self.activity.upgraded.load(Ordering::Acquire) {
            return None;
        }
        self.refresh();
        let phase = match self.phase {
            Phase::First(since) | Phase::Head(since) => {
                Some((since + self.timeouts.read_header, "read_header"))
            }
            Phase::Idle(since) => Some((since + self.timeouts.idle, "idle")),
            Phase::Busy => None,
        };
        // HTTP/2: a stream's response deadline, which no pending write may be there to see.
        let response = self
            .activity
            .http2
            .load(Ordering::Acquire)
            .then(|| self.activity.respond_by())
            .flatten()
            .map(|by| (by, "response"));
        match (phase, response) {
            (Some(p), Some(r)) => Some(if r.0 < p.0 { r } else { p }),
            (p, r) => p.or(r),
        }
    }

    fn on_bytes_read(&mut self) {
        if self.activity.upgraded.load(Ordering::Acquire) {
            return;
        }
        self.refresh();
        if let Phase::Idle(_) = self.phase
            && !self.activity.http2.load(Ordering::Acquire)
        {
            self.phase = Phase::Head(Instant::now());
        }
    }

    /// A pending write: fails once no write has made progress for the stall timeout, or
    /// at the response's deadline.
    fn write_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let stall = *self
            .write_deadline
            .get_or_insert_with(|| Instant::now() + self.timeouts.write_stall);
        let (deadline, phase) = match self.activity.respond_by() {
            Some(by) if by < stall => (by, "response"),
            _ => (stall, "write_stall"),
        };
        if expired(&mut self.write_timer, deadline, cx) {
            self.metrics.timed_out(phase);
            return Poll::Ready(Err(timed_out(phase)));
        }
        Poll::Pending
    }

    /// An error when the response being sent is past its deadline.
    fn overdue(&self) -> Option<std::io::Error> {
        let by = self.activity.respond_by()?;
        (Instant::now() >= by).then(|| {
            self.metrics.timed_out("response");
            timed_out("response")
        })
    }

    fn write_done<T>(
        &mut self,
        r: Poll<std::io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Pending => self.write_pending(cx),
            ready => {
                self.write_deadline = None;
                ready
            }
        }
    }
}

fn timed_out(phase: &'static str) -> std::io::Error {
    let what = match phase {
        "response" => "the response was not sent within its deadline",
        _ => "the peer stopped reading",
    };
    std::io::Error::new(std::io::ErrorKind::TimedOut, what)
}

/// Arms `timer` for `deadline` (reusing its allocation) and polls it.
fn expired(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
    if t.deadline() != deadline {
        t.as_mut().reset(deadline);
    }
    t.as_mut().poll(cx).is_ready()
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.on_bytes_read();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // Registered before the phase is read, so that a request ending after the
                // check still wakes this read.
                this.activity.read_waker.register(cx.waker());
                let Some((deadline, what)) = this.read_deadline() else {
                    return Poll::Pending;
                };
                this.read_deadline = Some(deadline);
                if expired(&mut this.read_timer, deadline, cx) {
                    this.metrics.timed_out(what);
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        what,
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.overdue() {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write_done(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.overdue() {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write_done(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        // No deadline check before a flush: hyper flushes an idle connection too (nothing to
        // write), and a pending flush is held to the deadline by `write_pending`.
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r
            && this.activity.active.load(Ordering::Acquire) == 0
            && !this.activity.http2.load(Ordering::Acquire)
        {
            // Everything hyper queued is out (it flushes the stream only with its own
            // buffer empty) and the response has ended: its deadline is over.
            this.activity.respond_by.store(0, Ordering::Release);
        }
        this.write_done(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.write_done(r, cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    fn timeouts() -> Timeouts {
        Timeouts {
            read_header: Duration::from_secs(30),
            idle: Duration::from_secs(90),
            write_stall: Duration::from_secs(60),
        }
    }

    fn metrics() -> ConnMetrics {
        ConnMetrics::register(&mut prometheus_client::registry::Registry::default())
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_head_must_arrive_within_the_header_timeout() {
        let (client, server) = duplex(64);
        let mut io = TimedIo::new(server, Arc::default(), timeouts(), metrics());
        let start = Instant::now();
        let mut client = client;
        // Bytes that keep coming do not extend the first request's deadline.
        tokio::spawn(async move {
            loop {
                if client.write_all(b"G").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut buf = [0u8; 16];
        let err = loop {
            match io.read(&mut buf).await {
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_then_header_timeout_and_none_while_busy_or_upgraded() {
        let (mut client, server) = duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let mut buf = [0u8; 16];
        // A request is in progress: no read deadline, however long.
        let guard = activity.request_started();
        let waited = tokio::time::timeout(Duration::from_secs(3600), io.read(&mut buf)).await;
        assert!(waited.is_err(), "still waiting after an hour");
        // Its response ends: idle, 90 s.
        drop(guard);
        let start = Instant::now();
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(
            (err.kind(), start.elapsed()),
            (std::io::ErrorKind::TimedOut, Duration::from_secs(90))
        );

        // A new idle period; the next head starts after 50 s: 30 s from its first byte.
        let (mut client2, server2) = duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server2, Arc::clone(&activity), timeouts(), metrics());
        drop(activity.request_started());
        let start = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(50)).await;
            client2.write_all(b"GET / HT").await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(client2);
        });
        assert_eq!(io.read(&mut buf).await.unwrap(), 8);
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(80));

        // Upgraded: no read deadline at all.
        let (_client3, server3) = duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server3, Arc::clone(&activity), timeouts(), metrics());
        let g = activity.request_started();
        g.upgraded();
        drop(g);
        let waited = tokio::time::timeout(Duration::from_secs(3600), io.read(&mut buf)).await;
        assert!(waited.is_err());
        client.shutdown().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn on_http2_bytes_while_idle_keep_the_idle_deadline() {
        let (mut client, server) = duplex(64);
        let activity = Arc::new(Activity::default());
        activity.set_http2();
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        // A stream ends: idle from now, 90 s.
        drop(activity.request_started());
        let start = Instant::now();
        tokio::spawn(async move {
            // A PING at 50 s (17 bytes), then silence.
            tokio::time::sleep(Duration::from_secs(50)).await;
            client.write_all(&[0u8; 17]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(client);
        });
        let mut buf = [0u8; 64];
        assert_eq!(io.read(&mut buf).await.unwrap(), 17);
        let err = io.read(&mut buf).await.unwrap_err();
        // Not 50 + 30 (a head deadline from the PING): the idle deadline of 90 s.
        assert_eq!(
            (err.kind(), start.elapsed()),
            (std::io::ErrorKind::TimedOut, Duration::from_secs(90))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_without_progress_fails_after_the_stall_timeout() {
        let (mut client, server) = duplex(16);
        let mut io = TimedIo::new(server, Arc::default(), timeouts(), metrics());
        // Progress resets the clock: the peer reads 16 bytes every 50 s.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                client.read_exact(&mut buf).await.unwrap();
            }
            // Then it stops reading, keeping the pipe open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(client);
        });
        let start = Instant::now();
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        // Three reads at 50, 100, 150 s; then 60 s without progress.
        assert_eq!(start.elapsed(), Duration::from_secs(210));
        reader.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_is_written_out_by_its_deadline_or_fails_and_then_the_deadline_is_over() {
        // The peer reads 16 bytes every 10 s: always progress, never a stall.
        let (mut client, server) = duplex(16);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let mut guard = activity.request_started();
        let start = Instant::now();
        guard.respond_by(start + Duration::from_secs(100));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                if client.read(&mut buf).await.unwrap_or(0) == 0 {
                    break;
                }
            }
        });
        let err = io.write_all(&[0u8; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(100));
        reader.abort();
        drop(guard);

        // A response written out in time: once it has ended and is flushed, its deadline
        // no longer applies to the connection (an idle keep-alive connection writes again
        // an hour later).
        let (mut client, server) = duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let mut guard = activity.request_started();
        guard.respond_by(Instant::now() + Duration::from_secs(10));
        io.write_all(b"answer").await.unwrap();
        drop(guard);
        io.flush().await.unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        io.write_all(b" again").await.unwrap();
        io.flush().await.unwrap();
        let mut buf = [0u8; 12];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"answer again");

        // An upgraded connection has no response deadline.
        let (_client, server) = duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let mut guard = activity.request_started();
        guard.respond_by(Instant::now() + Duration::from_secs(10));
        guard.upgraded();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        io.write_all(b"still here").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_parked_while_busy_is_woken_to_take_up_the_idle_deadline() {
        struct Flag(AtomicBool);
        impl futures::task::ArcWake for Flag {
            fn wake_by_ref(arc: &Arc<Self>) {
                arc.0.store(true, Ordering::SeqCst);
            }
        }
        let (_client, server) = duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let guard = activity.request_started();
        let mut buf = [0u8; 16];
        // hyper polls the read while the response is still going out: no deadline yet.
        let woken = Arc::new(Flag(AtomicBool::new(false)));
        let waker = futures::task::waker(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_pending());
        // The response ends while that read is parked: hyper polls it again only if woken.
        let start = Instant::now();
        drop(guard);
        assert!(
            woken.0.load(Ordering::SeqCst),
            "the parked read was not woken"
        );
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(
            (err.kind(), start.elapsed()),
            (std::io::ErrorKind::TimedOut, Duration::from_secs(90))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_left_behind_never_fails_an_idle_connection() {
        let (mut client, server) = duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, Arc::clone(&activity), timeouts(), metrics());
        let mut guard = activity.request_started();
        guard.respond_by(Instant::now() + Duration::from_secs(10));
        // The last flush comes while the response has not ended yet, so the deadline stays.
        io.write_all(b"answer").await.unwrap();
        io.flush().await.unwrap();
        drop(guard);
        // An hour later hyper flushes the idle connection (nothing to write): no error.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        io.flush().await.unwrap();
        // The next request starts: its response is written.
        let _next = activity.request_started();
        io.write_all(b" again").await.unwrap();
        io.flush().await.unwrap();
        let mut buf = [0u8; 12];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"answer again");
    }
}
