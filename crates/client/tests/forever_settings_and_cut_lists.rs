//! Regression tests from the third client red team (rtcl3, issue 32): a first list cut short
//! by a clean end of its body (a close-delimited response, a proxy re-framing a cut upstream)
//! is a transport failure retried, not a fatal answer; reflector settings of "forever"
//! (`Duration::MAX`, an infinite jitter) do not panic the informer's driver; a storm of more
//! than 4096 dropped waits does not stall the rate limiter; panics on the retry path back off
//! within the cap. Against a raw loopback server or a paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use listwatch_client::{Api, HttpClient, HttpConfig, Informer, InformerConfig, SyncError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the server writes for one request (then it closes, except `Watch`).
enum Raw {
    /// These bytes as they are (head and body), then the connection closes.
    Bytes(String),
    /// A 200 chunked watch with these frames, then the connection stays open.
    Watch(Vec<String>),
}

async fn read_head(sock: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(sock.read_u8().await.ok()?);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    Some(text.lines().next()?.split(' ').nth(1)?.to_owned())
}

/// A server answering `script(target, n-th list)`; its URL and its count of lists.
async fn raw_server(
    script: impl Fn(&str, usize) -> Raw + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let script = Arc::new(script);
    let lists = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&lists);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (script, lists) = (Arc::clone(&script), Arc::clone(&lists));
            tokio::spawn(async move {
                let Some(target) = read_head(&mut sock).await else {
                    return;
                };
                let watch = target.contains("watch=true") || target.contains("watch=1");
                let n = if watch {
                    0
                } else {
                    lists.fetch_add(1, Ordering::SeqCst)
                };
                match script(&target, n) {
                    Raw::Bytes(b) => {
                        sock.write_all(b.as_bytes()).await.ok();
                        sock.flush().await.ok();
                        sock.shutdown().await.ok();
                    }
                    Raw::Watch(frames) => {
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
    (url, counted)
}

fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"{rv}"}},"spec":{{"containers":[]}}}}"#
    )
}

fn pod_list(rv: u64, items: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// A whole list with its length.
fn whole(body: &str) -> Raw {
    Raw::Bytes(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// The first half of a list's body.
fn half(body: &str) -> &str {
    body.get(..body.len() / 2).unwrap()
}

fn list_of_two() -> String {
    pod_list(10, &[pod("a", 5), pod("b", 6)])
}

fn informer_with(url: &str, config: InformerConfig<Pod>) -> Informer<Pod> {
    let client = HttpClient::new(HttpConfig::new(url).unwrap()).unwrap();
    Informer::spawn(Api::<Pod>::all(client), config)
}

/// Waits (bounded) for the first sync and says how it went.
async fn first_sync(informer: &Informer<Pod>) -> Result<(), SyncError> {
    tokio::time::timeout(Duration::from_secs(30), informer.wait_until_synced())
        .await
        .unwrap_or_else(|_| panic!("wait_until_synced hung for 30 s"))
}

/// H: the first list's connection is cut mid-body, and the response had no length (a
/// close-delimited HTTP/1.1 answer, which hyper ends cleanly at EOF): the body is a
/// truncated list, `Error::Decode`, which fa79cf8 made fatal before the first sync. The
/// second try gets the whole list, so the informer syncs; the wait must not fail for good
/// on a transient cut (it did not before fa79cf8: Decode was retried).
#[tokio::test]
async fn a_first_list_cut_short_by_a_close_delimited_body_is_retried_not_fatal() {
    let (url, lists) = raw_server(|target, n| {
        if target.contains("watch=") {
            Raw::Watch(vec![])
        } else if n == 0 {
            Raw::Bytes(format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
                half(&list_of_two())
            ))
        } else {
            whole(&list_of_two())
        }
    })
    .await;
    let informer = informer_with(&url, InformerConfig::default());
    let synced = first_sync(&informer).await;
    assert!(
        synced.is_ok(),
        "a transient cut failed the first sync: {synced:?} (lists made: {})",
        lists.load(Ordering::SeqCst)
    );
    assert_eq!(informer.store().len(), 2);
}

/// H, same through a proxy: the upstream died mid-list and the proxy ended its chunked
/// answer cleanly (nginx does so for a close-delimited upstream). Retried, not fatal.
#[tokio::test]
async fn a_first_list_cut_short_but_cleanly_chunked_by_a_proxy_is_retried_not_fatal() {
    let (url, _lists) = raw_server(|target, n| {
        if target.contains("watch=") {
            Raw::Watch(vec![])
        } else if n == 0 {
            let part = half(&list_of_two()).to_owned();
            Raw::Bytes(format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{part}\r\n0\r\n\r\n",
                part.len()
            ))
        } else {
            whole(&list_of_two())
        }
    })
    .await;
    let informer = informer_with(&url, InformerConfig::default());
    let synced = first_sync(&informer).await;
    assert!(
        synced.is_ok(),
        "a transient cut failed the first sync: {synced:?}"
    );
    assert_eq!(informer.store().len(), 2);
}

/// Verification: a first list whose connection is reset before its announced length
/// (hyper: incomplete body, `Error::Http`) stays retriable, and the informer syncs.
#[tokio::test]
async fn a_first_list_cut_before_its_content_length_is_retried() {
    let (url, _lists) = raw_server(|target, n| {
        if target.contains("watch=") {
            Raw::Watch(vec![])
        } else if n == 0 {
            let body = list_of_two();
            Raw::Bytes(format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                body.len(),
                half(&body)
            ))
        } else {
            whole(&list_of_two())
        }
    })
    .await;
    let informer = informer_with(&url, InformerConfig::default());
    first_sync(&informer).await.unwrap();
    assert_eq!(informer.store().len(), 2);
}

