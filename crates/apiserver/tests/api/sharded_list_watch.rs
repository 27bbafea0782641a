//! Issue 33 item 1: server-side sharded list and watch (upstream's KEP-5866 `shardSelector`)
//! through the built server — N sharded informers of listwatch-client together see every
//! change of a resource exactly once, across a relist; lists echo `shardInfo`; watches and
//! watch-lists carry only their shard; malformed selectors get upstream's 400.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{PATIENCE, Server, http};
use futures::StreamExt;
use listwatch_api::shard::{ShardField, fnv1a64};
use listwatch_api::{Object, SelectableFields, ShardSelector, Status};
use listwatch_client::runtime::{
    Error as ClientError, ListRequest, ListerWatcher, Page, PageStream, WatchRequest, WatchStream,
};
use listwatch_client::{
    Config, EventHandler, HttpConfig, HttpListerWatcher, Informer, InformerConfig,
};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const MERGE: (&str, &str) = ("Content-Type", "application/merge-patch+json");
const CMS: &str = "/api/v1/namespaces/sh/configmaps";

async fn call(addr: &str, method: &'static str, path: String, body: Value) -> common::Response {
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || {
        let headers: &[(&str, &str)] = match method {
            "PATCH" => &[MERGE],
            _ => &[JSON],
        };
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        http(&addr, method, &path, headers, &body)
    })
    .await
    .unwrap()
}

/// What the test wrote: each object's uid, its update versions, whether it was deleted.
#[derive(Default)]
struct Written {
    uid: BTreeMap<String, String>,
    updates: BTreeSet<(String, String)>,
    deleted: BTreeSet<String>,
}

