//! The HTTP lister-watcher against a tiny fake server on loopback that serves fixed wire
//! bytes: paging, incremental watch decoding, Status errors, refused connections, tokens
//! and kubeconfig.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use listwatch_client::{
    Config, Event, HttpConfig, HttpListerWatcher, ListRequest, ListerWatcher, WatchEvent,
    WatchRequest, Writer, reflector, watcher,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// What the fake server answers.
enum Reply {
    /// A complete response with a content length.
    Full(u16, String),
    /// A chunked 200 response; waits for `gate` before each chunk after the first.
    Chunked(Vec<String>, Arc<Notify>),
    /// Never answers (the connection stays open).
    Hang,
    /// Headers with this code, then a chunked body of garbage that never ends.
    Endless(u16),
    /// A 200 list whose `items` never end: `{"items":[` then `{"a":1},` forever.
    EndlessList,
    /// A complete response with this code and `content-encoding: gzip`, body compressed.
    Gzip(u16, Vec<u8>),
    /// A chunked 200 response with `content-encoding: gzip`: these raw chunks, in order.
    GzipChunks(Vec<Vec<u8>>),
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Seen request heads (request line + headers).
type Seen = Arc<Mutex<Vec<String>>>;

async fn serve(route: impl Fn(&str) -> Reply + Send + Sync + 'static) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let route = Arc::new(route);
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let route = Arc::clone(&route);
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8(head).unwrap();
                let target = head.split_whitespace().nth(1).unwrap().to_owned();
                log.lock().unwrap().push(head);
                match route(&target) {
                    Reply::Endless(code) => {
                        let head = format!(
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                        );
                        if sock.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                        let chunk = format!("{:x}\r\n{}\r\n", 4096, "x".repeat(4096));
                        while sock.write_all(chunk.as_bytes()).await.is_ok() {}
                    }
                    Reply::EndlessList => {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                        let open = "a\r\n{\"items\":[\r\n";
                        if sock.write_all(head.as_bytes()).await.is_err()
                            || sock.write_all(open.as_bytes()).await.is_err()
                        {
                            return;
                        }
                        let items = "{\"a\":1},".repeat(512);
                        let chunk = format!("{:x}\r\n{items}\r\n", items.len());
                        while sock.write_all(chunk.as_bytes()).await.is_ok() {}
                    }
                    Reply::Hang => {
                        let _ = sock.read(&mut buf).await;
                    }
                    Reply::Full(code, body) => {
                        let resp = format!(
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        sock.write_all(resp.as_bytes()).await.unwrap();
                    }
                    Reply::Gzip(code, body) => {
                        let head = format!(
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        );
                        sock.write_all(head.as_bytes()).await.unwrap();
                        sock.write_all(&body).await.unwrap();
                    }
                    Reply::GzipChunks(chunks) => {
                        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n").await.unwrap();
                        for c in chunks {
                            let mut frame = format!("{:x}\r\n", c.len()).into_bytes();
                            frame.extend_from_slice(&c);
                            frame.extend_from_slice(b"\r\n");
                            if sock.write_all(&frame).await.is_err() {
                                return;
                            }
                            sock.flush().await.unwrap();
                        }
                        let _ = sock.write_all(b"0\r\n\r\n").await;
                    }
                    Reply::Chunked(chunks, gate) => {
                        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n").await.unwrap();
                        for (i, c) in chunks.iter().enumerate() {
                            if i > 0 {
                                gate.notified().await;
                            }
                            let frame = format!("{:x}\r\n{c}\r\n", c.len());
                            if sock.write_all(frame.as_bytes()).await.is_err() {
                                return;
                            }
                            sock.flush().await.unwrap();
                        }
                        let _ = sock.write_all(b"0\r\n\r\n").await;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n1"}}}}"#
    )
}

fn list_body(rv: u64, cont: &str, pods: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","continue":"{cont}"}},"items":[{}]}}"#,
        pods.join(",")
    )
}

#[tokio::test]
async fn lists_follow_continue_tokens_with_limit_and_without_a_version_on_continuations() {
    let (url, seen) = serve(|target| {
        if target.contains("continue=tok%2F1") {
            Reply::Full(200, list_body(10, "", &[pod("c", 9)]))
        } else {
            Reply::Full(200, list_body(10, "tok/1", &[pod("a", 3), pod("b", 4)]))
        }
    })
    .await;
    let lw = HttpListerWatcher::new(
        HttpConfig::new(&url).unwrap().bearer_token("t0k"),
        "/api/v1/pods",
    )
    .unwrap();
    let first = lw
        .list(&ListRequest {
            resource_version: Some("0".into()),
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        first.items.iter().map(|o| o.name()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        (first.resource_version, first.continue_token.as_deref()),
        ("10".to_owned(), Some("tok/1"))
    );
    let next = lw
        .list(&ListRequest {
            continue_token: first.continue_token,
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(next.items[0].resource_version(), 9);
    assert_eq!(next.continue_token, None);
    let seen = seen.lock().unwrap();
    assert!(
        seen[0].starts_with("GET /api/v1/pods?limit=2&resourceVersion=0 HTTP/1.1"),
        "{}",
        seen[0]
    );
    assert!(
        seen[1].starts_with("GET /api/v1/pods?limit=2&continue=tok%2F1 HTTP/1.1"),
        "{}",
        seen[1]
    );
    assert!(
        seen.iter()
            .all(|h| h.to_ascii_lowercase().contains("authorization: bearer t0k"))
    );
}

#[tokio::test]
async fn watch_frames_are_decoded_as_chunks_arrive_even_when_split_mid_frame() {
    let gate = Arc::new(Notify::new());
    let added = format!(r#"{{"type":"ADDED","object":{}}}"#, pod("a", 5));
    let modified = format!(r#"{{"type":"MODIFIED","object":{}}}"#, pod("a", 6));
    let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"8"}}}"#;
    let (a1, a2) = modified.split_at(17);
    let chunks = vec![
        format!("{added}\n{a1}"),
        format!("{a2}\n"),
        format!("{bookmark}\n"),
    ];
    let g = Arc::clone(&gate);
    let (url, seen) = serve(move |_| Reply::Chunked(chunks.clone(), Arc::clone(&g))).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/namespaces/ns/pods")
        .unwrap();
    let mut w = lw
        .watch(&WatchRequest {
            resource_version: Some("4".into()),
            allow_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        })
        .await
        .unwrap();
    // The server holds the rest until we let it go: the first event must already be here.
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!((o.name(), o.resource_version()), ("a", 5)),
        other => panic!("{other:?}"),
    }
    gate.notify_one();
    assert!(
        matches!(w.next().await.unwrap().unwrap(), WatchEvent::Modified(o) if o.resource_version() == 6)
    );
    gate.notify_one();
    assert_eq!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Bookmark {
            resource_version: "8".into(),
            initial_events_end: false
        }
    );
    assert!(w.next().await.is_none());
    let head = seen.lock().unwrap()[0].clone();
    assert!(
        head.starts_with(
            "GET /api/v1/namespaces/ns/pods?watch=1&resourceVersion=4&allowWatchBookmarks=true&timeoutSeconds=300 "
        ),
        "{head}"
    );
}

#[tokio::test]
async fn status_bodies_become_typed_errors_with_code_reason_and_retry_hint() {
    let (url, _) = serve(|target| {
        if target.contains("watch=1") {
            Reply::Full(429, r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"slow down","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":2}}"#.into())
        } else if target.contains("resourceVersion=7") {
            Reply::Full(410, r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 7 (9)","reason":"Expired","code":410}"#.into())
        } else {
            Reply::Full(503, "upstream down".into())
        }
    })
    .await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let e = lw
        .list(&ListRequest {
            resource_version: Some("7".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(e.is_expired());
    assert_eq!((e.code(), e.reason()), (Some(410), Some("Expired")));
    let e = lw.watch(&WatchRequest::default()).await.err().unwrap();
    assert!(e.is_too_many_requests() && e.is_retriable_with_backoff());
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Some(503));
    assert_eq!(e.status().unwrap().message, "upstream down");
}

#[tokio::test]
async fn an_error_event_ends_the_watch_stream_with_the_status() {
    let gate = Arc::new(Notify::new());
    let chunks = vec![format!(
        "{}\n{}\n",
        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#,
        r#"{"type":"ADDED","object":{"metadata":{"name":"never"}}}"#
    )];
    let (url, _) = serve(move |_| Reply::Chunked(chunks.clone(), Arc::clone(&gate))).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let mut w = lw.watch(&WatchRequest::default()).await.unwrap();
    assert!(w.next().await.unwrap().unwrap_err().is_expired());
    assert!(w.next().await.is_none(), "nothing after an ERROR event");
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error_the_reflector_retries() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let lw = HttpListerWatcher::new(
        HttpConfig::new(format!("http://127.0.0.1:{port}")).unwrap(),
        "/api/v1/pods",
    )
    .unwrap();
    let e = lw.watch(&WatchRequest::default()).await.err().unwrap();
    assert!(matches!(e, listwatch_client::Error::Connect(_)), "{e:?}");
    assert!(e.is_retriable_with_backoff());
}

#[tokio::test]
async fn a_reflector_over_http_mirrors_a_list_then_watch_events() {
    let gate = Arc::new(Notify::new());
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let g = Arc::clone(&gate);
    let (url, _) = serve(move |target| {
        let _ = tx.send(target.to_owned());
        if target.contains("watch=1") {
            let ev = format!(r#"{{"type":"DELETED","object":{}}}"#, pod("a", 12));
            Reply::Chunked(vec![format!("{ev}\n"), "\n".to_owned()], Arc::clone(&g))
        } else {
            Reply::Full(200, list_body(11, "", &[pod("a", 3), pod("b", 4)]))
        }
    })
    .await;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster: {{server: \"{url}\"}}\nusers:\n- name: u\n  user: {{token: abc}}\n"
    );
    let config = HttpConfig::from_kubeconfig_yaml(&kubeconfig, std::path::Path::new(".")).unwrap();
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let writer = Writer::default();
    let store = writer.store();
    let task =
        tokio::spawn(reflector(writer, watcher(lw, Config::default())).for_each(|_| async {}));
    store.wait_until_synced().await.unwrap();
    assert_eq!(
        rx.recv().await.unwrap(),
        "/api/v1/pods?limit=500&resourceVersion=0"
    );
    let watch = rx.recv().await.unwrap();
    assert!(
        watch.starts_with(
            "/api/v1/pods?watch=1&resourceVersion=11&allowWatchBookmarks=true&timeoutSeconds="
        ),
        "{watch}"
    );
    for _ in 0..1000 {
        if store.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.len(), 1);
    assert!(store.get_by_name(Some("ns"), "b").is_some());
    assert_eq!(store.resource_version(), "12");
    task.abort();
}

#[tokio::test]
async fn a_server_that_never_answers_a_list_times_out_as_a_transport_error() {
    let (url, seen) = serve(|_| Reply::Hang).await;
    let config = HttpConfig::new(&url)
        .unwrap()
        .request_timeout(Duration::from_millis(200));
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    // A connection failure (the next server is tried, when there is one; the reflector backs
    // off and retries).
    assert!(matches!(e, listwatch_client::Error::Connect(_)), "{e:?}");
    let head = seen.lock().unwrap()[0].to_ascii_lowercase();
    assert!(head.starts_with("get /api/v1/pods http/1.1"), "{head}");
    assert!(head.contains("user-agent: listwatch-client/"), "{head}");
}

#[tokio::test]
async fn a_list_body_over_the_limit_is_refused_while_reading() {
    let pods: Vec<String> = (0..100).map(|i| pod(&format!("p{i}"), i)).collect();
    let body = list_body(200, "", &pods);
    assert!(body.len() > 10_000);
    let (url, _) = serve(move |_| Reply::Full(200, body.clone())).await;
    let small = HttpConfig::new(&url).unwrap().max_list_bytes(10_000);
    let lw = HttpListerWatcher::new(small, "/api/v1/pods").unwrap();
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    assert!(e.to_string().contains("larger than 10000 bytes"), "{e}");
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    assert_eq!(
        lw.list(&ListRequest::default()).await.unwrap().items.len(),
        100
    );
}

#[tokio::test]
async fn endless_bodies_are_bounded_errors_not_hangs() {
    let (url, _) = serve(|target| {
        if target.contains("watch=") {
            Reply::Endless(200)
        } else if target.contains("limit=") {
            Reply::Endless(500)
        } else if target.contains("garbage") {
            Reply::Endless(200)
        } else {
            Reply::EndlessList
        }
    })
    .await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    // An error answer: only its first 64 KiB are read for a Status.
    let limited = ListRequest {
        limit: Some(1),
        ..ListRequest::default()
    };
    let e = tokio::time::timeout(Duration::from_secs(60), lw.list(&limited))
        .await
        .expect("an endless error body is read only up to its limit")
        .unwrap_err();
    assert_eq!(e.code(), Some(500));
    // A list whose items never end: refused at max_list_bytes, streamed or collected.
    let small = HttpConfig::new(&url).unwrap().max_list_bytes(1 << 20);
    let lw = HttpListerWatcher::new(small.clone(), "/api/v1/pods").unwrap();
    let e = tokio::time::timeout(Duration::from_secs(60), lw.list(&ListRequest::default()))
        .await
        .expect("an endless list body is refused at its limit")
        .unwrap_err();
    assert!(e.to_string().contains("larger than 1048576"), "{e}");
    let mut items = lw.list_stream(&ListRequest::default()).await.unwrap();
    let mut objects = 0;
    let e = loop {
        match tokio::time::timeout(Duration::from_secs(60), items.next())
            .await
            .expect("an endless list body is refused at its limit")
        {
            Some(Ok(_)) => objects += 1,
            Some(Err(e)) => break e,
            None => panic!("an endless list does not end"),
        }
    };
    assert!(e.to_string().contains("larger than 1048576"), "{e}");
    assert!(
        objects > 1000,
        "the items before the bound came out: {objects}"
    );
    assert!(
        items.next().await.is_none(),
        "the stream ends after its error"
    );
    // Garbage that never ends: refused at its first byte.
    let garbage = HttpListerWatcher::new(small, "/garbage").unwrap();
    let e = garbage.list(&ListRequest::default()).await.unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    // A watch: one frame never ends; refused at the frame limit.
    let mut w = lw.watch(&WatchRequest::default()).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(60), w.next())
        .await
        .expect("an endless frame is refused at the frame limit")
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("frame larger than"), "{e}");
}

#[tokio::test]
async fn a_list_without_a_resource_version_is_an_error_not_version_zero() {
    let (url, seen) = serve(|_| {
        Reply::Full(
            200,
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#.into(),
        )
    })
    .await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let mut events = std::pin::pin!(watcher(lw, Config::default()));
    // The page streams in (`Init`, its objects), and its end carries no version: an error,
    // never an `InitDone` at version 0.
    let e = loop {
        let next = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap();
        match next {
            Ok(Event::Init) => {}
            Ok(other) => panic!("no relist completes at version 0: {other:?}"),
            Err(e) => break e,
        }
    };
    assert!(e.to_string().contains("resourceVersion"), "{e}");
    assert!(
        seen.lock().unwrap().iter().all(|h| !h.contains("watch=")),
        "no watch from version 0"
    );
}

#[tokio::test]
async fn a_watch_event_without_a_resource_version_is_refused_and_the_watch_resumes_from_the_last_version()
 {
    let (url, seen) = serve(|target| {
        if !target.contains("watch=") {
            Reply::Full(200, list_body(10, "", &[]))
        } else if target.contains("resourceVersion=10") && !target.contains("later") {
            let no_rv = r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x","namespace":"ns"}}}"#;
            let good = format!(r#"{{"type":"ADDED","object":{}}}"#, pod("y", 11));
            Reply::Chunked(
                vec![format!("{no_rv}\n{good}\n")],
                Arc::new(Notify::new()),
            )
        } else {
            Reply::Hang
        }
    })
    .await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let mut events = std::pin::pin!(watcher(lw, Config::default()));
    let mut got = Vec::new();
    while seen
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.contains("watch="))
        .count()
        < 2
    {
        let ev = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap();
        got.push(ev.map(|e| format!("{e:?}")).map_err(|e| e.to_string()));
    }
    assert!(
        got.iter().any(|e| e
            .as_ref()
            .is_err_and(|m| m.contains("without metadata.resourceVersion"))),
        "{got:?}"
    );
    assert!(
        got.iter()
            .all(|e| !e.as_ref().is_ok_and(|m| m.contains("\"y\""))),
        "nothing after the bad event is applied: {got:?}"
    );
    let heads = seen.lock().unwrap().clone();
    let watches: Vec<&String> = heads.iter().filter(|h| h.contains("watch=")).collect();
    assert!(watches[1].contains("resourceVersion=10"), "{}", watches[1]);
}

#[tokio::test]
async fn impersonation_and_basic_auth_go_on_every_request() {
    let (url, seen) = serve(|_| Reply::Full(200, list_body(5, "", &[]))).await;
    let yaml = format!(
        "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\nclusters: [{{name: k, cluster: {{server: \"{url}\"}}}}]\nusers: [{{name: u, user: {{username: ann, password: pw, as: jane, as-groups: [devs, ops], as-uid: \"7\", as-user-extra: {{reason: [audit]}}}}}}]\n"
    );
    let config = HttpConfig::from_kubeconfig_yaml(&yaml, std::path::Path::new("/")).unwrap();
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    lw.list(&ListRequest::default()).await.unwrap();
    let head = seen.lock().unwrap()[0].to_lowercase();
    // base64("ann:pw")
    assert!(head.contains("authorization: basic yw5uonb3"), "{head}");
    for h in [
        "impersonate-user: jane",
        "impersonate-uid: 7",
        "impersonate-group: devs",
        "impersonate-group: ops",
        "impersonate-extra-reason: audit",
    ] {
        assert!(head.contains(h), "{h} missing in {head}");
    }
}

#[tokio::test]
async fn a_proxy_that_refuses_the_tunnel_is_a_clear_error_and_a_socks_proxy_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://user:p%40ss@{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(String::new()));
    let log = Arc::clone(&got);
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(sock.read_u8().await.unwrap());
        }
        *log.lock().unwrap() = String::from_utf8(head).unwrap();
        sock.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            .await
            .unwrap();
    });
    let config = HttpConfig::new("http://10.255.255.1:8080")
        .unwrap()
        .proxy_url(proxy);
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    assert!(format!("{e:?}").contains("407"), "{e:?}");
    let head = got.lock().unwrap().clone();
    assert!(
        head.starts_with("CONNECT 10.255.255.1:8080 HTTP/1.1\r\n"),
        "{head}"
    );
    // base64("user:p@ss")
    assert!(
        head.contains("Proxy-Authorization: Basic dXNlcjpwQHNz"),
        "{head}"
    );

    let socks = HttpConfig::new("http://127.0.0.1:1")
        .unwrap()
        .proxy_url("socks5://127.0.0.1:1080");
    let e = HttpListerWatcher::new(socks, "/api/v1/pods").unwrap_err();
    assert!(e.to_string().contains("not supported"), "{e}");
}

#[tokio::test]
async fn a_kubeconfig_user_with_an_exec_plugin_is_never_anonymous() {
    // Before: parsed as a user with no credentials, then 401 forever.
    let (url, seen) = serve(|_| Reply::Full(200, list_body(5, "", &[]))).await;
    let yaml = format!(
        "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\nclusters: [{{name: k, cluster: {{server: \"{url}\"}}}}]\nusers: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, command: /nonexistent/plugin, interactiveMode: Never}}}}}}]\n"
    );
    let config = HttpConfig::from_kubeconfig_yaml(&yaml, std::path::Path::new("/")).unwrap();
    let lw = HttpListerWatcher::new(config, "/api/v1/pods").unwrap();
    let e = lw.list(&ListRequest::default()).await.unwrap_err();
    assert!(e.to_string().contains("/nonexistent/plugin"), "{e}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "no request without the credential"
    );
}

#[tokio::test]
async fn gzip_answers_are_inflated_within_the_body_limit_and_plain_watches_ask_for_none() {
    let pods: Vec<String> = (0..50).map(|i| pod(&format!("p{i}"), i + 1)).collect();
    let list = list_body(60, "", &pods);
    let bomb = gzip(&vec![b' '; 4 << 20]);
    let (url, seen) = serve(move |target| {
        if target.contains("watch=") {
            Reply::Hang
        } else if target.contains("bomb") {
            Reply::Gzip(200, bomb.clone())
        } else if target.contains("gone") {
            Reply::Gzip(
                404,
                gzip(br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#),
            )
        } else {
            Reply::Gzip(200, gzip(list.as_bytes()))
        }
    })
    .await;
    let config = HttpConfig::new(&url).unwrap().max_list_bytes(1 << 20);
    let lw = HttpListerWatcher::new(config.clone(), "/api/v1/pods").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(
        (page.items.len(), page.resource_version.as_str()),
        (50, "60")
    );
    // 4 MiB of spaces compress to a few KiB: refused at the 1 MiB limit once inflated.
    let bomb = HttpListerWatcher::new(config.clone(), "/bomb").unwrap();
    let e = bomb.list(&ListRequest::default()).await.unwrap_err();
    assert!(e.to_string().contains("once decompressed"), "{e}");
    // A compressed error body still yields its Status.
    let gone = HttpListerWatcher::new(config, "/gone").unwrap();
    let e = gone.list(&ListRequest::default()).await.unwrap_err();
    assert_eq!(e.reason(), Some("NotFound"), "{e}");
    let _ = tokio::time::timeout(
        Duration::from_millis(200),
        lw.watch(&WatchRequest::default()),
    )
    .await;
    let _ = tokio::time::timeout(
        Duration::from_millis(200),
        lw.watch(&WatchRequest {
            send_initial_events: true,
            ..WatchRequest::default()
        }),
    )
    .await;
    let heads = seen.lock().unwrap().clone();
    let (watches, lists): (Vec<&String>, Vec<&String>) =
        heads.iter().partition(|h| h.contains("watch="));
    let (watch_lists, plain): (Vec<&String>, Vec<&String>) = watches
        .iter()
        .partition(|h| h.contains("sendInitialEvents=true"));
    assert!(
        lists
            .iter()
            .chain(&watch_lists)
            .all(|h| h.to_lowercase().contains("accept-encoding: gzip")),
        "lists and watch-lists accept gzip: {heads:?}"
    );
    assert!(!plain.is_empty() && !watch_lists.is_empty());
    assert!(
        plain
            .iter()
            .all(|h| !h.to_lowercase().contains("accept-encoding"))
    );
}

fn frame(kind: &str, object: &str) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

/// The bookmark that ends a watch-list's initial events.
fn initial_events_end(rv: u64) -> String {
    frame(
        "BOOKMARK",
        &format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"true"}}}}}}"#
        ),
    )
}

