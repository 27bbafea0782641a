//! Shared pieces of the cases: pod builders, a model of the writes a case made, bounded watch
//! reads with exact event checks, and writes from inside synchronous callbacks.

use std::collections::BTreeMap;
use std::future::Future;

use futures::StreamExt;
use listwatch_api::{FieldSelector, LabelSelector, Object, SelectableFields};
use serde_json::{Map, Value, json};

use super::WAIT;
use crate::{
    Error, GetOptions, Key, ListOptions, ObjectList, Result, SelectionPredicate, Storage, Updated,
    WatchEvent, WatchStream,
};

/// The selectable fields of the test pods.
pub(crate) fn pod_fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName", "status.phase"])
}

/// A pod to build: `Pod::new("ns", "a").node("n1").obj()`.
#[derive(Debug, Clone)]
pub(crate) struct Pod {
    resource: &'static str,
    ns: Option<String>,
    name: String,
    node: Option<String>,
    phase: Option<String>,
    uid: Option<String>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    rv: Option<u64>,
}

impl Pod {
    pub(crate) fn new(ns: &str, name: &str) -> Self {
        Self {
            resource: "pods",
            ns: Some(ns.to_owned()),
            name: name.to_owned(),
            node: None,
            phase: None,
            uid: None,
            labels: Vec::new(),
            annotations: Vec::new(),
            rv: None,
        }
    }

    /// A cluster-scoped pod (no namespace).
    pub(crate) fn cluster(name: &str) -> Self {
        Self {
            ns: None,
            ..Self::new("x", name)
        }
    }

    pub(crate) fn node(mut self, node: &str) -> Self {
        self.node = Some(node.to_owned());
        self
    }

    pub(crate) fn phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.to_owned());
        self
    }

    pub(crate) fn uid(mut self, uid: &str) -> Self {
        self.uid = Some(uid.to_owned());
        self
    }

    pub(crate) fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.to_owned(), v.to_owned()));
        self
    }

    pub(crate) fn rv(mut self, rv: u64) -> Self {
        self.rv = Some(rv);
        self
    }

    pub(crate) fn key(&self) -> Key {
        Key::object(self.resource, self.ns.as_deref(), &self.name).expect("valid test key")
    }

    pub(crate) fn obj(&self) -> Object {
        let mut meta = Map::new();
        meta.insert("name".into(), self.name.clone().into());
        if let Some(ns) = &self.ns {
            meta.insert("namespace".into(), ns.clone().into());
        }
        if let Some(uid) = &self.uid {
            meta.insert("uid".into(), uid.clone().into());
        }
        if let Some(rv) = self.rv {
            meta.insert("resourceVersion".into(), rv.to_string().into());
        }
        if !self.labels.is_empty() {
            let m: Map<String, Value> = self
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            meta.insert("labels".into(), m.into());
        }
        if !self.annotations.is_empty() {
            let m: Map<String, Value> = self
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            meta.insert("annotations".into(), m.into());
        }
        let mut spec = Map::new();
        if let Some(n) = &self.node {
            spec.insert("nodeName".into(), n.clone().into());
        }
        let mut status = Map::new();
        if let Some(p) = &self.phase {
            status.insert("phase".into(), p.clone().into());
        }
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status});
        Object::from_value(v, &pod_fields()).expect("valid test pod")
    }
}

/// A collection key of pods: one namespace, or all.
pub(crate) fn pods(ns: Option<&str>) -> Key {
    Key::collection("pods", ns).expect("valid test collection")
}

/// `obj` changed by `f` on its JSON (the resource version is kept).
pub(crate) fn modify(obj: &Object, f: impl FnOnce(&mut Map<String, Value>)) -> Object {
    let mut v = obj.to_value().expect("object JSON");
    if let Value::Object(m) = &mut v {
        f(m);
    }
    Object::from_value(v, obj.selectable_fields()).expect("modified object")
}

/// `obj` with one more label.
pub(crate) fn with_label(obj: &Object, k: &str, v: &str) -> Object {
    modify(obj, |m| {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert(k.into(), v.into());
            }
        }
    })
}

/// `obj` with one more annotation.
pub(crate) fn with_annotation(obj: &Object, k: &str, v: &str) -> Object {
    modify(obj, |m| {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            let a = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Value::Object(a) = a {
                a.insert(k.into(), v.into());
            }
        }
    })
}

