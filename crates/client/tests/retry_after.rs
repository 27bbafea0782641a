//! Refused requests are sent again after the server's `Retry-After`, as client-go's rest
//! client does (`checkWait`, `withRetry`): a 429 or any 5xx with a `Retry-After` of whole
//! seconds, every verb with its body, at most 10 retries, within the request timeout; on the
//! next server when the client has several. Each test runs on tokio's paused clock against a
//! scripted loopback server in its own runtime, so the waits pass in virtual time and are
//! exact: a retry 1 s after a `Retry-After: 1` arrives 1 s (and not 2 s) of virtual time
//! later.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake_api;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_api::{FakeApi, Misbehave};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use listwatch_api::Object;
use listwatch_client::{
    Api, Config, Error, Event, HttpClient, HttpConfig, ListRequest, ListerWatcher, Patch,
    PatchParams, WatchEvent, WatchRequest, watcher,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// One request the scripted server saw.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    at: Instant,
    method: String,
    target: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// One scripted answer.
#[derive(Debug, Clone)]
enum Reply {
    /// This code, a `Retry-After` header if given, this JSON body.
    Answer(u16, Option<&'static str>, String),
    /// A 200 watch: these frames (one event each), then the end of the stream.
    Watch(Vec<String>),
    /// This code and `Retry-After`, a `content-length` of 100 and 10 bytes of it, then the
    /// connection closed.
    CutBody(u16, Option<&'static str>),
    /// The same, but then the connection stays open and silent.
    StalledBody(u16, Option<&'static str>),
    /// No answer ever (the connection stays open).
    Hang,
}

/// A scripted server: the n-th request (from 0) gets `script(n)`.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    async fn start(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script = Arc::new(script);
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (script, log) = (Arc::clone(&script), Arc::clone(&log));
                tokio::spawn(async move {
                    if let Some((sock, seen)) = read_request(sock).await {
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(seen);
                            log.len() - 1
                        };
                        answer(sock, script(n)).await;
                    }
                });
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Two requests, the second the same as the first (method, target, content type and
    /// body) sent `wait` after it.
    fn assert_sent_again_after(&self, wait: Duration) -> Seen {
        let seen = self.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let (first, again) = (&seen[0], &seen[1]);
        assert_eq!(
            (
                &again.method,
                &again.target,
                &again.content_type,
                &again.body
            ),
            (
                &first.method,
                &first.target,
                &first.content_type,
                &first.body
            ),
            "sent again as it was"
        );
        assert_exact_gap(first, again, wait);
        first.clone()
    }
}

/// `b` came `gap` after `a`: on the paused clock only timers move time, so between a
/// refusal and its retry exactly the wait passes (plus nothing, since loopback I/O takes no
/// virtual time); "less than one more second" allows for none of the waits being doubled.
fn assert_exact_gap(a: &Seen, b: &Seen, gap: Duration) {
    let got = b.at - a.at;
    assert!(
        got >= gap && got < gap + Duration::from_secs(1),
        "{got:?} between the requests, {gap:?} expected"
    );
}

async fn read_request(mut sock: TcpStream) -> Option<(TcpStream, Seen)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let target = words.next().unwrap_or_default().to_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let seen = Seen {
        at: Instant::now(),
        method,
        target,
        content_type: header("content-type"),
        body,
    };
    Some((sock, seen))
}

async fn answer(mut sock: TcpStream, reply: Reply) {
    let head = |code: u16, after: Option<&str>, length: usize| {
        let after = after.map_or(String::new(), |a| format!("retry-after: {a}\r\n"));
        format!(
            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n{after}content-length: {length}\r\nconnection: close\r\n\r\n"
        )
    };
    match reply {
        Reply::Answer(code, after, body) => {
            let _ = sock
                .write_all(format!("{}{body}", head(code, after, body.len())).as_bytes())
                .await;
        }
        Reply::Watch(frames) => {
            let mut out = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
            );
            for f in frames {
                let line = format!("{f}\n");
                out.push_str(&format!("{:x}\r\n{line}\r\n", line.len()));
            }
            out.push_str("0\r\n\r\n");
            let _ = sock.write_all(out.as_bytes()).await;
        }
        Reply::CutBody(code, after) | Reply::StalledBody(code, after) => {
            let stall = matches!(reply, Reply::StalledBody(..));
            let _ = sock
                .write_all(format!("{}{{\"kind\":\"S", head(code, after, 100)).as_bytes())
                .await;
            if stall {
                silent(sock).await;
            }
        }
        Reply::Hang => silent(sock).await,
    }
}

/// Keeps the connection open, sending nothing, until the peer goes away.
async fn silent(mut sock: TcpStream) {
    let mut buf = [0u8; 64];
    while let Ok(n) = sock.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

fn pod_list(rv: u64, pods: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        pods.join(",")
    )
}

fn status(code: u16, reason: &str, message: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{message}","reason":"{reason}","code":{code}}}"#
    )
}

