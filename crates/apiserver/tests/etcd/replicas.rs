//! Two `listwatch-apiserver` replicas over one three-member etcd cluster share nothing but
//! etcd (issue 18, item 1): resource versions are etcd revisions, so a client may move between
//! them at any time. They serve the same lists, Exact and NotOlderThan lists at one
//! replica's version on the other, and a paginated walk begun on one and continued on the
//! other; a kube-rs client that lists on replica A and watches from that version on replica
//! B receives every write made through either replica exactly once, in order; and a write
//! acknowledged by one replica is visible at once to a consistent read (get and list) on the
//! other. Needs Debian's `etcd-server`; `cargo xtask test` runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::replicas::Replicas;
use common::{PATIENCE, Server, http};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const CMS: &str = "/api/v1/namespaces/r/configmaps";

fn client(server: &Server) -> Client {
    Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap()
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "r"}},
        "data": {"v": value},
    }))
    .unwrap()
}

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn get_json(addr: &str, path: &str) -> Value {
    let resp = http(addr, "GET", path, &[], b"");
    assert_eq!(
        resp.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp.json()
}

fn rv_of(list: &Value) -> u64 {
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A deletion's acknowledged version is unknown (see [`deleted`]).
const UNKNOWN_RV: &str = "";

/// Deletes a config map. Upstream answers it with a `Success` Status (config maps do not
/// return the deleted object), which carries no resource version.
async fn deleted(api: &Api<ConfigMap>, name: &str) {
    let status = api
        .delete(name, &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Success Status, as upstream answers a config map's DELETE");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn replicas_serve_the_same_lists_at_the_same_versions() {
    let replicas = Replicas::start(2, &[]).await;
    let (a, b) = (
        replicas.replica(0).addr.clone(),
        replicas.replica(1).addr.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let resp = http(
            &a,
            "POST",
            "/api/v1/namespaces",
            &[JSON],
            br#"{"metadata":{"name":"r"}}"#,
        );
        assert_eq!(resp.status, 201);
        // Writes through both replicas.
        for i in 0..30 {
            let via = if i % 2 == 0 { &a } else { &b };
            let body = json!({"metadata":{"name":format!("c{i:02}")},"data":{"i":i.to_string()}});
            let resp = http(via, "POST", CMS, &[JSON], body.to_string().as_bytes());
            assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
        }
        // Consistent lists: the same objects at the same versions.
        let on_a = get_json(&a, CMS);
        let on_b = get_json(&b, CMS);
        assert_eq!(on_a["items"].as_array().unwrap().len(), 30);
        assert_eq!(on_a["items"], on_b["items"]);
        // B listed after A (other writes, e.g. lease renewals, move etcd's revision).
        let at = rv_of(&on_a);
        assert!(rv_of(&on_b) >= at);
        // A's version means the same on B: Exact, and NotOlderThan.
        for query in [
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=NotOlderThan",
        ] {
            let there = get_json(&b, &format!("{CMS}?resourceVersion={at}&{query}"));
            assert_eq!(there["items"], on_a["items"], "{query}");
            if query.ends_with("Exact") {
                assert_eq!(rv_of(&there), at);
            } else {
                assert!(rv_of(&there) >= at);
            }
        }
        // A paginated walk begun on A and continued alternately on B and A: one snapshot.
        let mut walked = Vec::new();
        let mut page = get_json(&a, &format!("{CMS}?limit=7"));
        let walk_rv = rv_of(&page);
        let mut on_b_next = true;
        loop {
            assert_eq!(
                rv_of(&page),
                walk_rv,
                "every page is at the first page's version"
            );
            walked.extend(page["items"].as_array().unwrap().iter().cloned());
            let Some(token) = page["metadata"]["continue"]
                .as_str()
                .filter(|t| !t.is_empty())
            else {
                break;
            };
            let via = if on_b_next { &b } else { &a };
            on_b_next = !on_b_next;
            page = get_json(via, &format!("{CMS}?limit=7&continue={token}"));
        }
        assert_eq!(Value::Array(walked), on_a["items"]);
        // A write through B after the walk's version does not show in an Exact list on A.
        let resp = http(&b, "DELETE", &format!("{CMS}/c00"), &[], b"");
        assert_eq!(resp.status, 200);
        let then = get_json(
            &a,
            &format!("{CMS}?resourceVersion={at}&resourceVersionMatch=Exact"),
        );
        assert_eq!(then["items"], on_a["items"]);
        assert_eq!(get_json(&a, CMS)["items"].as_array().unwrap().len(), 29);
    })
    .await
    .unwrap();
}

/// What a write did, as a watcher must see it: (type, name, resourceVersion).
type Change = (&'static str, String, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_list_on_one_replica_and_a_watch_on_the_other_see_every_write_once() {
    let replicas = Replicas::start(2, &[]).await;
    let (ca, cb) = (client(replicas.replica(0)), client(replicas.replica(1)));
    namespace(&ca, "r").await;
    let on_a: Api<ConfigMap> = Api::namespaced(ca.clone(), "r");
    let on_b: Api<ConfigMap> = Api::namespaced(cb.clone(), "r");
    for i in 0..10 {
        on_a.create(&PostParams::default(), &configmap(&format!("pre{i}"), "0"))
            .await
            .unwrap();
    }
    // List on A...
    let listed = on_a.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 10);
    let from = listed.metadata.resource_version.clone().unwrap();
    // ...watch from its version on B, while a writer writes through both replicas.
    let mut stream = on_b
        .watch(&WatchParams::default().timeout(290), &from)
        .await
        .unwrap()
        .boxed();
    let writer = tokio::spawn(async move {
        let mut truth: Vec<Change> = Vec::new();
        for i in 0..60usize {
            let api = if i % 2 == 0 { &on_a } else { &on_b };
            let name = format!("w{i:02}");
            let made = api
                .create(&PostParams::default(), &configmap(&name, "0"))
                .await
                .unwrap();
            truth.push(("ADDED", name.clone(), made.resource_version().unwrap()));
            if i % 3 == 0 {
                // Updated through the other replica.
                let other = if i % 2 == 0 { &on_b } else { &on_a };
                let mut cm = made.clone();
                cm.data = Some([("v".to_owned(), "1".to_owned())].into());
                let upd = other
                    .replace(&name, &PostParams::default(), &cm)
                    .await
                    .unwrap();
                truth.push(("MODIFIED", name.clone(), upd.resource_version().unwrap()));
            }
            if i % 5 == 0 {
                deleted(api, &name).await;
                truth.push(("DELETED", name.clone(), UNKNOWN_RV.to_owned()));
            }
            if i % 7 == 0 {
                // One of the listed objects goes too.
                let pre = format!("pre{}", i / 7);
                deleted(api, &pre).await;
                truth.push(("DELETED", pre, UNKNOWN_RV.to_owned()));
            }
        }
        truth
    });
    let truth = writer.await.unwrap();
    let mut seen: Vec<Change> = Vec::new();
    while seen.len() < truth.len() {
        let event = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no event after {seen:?}; want {truth:?}"))
            .expect("the watch ended early")
            .unwrap();
        let (kind, obj) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?} after {seen:?}"),
        };
        seen.push((kind, obj.name_any(), obj.resource_version().unwrap()));
    }
    // A deletion's version is the watch's to tell (see `deleted`): compared by type and
    // name, and every version checked to be newer than the one before.
    let versions: Vec<u64> = seen.iter().map(|c| c.2.parse().unwrap()).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "versions strictly increase: {seen:?}"
    );
    for c in &mut seen {
        if c.0 == "DELETED" {
            c.2 = UNKNOWN_RV.to_owned();
        }
    }
    assert_eq!(
        seen, truth,
        "every write through either replica, once, in order"
    );
    // Nothing after them either (a duplicate would come now): a last write is the next.
    let last = Api::<ConfigMap>::namespaced(ca.clone(), "r")
        .create(&PostParams::default(), &configmap("last", "0"))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(PATIENCE, stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Added(o) => {
                assert_eq!(o.resource_version(), last.resource_version());
                break;
            }
            other => panic!("after every write, {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_write_acknowledged_by_one_replica_is_read_at_once_on_the_other() {
    let replicas = Replicas::start(2, &[]).await;
    let (ca, cb) = (client(replicas.replica(0)), client(replicas.replica(1)));
    namespace(&ca, "r").await;
    let apis = [
        Api::<ConfigMap>::namespaced(ca, "r"),
        Api::<ConfigMap>::namespaced(cb, "r"),
    ];
    for i in 0..100usize {
        let (writer, reader) = (&apis[i % 2], &apis[(i + 1) % 2]);
        let name = format!("f{i:03}");
        let made = writer
            .create(&PostParams::default(), &configmap(&name, "0"))
            .await
            .unwrap();
        let rv: u64 = made.resource_version().unwrap().parse().unwrap();
        // A consistent get and a consistent list on the other replica, right away.
        let got = reader.get(&name).await.unwrap();
        assert_eq!(got.resource_version(), made.resource_version());
        let listed = reader
            .list(&ListParams::default().fields(&format!("metadata.name={name}")))
            .await
            .unwrap();
        assert_eq!(
            listed.items.len(),
            1,
            "{name} missing from a consistent list"
        );
        let list_rv: u64 = listed.metadata.resource_version.unwrap().parse().unwrap();
        assert!(list_rv >= rv, "list at {list_rv} before the write at {rv}");
        // And an update through the reader is what the writer reads next.
        let mut cm = got;
        cm.data = Some([("v".to_owned(), "1".to_owned())].into());
        let upd = reader
            .replace(&name, &PostParams::default(), &cm)
            .await
            .unwrap();
        let back = writer.get(&name).await.unwrap();
        assert_eq!(back.resource_version(), upd.resource_version());
    }
}

/// A quiet resource: its consistent list on A answers at etcd's current revision, which
/// writes to other resources moved past its last event; B's cache of it reaches that version
/// through etcd's progress notifications, so a watch from it on B starts (no 504 "Too large
/// resource version") and delivers the next write. Without progress notifications from
/// etcd 3.4.23 (its default interval is 10 minutes) this watch fails after the cache's 3 s
/// wait: docs/deployment.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_watch_of_a_quiet_resource_from_another_replicas_version_starts() {
    let replicas = Replicas::start(2, &[]).await;
    let (ca, cb) = (client(replicas.replica(0)), client(replicas.replica(1)));
    namespace(&ca, "r").await;
    let secrets_a: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ca.clone(), "r");
    let secrets_b: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(cb, "r");
    let cms: Api<ConfigMap> = Api::namespaced(ca, "r");
    for round in 0..3 {
        // Other resources move etcd's revision past the secrets' last event.
        for i in 0..5 {
            cms.create(
                &PostParams::default(),
                &configmap(&format!("m{round}-{i}"), "0"),
            )
            .await
            .unwrap();
        }
        let listed = secrets_a.list(&ListParams::default()).await.unwrap();
        let from = listed.metadata.resource_version.unwrap();
        let mut stream = secrets_b
            .watch(&WatchParams::default().timeout(60), &from)
            .await
            .unwrap()
            .boxed();
        let secret =
            serde_json::from_value(json!({"metadata":{"name":format!("s{round}")}})).unwrap();
        let made = secrets_a
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        loop {
            match tokio::time::timeout(PATIENCE, stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
            {
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Added(s) => {
                    assert_eq!(s.resource_version(), made.resource_version());
                    break;
                }
                other => panic!("watch from {from}: {other:?}"),
            }
        }
    }
}

