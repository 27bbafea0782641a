//! [`Recorder`]: Kubernetes Events about the objects a controller manages (client-go's
//! `record.EventRecorder`, kube-runtime's `events::Recorder`), posted as core/v1 `Event`s
//! (feature `k8s-openapi`), about k8s-openapi's types and kube-rs's derived custom resources
//! (feature `kube`).
//!
//! Invariants:
//! - **recording never blocks the caller** (client-go's broadcaster): [`Recorder::publish`]
//!   puts the event on a queue of at most [`MAX_QUEUED`] and returns; one background task per
//!   recorder writes them in order. An event that finds the queue full is dropped and
//!   counted ([`RecorderStats::dropped`]), as client-go drops when its channel is full; a
//!   reconcile is never held by an unreachable server;
//! - an event is named `<object name>.<hex nanoseconds>` (client-go's legacy recorder) in the
//!   object's namespace (`default` for a cluster-scoped object, as client-go);
//! - what an event becomes is client-go's `EventCorrelator` (`events/correlator.rs`): the
//!   same event again raises the `count` and `lastTimestamp` of the Event written for it;
//!   events differing only in their message are combined after 10 distinct ones in 10
//!   minutes into one `(combined from similar events)` Event; a spam filter lets 25 writes
//!   about one object through, then one per 5 minutes ([`RecorderStats::filtered`]);
//! - memory is bounded: the queue (each event's note cut to 1 KiB when published), and
//!   each cache of the correlator at [`MAX_SERIES`] entries (the least recently used
//!   forgotten first);
//! - a write that fails because the server could not be reached (a refused, reset or cut
//!   connection: [`Error::Connect`], [`Error::Http`]) is tried again, at most [`MAX_TRIES`]
//!   times in all with a doubling wait (100 ms up to 2 s), as client-go's broadcaster retries
//!   such failures (`maxTriesPerEvent` = 12); a retried create answered 409 AlreadyExists was
//!   the earlier try landing, and counts as recorded. A refusal by the server (any status
//!   code) is not retried (client-go's "will not retry!"). Either way the failure is logged
//!   and counted ([`RecorderStats::failed`]); events are best-effort.

mod correlator;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use correlator::{Correlator, Decision, Written};
pub use correlator::{MAX_SIMILAR, SIMILAR_WINDOW, SPAM_BURST, SPAM_INTERVAL};

use crate::{
    ApiResource, Error, HasMetadata, HttpClient, Patch, PatchParams, ResourceType, Result,
};

/// How many entries each cache of a recorder's correlator keeps (event series, groups of
/// similar events, spam-filter buckets; client-go's LRUs of 4096).
pub const MAX_SERIES: usize = 4096;

/// How many events wait to be written at most; more are dropped (client-go's
/// `maxQueuedEvents`).
pub const MAX_QUEUED: usize = 1000;

/// How many times one write of an event is tried when the server cannot be reached
/// (client-go's `maxTriesPerEvent`).
pub const MAX_TRIES: u32 = 12;

/// The wait before the first retry; it doubles up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(2);

/// Whether `e` means the server was not reached or its answer lost (worth another try),
/// rather than a refusal (client-go's `recordEvent`: only non-`StatusError`s are retried).
fn unreached(e: &Error) -> bool {
    matches!(e, Error::Connect(_) | Error::Http(_))
}

