//! An in-process lister-watcher over a `Storage` backend, with scripted faults.
//!
//! Every call is logged (with the virtual time it happened at) so tests can check what the
//! reflector asked for; faults are queued per call kind and consumed in order.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::status::reason;
use listwatch_api::{Object, SelectableFields, Status};
use listwatch_memstore::MemStore;
use listwatch_runtime::{
    Delta, Error, ListRequest, ListerWatcher, Page, VersionMatch, WatchEvent, WatchRequest,
    WatchStream,
};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, SelectionPredicate, Storage};
use tokio::sync::watch;
use tokio::time::Instant;

/// A fault for the next call of one kind.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The call fails with this Status.
    Status(Box<Status>),
    /// The connection is refused.
    Refused,
    /// The server takes this long before answering normally.
    Slow(Duration),
    /// Watch only: the stream ends (cleanly) after this many events.
    EndAfter(usize),
    /// Watch only: after this many events, an `ERROR` event with this Status ends it.
    ErrorAfter(usize, Box<Status>),
    /// Watch only: after this many events, a frame that does not decode ends it.
    GarbledAfter(usize),
}

pub fn status(code: u16) -> Box<Status> {
    let r = match code {
        410 => reason::EXPIRED,
        429 => reason::TOO_MANY_REQUESTS,
        504 => reason::TIMEOUT,
        _ => reason::INTERNAL_ERROR,
    };
    let msg = if code == 504 {
        "Too large resource version: 1, current: 0"
    } else {
        "scripted"
    };
    Box::new(Status::failure(code, r, msg))
}

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    List(ListRequest),
    Watch(WatchRequest),
}

#[derive(Default)]
struct Script {
    /// Every continuation page fails with 410 (a walk slower than the compaction window).
    expire_continuations: bool,
    /// Watches ignore sendInitialEvents and resourceVersionMatch (a server without the
    /// streaming list feature).
    ignore_initial_events: bool,
    list_faults: VecDeque<Fault>,
    watch_faults: VecDeque<Fault>,
    log: Vec<(Instant, Call)>,
}

/// The lister-watcher. Cheap to clone; clones share the script.
#[derive(Clone)]
pub struct StorageLw {
    pub store: MemStore,
    key: Key,
    script: Arc<Mutex<Script>>,
    /// Bumping it ends every open watch with an ERROR 410 (checked before anything else).
    expire: Arc<watch::Sender<u64>>,
}

impl StorageLw {
    pub fn new(store: MemStore) -> Self {
        let (expire, _) = watch::channel(0);
        Self {
            store,
            key: Key::collection("pods", None).unwrap(),
            script: Arc::default(),
            expire: Arc::new(expire),
        }
    }

    pub fn fail_lists(&self, faults: impl IntoIterator<Item = Fault>) {
        self.script.lock().unwrap().list_faults.extend(faults);
    }

    pub fn fail_watches(&self, faults: impl IntoIterator<Item = Fault>) {
        self.script.lock().unwrap().watch_faults.extend(faults);
    }

    /// From now on every continuation page fails with 410 Expired.
    pub fn expire_continuations(&self) {
        self.script.lock().unwrap().expire_continuations = true;
    }

    /// From now on watches ignore sendInitialEvents (a server without streaming lists).
    pub fn ignore_initial_events(&self) {
        self.script.lock().unwrap().ignore_initial_events = true;
    }

    /// Ends every open watch with an ERROR 410 event, before any further event.
    pub fn expire_watches(&self) {
        self.expire.send_modify(|e| *e += 1);
    }

    pub fn log(&self) -> Vec<(Instant, Call)> {
        self.script.lock().unwrap().log.clone()
    }

    pub fn lists(&self) -> Vec<ListRequest> {
        self.log()
            .into_iter()
            .filter_map(|(_, c)| if let Call::List(l) = c { Some(l) } else { None })
            .collect()
    }

    pub fn watches(&self) -> Vec<(Instant, WatchRequest)> {
        self.log()
            .into_iter()
            .filter_map(|(t, c)| {
                if let Call::Watch(w) = c {
                    Some((t, w))
                } else {
                    None
                }
            })
            .collect()
    }

