//! The client-side rate limiter against a scripted HTTP server: requests past the burst wait
//! for their token, and one whose token is due after the request timeout fails at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use listwatch_client::{HttpClient, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers every request with a small object; counts the requests.
async fn serve(count: Arc<AtomicUsize>) -> String {
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
                count.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#;
                let res = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.ok();
            });
        }
    });
    url
}

/// A bucket of 2 refilled once an hour, a 5 s request timeout: two requests go, the third
/// is refused by the limiter without reaching the server.
#[tokio::test]
async fn requests_past_the_burst_wait_and_one_due_past_the_deadline_is_refused() {
    let count = Arc::new(AtomicUsize::new(0));
    let url = serve(Arc::clone(&count)).await;
    let client = HttpClient::new(
        HttpConfig::new(&url)
            .unwrap()
            .request_timeout(Duration::from_secs(5))
            .rate_limit(1.0 / 3600.0, 2),
    )
    .unwrap();
    let path = "/api/v1/namespaces/d/configmaps/a";
    assert!(client.get(path).await.unwrap().is_some());
    assert!(client.get(path).await.unwrap().is_some());
    let e = client.get(path).await.unwrap_err();
    assert!(e.to_string().contains("client rate limiter"), "{e}");
    assert_eq!(
        count.load(Ordering::SeqCst),
        2,
        "the refused request was sent"
    );
}
