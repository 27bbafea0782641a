//! listwatch-client's HTTP lister-watcher, reflector and informer against the built server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_apiserver::builtin::POD_FIELDS;
use listwatch_client::{
    Config, EventHandler, HttpConfig, HttpListerWatcher, Informer, InformerConfig, Store, Writer,
    reflector, watcher,
};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const MERGE: (&str, &str) = ("Content-Type", "application/merge-patch+json");

/// Raw HTTP from async code: each call on a blocking thread.
async fn call(
    addr: &str,
    method: &'static str,
    path: String,
    headers: &'static [(&'static str, &'static str)],
    body: String,
) -> common::Response {
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || http(&addr, method, &path, headers, body.as_bytes()))
        .await
        .unwrap()
}

async fn setup(server: &Server) {
    let r = call(
        &server.addr,
        "POST",
        "/api/v1/namespaces".into(),
        &[JSON],
        json!({"metadata":{"name":"lw"}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 201);
}

async fn create_pod(server: &Server, name: &str, node: &str) {
    let pod = json!({"metadata":{"name":name},"spec":{"nodeName":node,"containers":[{"name":"c","image":"x"}]}});
    let r = call(
        &server.addr,
        "POST",
        "/api/v1/namespaces/lw/pods".into(),
        &[JSON],
        pod.to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
}

fn lister(server: &Server, path: &str) -> HttpListerWatcher {
    HttpListerWatcher::new(HttpConfig::new(server.url.clone()).unwrap(), path)
        .unwrap()
        .with_selectable_fields(SelectableFields::new(POD_FIELDS))
}

async fn server_state(server: &Server) -> BTreeMap<String, u64> {
    let list = call(
        &server.addr,
        "GET",
        "/api/v1/namespaces/lw/pods".into(),
        &[],
        String::new(),
    )
    .await
    .json();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let m = &p["metadata"];
            (
                m["name"].as_str().unwrap().to_owned(),
                m["resourceVersion"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

async fn converges(store: &Store<Object>, server: &Server) {
    let want = server_state(server).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got: BTreeMap<String, u64> = store
            .list()
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version()))
            .collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "store never converged: {got:?} vs {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn reflector_mirrors_writes(config: Config) -> Server {
    let server = Server::start(&[]);
    setup(&server).await;
    for i in 0..5 {
        create_pod(&server, &format!("pre{i}"), "n1").await;
    }
    let writer = Writer::default();
    let store = writer.store();
    let driver = tokio::spawn(
        reflector(
            writer,
            watcher(lister(&server, "/api/v1/namespaces/lw/pods"), config),
        )
        .for_each(|_| async {}),
    );
    tokio::time::timeout(PATIENCE, store.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    // The first list asks for RV "0", which the watch cache may serve from slightly behind
    // the writes just made (any version is allowed, as upstream); the watch then catches up.
    converges(&store, &server).await;
    assert_eq!(store.len(), 5);
    for i in 0..20 {
        create_pod(
            &server,
            &format!("p{i}"),
            if i % 2 == 0 { "n1" } else { "n2" },
        )
        .await;
    }
    for i in 0..10 {
        let patch = json!({"metadata":{"labels":{"round":i.to_string()}}}).to_string();
        call(
            &server.addr,
            "PATCH",
            format!("/api/v1/namespaces/lw/pods/p{i}"),
            &[MERGE],
            patch,
        )
        .await;
    }
    for i in 0..5 {
        call(
            &server.addr,
            "DELETE",
            // Scheduled pods: grace 0 removes them at once (a kubelet's DELETE upstream).
            format!("/api/v1/namespaces/lw/pods/pre{i}?gracePeriodSeconds=0"),
            &[],
            String::new(),
        )
        .await;
    }
    converges(&store, &server).await;
    assert_eq!(store.len(), 20);
    driver.abort();
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reflector_with_paged_lists_mirrors_the_server() {
    reflector_mirrors_writes(Config::default().page_size(2)).await;
}

/// The streaming list is a watch-list, which listwatch-client asks gzipped and the server
/// gzips: the reflector mirrors the server through a compressed watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reflector_with_streaming_list_mirrors_the_server() {
    let server = reflector_mirrors_writes(Config::default().streaming_list(true)).await;
    let metrics = call(&server.addr, "GET", "/metrics".into(), &[], String::new()).await;
    let gzipped_watches = String::from_utf8_lossy(&metrics.body)
        .lines()
        .find_map(|l| {
            l.strip_prefix("listwatch_gzip_responses_total{kind=\"watch\"}")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0);
    assert!(gzipped_watches >= 1.0, "the watch-list came gzipped");
}

struct Recorder(tokio::sync::mpsc::UnboundedSender<String>);

impl EventHandler<Object> for Recorder {
    fn on_add(&mut self, o: &Arc<Object>, initial: bool) {
        let _ = self.0.send(format!(
            "{} {}",
            if initial { "listed" } else { "added" },
            o.name()
        ));
    }
    fn on_update(&mut self, _old: &Arc<Object>, new: &Arc<Object>) {
        let _ = self.0.send(format!("updated {}", new.name()));
    }
    fn on_delete(&mut self, o: &Arc<Object>, _unknown: bool) {
        let _ = self.0.send(format!("deleted {}", o.name()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_handlers_see_a_node_scoped_selection_change() {
    let server = Server::start(&[]);
    setup(&server).await;
    create_pod(&server, "on-n1", "n1").await;
    create_pod(&server, "on-n2", "n2").await;
    let config =
        Config::default().fields(listwatch_api::FieldSelector::equals("spec.nodeName", "n1"));
    let informer = Informer::spawn(
        lister(&server, "/api/v1/pods"),
        InformerConfig::default().reflector(config),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _handler = informer.add_handler(Recorder(tx));
    tokio::time::timeout(PATIENCE, informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();

    create_pod(&server, "new-n1", "n1").await;
    create_pod(&server, "new-n2", "n2").await;
    call(
        &server.addr,
        "PATCH",
        "/api/v1/namespaces/lw/pods/on-n1".into(),
        &[MERGE],
        r#"{"metadata":{"labels":{"x":"1"}}}"#.into(),
    )
    .await;
    call(
        &server.addr,
        "DELETE",
        // A scheduled pod: grace 0 removes it at once (after the write that marks it).
        "/api/v1/namespaces/lw/pods/new-n1?gracePeriodSeconds=0".into(),
        &[],
        String::new(),
    )
    .await;

    let want = [
        "listed on-n1",
        "added new-n1",
        "updated on-n1",
        "updated new-n1",
        "deleted new-n1",
    ];
    let mut got = Vec::new();
    while got.len() < want.len() {
        let ev = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("handler events")
            .unwrap();
        got.push(ev);
    }
    // The first list asks for RV "0", which the watch cache may serve from just before
    // on-n1's creation (any version is allowed, as upstream): then on-n1 comes as a watch
    // add instead of a listed object.
    if got.first().is_some_and(|e| e == "added on-n1") {
        got[0] = "listed on-n1".into();
    }
    assert_eq!(got, want, "only pods on n1 reach the handler, in order");
    assert_eq!(informer.store().len(), 1);
}

/// `metadata_only`: the list and the watch answer `PartialObjectMetadata` (no spec), and a
/// label change made while watching reaches the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_reflector_holds_partial_object_metadata() {
    let server = Server::start(&[]);
    setup(&server).await;
    for i in 0..3 {
        create_pod(&server, &format!("m{i}"), "n1").await;
    }
    let writer = Writer::default();
    let store = writer.store();
    let lw = lister(&server, "/api/v1/namespaces/lw/pods").metadata_only();
    let driver = tokio::spawn(
        reflector(writer, watcher(lw, Config::default().page_size(2))).for_each(|_| async {}),
    );
    tokio::time::timeout(PATIENCE, store.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    converges(&store, &server).await;
    // Listed objects: metadata only.
    for o in store.list() {
        let v = o.to_value().unwrap();
        assert_eq!(v["kind"], "PartialObjectMetadata", "{v}");
        assert_eq!(v["apiVersion"], "meta.k8s.io/v1", "{v}");
        assert!(v.get("spec").is_none() && v.get("status").is_none(), "{v}");
    }
    // Watched: a new pod and a label change.
    create_pod(&server, "m3", "n2").await;
    let patch = json!({"metadata":{"labels":{"tier":"web"}}}).to_string();
    let r = call(
        &server.addr,
        "PATCH",
        "/api/v1/namespaces/lw/pods/m0".into(),
        &[MERGE],
        patch,
    )
    .await;
    assert_eq!(r.status, 200);
    converges(&store, &server).await;
    let m0 = store
        .list()
        .into_iter()
        .find(|o| o.name() == "m0")
        .unwrap()
        .to_value()
        .unwrap();
    assert_eq!(m0["metadata"]["labels"]["tier"], "web", "{m0}");
    for o in store.list() {
        let v = o.to_value().unwrap();
        assert_eq!(v["kind"], "PartialObjectMetadata", "{v}");
        assert!(v.get("spec").is_none(), "{v}");
    }
    driver.abort();
}
