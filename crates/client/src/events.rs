//! [`Recorder`]: Kubernetes Events about the objects a controller manages (client-go's
//! `record.EventRecorder`, kube-runtime's `events::Recorder`), posted as core/v1 `Event`s
//! (feature `k8s-openapi`).
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
//! - a failed write is returned to the caller (events are best-effort; callers usually log
//!   and go on).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::{HttpClient, Patch, PatchParams, Result};

/// How many event series a recorder remembers for de-duplication.
pub const MAX_SERIES: usize = 1024;

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
    K: k8s_openapi::Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = Metadata::metadata(object);
    ObjectReference {
        api_version: Some(K::API_VERSION.to_owned()),
        kind: Some(K::KIND.to_owned()),
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
            let patch = json!({"count": count + 1, "lastTimestamp": seconds});
            match self
                .client
                .patch(&path, &Patch::Merge(patch), &PatchParams::default())
                .await
            {
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
        self.client
            .create(&format!("/api/v1/namespaces/{namespace}/events"), &body)
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
