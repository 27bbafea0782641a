//! Red-team probes (rtcl) of issue 32: listwatch-client as an operator author and a
//! hostile server use it. Each test asserts what client-go / kube-rs do; a failing test is a
//! finding (see the report on branch h-rtcl).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use listwatch_client::events::{EventData, EventType, Recorder};
use listwatch_client::{
    Action, Api, Controller, EventHandler, HttpClient, HttpConfig, Informer, InformerConfig,
    ObjectKey,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What one request gets.
enum Reply {
    /// A status and a JSON body, then the connection closes.
    Body(u16, String),
    /// A 200 watch: these frames (chunked), then the connection stays open.
    Watch(Vec<String>),
}

/// (method, request target) of every request.
type Log = Arc<Mutex<Vec<(String, String)>>>;

/// A scripted server: `script(method, target, n-th list or watch of its kind)`.
async fn scripted(
    script: impl Fn(&str, &str, usize) -> Reply + Send + Sync + 'static,
) -> (String, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    let script = Arc::new(script);
    let lists = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (l, script, lists, watches) = (
                Arc::clone(&l),
                Arc::clone(&script),
                Arc::clone(&lists),
                Arc::clone(&watches),
            );
            tokio::spawn(async move {
                let Some((mut sock, method, target)) = read_head(sock).await else {
                    return;
                };
                l.lock().unwrap().push((method.clone(), target.clone()));
                let watch = target.contains("watch=true") || target.contains("watch=1");
                let n = if watch { &watches } else { &lists }.fetch_add(1, Ordering::SeqCst);
                match script(&method, &target, n) {
                    Reply::Body(code, body) => {
                        let res = format!(
                            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        sock.write_all(res.as_bytes()).await.ok();
                    }
                    Reply::Watch(frames) => {
                        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                        sock.write_all(head.as_bytes()).await.ok();
                        for f in frames {
                            let f = format!("{f}\n");
                            let chunk = format!("{:x}\r\n{f}\r\n", f.len());
                            sock.write_all(chunk.as_bytes()).await.ok();
                        }
                        sock.flush().await.ok();
                        let mut buf = [0u8; 64];
                        while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                }
            });
        }
    });
    (url, log)
}

/// Reads the request head and body (by Content-Length); (socket, method, target).
async fn read_head(mut sock: TcpStream) -> Option<(TcpStream, String, String)> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(sock.read_u8().await.ok()?);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut first = text.lines().next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let len = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await.ok()?;
    Some((sock, method, target))
}

fn pod(name: &str, rv: u64, node: &str) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"{rv}"}},"spec":{{"nodeName":{node},"containers":[]}}}}"#
    )
}

fn pod_list(rv: u64, items: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

#[derive(Default, Clone)]
struct Deltas(Arc<Mutex<Vec<String>>>);

impl EventHandler<Pod> for Deltas {
    fn on_add(&mut self, o: &Arc<Pod>, _: bool) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("add {name}"));
    }
    fn on_update(&mut self, _: &Arc<Pod>, o: &Arc<Pod>) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("update {name}"));
    }
    fn on_delete(&mut self, o: &Arc<Pod>, unknown: bool) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push(format!("delete {name} (final state unknown: {unknown})"));
    }
}