/// `obj` with another `metadata.uid`.
pub(crate) fn with_uid(obj: &Object, uid: &str) -> Object {
    modify(obj, |m| {
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.insert("uid".into(), uid.into());
        }
    })
}

/// A label of `obj`.
pub(crate) fn label_of<'a>(obj: &'a Object, k: &str) -> Option<&'a str> {
    obj.labels().iter().find(|(lk, _)| *lk == k).map(|(_, v)| v)
}

/// The wire JSON, for failure messages.
pub(crate) fn show(o: &Object) -> String {
    String::from_utf8_lossy(&o.to_json_bytes()).into_owned()
}

/// `ns/name@rv` of each object.
pub(crate) fn names(items: &[Object]) -> Vec<String> {
    items
        .iter()
        .map(|o| {
            format!(
                "{}/{}@{}",
                o.namespace().unwrap_or(""),
                o.name(),
                o.resource_version()
            )
        })
        .collect()
}

/// Asserts two objects are equal (content and resource version).
#[track_caller]
pub(crate) fn assert_same(got: &Object, want: &Object, ctx: &str) {
    assert!(
        got == want,
        "{ctx}:\n  got  {}\n  want {}",
        show(got),
        show(want)
    );
}

/// Asserts two lists of objects are equal, in order.
#[track_caller]
pub(crate) fn assert_items(got: &[Object], want: &[Object], ctx: &str) {
    assert!(
        got == want,
        "{ctx}:\n  got  {:?}\n  want {:?}",
        names(got),
        names(want)
    );
    for (g, w) in got.iter().zip(want) {
        assert_same(g, w, ctx);
    }
}

/// Asserts `res` failed and `pred` accepts the error.
#[track_caller]
pub(crate) fn assert_err<T: std::fmt::Debug>(
    res: Result<T>,
    pred: fn(&Error) -> bool,
    ctx: &str,
) -> Error {
    match res {
        Ok(v) => panic!("{ctx}: expected an error, got {v:?}"),
        Err(e) => {
            assert!(pred(&e), "{ctx}: unexpected error {e:?}");
            e
        }
    }
}

pub(crate) fn is_bad_request(e: &Error) -> bool {
    matches!(e, Error::BadRequest { .. })
}

pub(crate) fn is_too_large(e: &Error) -> bool {
    matches!(e, Error::TooLargeResourceVersion { .. })
}

pub(crate) fn is_not_found(e: &Error) -> bool {
    e.is_not_found()
}

pub(crate) fn is_conflict(e: &Error) -> bool {
    e.is_conflict()
}

pub(crate) fn is_expired(e: &Error) -> bool {
    e.is_expired()
}

/// Label and field selectors from text.
pub(crate) fn pred(label: &str, field: &str) -> SelectionPredicate {
    SelectionPredicate {
        label: LabelSelector::parse(label).expect("test label selector"),
        field: FieldSelector::parse(field).expect("test field selector"),
        ..SelectionPredicate::default()
    }
}

/// Creates `pod`, returning the stored object.
pub(crate) async fn create<S: Storage + ?Sized>(s: &S, pod: &Pod) -> Object {
    s.create(&pod.key(), pod.obj(), None)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", pod.key()))
}

/// Replaces the object at `pod`'s key with `pod` (creating it when absent).
pub(crate) async fn put<S: Storage + ?Sized>(s: &S, pod: &Pod) -> Object {
    let new = pod.obj();
    let mut f = |_: Option<&Object>| -> Result<Updated> { Ok(new.clone().into()) };
    s.guaranteed_update(&pod.key(), None, true, &mut f, None)
        .await
        .unwrap_or_else(|e| panic!("put {}: {e}", pod.key()))
}

/// Updates the object at `key` with `f`.
pub(crate) async fn update<S: Storage + ?Sized>(
    s: &S,
    key: &Key,
    f: impl Fn(&Object) -> Object + Send + Sync,
) -> Object {
    let mut u = |cur: Option<&Object>| -> Result<Updated> {
        cur.map(|o| f(o).into())
            .ok_or_else(|| Error::internal("object vanished"))
    };
    s.guaranteed_update(key, None, false, &mut u, None)
        .await
        .unwrap_or_else(|e| panic!("update {key}: {e}"))
}

/// Deletes `key` unconditionally.
pub(crate) async fn delete<S: Storage + ?Sized>(s: &S, key: &Key) -> Object {
    s.delete(key, None, crate::no_validation(), None)
        .await
        .unwrap_or_else(|e| panic!("delete {key}: {e}"))
}

