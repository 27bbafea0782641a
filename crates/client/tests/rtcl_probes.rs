//! Regression tests from the red team's probes (rtcl) of issue 32: a relist never reports a
//! live object deleted, whether one of its objects does not decode or the transform panics on
//! it (client-go and kube-rs fail such a list as a whole and keep the last good store). The
//! probes of the findings not yet fixed are on branch `h-rtcl` and listed in docs/client.md
//! ("Known gaps"); `cargo xtask test` runs ignored tests, so they are not kept here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use listwatch_client::{Api, EventHandler, HttpClient, HttpConfig, Informer, InformerConfig};
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