/// `/readyz` follows etcd's quorum on every replica (docs/deployment.md, "etcd lost"): it
/// fails once two of the three members are gone, while `/livez` stays 200 and requests fail
/// with an error instead of hanging; when the members are back every replica is ready again,
/// without a restart, and serves writes and consistent reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn readyz_follows_the_etcd_quorum() {
    let mut replicas = Replicas::start(2, &[]).await;
    let addrs: Vec<String> = (0..2).map(|i| replicas.replica(i).addr.clone()).collect();
    let until = |want_ready: bool| {
        let addrs = addrs.clone();
        tokio::task::spawn_blocking(move || {
            for addr in &addrs {
                let deadline = std::time::Instant::now() + PATIENCE;
                loop {
                    let r = http(addr, "GET", "/readyz", &[], b"");
                    if (r.status == 200) == want_ready {
                        break;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{addr}: /readyz stayed {}",
                        r.status
                    );
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                assert_eq!(http(addr, "GET", "/livez", &[], b"").status, 200);
            }
        })
    };
    until(true).await.unwrap();
    for i in 0..2 {
        replicas.etcd.member(i).unwrap().kill();
    }
    until(false).await.unwrap();
    let a = addrs[0].clone();
    let first = tokio::task::spawn_blocking(move || {
        let body = br#"{"metadata":{"name":"q"}}"#;
        let r = http(&a, "POST", "/api/v1/namespaces", &[JSON], body);
        assert!(r.status >= 500, "a write without a quorum: {}", r.status);
        // 504: sent to a member that still led (it could not commit): the outcome is
        // unknown — the entry may be committed once the quorum is back — so no Retry-After.
        if r.status == 504 {
            assert_eq!(
                r.header("retry-after"),
                None,
                "an unknown outcome is not retryable"
            );
        }
        r.status
    })
    .await
    .unwrap();
    for i in 0..2 {
        replicas.etcd.member(i).unwrap().restart().await.unwrap();
    }
    until(true).await.unwrap();
    let (a, b) = (addrs[0].clone(), addrs[1].clone());
    tokio::task::spawn_blocking(move || {
        let body = br#"{"metadata":{"name":"q"}}"#;
        let status = http(&a, "POST", "/api/v1/namespaces", &[JSON], body).status;
        // 409 only when the first attempt's outcome was unknown and it did land.
        assert!(
            status == 201 || (status == 409 && first == 504),
            "create after the quorum came back: {status} (the first attempt: {first})"
        );
        assert_eq!(
            http(&b, "GET", "/api/v1/namespaces/q", &[], b"").status,
            200
        );
    })
    .await
    .unwrap();
}