    fn begin(&self, call: Call, list: bool) -> Option<Fault> {
        let mut s = self.script.lock().unwrap();
        // A reflector looping without pause never lets the test run again: stop it here
        // (its task panics) so that the test fails instead of hanging.
        assert!(s.log.len() < 10_000, "runaway reflector: 10000 calls");
        s.log.push((Instant::now(), call));
        if list {
            s.list_faults.pop_front()
        } else {
            s.watch_faults.pop_front()
        }
    }
}

fn to_error(e: &listwatch_storage::Error) -> Error {
    Error::Api(Box::new(e.to_status()))
}

fn vm(m: Option<VersionMatch>) -> Option<ResourceVersionMatch> {
    m.map(|m| match m {
        VersionMatch::Exact => ResourceVersionMatch::Exact,
        VersionMatch::NotOlderThan => ResourceVersionMatch::NotOlderThan,
    })
}

/// How a scripted watch ends early: after `n` events, cleanly or with an error.
type EarlyEnd = Option<(usize, Option<Error>)>;

async fn apply_fault(f: Option<Fault>) -> Result<EarlyEnd, Error> {
    match f {
        None => Ok(None),
        Some(Fault::Status(s)) => Err(Error::Api(s)),
        Some(Fault::Refused) => Err(Error::Connect("connection refused (scripted)".into())),
        Some(Fault::Slow(d)) => {
            tokio::time::sleep(d).await;
            Ok(None)
        }
        Some(Fault::EndAfter(n)) => Ok(Some((n, None))),
        Some(Fault::ErrorAfter(n, s)) => Ok(Some((n, Some(Error::Api(s))))),
        Some(Fault::GarbledAfter(n)) => Ok(Some((
            n,
            Some(Error::Decode("watch frame: scripted garbage".into())),
        ))),
    }
}

/// The storage's own version of one the reflector sent back (opaque to it; numbers here).
fn num_rv(rv: Option<&str>) -> Option<u64> {
    listwatch_api::rv::parse_optional(rv)
        .expect("the reflector sent back a version it was not given")
}

#[async_trait]
impl ListerWatcher for StorageLw {
    type Object = Object;

    async fn list(&self, r: &ListRequest) -> Result<Page<Object>, Error> {
        apply_fault(self.begin(Call::List(r.clone()), true)).await?;
        if r.continue_token.is_some() && self.script.lock().unwrap().expire_continuations {
            return Err(Error::Api(status(410)));
        }
        let opts = ListOptions {
            resource_version: num_rv(r.resource_version.as_deref()),
            resource_version_match: vm(r.resource_version_match),
            predicate: SelectionPredicate {
                label: r.label_selector.clone(),
                field: r.field_selector.clone(),
                shard: r.shard_selector.clone(),
            },
            limit: r.limit.map(u64::from),
            continue_token: r.continue_token.clone(),
            recursive: true,
            ..ListOptions::default()
        };
        let l = self
            .store
            .list(&self.key, &opts)
            .await
            .map_err(|e| to_error(&e))?;
        Ok(Page {
            items: l.items,
            resource_version: l.resource_version.to_string(),
            continue_token: l.continue_token,
        })
    }

