//! Failures that used to be silent, against a scripted HTTP server: a list body whose
//! deadline counted the consumer's time, and one undecodable object that failed a whole
//! typed list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::ObjectMeta;
use listwatch_client::{
    Error, HasMetadata, HttpConfig, HttpListerWatcher, ListRequest, ListerWatcher, PageItem,
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

fn pod(name: &str, rv: u64, node: &str) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":{node}}}}}"#
    )
}

/// Serves every request with `body`, written in two parts `gap` apart.
async fn serve(body: String, split: usize, gap: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(sock.read_u8().await.unwrap());
                }
                let res = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.unwrap();
                let (a, b) = body.as_bytes().split_at(split.min(body.len()));
                sock.write_all(a).await.unwrap();
                sock.flush().await.unwrap();
                tokio::time::sleep(gap).await;
                sock.write_all(b).await.ok();
            });
        }
    });
    url
}

fn list_of(items: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"101"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// The consumer spends 3 s on the first object of a list whose server needs 3.5 s in all,
/// 0.5 s of it after the consumer's work, with a 2 s request timeout: the list completes,
/// because only the time spent waiting for the server counts. Before, one deadline from the
/// response headers expired during the consumer's work.
#[tokio::test]
async fn a_slow_consumer_does_not_use_up_the_list_body_deadline() {
    let items: Vec<String> = (0..4)
        .map(|i| pod(&format!("p{i}"), i + 1, "\"n\""))
        .collect();
    let body = list_of(&items);
    // The first part ends inside the second item: the first item is complete at once.
    let split = body.find("\"p1\"").unwrap();
    let url = serve(body, split, Duration::from_millis(3500)).await;
    let config = HttpConfig::new(&url)
        .unwrap()
        .request_timeout(Duration::from_secs(2));
    let lw = HttpListerWatcher::new(config, "/api/v1/pods")
        .unwrap()
        .typed::<Pod>();
    let mut items = lw.list_stream(&ListRequest::default()).await.unwrap();
    let first = items.next().await.unwrap().unwrap();
    assert!(matches!(first, PageItem::Object(p) if p.metadata.name.as_deref() == Some("p0")));
    // The consumer's own work on the first object.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut names = Vec::new();
    while let Some(item) = items.next().await {
        match item {
            Ok(PageItem::Object(p)) => names.push(p.metadata.name.unwrap()),
            Ok(PageItem::End(end)) => {
                assert_eq!(end.resource_version, "101");
                break;
            }
            Err(e) => panic!("list failed after the consumer's work: {e}"),
        }
    }
    assert_eq!(names, ["p1", "p2", "p3"]);
}

/// One item whose `spec.nodeName` is a number does not decode into `Pod`: it is skipped with
/// an `Error::SkippedObject` naming it, and the list goes on to its end.
#[tokio::test]
async fn one_undecodable_item_is_skipped_and_the_typed_list_goes_on() {
    let items = [
        pod("a", 1, "\"n\""),
        pod("bad", 2, "7"),
        pod("c", 3, "\"n\""),
    ];
    let body = list_of(&items);
    let url = serve(body.clone(), body.len(), Duration::ZERO).await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods")
        .unwrap()
        .typed::<Pod>();
    let got: Vec<_> = lw
        .list_stream(&ListRequest::default())
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(matches!(&got[0], Ok(PageItem::Object(p)) if p.spec.node_name == "n"));
    match &got[1] {
        Err(Error::SkippedObject {
            key,
            resource_version,
            ..
        }) => assert_eq!((key.as_str(), resource_version.as_str()), ("ns/bad", "2")),
        other => panic!("expected SkippedObject, got {other:?}"),
    }
    assert!(matches!(&got[2], Ok(PageItem::Object(p)) if p.metadata.name.as_deref() == Some("c")));
    assert!(matches!(&got[3], Ok(PageItem::End(_))));
    // The collected page has the two good ones.
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 2);
}
