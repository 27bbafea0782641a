//! [`Recorder`]: Kubernetes Events about the objects a controller manages (client-go's
//! `record.EventRecorder`, kube-runtime's `events::Recorder`), posted as core/v1 `Event`s
//! (feature `k8s-openapi`), about k8s-openapi's types and kube-rs's derived custom resources
//! (feature `kube`).
//!
//! Invariants:
//! - an event is named `<object name>.<hex nanoseconds>` (client-go's legacy recorder) in the
//!   object's namespace (`default` for a cluster-scoped object, as client-go);
//! - the same event again (same object uid, type, reason, action and note) is not a new
//!   object: the recorder patches the `count` and `lastTimestamp` of the one it created
//!   (client-go's `EventCorrelator` series), so a reconcile failing in a loop writes one
//!   Event, not thousands;
//! - the recorder remembers at most [`MAX_SERIES`] series (the oldest is forgotten first):
//!   memory is bounded whatever the number of objects;
//! - a write that fails because the server could not be reached (a refused, reset or cut
//!   connection: [`Error::Connect`], [`Error::Http`]) is tried again, at most [`MAX_TRIES`]
//!   times in all with a doubling wait (100 ms up to 2 s), as client-go's broadcaster retries
//!   such failures (`maxTriesPerEvent` = 12); a retried create answered 409 AlreadyExists was
//!   the earlier try landing, and counts as recorded. A refusal by the server (any status
//!   code) is not retried (client-go's "will not retry!"): it is returned to the caller at
//!   once, as is the last transport failure (events are best-effort; callers usually log and
//!   go on).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::{
    ApiResource, Error, HasMetadata, HttpClient, Patch, PatchParams, ResourceType, Result,
};

/// How many event series a recorder remembers for de-duplication.
pub const MAX_SERIES: usize = 1024;

/// How many times one write of an event is tried when the server cannot be reached
/// (client-go's `maxTriesPerEvent`).
pub const MAX_TRIES: u32 = 12;

/// The wait before the first retry; it doubles up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest wait between two tries.
const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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
    fn as_str(self) -> &'static str {
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

struct Series {
    /// Namespace and name of the Event created for it.
    namespace: String,
    name: String,
    count: i32,
}

#[derive(Default)]
struct Memory {
    series: HashMap<(String, EventData), Series>,
    order: VecDeque<(String, EventData)>,
}

/// Posts Events as one controller instance (`reportingController` / `source.component`,
/// `reportingInstance` / `source.host`). Cheap to clone (shared memory of series).
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
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorder {
    client: HttpClient,
    controller: String,
    instance: String,
    memory: Arc<Mutex<Memory>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
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
            client,
            controller: controller.into(),
            instance: instance.into(),
            memory: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `event` about `regarding`: a new Event, or the count of the same one raised.
    pub async fn publish(&self, regarding: &ObjectReference, event: &EventData) -> Result<()> {
        let now = crate::leaderelection::micro_time_now();
        // RFC 3339 seconds for the `Time` fields.
        let seconds = now.get(..19).map_or(now.clone(), |s| format!("{s}Z"));
        let identity = regarding
            .uid
            .clone()
            .or_else(|| {
                Some(format!(
                    "{}/{}/{}",
                    regarding.kind.as_deref().unwrap_or(""),
                    regarding.namespace.as_deref().unwrap_or(""),
                    regarding.name.as_deref().unwrap_or("")
                ))
            })
            .unwrap_or_default();
        let key = (identity, event.clone());
        let known = self
            .lock()
            .series
            .get(&key)
            .map(|s| (s.namespace.clone(), s.name.clone(), s.count));
        if let Some((namespace, name, count)) = known {
            let path = format!("/api/v1/namespaces/{namespace}/events/{name}");
            let patch = Patch::Merge(json!({"count": count + 1, "lastTimestamp": seconds}));
            let params = PatchParams::default();
            let patched = with_retries(|_| self.client.patch(&path, &patch, &params)).await;
            match patched {
                Ok(_) => {
                    if let Some(s) = self.lock().series.get_mut(&key) {
                        s.count = count + 1;
                    }
                    return Ok(());
                }
                // Gone (events expire): a new one below.
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
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
        let note: Option<String> = event.note.as_deref().map(|n| {
            n.chars()
                .scan(0usize, |len, c| {
                    *len += c.len_utf8();
                    (*len <= 1024).then_some(c)
                })
                .collect()
        });
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": regarding,
            "type": event.type_.as_str(),
            "reason": event.reason,
            "action": event.action,
            "message": note,
            "count": 1,
            "firstTimestamp": seconds,
            "lastTimestamp": seconds,
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
        let mut m = self.lock();
        if m.series.len() >= MAX_SERIES
            && let Some(old) = m.order.pop_front()
        {
            m.series.remove(&old);
        }
        m.order.push_back(key.clone());
        m.series.insert(
            key,
            Series {
                namespace,
                name,
                count: 1,
            },
        );
        Ok(())
    }
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
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "two lost tries, one answered"
        );

        // The answer of a stored create lost, the retry told it exists: recorded.
        let (url, seen) = flaky_server(1, "409 Conflict").await;
        let client = HttpClient::new(crate::HttpConfig::new(url).unwrap()).unwrap();
        let recorder = Recorder::new(client, "example.com/test", "test-0");
        recorder.publish(&regarding, &data).await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    /// A refusal is not retried (client-go's "will not retry!").
    #[tokio::test]
    async fn a_refused_event_is_not_retried() {
        let (url, seen) = flaky_server(0, "422 Unprocessable Entity").await;
        let client = HttpClient::new(crate::HttpConfig::new(url).unwrap()).unwrap();
        let recorder = Recorder::new(client, "example.com/test", "test-0");
        let (regarding, data) = event();
        let e = recorder.publish(&regarding, &data).await.unwrap_err();
        assert_eq!(e.code(), Some(422), "{e}");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }
}