    async fn watch(&self, r: &WatchRequest) -> Result<WatchStream<Object>, Error> {
        let end_after = apply_fault(self.begin(Call::Watch(r.clone()), false)).await?;
        let mut r = r.clone();
        if self.script.lock().unwrap().ignore_initial_events {
            r.send_initial_events = false;
            r.resource_version_match = None;
        }
        let opts = ListOptions {
            resource_version: num_rv(r.resource_version.as_deref()),
            resource_version_match: vm(r.resource_version_match),
            predicate: SelectionPredicate {
                label: r.label_selector.clone(),
                field: r.field_selector.clone(),
                shard: r.shard_selector.clone(),
            },
            recursive: true,
            allow_watch_bookmarks: r.allow_bookmarks,
            send_initial_events: r.send_initial_events.then_some(true),
            progress_notify: r.allow_bookmarks,
            ..ListOptions::default()
        };
        let inner = self
            .store
            .watch(&self.key, &opts)
            .await
            .map_err(|e| to_error(&e))?;
        let mut expire = self.expire.subscribe();
        expire.mark_unchanged();
        let events = inner.map(|e| match e {
            listwatch_storage::WatchEvent::Added(o) => Ok(WatchEvent::Added(o)),
            listwatch_storage::WatchEvent::Modified { object, .. } => {
                Ok(WatchEvent::Modified(object))
            }
            listwatch_storage::WatchEvent::Deleted(o) => Ok(WatchEvent::Deleted(o)),
            listwatch_storage::WatchEvent::Bookmark(b) => Ok(WatchEvent::Bookmark {
                resource_version: b.resource_version.to_string(),
                initial_events_end: b.initial_events_end,
            }),
            listwatch_storage::WatchEvent::Error(e) => Err(to_error(&e)),
        });
        let events = match end_after {
            Some((n, None)) => events.take(n).boxed(),
            Some((n, Some(e))) => events
                .take(n)
                .chain(futures::stream::iter([Err(e)]))
                .boxed(),
            None => events.boxed(),
        };
        // The scripted expiry wins over any event ready at the same time.
        Ok(
            futures::stream::unfold(Some((events, expire)), |st| async move {
                let (mut events, mut expire) = st?;
                tokio::select! {
                    biased;
                    Ok(()) = expire.changed() => Some((Err(Error::Api(status(410))), None)),
                    e = events.next() => {
                        let e = e?;
                        let end = e.is_err();
                        Some((e, (!end).then_some((events, expire))))
                    }
                }
            })
            .boxed(),
        )
    }
}

pub fn pod(name: &str, labels: &[(&str, &str)], payload: &str) -> Object {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    Object::from_value(
        serde_json::json!({"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":name,"namespace":"ns","labels":labels},"spec":{"payload":payload}}),
        &SelectableFields::none(),
    )
    .unwrap()
}

pub fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

pub async fn create(store: &MemStore, name: &str, payload: &str) -> Object {
    store
        .create(&key(name), pod(name, &[("app", "web")], payload), None)
        .await
        .unwrap()
}

pub async fn update(store: &MemStore, name: &str, payload: &str) -> Object {
    let new = pod(name, &[("app", "web")], payload);
    store
        .guaranteed_update(
            &key(name),
            None,
            false,
            &mut |_| Ok(new.clone().into()),
            None,
        )
        .await
        .unwrap()
}

pub async fn delete(store: &MemStore, name: &str) -> Object {
    store
        .delete(&key(name), None, listwatch_storage::no_validation(), None)
        .await
        .unwrap()
}

/// The backend's current objects: (key, resource version).
pub async fn backend_state(store: &MemStore) -> Vec<(String, u64)> {
    let l = store
        .list(
            &Key::collection("pods", None).unwrap(),
            &ListOptions::recursive(),
        )
        .await
        .unwrap();
    let mut v: Vec<_> = l
        .items
        .iter()
        .map(|o| {
            (
                format!("{}/{}", o.namespace().unwrap_or(""), o.name()),
                o.resource_version(),
            )
        })
        .collect();
    v.sort();
    v
}

pub fn store_state(store: &listwatch_runtime::Store<Object>) -> Vec<(String, u64)> {
    let mut v: Vec<_> = store
        .list()
        .iter()
        .map(|o| {
            (
                format!("{}/{}", o.namespace().unwrap_or(""), o.name()),
                o.resource_version(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Waits (in virtual time) until `f` holds, up to `limit`.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// Replays handler deltas into a model, checking each is consistent with what came before.
pub fn replay(model: &mut BTreeMap<String, u64>, d: &Delta<Object>) {
    let k = |o: &Object| format!("{}/{}", o.namespace().unwrap_or(""), o.name());
    match d {
        Delta::Added { object, .. } => {
            assert!(
                model.insert(k(object), object.resource_version()).is_none(),
                "add of a present key {d:?}"
            );
        }
        Delta::Updated { old, new } => {
            let cur = model.insert(k(new), new.resource_version());
            assert_eq!(
                cur,
                Some(old.resource_version()),
                "update's old is not the current state: {d:?}"
            );
            assert!(
                new.resource_version() > old.resource_version(),
                "versions go backwards: {d:?}"
            );
        }
        Delta::Deleted { object, .. } => {
            assert!(
                model.remove(&k(object)).is_some(),
                "delete of an absent key {d:?}"
            );
        }
        Delta::Sync(o) => assert_eq!(model.get(&k(o)), Some(&o.resource_version())),
    }
}
