//! The client-side rate limiter against a scripted HTTP server: requests past the burst wait
//! for their token, the first try however long that takes (before the request timeout
//! starts, as client-go), a retry only within the request timeout; requests dropped while
//! they wait give their tokens back; a `qps` of 0 is no limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use listwatch_client::{HttpClient, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers every request with a small object; counts the requests.
async fn serve(count: Arc<AtomicUsize>) -> String {
    serve_refusing(count, 0).await
}

/// Answers the first `refusals` requests 429 with `Retry-After: 1`, then a small object;
/// counts the requests.
async fn serve_refusing(count: Arc<AtomicUsize>, refusals: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    match sock.read_u8().await {
                        Ok(b) => head.push(b),
                        Err(_) => return,
                    }
                }
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (status, body) = if n < refusals {
                    (
                        "429 Too Many Requests\r\nRetry-After: 1",
                        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}"#,
                    )
                } else {
                    (
                        "200 OK",
                        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#,
                    )
                };
                let res = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.ok();
            });
        }
    });
    url
}

const PATH: &str = "/api/v1/namespaces/d/configmaps/a";

/// A bucket of 2 refilled once an hour, a 5 s request timeout: two requests go at once, the
/// third waits the hour for its token and is then sent (before, it failed at once without
/// being sent: the wait was bounded by the request timeout, which client-go starts only
/// after the first try's token).
#[tokio::test(start_paused = true)]
async fn a_first_try_waits_for_its_token_past_the_request_timeout() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve(Arc::clone(&count)).await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(5))
            .rate_limit(1.0 / 3600.0, 2),
    )
    .unwrap();
    let start = tokio::time::Instant::now();
    assert!(client.get(PATH).await.unwrap().is_some());
    assert!(client.get(PATH).await.unwrap().is_some());
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert!(client.get(PATH).await.unwrap().is_some());
    assert_eq!(count.load(Ordering::SeqCst), 3);
    assert!(
        start.elapsed() >= Duration::from_secs(3600),
        "the third request went before its token was due: {:?}",
        start.elapsed()
    );
    assert!(client.metrics().rate_limiter_wait >= Duration::from_secs(3599));
}

/// The red team's probe (rtcl M2): QPS 2, burst 1, a 1 s request timeout, six GETs at once.
/// client-go sends all six within ~2.5 s; before, the fourth and later failed at once.
#[tokio::test]
async fn a_burst_past_the_timeout_waits_for_its_tokens_instead_of_failing() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve(Arc::clone(&count)).await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(1))
            .rate_limit(2.0, 1),
    )
    .unwrap();
    let gets = (0..6).map(|_| {
        let c = client.clone();
        async move { c.get(PATH).await }
    });
    let results = futures::future::join_all(gets).await;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 6 requests failed ({} sent): {failed:?}",
        failed.len(),
        count.load(Ordering::SeqCst)
    );
    assert_eq!(count.load(Ordering::SeqCst), 6);
}

/// A retry after `Retry-After` takes a token too, within the request timeout: QPS 1/3600,
/// burst 1, the answer 429 `Retry-After: 1`: the retry's token is an hour away, past the 5 s
/// timeout, so the 429 is returned at once and nothing more is sent.
#[tokio::test(start_paused = true)]
async fn a_retry_whose_token_is_due_past_the_deadline_returns_the_refusal() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve_refusing(Arc::clone(&count), 1).await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(5))
            .rate_limit(1.0 / 3600.0, 1),
    )
    .unwrap();
    let e = client.get(PATH).await.unwrap_err();
    assert!(e.to_string().contains("client rate limiter"), "{e}");
    assert_eq!(count.load(Ordering::SeqCst), 1, "the retry was sent");
}

/// The red team's probe (rtcl M3): QPS 1, burst 1; 20 requests start and are dropped while
/// they wait (a lost lease, a caller's own timeout). They give their tokens back, so the
/// next request goes within a second instead of waiting behind 19 requests never sent.
#[tokio::test(start_paused = true)]
async fn requests_dropped_while_throttled_give_their_tokens_back() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve(Arc::clone(&count)).await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(60))
            .rate_limit(1.0, 1),
    )
    .unwrap();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.get(PATH).await })
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
    client.get(PATH).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited <= Duration::from_secs(1),
        "the next request waited {waited:?} (virtual) for tokens of 19 dropped requests"
    );
}

/// `rate_limit(0.0, n)` is no limit (the token bucket's meaning of 0): requests past the
/// burst go at once. Before, they waited forever for a token refilled at the smallest rate.
#[tokio::test(start_paused = true)]
async fn a_qps_of_zero_is_no_limit() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve(Arc::clone(&count)).await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap().rate_limit(0.0, 1)).unwrap();
    let five = async {
        for _ in 0..5 {
            client.get(PATH).await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(3600), five)
        .await
        .expect("requests past the burst of a zero qps limit waited for a token");
    assert_eq!(count.load(Ordering::SeqCst), 5);
    assert_eq!(client.metrics().rate_limiter_wait, Duration::ZERO);
}