/// kube-apiserver 1.37 gzips a watch-list with one gzip member per flush
/// (`WatchListCompression`): a decoder that stops after the first member, or refuses what
/// follows it, loses the watch. Here three members, the second split across chunks at an
/// odd place, and every event comes out, in order.
#[tokio::test]
async fn a_watch_list_sent_as_three_gzip_members_decodes_every_event() {
    let first = gzip(frame("ADDED", &pod("a", 5)).as_bytes());
    let second =
        gzip(format!("{}{}", frame("ADDED", &pod("b", 6)), initial_events_end(6)).as_bytes());
    let third = gzip(frame("MODIFIED", &pod("a", 7)).as_bytes());
    let (s1, s2) = second.split_at(7);
    let chunks = vec![first, s1.to_vec(), [s2, &third[..]].concat()];
    let (url, seen) = serve(move |_| Reply::GzipChunks(chunks.clone())).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let events: Vec<_> = lw
        .watch(&WatchRequest {
            send_initial_events: true,
            allow_bookmarks: true,
            ..WatchRequest::default()
        })
        .await
        .unwrap()
        .collect()
        .await;
    let got: Vec<String> = events
        .into_iter()
        .map(|e| match e.unwrap() {
            WatchEvent::Added(o) => format!("added {}@{}", o.name(), o.resource_version()),
            WatchEvent::Modified(o) => format!("modified {}@{}", o.name(), o.resource_version()),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => format!("bookmark {resource_version} {initial_events_end}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        ["added a@5", "added b@6", "bookmark 6 true", "modified a@7"]
    );
    let heads = seen.lock().unwrap().clone();
    assert!(heads[0].to_lowercase().contains("accept-encoding: gzip"));
}

/// A list body of several gzip members (what a proxy re-compressing per flush sends) is the
/// whole list, not its first member's part.
#[tokio::test]
async fn a_list_sent_as_three_gzip_members_is_the_whole_list() {
    let pods: Vec<String> = (0..30).map(|i| pod(&format!("p{i}"), i + 1)).collect();
    let body = list_body(40, "", &pods);
    let (a, rest) = body.split_at(body.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    let chunks = vec![gzip(a.as_bytes()), gzip(b.as_bytes()), gzip(c.as_bytes())];
    let (url, _) = serve(move |_| Reply::GzipChunks(chunks.clone())).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(
        (page.items.len(), page.resource_version.as_str()),
        (30, "40")
    );
}

/// A gzip bomb in a watch body: a few KiB that inflate to 64 MiB without a newline. The
/// watch fails once one frame passes its 16 MiB bound; it never inflates the rest first.
#[tokio::test]
async fn a_gzip_bomb_in_a_watch_body_is_refused_at_the_frame_bound() {
    let mut raw = b"{\"type\":\"ADDED\",\"object\":".to_vec();
    raw.resize(64 << 20, b' ');
    let bomb = gzip(&raw);
    assert!(bomb.len() < 128 << 10, "{}", bomb.len());
    let ok = gzip(frame("ADDED", &pod("a", 5)).as_bytes());
    let chunks = vec![ok, bomb];
    let (url, _) = serve(move |_| Reply::GzipChunks(chunks.clone())).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let mut events = lw
        .watch(&WatchRequest {
            send_initial_events: true,
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    assert!(matches!(
        events.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    let e = events.next().await.unwrap().unwrap_err();
    assert!(e.to_string().contains("watch frame larger than"), "{e}");
    assert!(events.next().await.is_none(), "the watch ends there");
}

/// Lists through `lw` from a server that holds the rest of the body until `gate` opens:
/// the first object must come out of the first chunk alone (a whole-body read would wait
/// forever), then the second, then the page's end.
async fn streams_items_as_they_arrive<L: ListerWatcher>(lw: L, gate: &Notify) {
    use listwatch_client::{PageEnd, PageItem, Resource};
    let mut items = lw.list_stream(&ListRequest::default()).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), items.next())
        .await
        .expect("the first item before the rest of the body")
        .unwrap()
        .unwrap();
    assert!(matches!(&first, PageItem::Object(o) if o.name() == "a"));
    gate.notify_one();
    let second = items.next().await.unwrap().unwrap();
    assert!(matches!(&second, PageItem::Object(o) if o.name() == "b"));
    let end = items.next().await.unwrap().unwrap();
    assert!(matches!(
        &end,
        PageItem::End(PageEnd {
            resource_version,
            continue_token: None
        }) if resource_version == "9"
    ));
    assert!(items.next().await.is_none());
}

#[tokio::test]
async fn list_items_come_out_as_their_bytes_arrive_on_every_http_lister_watcher() {
    use k8s_openapi::api::core::v1::Pod;
    use listwatch_client::{Api, HttpClient, Typed};
    let gate = Arc::new(Notify::new());
    let chunks = vec![
        format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{},"#,
            pod("a", 1)
        ),
        format!("{}]}}", pod("b", 2)),
    ];
    let (url, _) = serve({
        let gate = Arc::clone(&gate);
        move |_| Reply::Chunked(chunks.clone(), Arc::clone(&gate))
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let dynamic = client.lister_watcher("/api/v1/pods").unwrap();
    streams_items_as_they_arrive(dynamic.clone(), &gate).await;
    streams_items_as_they_arrive(dynamic.clone().typed::<Pod>(), &gate).await;
    streams_items_as_they_arrive(Typed::<_, Pod>::new(dynamic), &gate).await;
    streams_items_as_they_arrive(Api::<Pod>::all(client), &gate).await;
}

#[tokio::test]
async fn a_metadata_only_api_asks_for_partial_object_metadata_on_every_read() {
    use k8s_openapi::api::core::v1::Pod;
    use listwatch_client::{Api, HttpClient, PartialObjectMetadata, Resource};
    let meta = |name: &str, rv: u64| {
        format!(
            r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{"app":"web"}}}}}}"#
        )
    };
    let (url, seen) = serve(move |target| {
        if target.contains("watch=") {
            Reply::Chunked(
                vec![format!(r#"{{"type":"ADDED","object":{}}}"#, meta("w", 8)) + "\n"],
                Arc::new(Notify::new()),
            )
        } else if target.ends_with("/pods/a") {
            Reply::Full(200, meta("a", 3))
        } else {
            Reply::Full(
                200,
                format!(
                    r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{{"resourceVersion":"7"}},"items":[{}]}}"#,
                    meta("a", 3)
                ),
            )
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    // Through the type, and through a full handle's `metadata()`: the same requests.
    let by_type = Api::<PartialObjectMetadata<Pod>>::namespaced(client.clone(), "ns");
    let by_handle = Api::<Pod>::namespaced(client, "ns").metadata();
    for api in [by_type, by_handle] {
        assert!(api.is_metadata_only());
        let a = api.get("a").await.unwrap();
        assert_eq!((a.kind.as_str(), a.name()), ("PartialObjectMetadata", "a"));
        assert_eq!(a.metadata.labels.as_ref().unwrap()["app"], "web");
        let page = api.list(&ListRequest::default()).await.unwrap();
        assert_eq!(
            (
                page.resource_version.as_str(),
                &*page.items[0].resource_version()
            ),
            ("7", "3")
        );
        let mut events = api.watch(&WatchRequest::default()).await.unwrap();
        assert!(matches!(
            events.next().await.unwrap().unwrap(),
            WatchEvent::Added(o) if o.name() == "w" && o.resource_version() == "8"
        ));
        // Whole-object writes are refused before anything is sent.
        let e = api
            .create(&PartialObjectMetadata::new(Default::default()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("metadata-only"), "{e}");
    }
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 6, "{heads:?}");
    for head in &heads {
        let accept = head
            .lines()
            .find_map(|l| l.strip_prefix("accept: "))
            .unwrap_or_default();
        let want = if head.contains("watch=") || head.contains("/pods/a ") {
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
        } else {
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        };
        assert_eq!(accept, want, "{head}");
    }
}
