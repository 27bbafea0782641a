//! Kubeconfig settings as they reach the wire: a cluster's `disable-compression: true`
//! (client-go's `DisableCompression`) sends no `Accept-Encoding: gzip`; without it lists and
//! objects ask for gzip as Go's transport does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use listwatch_client::{HttpClient, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers every request with a small object; keeps each request head (lowercased).
async fn serve() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    match sock.read_u8().await {
                        Ok(b) => head.push(b),
                        Err(_) => return,
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_lowercase());
                let body = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#;
                let res = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.ok();
            });
        }
    });
    (url, heads)
}

fn kubeconfig(url: &str, extra: &str) -> String {
    format!(
        "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\nclusters: [{{name: k, cluster: {{server: \"{url}\"{extra}}}}}]\nusers: [{{name: u, user: {{}}}}]\n"
    )
}

#[tokio::test]
async fn disable_compression_in_the_kubeconfig_asks_for_no_gzip() {
    let (url, heads) = serve().await;
    let dir = std::path::Path::new("/");
    let plain = HttpConfig::from_kubeconfig_yaml(&kubeconfig(&url, ""), dir).unwrap();
    let off =
        HttpConfig::from_kubeconfig_yaml(&kubeconfig(&url, ", disable-compression: true"), dir)
            .unwrap();
    assert!(!plain.disable_compression && off.disable_compression);
    let path = "/api/v1/namespaces/d/configmaps/a";
    HttpClient::new(plain).unwrap().get(path).await.unwrap();
    HttpClient::new(off).unwrap().get(path).await.unwrap();
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    assert!(
        heads[0].contains("accept-encoding: gzip"),
        "by default a get asks for gzip: {}",
        heads[0]
    );
    assert!(
        !heads[1].contains("accept-encoding"),
        "disable-compression: true still asked for gzip: {}",
        heads[1]
    );
}