/// A refusal: `code` with `Retry-After: after` and a Status saying `message`.
fn refusal(code: u16, after: &'static str, message: &str) -> Reply {
    Reply::Answer(
        code,
        Some(after),
        status(code, "ServiceUnavailable", message),
    )
}

fn client(url: &str) -> HttpClient {
    HttpClient::new(HttpConfig::new(url).unwrap()).unwrap()
}

const POD_A: &str = "/api/v1/namespaces/ns/pods/a";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_is_sent_again_after_the_wait_and_succeeds() {
    let server = Server::start(|n| match n {
        0 => refusal(503, "1", "the apiserver is shutting down"),
        _ => Reply::Answer(200, None, pod("a", 5)),
    })
    .await;
    let got = client(&server.url).get(POD_A).await.unwrap().unwrap();
    assert_eq!(got["metadata"]["resourceVersion"], "5");
    server.assert_sent_again_after(SECOND);
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_sent_again_after_the_wait_and_succeeds() {
    let server = Server::start(|n| match n {
        0 => Reply::Answer(
            429,
            Some("2"),
            status(429, "TooManyRequests", "too many requests"),
        ),
        _ => Reply::Answer(200, None, pod_list(9, &[pod("a", 5)])),
    })
    .await;
    let lw = client(&server.url).lister_watcher(PODS).unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!((page.resource_version.as_str(), page.items.len()), ("9", 1));
    server.assert_sent_again_after(2 * SECOND);
}

#[tokio::test(start_paused = true)]
async fn after_ten_retries_the_last_refusal_is_the_error() {
    let server = Server::start(|n| refusal(503, "1", &format!("refusal {n}"))).await;
    let e = client(&server.url).get(POD_A).await.unwrap_err();
    let seen = server.seen();
    assert_eq!(
        seen.len(),
        11,
        "the request and 10 retries (client-go's maxRetries)"
    );
    assert_eq!(e.code(), Some(503));
    assert_eq!(
        e.status().unwrap().message,
        "refusal 10",
        "the last refusal"
    );
    assert_eq!(
        e.retry_after(),
        Some(SECOND),
        "the header's hint is on the error"
    );
    for pair in seen.windows(2) {
        assert_exact_gap(&pair[0], &pair[1], SECOND);
    }

    // `max_retries` bounds it: 0 returns the first refusal.
    let server = Server::start(|n| refusal(503, "1", &format!("refusal {n}"))).await;
    let config = HttpConfig::new(&server.url).unwrap().max_retries(0);
    let e = HttpClient::new(config)
        .unwrap()
        .get(POD_A)
        .await
        .unwrap_err();
    assert_eq!(e.status().unwrap().message, "refusal 0");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn only_a_429_or_5xx_with_whole_seconds_in_retry_after_is_retried() {
    let cases: [(u16, Option<&'static str>); 9] = [
        (500, None),
        (503, None),
        (500, Some("1.5")),
        (503, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
        (503, Some("soon")),
        (503, Some("99999999999999999999")),
        (404, Some("1")),
        (409, Some("1")),
        (403, Some("1")),
    ];
    for (code, after) in cases {
        let server = Server::start(move |_| {
            Reply::Answer(code, after, status(code, "InternalError", "scripted"))
        })
        .await;
        let e = client(&server.url)
            .create(PODS, &serde_json::from_str(&pod("a", 0)).unwrap())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(code), "{code} {after:?}");
        assert_eq!(server.seen().len(), 1, "{code} {after:?}: not retried");
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_is_sent_again_with_its_body_as_client_go_does() {
    let body: Value = serde_json::from_str(&pod("new", 0)).unwrap();
    // Refused with Retry-After: client-go re-sends a body it holds in memory, for any verb.
    for (code, after, wait) in [
        (503, "1", SECOND),
        (504, "3", 3 * SECOND),
        (429, "0", Duration::ZERO),
    ] {
        let server = Server::start(move |n| match n {
            0 => refusal(code, after, "refused"),
            _ => Reply::Answer(201, None, pod("new", 12)),
        })
        .await;
        let created = client(&server.url).create(PODS, &body).await.unwrap();
        assert_eq!(created["metadata"]["resourceVersion"], "12");
        let first = server.assert_sent_again_after(wait);
        assert_eq!(first.method, "POST");
        assert_eq!(first.content_type.as_deref(), Some("application/json"));
        assert_eq!(serde_json::from_slice::<Value>(&first.body).unwrap(), body);
    }
    // A negative Retry-After means at once.
    let server = Server::start(|n| match n {
        0 => refusal(503, "-5", "refused"),
        _ => Reply::Answer(201, None, pod("new", 12)),
    })
    .await;
    client(&server.url).create(PODS, &body).await.unwrap();
    server.assert_sent_again_after(Duration::ZERO);
}

/// Each kind of request, refused once with `503 Retry-After: 1`, then answered with `ok`.
async fn refused_once(ok: Reply) -> (Server, HttpClient) {
    let server = Server::start(move |n| match n {
        0 => refusal(503, "1", "draining"),
        _ => ok.clone(),
    })
    .await;
    let client = client(&server.url);
    (server, client)
}

#[tokio::test(start_paused = true)]
async fn every_kind_of_request_is_sent_again_after_the_wait() {
    let a = || Reply::Answer(200, None, pod("a", 5));
    let json: Value = serde_json::from_str(&pod("a", 4)).unwrap();
    let merge = serde_json::json!({"metadata": {"labels": {"x": "1"}}});
    let list = || Reply::Answer(200, None, pod_list(9, &[pod("a", 5)]));
    let watch = || {
        Reply::Watch(vec![format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            pod("w", 8)
        )])
    };
    let deleted = || {
        Reply::Answer(
            200,
            None,
            r#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#.into(),
        )
    };

    // The JSON calls of HttpClient.
    let (s, c) = refused_once(a()).await;
    assert!(c.get(POD_A).await.unwrap().is_some());
    assert_eq!(s.assert_sent_again_after(SECOND).method, "GET");
    let (s, c) = refused_once(a()).await;
    c.create(PODS, &json).await.unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "POST");
    let (s, c) = refused_once(a()).await;
    c.replace(POD_A, &json).await.unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "PUT");
    let (s, c) = refused_once(a()).await;
    c.patch(POD_A, &Patch::Merge(&merge), &PatchParams::default())
        .await
        .unwrap();
    let sent = s.assert_sent_again_after(SECOND);
    assert_eq!(
        (sent.method.as_str(), sent.content_type.as_deref()),
        ("PATCH", Some("application/merge-patch+json"))
    );
    let (s, c) = refused_once(deleted()).await;
    assert!(c.delete(POD_A).await.unwrap());
    assert_eq!(s.assert_sent_again_after(SECOND).method, "DELETE");

    // The dynamic lister-watcher.
    let (s, c) = refused_once(list()).await;
    let page = c
        .lister_watcher(PODS)
        .unwrap()
        .list(&ListRequest::default())
        .await;
    assert_eq!(page.unwrap().items.len(), 1);
    s.assert_sent_again_after(SECOND);
    let (s, c) = refused_once(watch()).await;
    let mut events = c
        .lister_watcher(PODS)
        .unwrap()
        .watch(&WatchRequest::default())
        .await
        .unwrap();
    assert!(matches!(
        events.next().await.unwrap().unwrap(),
        WatchEvent::Added(o) if o.name() == "w"
    ));
    assert!(s.assert_sent_again_after(SECOND).target.contains("watch=1"));

    // The typed Api.
    let typed = |c: HttpClient| Api::<Pod>::namespaced(c, "ns");
    let p: Pod = serde_json::from_value(json.clone()).unwrap();
    let (s, c) = refused_once(a()).await;
    typed(c).get("a").await.unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "GET");
    let (s, c) = refused_once(a()).await;
    typed(c).create(&p).await.unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "POST");
    let (s, c) = refused_once(a()).await;
    typed(c).replace("a", &p).await.unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "PUT");
    let (s, c) = refused_once(a()).await;
    typed(c)
        .patch("a", &Patch::Merge(&merge), &PatchParams::default())
        .await
        .unwrap();
    assert_eq!(s.assert_sent_again_after(SECOND).method, "PATCH");
    let (s, c) = refused_once(deleted()).await;
    assert!(typed(c).delete("a").await.unwrap());
    assert_eq!(s.assert_sent_again_after(SECOND).method, "DELETE");
    let (s, c) = refused_once(list()).await;
    assert_eq!(
        typed(c)
            .list(&ListRequest::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    s.assert_sent_again_after(SECOND);
    let (s, c) = refused_once(watch()).await;
    let mut events = typed(c).watch(&WatchRequest::default()).await.unwrap();
    assert!(matches!(
        events.next().await.unwrap().unwrap(),
        WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("w")
    ));
    s.assert_sent_again_after(SECOND);
}

#[tokio::test(start_paused = true)]
async fn retries_fit_in_the_request_timeout_and_each_wait_is_capped() {
    // Timeout 5 s, Retry-After 3: one retry at 3 s; a second would end at 6 s, past the
    // deadline, so the second refusal is the error at once, at 3 s.
    let server = Server::start(|n| refusal(503, "3", &format!("refusal {n}"))).await;
    let config = HttpConfig::new(&server.url)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let start = Instant::now();
    let e = HttpClient::new(config)
        .unwrap()
        .get(POD_A)
        .await
        .unwrap_err();
    assert_eq!(e.status().unwrap().message, "refusal 1");
    assert_eq!(server.seen().len(), 2);
    let took = start.elapsed();
    assert!(took >= 3 * SECOND && took < 4 * SECOND, "{took:?}");

    // After a retry, the attempt has only the rest of the deadline for its headers: a
    // server that stops answering fails the request at 5 s, not at 1 s + 5 s.
    let server = Server::start(|n| match n {
        0 => refusal(503, "1", "draining"),
        _ => Reply::Hang,
    })
    .await;
    let config = HttpConfig::new(&server.url)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let start = Instant::now();
    let e = HttpClient::new(config)
        .unwrap()
        .get(POD_A)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Connect(_)), "{e}");
    let took = start.elapsed();
    assert!(took >= 5 * SECOND && took < 6 * SECOND, "{took:?}");

    // A Retry-After of an hour waits 30 s (no request timeout: only the cap bounds it).
    let server = Server::start(|n| match n {
        0 => refusal(429, "3600", "busy"),
        _ => Reply::Answer(200, None, pod("a", 5)),
    })
    .await;
    let mut config = HttpConfig::new(&server.url).unwrap();
    config.request_timeout = None;
    HttpClient::new(config).unwrap().get(POD_A).await.unwrap();
    server.assert_sent_again_after(Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_whose_body_cannot_be_read_is_still_retried() {
    let server = Server::start(|n| match n {
        0 => Reply::CutBody(503, Some("1")),
        _ => Reply::Answer(200, None, pod("a", 5)),
    })
    .await;
    client(&server.url).get(POD_A).await.unwrap().unwrap();
    server.assert_sent_again_after(SECOND);

    // A body that stalls is given up at the deadline; the refusal is then the error.
    let server = Server::start(|_| Reply::StalledBody(503, Some("1"))).await;
    let config = HttpConfig::new(&server.url)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let e = HttpClient::new(config)
        .unwrap()
        .get(POD_A)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(503), "{e}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_body_that_stalls_fails_at_the_deadline_instead_of_hanging() {
    // Before error bodies were read under the deadline, this waited forever.
    let server = Server::start(|_| Reply::StalledBody(404, None)).await;
    let config = HttpConfig::new(&server.url)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let start = Instant::now();
    let c = HttpClient::new(config).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(3600), c.get(POD_A))
        .await
        .expect("the error body's read has a deadline")
        .unwrap_err();
    assert!(matches!(e, Error::Http(_)), "{e}");
    assert!(start.elapsed() < 6 * SECOND);
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let s = &seen[0];
    assert_eq!((s.method.as_str(), s.target.as_str()), ("GET", POD_A));
    assert!(s.content_type.is_none() && s.body.is_empty() && s.at == start);
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_during_its_wait_sends_nothing_more() {
    let server = Server::start(|_| refusal(503, "10", "draining")).await;
    let c = client(&server.url);
    let task = tokio::spawn(async move { c.get(POD_A).await });
    while server.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(SECOND).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        server.seen().len(),
        1,
        "no retry after the caller went away"
    );
}