impl Written {
    async fn create(&mut self, addr: &str, name: &str) {
        let r = call(
            addr,
            "POST",
            CMS.into(),
            json!({"metadata":{"name":name},"data":{"v":"0"}}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_owned();
        self.uid.insert(name.to_owned(), uid);
    }

    async fn update(&mut self, addr: &str, name: &str, v: usize) {
        let r = call(
            addr,
            "PATCH",
            format!("{CMS}/{name}"),
            json!({"data":{"v":v.to_string()}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let rv = r.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        self.updates.insert((name.to_owned(), rv));
    }

    async fn delete(&mut self, addr: &str, name: &str) {
        let r = call(addr, "DELETE", format!("{CMS}/{name}"), Value::Null).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        self.deleted.insert(name.to_owned());
    }
}

/// Every change a shard's handler was told of: (shard, "appeared" | "updated" | "deleted",
/// name, resourceVersion). An update whose version did not change (a relist handing the
/// same object again) is no change and is not recorded.
type Seen = Arc<std::sync::Mutex<Vec<(usize, &'static str, String, String)>>>;

struct Recorder(usize, Seen);

impl EventHandler<Object> for Recorder {
    fn on_add(&mut self, o: &Arc<Object>, _initial: bool) {
        self.1.lock().unwrap().push((
            self.0,
            "appeared",
            o.name().into(),
            o.resource_version().to_string(),
        ));
    }
    fn on_update(&mut self, old: &Arc<Object>, new: &Arc<Object>) {
        if old.resource_version() != new.resource_version() {
            self.1.lock().unwrap().push((
                self.0,
                "updated",
                new.name().into(),
                new.resource_version().to_string(),
            ));
        }
    }
    fn on_delete(&mut self, o: &Arc<Object>, _unknown: bool) {
        self.1
            .lock()
            .unwrap()
            .push((self.0, "deleted", o.name().into(), String::new()));
    }
}

/// A lister-watcher that ends its open watch with a 410 Expired when told to (a compacted
/// version, as a server reports it), so that the reflector above relists from the server.
struct ExpireOnDemand {
    inner: HttpListerWatcher,
    expire: Arc<tokio::sync::watch::Sender<u64>>,
    lists: Arc<AtomicUsize>,
}

fn expired() -> ClientError {
    ClientError::api(Status::failure(
        410,
        listwatch_api::status::reason::EXPIRED,
        "too old resource version: injected by the test",
    ))
}

#[async_trait]
impl ListerWatcher for ExpireOnDemand {
    type Object = Object;

    async fn list(&self, r: &ListRequest) -> listwatch_client::runtime::Result<Page<Object>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(r).await
    }

    async fn list_stream(
        &self,
        r: &ListRequest,
    ) -> listwatch_client::runtime::Result<PageStream<Object>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        // The server must have been asked for this shard only.
        assert!(
            !r.shard_selector.is_empty(),
            "a sharded reflector's list carries its selector"
        );
        self.inner.list_stream(r).await
    }

    async fn watch(
        &self,
        r: &WatchRequest,
    ) -> listwatch_client::runtime::Result<WatchStream<Object>> {
        assert!(
            !r.shard_selector.is_empty(),
            "a sharded reflector's watch carries its selector"
        );
        let events = self.inner.watch(r).await?;
        let mut rx = self.expire.subscribe();
        let fired = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&fired);
        let stop = async move {
            if rx.changed().await.is_ok() {
                f.store(true, Ordering::SeqCst);
            }
        };
        let tail = futures::stream::once(async move { fired.load(Ordering::SeqCst) })
            .filter_map(|f| futures::future::ready(f.then(|| Err(expired()))));
        Ok(events.take_until(stop).chain(tail).boxed())
    }
}

fn shard_of(uid: &str, n: u64) -> usize {
    (0..n)
        .position(|i| {
            ShardSelector::nth_of(ShardField::Uid, i, n)
                .unwrap()
                .contains(fnv1a64(uid.as_bytes()))
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_informers_see_every_change_exactly_once_across_a_relist() {
    const N: u64 = 3;
    let server = Server::start(&[]);
    let a = server.addr.as_str();
    let r = call(
        a,
        "POST",
        "/api/v1/namespaces".into(),
        json!({"metadata":{"name":"sh"}}),
    )
    .await;
    assert_eq!(r.status, 201);
    let mut w = Written::default();
    for i in 0..30 {
        w.create(a, &format!("pre{i}")).await;
    }

    let seen: Seen = Arc::default();
    let expire = Arc::new(tokio::sync::watch::channel(0u64).0);
    let mut informers = Vec::new();
    let mut lists = Vec::new();
    let mut handlers = Vec::new();
    for i in 0..N {
        let count = Arc::new(AtomicUsize::new(0));
        let lw = ExpireOnDemand {
            inner: HttpListerWatcher::new(HttpConfig::new(server.url.clone()).unwrap(), CMS)
                .unwrap()
                .with_selectable_fields(SelectableFields::none()),
            expire: Arc::clone(&expire),
            lists: Arc::clone(&count),
        };
        let config = Config::default()
            .page_size(7)
            .shard(ShardSelector::nth_of(ShardField::Uid, i, N).unwrap());
        let informer = Informer::spawn(lw, InformerConfig::default().reflector(config));
        handlers.push(informer.add_handler(Recorder(i as usize, Arc::clone(&seen))));
        tokio::time::timeout(PATIENCE, informer.wait_until_synced())
            .await
            .unwrap()
            .unwrap();
        informers.push(informer);
        lists.push(count);
    }

    let converged = |w: &Written, informers: &[Informer<Object>]| {
        let want: BTreeSet<String> = w
            .uid
            .keys()
            .filter(|n| !w.deleted.contains(*n))
            .cloned()
            .collect();
        let mut got = BTreeSet::new();
        for inf in informers {
            for o in inf.store().list() {
                assert!(
                    got.insert(o.name().to_owned()),
                    "{} held by two shards",
                    o.name()
                );
            }
        }
        got == want
    };
    let wait_converged = |w: &Written, informers: &[Informer<Object>]| {
        let deadline = Instant::now() + PATIENCE;
        while !converged(w, informers) {
            assert!(
                Instant::now() < deadline,
                "the shards never held the namespace between them"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    for i in 0..30 {
        w.create(a, &format!("p{i}")).await;
    }
    for i in 0..20 {
        w.update(a, &format!("pre{i}"), 1).await;
    }
    for i in 20..30 {
        w.delete(a, &format!("pre{i}")).await;
    }
    wait_converged(&w, &informers);

    // Every shard's watch ends with 410 Expired: each relists from the server.
    let before: Vec<usize> = lists.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    expire.send_modify(|g| *g += 1);
    let deadline = Instant::now() + PATIENCE;
    while lists
        .iter()
        .zip(&before)
        .any(|(c, b)| c.load(Ordering::SeqCst) <= *b)
    {
        assert!(Instant::now() < deadline, "the shards did not relist");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for i in 0..20 {
        w.create(a, &format!("q{i}")).await;
    }
    for i in 0..10 {
        w.update(a, &format!("p{i}"), 2).await;
        w.update(a, &format!("pre{i}"), 2).await;
    }
    for i in 10..20 {
        w.delete(a, &format!("p{i}")).await;
    }
    wait_converged(&w, &informers);
    // The handlers hear of a change after the store has it: wait until every change the
    // test made has been told (any more is a duplicate, which the checks below catch).
    let told = w.uid.len() + w.updates.len() + w.deleted.len();
    let deadline = Instant::now() + PATIENCE;
    while seen.lock().unwrap().len() < told {
        assert!(
            Instant::now() < deadline,
            "the handlers were not told of every change"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let seen = seen.lock().unwrap().clone();
    drop(handlers);
    // Each object appeared exactly once, in the shard its uid hashes to.
    for (name, uid) in &w.uid {
        let appeared: Vec<usize> = seen
            .iter()
            .filter(|e| e.1 == "appeared" && &e.2 == name)
            .map(|e| e.0)
            .collect();
        assert_eq!(appeared, [shard_of(uid, N)], "{name} appeared {appeared:?}");
        let deleted = seen
            .iter()
            .filter(|e| e.1 == "deleted" && &e.2 == name)
            .count();
        assert_eq!(
            deleted,
            usize::from(w.deleted.contains(name)),
            "{name} deleted {deleted} times"
        );
        assert!(
            seen.iter()
                .filter(|e| &e.2 == name)
                .all(|e| e.0 == shard_of(uid, N)),
            "{name} reached a shard it does not hash to"
        );
    }
    // Each update exactly once; nothing else.
    let updates: Vec<(String, String)> = seen
        .iter()
        .filter(|e| e.1 == "updated")
        .map(|e| (e.2.clone(), e.3.clone()))
        .collect();
    assert_eq!(updates.len(), w.updates.len(), "{updates:?}");
    assert_eq!(updates.into_iter().collect::<BTreeSet<_>>(), w.updates);
    assert!(
        seen.iter()
            .all(|e| ["appeared", "updated", "deleted"].contains(&e.1)),
        "{seen:?}"
    );
}

fn get(addr: &str, path: &str) -> common::Response {
    http(addr, "GET", path, &[], b"")
}

fn enc(s: &str) -> String {
    url_escape(s)
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Lists from the watch cache and from the backend (an Exact read at a past version
/// bypasses the cache), watches and watch-lists: each holds its shard only, and lists echo
/// the canonical selector in `metadata.shardInfo.selector`.
#[test]
fn lists_watches_and_watch_lists_carry_one_shard() {
    let server = Server::start(&[]);
    let a = server.addr.as_str();
    assert_eq!(
        http(
            a,
            "POST",
            "/api/v1/namespaces",
            &[JSON],
            br#"{"metadata":{"name":"sh"}}"#
        )
        .status,
        201
    );
    let mut uids = BTreeMap::new();
    let mut last = String::new();
    for i in 0..24 {
        let r = http(
            a,
            "POST",
            CMS,
            &[JSON],
            json!({"metadata":{"name":format!("c{i}")}})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(r.status, 201);
        let v = r.json();
        uids.insert(
            v["metadata"]["name"].as_str().unwrap().to_owned(),
            v["metadata"]["uid"].as_str().unwrap().to_owned(),
        );
        last = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    // Short bounds, as a client may write them; the echo is the canonical form.
    let asked = "shardRange(object.metadata.uid,'0x0','0x8000000000000000')";
    let canonical = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    let sel = ShardSelector::parse(asked).unwrap();
    let mine: BTreeSet<String> = uids
        .iter()
        .filter(|(_, u)| sel.contains(fnv1a64(u.as_bytes())))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!mine.is_empty() && mine.len() < uids.len(), "{mine:?}");
    let names = |v: &Value| -> BTreeSet<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for query in [
        String::new(),
        "&resourceVersion=0".to_owned(),
        format!("&resourceVersion={last}&resourceVersionMatch=Exact"),
        "&limit=5".to_owned(),
    ] {
        // Paged: walk the continue tokens.
        let mut got = BTreeSet::new();
        let mut cont = String::new();
        loop {
            let r = get(
                a,
                &format!("{CMS}?shardSelector={}{query}{cont}", enc(asked)),
            );
            assert_eq!(
                r.status,
                200,
                "{query}: {}",
                String::from_utf8_lossy(&r.body)
            );
            let v = r.json();
            assert_eq!(
                v["metadata"]["shardInfo"]["selector"], canonical,
                "{query}: {v}"
            );
            assert!(v["metadata"].get("remainingItemCount").is_none(), "{v}");
            got.extend(names(&v));
            match v["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => cont = format!("&continue={}", enc(c)),
                _ => break,
            }
            if query.contains("resourceVersion") {
                break;
            }
        }
        assert_eq!(got, mine, "{query}");
    }
    assert!(get(a, CMS).json()["metadata"].get("shardInfo").is_none());

    // A watch-list: the initial events are the shard, then the bookmark.
    let (stream, _) = common::open_stream(
        a,
        &format!(
            "{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&shardSelector={}",
            enc(asked)
        ),
    );
    let mut events = common::WatchEvents::new(stream);
    let mut initial = BTreeSet::new();
    loop {
        let ev = events.next().expect("a watch-list event");
        if ev["type"] == "BOOKMARK" {
            break;
        }
        assert_eq!(ev["type"], "ADDED", "{ev}");
        initial.insert(
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(initial, mine);
    // Then changes of the shard only: every object changes, the shard's come through.
    for i in 0..24 {
        let r = http(
            a,
            "PATCH",
            &format!("{CMS}/c{i}"),
            &[MERGE],
            br#"{"data":{"x":"1"}}"#,
        );
        assert_eq!(r.status, 200);
    }
    let mut changed = BTreeSet::new();
    while changed.len() < mine.len() {
        let ev = events.next().expect("a watch event");
        if ev["type"] == "BOOKMARK" {
            continue;
        }
        assert_eq!(ev["type"], "MODIFIED", "{ev}");
        let n = ev["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(mine.contains(&n), "{n} is not in the shard");
        changed.insert(n);
    }
}

#[test]
fn malformed_shard_selectors_are_upstreams_400() {
    let server = Server::start(&[]);
    let a = server.addr.as_str();
    let long = vec!["shardRange(object.metadata.uid, '0x0', '0x1')"; 65].join(" || ");
    for (sel, wants) in [
        (
            "shardRange(object.metadata.name, '0x0', '0x1')",
            "unsupported metadata field",
        ),
        (
            "shardRange(object.metadata.uid, '0x0', '0x00000000000000001')",
            "hex value too long",
        ),
        (
            "shardRange(object.metadata.uid, '0x0', '0x1') || shardRange(object.metadata.namespace, '0x1', '0x2')",
            "inconsistent shard keys",
        ),
        (
            "shardRange(object.metadata.uid, '0x9', '0x1')",
            "must be less than",
        ),
        (long.as_str(), "too many shardRange terms"),
    ] {
        for watch in ["", "&watch=1"] {
            let r = get(
                a,
                &format!("/api/v1/configmaps?shardSelector={}{watch}", enc(sel)),
            );
            assert_eq!(r.status, 400, "{sel}");
            let v = r.json();
            assert_eq!(v["reason"], "BadRequest", "{v}");
            let msg = v["message"].as_str().unwrap();
            assert!(
                msg.starts_with("invalid shard selector: ") && msg.contains(wants),
                "{msg}"
            );
        }
    }
}