/// Item 3 variant: a relist in which an object that exists no longer decodes (a field of
/// the wrong type written through a CRD without a structural schema, a schema drift).
/// client-go fails that list (decode error: the store keeps its last good state and the
/// list is retried); kube-rs fails the whole page the same way. Here the item is skipped,
/// so the relist's replace *deletes* the live object from the store and every handler gets
/// `on_delete` — a `run_with_objects` reconcile then gets `None`, which its doc says means
/// "gone: clean up".
#[tokio::test]
async fn an_undecodable_object_in_a_relist_is_not_reported_deleted() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                // The watch expires: the reflector relists.
                Reply::Watch(vec![
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}"#.into(),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else if n == 0 {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        } else {
            // `a` still exists; its spec.nodeName is now a number.
            Reply::Body(200, pod_list(20, &[pod("a", 15, "7")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    let deltas = Deltas::default();
    let _reg = informer.add_handler(deltas.clone());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    // Let the 410 and the relist happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = deltas.0.lock().unwrap().clone();
    assert!(
        informer.store().get_by_name(Some("ns"), "a").is_some()
            && !seen.iter().any(|d| d.starts_with("delete a")),
        "a live object was reported deleted because one field did not decode: store has a = {:?}, deltas {seen:?}",
        informer.store().get_by_name(Some("ns"), "a").is_some(),
    );
}

/// Item 3, watch variant: a MODIFIED and then the DELETED of `a`, both undecodable. Both are
/// skipped; the store keeps `a` (at its old version) for good while the server has none, and
/// `has_synced` stays true. (kube-rs's watcher skips such an event too; client-go ends the
/// watch and relists, so its store never keeps a ghost past a successful relist.)
#[tokio::test]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn an_undecodable_delete_in_a_watch_leaves_no_ghost() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                let m = pod("a", 11, "7");
                let d = pod("a", 12, "7");
                Reply::Watch(vec![
                    format!(r#"{{"type":"MODIFIED","object":{m}}}"#),
                    format!(r#"{{"type":"DELETED","object":{d}}}"#),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ghost = informer.store().get_by_name(Some("ns"), "a");
    assert!(
        ghost.is_none(),
        "the server deleted a, the store still has it at version {:?} (synced: {})",
        ghost.and_then(|p| p.metadata.resource_version.clone()),
        informer.has_synced()
    );
}

/// Item 4 in the reference operator: it waits with `Store::wait_until_synced` (the
/// store's, which only fails when the writer is dropped), not `Informer::wait_until_synced`
/// (which fails with `SyncError::Fatal` on a 403). Against a server that refuses the list
/// with 403 (RBAC missing for one of its three resources), the informer's wait fails at
/// once, the store's — the one the operator and its readers hold — hangs for good.
#[tokio::test]
#[ignore = "rtcl finding M1: examples fixed, Store::wait_until_synced itself still waits; see docs/client.md"]
async fn the_store_wait_the_reference_operator_uses_does_not_hang_on_a_403() {
    let (url, _log) = scripted(|_, _, _| {
        Reply::Body(
            403,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"pods is forbidden"}"#.into(),
        )
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    let fatal = tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced()).await;
    assert!(matches!(fatal, Ok(Err(_))), "informer wait: {fatal:?}");
    let store_wait =
        tokio::time::timeout(Duration::from_secs(5), informer.store().wait_until_synced()).await;
    assert!(
        store_wait.is_ok(),
        "Store::wait_until_synced (examples/website_operator.rs) still waiting after 5 s on a 403"
    );
}

/// The client-side limiter refuses, instead of waiting, a request whose token is due after
/// the request timeout. client-go throttles the first try *before* it sets up the timeout
/// ("We don't want a throttled client to return timeouts to callers before it makes a single
/// request", rest/request.go): with QPS 2 / burst 1 and a 1 s timeout, 6 concurrent GETs all
/// succeed within ~2.5 s. Here the fourth and later fail at once with an error, so a
/// controller start (hundreds of reconciles at once) turns into errors and backoff.
#[tokio::test]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn a_burst_past_the_timeout_waits_for_its_tokens_instead_of_failing() {
    let (url, log) = scripted(|_, _, _| {
        Reply::Body(
            200,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#.into(),
        )
    })
    .await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(1))
            .rate_limit(2.0, 1),
    )
    .unwrap();
    let gets = (0..6).map(|_| {
        let c = client.clone();
        async move { c.get("/api/v1/namespaces/d/configmaps/a").await }
    });
    let results = futures::future::join_all(gets).await;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 6 requests failed without being sent ({} sent): {failed:?}",
        failed.len(),
        log.lock().unwrap().len()
    );
}

/// The recorder's series key includes the note: events that differ only in their message
/// (an error text with a version, a count, a timestamp) are each a new Event object,
/// forever. client-go's EventCorrelator aggregates "similar" events (same source, object,
/// type, reason; any message) after 10 in 10 minutes into one "(combined from similar
/// events)" Event whose count is patched, and its spam filter allows a burst of 25 per
/// object then one per 5 minutes. 50 failures of one reconcile with varying messages:
/// client-go makes at most 11 Events; here 50 creates.
#[tokio::test]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn events_differing_only_in_their_message_do_not_create_an_event_each() {
    let (url, log) = scripted(|method, _, _| {
        let body = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"ns"}}"#;
        Reply::Body(if method == "POST" { 201 } else { 200 }, body.into())
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let recorder = Recorder::new(client, "example.com/op", "op-0");
    let regarding = ObjectReference {
        api_version: Some("example.com/v1".into()),
        kind: Some("Website".into()),
        namespace: Some("ns".into()),
        name: Some("w".into()),
        uid: Some("u1".into()),
        ..ObjectReference::default()
    };
    for i in 0..50 {
        let data = EventData {
            type_: EventType::Warning,
            reason: "ReconcileFailed".into(),
            action: "Reconcile".into(),
            note: Some(format!(
                "Operation cannot be fulfilled: the object has been modified (resourceVersion {})",
                1000 + i
            )),
        };
        recorder.publish(&regarding, &data).await.unwrap();
    }
    let log = log.lock().unwrap();
    let creates = log.iter().filter(|(m, _)| m == "POST").count();
    assert!(
        creates <= 11,
        "{creates} Event objects created for one failing reconcile ({} writes in all)",
        log.len()
    );
}

/// `HttpConfig::infer` with an empty kubeconfig file present (a container image's empty
/// ~/.kube/config, a KUBECONFIG pointing at an empty mounted file) fails, inside a pod,
/// instead of using the in-cluster configuration. client-go's DeferredLoadingClientConfig
/// treats an empty merged config (ErrEmptyConfig, or one equal to the defaults) as "no
/// kubeconfig" and uses in-cluster when possible; kube-rs's infer falls back on any
/// kubeconfig error.
#[test]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
fn infer_with_an_empty_kubeconfig_uses_the_in_cluster_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("config");
    std::fs::write(&kc, "").unwrap();
    let sa = dir.path().join("sa");
    std::fs::create_dir(&sa).unwrap();
    std::fs::write(sa.join("token"), "t").unwrap();
    std::fs::write(sa.join("ca.crt"), "ca").unwrap();
    std::fs::write(sa.join("namespace"), "ops\n").unwrap();
    let c = HttpConfig::infer_from(std::slice::from_ref(&kc), "10.0.0.1", "443", &sa);
    match c {
        Ok(c) => assert_eq!(c.base_url, "https://10.0.0.1:443"),
        Err(e) => panic!("in a pod with an empty kubeconfig file: {e}"),
    }
}