#[tokio::test(start_paused = true)]
async fn with_several_servers_the_retry_goes_to_the_next_after_the_wait() {
    let a = Server::start(|_| refusal(503, "1", "the apiserver is shutting down")).await;
    let b = Server::start(|_| Reply::Answer(201, None, pod("new", 7))).await;
    let config = HttpConfig::with_servers([a.url.clone(), b.url.clone()]).unwrap();
    let c = HttpClient::new(config).unwrap();
    let body: Value = serde_json::from_str(&pod("new", 0)).unwrap();
    c.create(PODS, &body).await.unwrap();
    let (on_a, on_b) = (a.seen(), b.seen());
    assert_eq!((on_a.len(), on_b.len()), (1, 1));
    assert_eq!(on_b[0].body, on_a[0].body, "the same POST");
    assert_exact_gap(&on_a[0], &on_b[0], SECOND);
    assert_eq!(
        c.current_server(),
        b.url,
        "the client stays on the next server"
    );
    c.get(POD_A).await.unwrap();
    assert_eq!((a.seen().len(), b.seen().len()), (1, 2));

    // Both refuse once: round the list, one wait per refusal.
    let a = Server::start(|n| match n {
        0 => refusal(503, "1", "a"),
        _ => Reply::Answer(200, None, pod("x", 3)),
    })
    .await;
    let b = Server::start(|_| refusal(429, "2", "b")).await;
    let config = HttpConfig::with_servers([a.url.clone(), b.url.clone()]).unwrap();
    let c = HttpClient::new(config).unwrap();
    c.get(POD_A).await.unwrap();
    let (on_a, on_b) = (a.seen(), b.seen());
    assert_eq!((on_a.len(), on_b.len()), (2, 1));
    assert_exact_gap(&on_a[0], &on_b[0], SECOND);
    assert_exact_gap(&on_b[0], &on_a[1], 2 * SECOND);
    assert_eq!(c.current_server(), a.url);
}