/// Reads `key` at the latest revision.
pub(crate) async fn get<S: Storage + ?Sized>(s: &S, key: &Key) -> Option<Object> {
    s.get(
        key,
        &GetOptions {
            resource_version: None,
            ignore_not_found: true,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("get {key}: {e}"))
}

/// Lists with `opts`, panicking on error.
pub(crate) async fn list<S: Storage + ?Sized>(s: &S, key: &Key, opts: &ListOptions) -> ObjectList {
    s.list(key, opts)
        .await
        .unwrap_or_else(|e| panic!("list {key} {opts:?}: {e}"))
}

/// Writes something outside the pods (a configmap), moving the store's revision forward.
pub(crate) async fn bump<S: Storage + ?Sized>(s: &S, name: &str) -> u64 {
    let key = Key::object("configmaps", Some("bump"), name).expect("valid key");
    let obj = Object::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"namespace":"bump"}}),
        &SelectableFields::none(),
    )
    .expect("configmap");
    s.create(&key, obj, None)
        .await
        .unwrap_or_else(|e| panic!("bump {name}: {e}"))
        .resource_version()
}

/// Lists all pods not older than `rev`, so that a cache has caught up with the writes up to
/// `rev` before a read or watch that may be served from it (as upstream's suite does).
pub(crate) async fn sync<S: Storage + ?Sized>(s: &S, rev: u64) {
    let opts =
        ListOptions::recursive().at(Some(rev), Some(crate::ResourceVersionMatch::NotOlderThan));
    let _ = list(s, &pods(None), &opts).await;
}

/// Asks the store for its current revision.
pub(crate) async fn current<S: Storage + ?Sized>(s: &S) -> u64 {
    s.current_resource_version()
        .await
        .expect("current resource version")
}

/// The writes a case made, to compute the expected state at any revision.
#[derive(Debug, Default)]
pub(crate) struct History {
    writes: Vec<(u64, String, Option<Object>)>,
}

impl History {
    /// Records a create or update (at the object's own revision).
    pub(crate) fn put(&mut self, key: &Key, obj: &Object) {
        self.writes.push((
            obj.resource_version(),
            key.path().to_owned(),
            Some(obj.clone()),
        ));
    }

    /// Records a delete at `rev`.
    pub(crate) fn delete(&mut self, key: &Key, rev: u64) {
        self.writes.push((rev, key.path().to_owned(), None));
    }

    /// The revisions written, in order.
    pub(crate) fn revisions(&self) -> Vec<u64> {
        self.writes.iter().map(|w| w.0).collect()
    }

    /// The events a watch of `within` with `pred` from `rev` must deliver, in order: a write
    /// entering the selection is ADDED, one staying in it MODIFIED (from the previous state),
    /// one leaving it (or deleting) DELETED with the last state at the write's revision.
    pub(crate) fn events_after(
        &self,
        rev: u64,
        within: &Key,
        pred: &SelectionPredicate,
    ) -> Vec<Expect> {
        let mut state: BTreeMap<&str, &Object> = BTreeMap::new();
        let mut out = Vec::new();
        for (r, path, obj) in &self.writes {
            let old = match obj {
                Some(o) => state.insert(path, o),
                None => state.remove(path.as_str()),
            };
            if *r <= rev || !within.contains(path) {
                continue;
            }
            let old = old.filter(|o| pred.matches(o));
            match (old, obj.as_ref().filter(|o| pred.matches(o))) {
                (None, Some(new)) => out.push(Expect::Added(new.clone())),
                (Some(old), Some(new)) => out.push(Expect::ModifiedFrom(new.clone(), old.clone())),
                (Some(old), None) => out.push(Expect::Deleted(old.with_resource_version(*r))),
                (None, None) => {}
            }
        }
        out
    }

    /// The objects under `within` at `rev`, in key order.
    pub(crate) fn state_at(&self, rev: u64, within: &Key) -> Vec<Object> {
        let mut state = BTreeMap::new();
        for (r, path, obj) in &self.writes {
            if *r > rev {
                continue;
            }
            match obj {
                Some(o) => state.insert(path.clone(), o.clone()),
                None => state.remove(path),
            };
        }
        state
            .into_iter()
            .filter(|(p, _)| within.contains(p))
            .map(|(_, o)| o)
            .collect()
    }
}