/// Runs `write` until it succeeds, fails with something other than [`unreached`], or has
/// been tried [`MAX_TRIES`] times; `write` gets the number of the try (1, 2, …).
async fn with_retries<T, F, Fut>(mut write: F) -> Result<T>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut wait = FIRST_RETRY_WAIT;
    let mut tries = 1;
    loop {
        match write(tries).await {
            Err(e) if unreached(&e) && tries < MAX_TRIES => {
                tracing::debug!(error = %e, tries, "event not written, trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RETRY_WAIT);
                tries += 1;
            }
            r => return r,
        }
    }
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Things going as they should.
    Normal,
    /// Something the user should look at.
    Warning,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventData {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// A short CamelCase machine-readable reason (`Created`, `ReconcileFailed`).
    pub reason: String,
    /// What was done or failed (`Create`, `Reconcile`).
    pub action: String,
    /// A human-readable message (at most 1 KiB is kept, as kube-apiserver's limit).
    pub note: Option<String>,
}

/// The reference to `object` an event is about (apiVersion, kind, namespace, name, uid,
/// resourceVersion).
pub fn object_reference<K>(object: &K) -> ObjectReference
where
    K: ResourceType + HasMetadata<Metadata = ObjectMeta>,
{
    let meta = HasMetadata::metadata(object);
    ObjectReference {
        api_version: Some(ApiResource::of::<K>().api_version()),
        kind: Some(K::kind().into_owned()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

/// What a recorder did with the events published to it (each count since it was made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Events accepted by [`Recorder::publish`] onto the queue.
    pub queued: u64,
    /// Events written (an Event created, or the count of one raised).
    pub written: u64,
    /// Events dropped because the queue was full.
    pub dropped: u64,
    /// Events held back by the spam filter.
    pub filtered: u64,
    /// Events whose write failed (refused, or the server unreachable for every try).
    pub failed: u64,
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    filtered: AtomicU64,
    failed: AtomicU64,
}

/// One event waiting to be written.
struct Queued {
    regarding: ObjectReference,
    event: EventData,
    /// When it was published (RFC 3339 seconds).
    at: String,
}

enum Message {
    Event(Box<Queued>),
    /// Answered once everything queued before it was handled.
    Flush(oneshot::Sender<()>),
}

/// What the background writer needs; shared with the handles.
struct Writer {
    client: HttpClient,
    controller: String,
    instance: String,
    correlator: Mutex<Correlator>,
    counters: Counters,
}

/// Posts Events as one controller instance (`reportingController` / `source.component`,
/// `reportingInstance` / `source.host`). Cheap to clone (one queue, one background writer
/// and one memory of series for all clones). The writer task starts on the first
/// [`publish`](Self::publish) (on the current tokio runtime) and stops when the last clone
/// is dropped, like the process it belongs to: call [`flush`](Self::flush) before a graceful
/// stop to write what is still queued.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use listwatch_client::events::{EventData, EventType, Recorder, object_reference};
/// # async fn demo(client: listwatch_client::HttpClient, cm: ConfigMap) -> listwatch_client::Result<()> {
/// let recorder = Recorder::new(client, "example.com/my-operator", "my-operator-0");
/// recorder
///     .publish(
///         &object_reference(&cm),
///         &EventData {
///             type_: EventType::Normal,
///             reason: "Synced".into(),
///             action: "Reconcile".into(),
///             note: Some("children are up to date".into()),
///         },
///     )
///     .await?;
/// // At shutdown: give the queue a few seconds to be written.
/// recorder.flush(std::time::Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorder {
    writer: Arc<Writer>,
    queue: Arc<Queue>,
}

/// The queue to the writer task and the task; `None` until the first publish. Dropped with
/// the last [`Recorder`] clone, it stops the task (events not written yet are lost, as
/// when the process ends: [`Recorder::flush`] first to keep them).
#[derive(Default)]
struct Queue(Mutex<Option<(mpsc::Sender<Message>, tokio::task::AbortHandle)>>);

impl Queue {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<(mpsc::Sender<Message>, tokio::task::AbortHandle)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Some((_, task)) = self.lock().take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("controller", &self.writer.controller)
            .field("instance", &self.writer.instance)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder posting through `client` as `controller` (e.g. `example.com/my-operator`)
    /// instance `instance` (e.g. the pod name).
    pub fn new(
        client: HttpClient,
        controller: impl Into<String>,
        instance: impl Into<String>,
    ) -> Self {
        Self {
            writer: Arc::new(Writer {
                client,
                controller: controller.into(),
                instance: instance.into(),
                correlator: Mutex::default(),
                counters: Counters::default(),
            }),
            queue: Arc::default(),
        }
    }

    /// What this recorder did with its events so far.
    pub fn stats(&self) -> RecorderStats {
        let c = &self.writer.counters;
        RecorderStats {
            queued: c.queued.load(Ordering::Relaxed),
            written: c.written.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
        }
    }

    /// The sender of the writer task's queue, the task started when there is none (or it
    /// is gone: a runtime shut down under it).
    fn sender(&self) -> mpsc::Sender<Message> {
        let mut queue = self.queue.lock();
        if let Some((tx, _)) = queue.as_ref().filter(|(tx, _)| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(MAX_QUEUED);
        let task = tokio::spawn(write_queue(Arc::clone(&self.writer), rx)).abort_handle();
        *queue = Some((tx.clone(), task));
        tx
    }

    /// Records `event` about `regarding` without waiting: it is queued for the background
    /// writer (a new Event, the count of the same one raised, or combined with similar
    /// ones; see the module doc). Returns at once; a full queue drops the event (counted in
    /// [`stats`](Self::stats)). Never fails: write failures are logged and counted.
    pub async fn publish(&self, regarding: &ObjectReference, event: &EventData) -> Result<()> {
        let now = crate::leaderelection::micro_time_now();
        // RFC 3339 seconds for the `Time` fields.
        let at = now.get(..19).map_or(now.clone(), |s| format!("{s}Z"));
        // The note cut to its 1 KiB now: the queue and the correlator's caches (whose keys
        // hold it) never hold more.
        let event = EventData {
            note: truncated(event.note.as_deref()),
            ..event.clone()
        };
        let message = Message::Event(Box::new(Queued {
            regarding: regarding.clone(),
            event,
            at,
        }));
        let counters = &self.writer.counters;
        match self.sender().try_send(message) {
            Ok(()) => {
                counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                let dropped = counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(dropped, "event recorder: queue full, event dropped");
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // The writer task was just started: it cannot be closed yet.
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Waits, at most `deadline`, until every event published before the call has been
    /// handled (written, filtered or failed); returns whether they were. For a graceful
    /// shutdown and for tests.
    pub async fn flush(&self, deadline: Duration) -> bool {
        let Some(tx) = self.queue.lock().as_ref().map(|(tx, _)| tx.clone()) else {
            return true;
        };
        let (done, handled) = oneshot::channel();
        tokio::time::timeout(deadline, async move {
            tx.send(Message::Flush(done)).await.is_ok() && handled.await.is_ok()
        })
        .await
        .unwrap_or(false)
    }
}

/// The writer task: handles the queue in order until every sender is gone.
async fn write_queue(writer: Arc<Writer>, mut rx: mpsc::Receiver<Message>) {
    while let Some(message) = rx.recv().await {
        match message {
            Message::Flush(done) => {
                done.send(()).ok();
            }
            Message::Event(queued) => {
                let counters = &writer.counters;
                match writer.record(*queued).await {
                    Ok(true) => counters.written.fetch_add(1, Ordering::Relaxed),
                    Ok(false) => counters.filtered.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::warn!(error = %e, "event not recorded");
                        counters.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }
    }
}

impl Writer {
    fn correlator(&self) -> std::sync::MutexGuard<'_, Correlator> {
        self.correlator
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes one event as the correlator decides; `Ok(false)` when the spam filter held
    /// it back.
    async fn record(&self, queued: Queued) -> Result<bool> {
        let Queued {
            regarding,
            event,
            at,
        } = queued;
        let object = regarding.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}/{}",
                regarding.kind.as_deref().unwrap_or(""),
                regarding.namespace.as_deref().unwrap_or(""),
                regarding.name.as_deref().unwrap_or("")
            )
        });
        let decision = self.correlator().decide(&object, &event);
        let (series, message) = match decision {
            Decision::Filtered => return Ok(false),
            Decision::Update {
                series,
                written,
                message,
            } => {
                let path = format!(
                    "/api/v1/namespaces/{}/events/{}",
                    written.namespace, written.name
                );
                let count = written.count.saturating_add(1);
                let patch = Patch::Merge(
                    json!({"count": count, "lastTimestamp": at, "message": truncated(message.as_deref())}),
                );
                let params = PatchParams::default();
                match with_retries(|_| self.client.patch(&path, &patch, &params)).await {
                    Ok(_) => {
                        self.correlator()
                            .written(series, Written { count, ..written });
                        return Ok(true);
                    }
                    // Gone (events expire): a new one below.
                    Err(e) if e.code() == Some(404) => (series, message),
                    Err(e) => return Err(e),
                }
            }
            Decision::Create { series, message } => (series, message),
        };
        let namespace = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or("event"),
            nanos.max(0)
        );
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": regarding,
            "type": event.type_.as_str(),
            "reason": event.reason,
            "action": event.action,
            "message": truncated(message.as_deref()),
            "count": 1,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "source": {"component": self.controller, "host": self.instance},
            "reportingComponent": self.controller,
            "reportingInstance": self.instance,
        });
        let collection = format!("/api/v1/namespaces/{namespace}/events");
        with_retries(|tries| {
            let created = self.client.create(&collection, &body);
            async move {
                match created.await {
                    // An earlier try was stored and only its answer lost.
                    Err(e) if tries > 1 && e.code() == Some(409) => Ok(()),
                    r => r.map(|_| ()),
                }
            }
        })
        .await?;
        self.correlator().written(
            series,
            Written {
                namespace,
                name,
                count: 1,
            },
        );
        Ok(true)
    }
}

/// At most 1 KiB of `note` (kube-apiserver's limit), cut at a character boundary.
fn truncated(note: Option<&str>) -> Option<String> {
    note.map(|n| {
        n.chars()
            .scan(0usize, |len, c| {
                *len += c.len_utf8();
                (*len <= 1024).then_some(c)
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that closes its first `drop_first` connections after reading the request
    /// (the answer is lost) and answers `status` on the others; counts connections.
    async fn flaky_server(drop_first: u32, status: &'static str) -> (String, Arc<AtomicU32>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicU32::new(0));
        let s = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = s.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0u8; 64 * 1024];
                let _ = conn.read(&mut buf).await;
                if n < drop_first {
                    continue;
                }
                let body = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e"}}"#;
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        (url, seen)
    }

    fn event() -> (ObjectReference, EventData) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some("ns".into()),
            name: Some("cm".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        };
        let data = EventData {
            type_: EventType::Normal,
            reason: "Synced".into(),
            action: "Reconcile".into(),
            note: None,
        };
        (regarding, data)
    }

    /// Regression: one cut connection lost the event for good (a reconcile that changed
    /// nothing more never published it again), where client-go retries until the server is
    /// back. The write is tried again, and the retried create's 409 counts as written.
    #[tokio::test]
    async fn an_event_whose_connection_is_cut_is_written_on_a_later_try() {
        let (url, seen) = flaky_server(2, "201 Created").await;
        let client = HttpClient::new(crate::HttpConfig::new(url).unwrap()).unwrap();
        let recorder = Recorder::new(client, "example.com/test", "test-0");
        let (regarding, data) = event();
        recorder.publish(&regarding, &data).await.unwrap();
        assert!(recorder.flush(Duration::from_secs(60)).await);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "two lost tries, one answered"
        );
        assert_eq!(recorder.stats().written, 1);

        // The answer of a stored create lost, the retry told it exists: recorded.
        let (url, seen) = flaky_server(1, "409 Conflict").await;
        let client = HttpClient::new(crate::HttpConfig::new(url).unwrap()).unwrap();
        let recorder = Recorder::new(client, "example.com/test", "test-0");
        recorder.publish(&regarding, &data).await.unwrap();
        assert!(recorder.flush(Duration::from_secs(60)).await);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert_eq!(recorder.stats().written, 1);
    }

    /// A refusal is not retried (client-go's "will not retry!").
    #[tokio::test]
    async fn a_refused_event_is_not_retried() {
        let (url, seen) = flaky_server(0, "422 Unprocessable Entity").await;
        let client = HttpClient::new(crate::HttpConfig::new(url).unwrap()).unwrap();
        let recorder = Recorder::new(client, "example.com/test", "test-0");
        let (regarding, data) = event();
        recorder.publish(&regarding, &data).await.unwrap();
        assert!(recorder.flush(Duration::from_secs(60)).await);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert_eq!(
            recorder.stats(),
            RecorderStats {
                queued: 1,
                failed: 1,
                ..RecorderStats::default()
            }
        );
    }
}