/// M: `min_watch_timeout(Duration::MAX)` ("never time the watch out"): `idle_limit`
/// computes `min_watch_timeout * 2` eagerly (the `map_or` default) and panics on every
/// watch, killing the informer's driver after the first sync: a watched change never
/// arrives. The rtcl2 H2 fix saturated the idle deadline's `Instant +` but not this.
#[tokio::test]
async fn a_min_watch_timeout_of_duration_max_does_not_kill_the_informer() {
    let (url, _lists) = raw_server(|target, _| {
        if target.contains("watch=") {
            Raw::Watch(vec![format!(
                r#"{{"type":"ADDED","object":{}}}"#,
                pod("c", 11)
            )])
        } else {
            whole(&list_of_two())
        }
    })
    .await;
    let config = InformerConfig {
        reflector: listwatch_client::Config::default().min_watch_timeout(Duration::MAX),
        ..InformerConfig::default()
    };
    let informer = informer_with(&url, config);
    first_sync(&informer).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while informer.store().len() < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "the watched ADDED ns/c never reached the store (store: {})",
        informer.store().len()
    );
}

/// M: an initial backoff of `Duration::MAX` ("do not retry on my behalf"): the first
/// failure's `Backoff::next_delay` doubles it (`Duration * 2` overflows) and panics the
/// driver, so the bounded wait reports the informer stopped instead of timing out while
/// it (never) retries.
#[tokio::test]
async fn an_initial_backoff_of_duration_max_does_not_kill_the_informer() {
    let (url, _lists) = raw_server(|_, _| {
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable"}"#;
        Raw::Bytes(format!(
            "HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    })
    .await;
    let config = InformerConfig {
        reflector: listwatch_client::Config::default().backoff(
            Duration::MAX,
            Duration::MAX,
            Duration::from_secs(120),
            0.0,
        ),
        ..InformerConfig::default()
    };
    let informer = informer_with(&url, config);
    let wait = informer
        .wait_until_synced_within(Duration::from_secs(3))
        .await;
    assert!(matches!(wait, Err(SyncError::TimedOut(_))), "{wait:?}");
}

/// M: an infinite (or huge) jitter factor: `base.mul_f64(1 + jitter × r)` panics at the
/// first failure (`Backoff::new` clamps only below 0), killing the driver.
#[tokio::test]
async fn an_infinite_backoff_jitter_does_not_kill_the_informer() {
    let (url, _lists) = raw_server(|_, _| {
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable"}"#;
        Raw::Bytes(format!(
            "HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    })
    .await;
    let config = InformerConfig {
        reflector: listwatch_client::Config::default().backoff(
            Duration::from_millis(100),
            Duration::from_secs(30),
            Duration::from_secs(120),
            f64::INFINITY,
        ),
        ..InformerConfig::default()
    };
    let informer = informer_with(&url, config);
    let wait = informer
        .wait_until_synced_within(Duration::from_secs(3))
        .await;
    assert!(matches!(wait, Err(SyncError::TimedOut(_))), "{wait:?}");
}

/// M (e64e2c6 regression): a storm of more than 4096 dropped waits. A first try waits for
/// its token however long and "drop the call to give up" (HttpConfig::rate_limit), so
/// callers with their own timeouts drop waiters oldest first. Before e64e2c6 each cancel
/// gave its token back; now only 4096 free slots are kept and the rest are lost, so after
/// the slots the next reservation is due as if the dropped ones still held their tokens:
/// here 6000 dropped at 10 qps stall every later request of the client for ~190 s.
#[tokio::test(start_paused = true)]
async fn a_storm_of_dropped_waits_does_not_stall_the_bucket_past_the_rate() {
    use listwatch_client::runtime::TokenBucket;
    let mut b = TokenBucket::new(10.0, 1);
    assert_eq!(b.reserve(None), Ok(Duration::ZERO));
    let dues: Vec<_> = (0..6000).map(|_| b.reserve_due(None).unwrap().1).collect();
    // Every waiter gives up (its caller's timeout), oldest first, before its token is due.
    for due in dues {
        b.cancel(due);
    }
    // 4097 new requests: at 10 qps, with every token given back, the last is due within
    // 409.7 s (0.1 s apart); a lost token pushes it out.
    let mut last = Duration::ZERO;
    for _ in 0..4097 {
        last = b.reserve(None).unwrap();
    }
    assert!(
        last <= Duration::from_millis(409_700),
        "the 4097th request after the storm waits {last:?}"
    );
}

/// Verification (rtcl2 H1 on the retry path): a key whose reconcile fails, then panics in
/// the closure, then panics in its future, then succeeds, is reconciled in the end, both
/// panics counted; and a key that always panics is retried within the backoff cap
/// (RateLimits::default max 1000 s), not parked.
#[tokio::test(start_paused = true)]
async fn panics_on_the_retry_path_back_off_within_the_cap_and_do_not_kill_the_workers() {
    use listwatch_client::{Action, Controller, ObjectKey};
    use std::sync::Mutex;
    let c = Controller::default();
    let calls: Arc<Mutex<Vec<(String, tokio::time::Instant)>>> = Arc::default();
    c.queue().add(ObjectKey::new(Some("ns"), "flaky"));
    c.queue().add(ObjectKey::new(Some("ns"), "always"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let seen = Arc::clone(&calls);
    let run = tokio::spawn(c.clone().run(
        1,
        move |key: ObjectKey| {
            let mut seen = seen.lock().unwrap();
            seen.push((key.as_str().to_owned(), tokio::time::Instant::now()));
            let n = seen.iter().filter(|(k, _)| k == key.as_str()).count();
            drop(seen);
            assert!(key.as_str() != "ns/always", "always panics");
            assert!(n != 2, "the closure panics on the first retry");
            let tx = tx.clone();
            async move {
                match n {
                    1 => Err("first try fails".to_owned()),
                    3 => panic!("the future panics on the second retry"),
                    _ => {
                        tx.send(()).ok();
                        Ok(Action::Done)
                    }
                }
            }
        },
        std::future::pending::<()>(),
        Duration::from_secs(5),
    ));
    let done = tokio::time::timeout(Duration::from_secs(600), rx.recv()).await;
    assert!(done.is_ok(), "ns/flaky was never reconciled");
    tokio::time::sleep(Duration::from_secs(4 * 3600)).await;
    run.abort();
    assert!(c.panics() >= 2);
    let calls = calls.lock().unwrap();
    let always: Vec<_> = calls
        .iter()
        .filter(|(k, _)| k == "ns/always")
        .map(|(_, t)| *t)
        .collect();
    assert!(always.len() >= 10, "retried {} times in 4 h", always.len());
    for w in always.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap <= Duration::from_secs(1001),
            "a retry {gap:?} after the last"
        );
    }
}