/// What a watch must deliver next.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    Added(Object),
    Modified(Object),
    /// MODIFIED whose `prev`, when the backend gives one, must be exactly this state.
    ModifiedFrom(Object, Object),
    Deleted(Object),
}

/// Describes an event for failure messages.
pub(crate) fn describe(ev: &WatchEvent) -> String {
    match ev {
        WatchEvent::Added(o) => format!("ADDED {}", show(o)),
        WatchEvent::Modified { object, prev } => format!(
            "MODIFIED {} (prev {})",
            show(object),
            prev.as_ref().map_or_else(|| "unknown".to_owned(), show)
        ),
        WatchEvent::Deleted(o) => format!("DELETED {}", show(o)),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {b:?}"),
        WatchEvent::Error(e) => format!("ERROR {e:?}"),
    }
}

fn describe_expect(e: &Expect) -> String {
    match e {
        Expect::Added(o) => format!("ADDED {}", show(o)),
        Expect::Modified(o) => format!("MODIFIED {}", show(o)),
        Expect::ModifiedFrom(o, p) => format!("MODIFIED {} (prev {})", show(o), show(p)),
        Expect::Deleted(o) => format!("DELETED {}", show(o)),
    }
}

/// Asserts `ev` is exactly `want`.
#[track_caller]
pub(crate) fn check_event(ev: &WatchEvent, want: &Expect, ctx: &str) {
    let ok = match (ev, want) {
        (WatchEvent::Added(g), Expect::Added(w)) | (WatchEvent::Deleted(g), Expect::Deleted(w)) => {
            g == w
        }
        (WatchEvent::Modified { object, prev }, Expect::Modified(w)) => {
            object == w
                && prev.as_ref().is_none_or(|p| {
                    p.name() == w.name()
                        && p.namespace() == w.namespace()
                        && p.resource_version() < w.resource_version()
                })
        }
        (WatchEvent::Modified { object, prev }, Expect::ModifiedFrom(w, p)) => {
            object == w && prev.as_ref().is_none_or(|got| got == p)
        }
        _ => false,
    };
    assert!(
        ok,
        "{ctx}:\n  got  {}\n  want {}",
        describe(ev),
        describe_expect(want)
    );
}

/// The next event, within [`WAIT`]; panics when the stream ends or stays silent.
pub(crate) async fn next_event(w: &mut WatchStream, ctx: &str) -> WatchEvent {
    match tokio::time::timeout(WAIT, w.next()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => panic!("{ctx}: the watch ended while an event was expected"),
        Err(_) => panic!("{ctx}: no watch event within {WAIT:?}"),
    }
}

/// The next object (or error) event, skipping bookmarks; each skipped bookmark must not be an
/// initial-events-end marker and must not go back before `*last_rv`, which tracks the newest
/// revision delivered.
pub(crate) async fn next_non_bookmark(
    w: &mut WatchStream,
    last_rv: &mut u64,
    ctx: &str,
) -> WatchEvent {
    loop {
        let ev = next_event(w, ctx).await;
        match &ev {
            WatchEvent::Bookmark(b) => {
                assert!(
                    !b.initial_events_end,
                    "{ctx}: unexpected initial-events-end bookmark {b:?}"
                );
                assert!(
                    b.resource_version >= *last_rv,
                    "{ctx}: bookmark at {} after an event at {}",
                    b.resource_version,
                    *last_rv
                );
                *last_rv = b.resource_version;
            }
            other => {
                if let Some(rv) = other.resource_version() {
                    assert!(
                        rv > *last_rv || *last_rv == 0,
                        "{ctx}: event at {rv} after {}: {}",
                        *last_rv,
                        describe(other)
                    );
                    *last_rv = rv;
                }
                return ev;
            }
        }
    }
}

/// Asserts the next events are exactly `want` (no bookmarks in between).
pub(crate) async fn expect_events(w: &mut WatchStream, want: &[Expect], ctx: &str) {
    for (i, e) in want.iter().enumerate() {
        let ev = next_event(w, &format!("{ctx} (event {i})")).await;
        check_event(&ev, e, &format!("{ctx} (event {i})"));
    }
}

