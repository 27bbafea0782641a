//! Typed lists are decoded once, straight from the wire into the final type: no dynamic
//! `Object` (whose wire bytes the old path produced per item just to parse them again).
//! Its own test binary: the encode counter is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use listwatch_api::ObjectMeta;
use listwatch_client::{
    HasMetadata, HttpConfig, HttpListerWatcher, ListRequest, ListerWatcher, Typed, WatchEvent,
    WatchRequest,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, serde::Deserialize)]
struct Pod {
    metadata: ObjectMeta,
    spec: Spec,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct Spec {
    #[serde(rename = "nodeName")]
    node_name: String,
}

impl HasMetadata for Pod {
    type Metadata = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n-{name}"}}}}"#
    )
}

/// Answers every request: lists with 100 pods, watches with one ADDED event and a bookmark.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(sock.read_u8().await.unwrap());
                }
                let head = String::from_utf8(head).unwrap();
                let body = if head.contains("watch=") {
                    format!(
                        "{{\"type\":\"ADDED\",\"object\":{}}}\n{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"300\"}}}}}}\n",
                        pod("w", 200)
                    )
                } else {
                    let items: Vec<String> =
                        (0..100).map(|i| pod(&format!("p{i}"), i + 1)).collect();
                    format!(
                        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"101"}},"items":[{}]}}"#,
                        items.join(",")
                    )
                };
                let res = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.unwrap();
            });
        }
    });
    url
}

#[tokio::test]
async fn typed_lists_and_watches_decode_straight_into_the_type() {
    let url = serve().await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();

    let before = listwatch_api::wire_encode_count();
    let page = lw
        .clone()
        .typed::<Pod>()
        .list(&ListRequest::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 100);
    assert_eq!(page.resource_version, "101");
    assert_eq!(page.items[7].spec.node_name, "n-p7");
    assert_eq!(
        page.items[7].metadata.resource_version.as_deref(),
        Some("8")
    );
    assert_eq!(
        listwatch_api::wire_encode_count(),
        before,
        "no intermediate Object bytes"
    );
    // The generic path builds an Object per item and encodes it again to decode it.
    let generic = Typed::<_, Pod>::new(lw.clone());
    let page = generic.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 100);
    assert!(listwatch_api::wire_encode_count() >= before + 100);

    let mut events = lw
        .typed::<Pod>()
        .watch(&WatchRequest::default())
        .await
        .unwrap();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.spec.node_name, "n-w"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        events.next().await.unwrap().unwrap(),
        WatchEvent::Bookmark {
            resource_version,
            ..
        } if resource_version == "300"
    ));
}