/// The watcher's events and errors, as text.
type Log = Arc<Mutex<Vec<String>>>;

fn spawn_watcher(url: &str, http: impl FnOnce(HttpConfig) -> HttpConfig) -> Log {
    let client = HttpClient::new(http(HttpConfig::new(url).unwrap())).unwrap();
    let lw = client.lister_watcher("/api/v1/pods").unwrap();
    let config = Config::default().backoff(
        Duration::from_millis(500),
        Duration::from_secs(1),
        Duration::from_secs(60),
        0.0,
    );
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    tokio::spawn(watcher(lw, config).for_each(move |e| {
        let line = match e {
            Ok(Event::Apply(o)) => Some(format!("Apply {}", name(&o))),
            Ok(Event::InitDone { .. }) => Some("InitDone".into()),
            Ok(_) => None,
            Err(e) => Some(format!("error {}", e.code().unwrap_or_default())),
        };
        l.lock().unwrap().extend(line);
        async {}
    }));
    log
}

fn name(o: &Object) -> String {
    o.name().to_owned()
}

async fn until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !f() {
        assert!(Instant::now() < deadline, "condition not reached in 1 h");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn logged(log: &Log, line: &str) -> bool {
    log.lock().unwrap().iter().any(|l| l == line)
}

#[tokio::test(start_paused = true)]
async fn a_watch_refused_with_503_retry_after_is_opened_again_after_the_wait_without_a_relist() {
    let api = FakeApi::start(10).await;
    let synced = api.put("p0");
    api.fail_watches([Misbehave::Refuse(503, "1")]);
    let log = spawn_watcher(&api.url(), |c| c);
    until(|| api.watches().len() == 2).await;
    api.put("p1");
    until(|| logged(&log, "Apply p1")).await;
    let w = api.watches();
    assert_eq!(w.len(), 2, "{w:?}");
    let gap = w[1].at - w[0].at;
    assert!(gap >= SECOND && gap < 2 * SECOND, "{gap:?}");
    assert_eq!(w[1].param("resourceVersion"), Some(synced.to_string()));
    assert_eq!(api.lists().len(), 1, "no relist");
    assert_eq!(
        *log.lock().unwrap(),
        ["InitDone", "Apply p1"],
        "the refusal never reached the reflector"
    );
}

#[tokio::test(start_paused = true)]
async fn refusals_past_the_retries_go_to_the_reflector_as_client_go_s_do() {
    // One retry allowed: a watch refused twice with 429 reaches the reflector, which backs
    // off and re-watches (client-go: 429 is retriable without a relist).
    let api = FakeApi::start(10).await;
    api.put("p0");
    api.fail_watches([Misbehave::Refuse(429, "1"), Misbehave::Refuse(429, "1")]);
    let log = spawn_watcher(&api.url(), |c| c.max_retries(1));
    until(|| api.watches().len() == 3).await;
    api.put("p1");
    until(|| logged(&log, "Apply p1")).await;
    assert_eq!(api.lists().len(), 1, "429: no relist");
    assert_eq!(*log.lock().unwrap(), ["InitDone", "error 429", "Apply p1"]);

    // A watch refused twice with 503: any other open failure relists (client-go's
    // reflector relists on a watch error that is not 429 or a refused connection).
    let api = FakeApi::start(10).await;
    api.put("p0");
    api.fail_watches([Misbehave::Refuse(503, "1"), Misbehave::Refuse(503, "1")]);
    let log = spawn_watcher(&api.url(), |c| c.max_retries(1));
    until(|| api.watches().len() == 3).await;
    api.put("p1");
    until(|| logged(&log, "Apply p1")).await;
    assert_eq!(api.lists().len(), 2, "503: relisted");
}

/// The client's metrics count every attempt under its method and outcome, the retry after
/// the `Retry-After`, and an attempt that got no answer under no code (client-go's
/// `rest_client_requests_total`, `rest_client_request_retries_total`).
#[tokio::test(start_paused = true)]
async fn metrics_count_each_attempt_its_outcome_and_the_retries() {
    use listwatch_client::{RequestKey, RequestStats};
    let server = Server::start(|n| match n {
        0 => refusal(503, "1", "the apiserver is shutting down"),
        1 => Reply::Answer(200, None, pod("a", 5)),
        _ => Reply::Answer(404, None, status(404, "NotFound", "pods \"b\" not found")),
    })
    .await;
    let c = client(&server.url);
    assert!(c.get(POD_A).await.unwrap().is_some());
    assert!(
        c.get("/api/v1/namespaces/ns/pods/b")
            .await
            .unwrap()
            .is_none()
    );
    let m = c.metrics();
    let count = |method: &str, code: Option<u16>| {
        m.requests
            .get(&RequestKey {
                method: method.into(),
                code,
            })
            .map_or(0, |s: &RequestStats| s.count)
    };
    assert_eq!(
        (
            count("GET", Some(503)),
            count("GET", Some(200)),
            count("GET", Some(404))
        ),
        (1, 1, 1),
        "{m:?}"
    );
    assert_eq!(m.requests.len(), 3, "{m:?}");
    assert_eq!(m.retries, 1, "{m:?}");
    // Clones share the counters.
    assert_eq!(c.clone().metrics(), m);

    // No server: the attempt is counted without a code.
    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let c = client(&url);
    assert!(c.get(POD_A).await.is_err());
    let m = c.metrics();
    assert_eq!(
        m.requests.keys().cloned().collect::<Vec<_>>(),
        [RequestKey {
            method: "GET".into(),
            code: None
        }],
        "{m:?}"
    );
}