/// Asserts the next non-bookmark events are exactly `want`; bookmarks may come between them
/// but must carry sane revisions.
pub(crate) async fn expect_events_skipping_bookmarks(
    w: &mut WatchStream,
    want: &[Expect],
    ctx: &str,
) {
    let mut last = 0;
    for (i, e) in want.iter().enumerate() {
        let ev = next_non_bookmark(w, &mut last, &format!("{ctx} (event {i})")).await;
        check_event(&ev, e, &format!("{ctx} (event {i})"));
    }
}

/// Asserts the stream ends within [`WAIT`] without another event.
pub(crate) async fn expect_end(w: &mut WatchStream, ctx: &str) {
    match tokio::time::timeout(WAIT, w.next()).await {
        Ok(None) => {}
        Ok(Some(ev)) => panic!("{ctx}: expected the watch to end, got {}", describe(&ev)),
        Err(_) => panic!("{ctx}: the watch did not end within {WAIT:?}"),
    }
}

/// Opens a watch, panicking on error.
pub(crate) async fn watch<S: Storage + ?Sized>(
    s: &S,
    key: &Key,
    opts: &ListOptions,
) -> WatchStream {
    s.watch(key, opts)
        .await
        .unwrap_or_else(|e| panic!("watch {key} {opts:?}: {e}"))
}

/// Watch options from a revision (`None` unset), over a collection or one object.
pub(crate) fn from_rv(rv: Option<u64>, key: &Key) -> ListOptions {
    ListOptions {
        resource_version: rv,
        recursive: key.is_collection(),
        ..ListOptions::default()
    }
}

/// Runs `fut` (a store call) to completion from inside a synchronous callback of the store
/// (an update or validation function), on another task, waiting at most [`WAIT`].
///
/// A store that holds a lock while calling back would deadlock here; the bounded wait turns
/// that into an error instead of a hang.
pub(crate) fn block_on_from_callback<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let handle = tokio::runtime::Handle::current();
    assert!(
        matches!(
            handle.runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        ),
        "conformance cases need a multi-thread tokio runtime (use conformance_tests!)"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    tokio::task::block_in_place(|| rx.recv_timeout(WAIT)).unwrap_or_else(|_| {
        Err(Error::internal(format!(
            "a write issued from inside a store callback did not finish within {WAIT:?}: \
             does the store hold a lock while calling back?"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_replays_writes_up_to_a_revision_in_key_order() {
        let mut h = History::default();
        let (a, b) = (Pod::new("ns", "a"), Pod::new("ns", "b"));
        let b1 = b.obj().with_resource_version(1);
        let a2 = a.obj().with_resource_version(2);
        let a3 = Pod::new("ns", "a")
            .label("v", "3")
            .obj()
            .with_resource_version(3);
        h.put(&b.key(), &b1);
        h.put(&a.key(), &a2);
        h.put(&a.key(), &a3);
        h.delete(&b.key(), 4);
        let ns = pods(Some("ns"));
        assert_eq!(h.state_at(0, &ns), vec![]);
        assert_eq!(h.state_at(1, &ns), vec![b1.clone()]);
        assert_eq!(h.state_at(2, &ns), vec![a2, b1.clone()]);
        assert_eq!(h.state_at(3, &ns), vec![a3.clone(), b1]);
        assert_eq!(h.state_at(9, &ns), vec![a3]);
        assert_eq!(h.state_at(9, &pods(Some("n"))), vec![]);
        assert_eq!(h.revisions(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn modified_events_are_checked_against_their_previous_state() {
        let old = Pod::new("ns", "a").obj().with_resource_version(1);
        let new = Pod::new("ns", "a")
            .phase("Running")
            .obj()
            .with_resource_version(2);
        let ev = |prev: Option<Object>| WatchEvent::Modified {
            object: new.clone(),
            prev,
        };
        check_event(
            &ev(None),
            &Expect::ModifiedFrom(new.clone(), old.clone()),
            "no prev",
        );
        check_event(
            &ev(Some(old.clone())),
            &Expect::ModifiedFrom(new.clone(), old.clone()),
            "prev",
        );
        let wrong = std::panic::catch_unwind(|| {
            check_event(
                &ev(Some(new.clone())),
                &Expect::ModifiedFrom(new.clone(), old.clone()),
                "x",
            );
        });
        assert!(wrong.is_err(), "a wrong prev must fail the check");
        let kind = std::panic::catch_unwind(|| {
            check_event(
                &WatchEvent::Added(new.clone()),
                &Expect::Modified(new.clone()),
                "x",
            );
        });
        assert!(kind.is_err(), "a wrong event type must fail the check");
    }
}