/// A controller whose `run` ended by its `shutdown` future (a custom leadership loop: stop
/// on a lost lease, run again on the next term, as `Controller::run`'s doc invites for
/// clones) is dead for good: the shared queue stays shut down, keys added afterwards are
/// dropped, and the next `run` returns no error, reconciles nothing and waits. A silent
/// no-op; kube-rs's `Controller::run` consumes the controller, client-go's queue panics
/// on nothing but `Add` after `ShutDown` is documented as ignored — neither hands out a
/// reusable handle that silently does nothing.
#[tokio::test(start_paused = true)]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn a_controller_run_again_after_a_graceful_stop_reconciles() {
    let c = Controller::default();
    let first = c.clone().run(
        1,
        |_k: ObjectKey| async { Ok::<_, String>(Action::Done) },
        tokio::time::sleep(Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    assert!(first.await);
    // The next term.
    c.queue().add(ObjectKey::new(Some("ns"), "a"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let second = tokio::spawn(c.clone().run(
        1,
        move |k: ObjectKey| {
            tx.send(k.as_str().to_owned()).ok();
            async { Ok::<_, String>(Action::Done) }
        },
        std::future::pending::<()>(),
        Duration::from_secs(1),
    ));
    let got = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    second.abort();
    assert_eq!(
        got.ok().flatten().as_deref(),
        Some("ns/a"),
        "the second run reconciled nothing and reported nothing"
    );
}

/// Item 4 variant: a transform that panics on the new version of an object that exists
/// (one the relist after a 410 brings) skips it, so the relist's replace deletes the live
/// object and handlers get `on_delete` (reported to `errors()` only). client-go's
/// HandleCrash re-panics (the process restarts, no wrong view); kube-rs's `modify` panics
/// the stream's task. Same mechanism as the undecodable relist item above.
#[tokio::test]
async fn a_transform_panic_in_a_relist_does_not_report_a_live_object_deleted() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                Reply::Watch(vec![
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}"#.into(),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else if n == 0 {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        } else {
            Reply::Body(200, pod_list(20, &[pod("a", 15, "\"node-2\"")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let config = InformerConfig::default().transform(|p: Pod| {
        assert!(
            p.metadata.resource_version.as_deref() != Some("15"),
            "transform bug on this version"
        );
        p
    });
    let informer = Informer::spawn(Api::<Pod>::all(client), config);
    let deltas = Deltas::default();
    let _reg = informer.add_handler(deltas.clone());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = deltas.0.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|d| d.starts_with("delete a")),
        "a live object was reported deleted because the transform panicked on it: {seen:?}"
    );
}

/// `Recorder::publish` is awaited inside the reconcile (examples/website_operator.rs does),
/// and retries an unreachable server 12 times with waits up to 2 s: each publish holds the
/// reconcile (and its key) ~15 s of waits plus 12 connection attempts while the server is
/// unreachable. client-go's `Eventf` never blocks the caller (the broadcaster queues and
/// retries in the background); kube-rs's publish is one request.
#[tokio::test(start_paused = true)]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn publishing_an_event_does_not_hold_the_reconcile_while_the_server_is_unreachable() {
    // A port with nothing listening: every connection is refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let recorder = Recorder::new(client, "example.com/op", "op-0");
    let regarding = ObjectReference {
        kind: Some("Website".into()),
        namespace: Some("ns".into()),
        name: Some("w".into()),
        uid: Some("u1".into()),
        ..ObjectReference::default()
    };
    let data = EventData {
        type_: EventType::Normal,
        reason: "ChildrenApplied".into(),
        action: "Reconcile".into(),
        note: None,
    };
    let start = tokio::time::Instant::now();
    let r = recorder.publish(&regarding, &data).await;
    let held = start.elapsed();
    assert!(
        held < Duration::from_secs(1),
        "publish held the reconcile {held:?} (virtual) before returning {r:?}"
    );
}

/// The limiter reserves a token before it waits and never gives it back: requests dropped
/// while they wait (a lost lease drops every reconcile in flight, a caller's own timeout)
/// keep their tokens reserved, so the next request waits behind requests that will never be
/// sent. golang.org/x/time/rate's `Wait` (client-go's token bucket) cancels the reservation
/// when its context ends, giving the tokens back. QPS 1 / burst 1: 20 requests start, are
/// dropped 100 ms later; the next one should go within ~1 s.
#[tokio::test(start_paused = true)]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
async fn requests_dropped_while_throttled_give_their_tokens_back() {
    let (url, _log) = scripted(|_, _, _| {
        Reply::Body(
            200,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#.into(),
        )
    })
    .await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(60))
            .rate_limit(1.0, 1),
    )
    .unwrap();
    let path = "/api/v1/namespaces/d/configmaps/a";
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.get(path).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    let start = tokio::time::Instant::now();
    client.get(path).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "the next request waited {waited:?} (virtual) for tokens of 19 dropped requests"
    );
}

/// `owned_by` / `controller_owner_key` match the owner reference's whole `apiVersion`, so a
/// child created while the owner was served at another version (a CRD moved from
/// `example.com/v1beta1` to `v1`, children kept) no longer wakes its owner: deleting or
/// editing that child is never repaired, silently. controller-runtime's
/// `EnqueueRequestForOwner` compares group and kind only (the version is ignored); the
/// garbage collector resolves owners by group and kind too.
#[test]
#[ignore = "rtcl finding: not fixed yet, see docs/client.md"]
fn an_owner_reference_of_another_version_of_the_owner_still_maps_to_it() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use listwatch_client::relations::controller_owner_key;
    let child = ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("ns".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1beta2".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "1234".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        ..ReplicaSet::default()
    };
    assert_eq!(
        controller_owner_key::<Deployment, _>(&child).map(|k| k.as_str().to_owned()),
        Some("ns/web".to_owned()),
        "a child whose controller reference names apps/v1beta2 Deployment web is not mapped to it"
    );
}
