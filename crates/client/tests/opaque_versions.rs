//! Resource versions are opaque strings (issue 32 item 1.6): against a scripted server whose
//! versions are not numbers (`"abc/7"`), the reflector syncs, watches from the version the
//! list gave, applies the watch's events and bookmarks, and never relists. Before, the list's
//! version was parsed as a `u64`, the list failed to decode and the reflector relisted
//! forever.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::ObjectMeta;
use listwatch_client::{
    Config, HasMetadata, HttpConfig, HttpListerWatcher, Resource, Writer, reflector, watcher,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, serde::Deserialize)]
struct Pod {
    metadata: ObjectMeta,
}

impl HasMetadata for Pod {
    type Metadata = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

fn pod(name: &str, rv: &str) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

/// What the server saw: the request target of every request, in order.
type Seen = Arc<Mutex<Vec<String>>>;

/// Lists return one pod at `"abc/7"`; the first watch sends pod `b` at `"abc/8"` and a
/// bookmark at `"abc/9"` and then stays open; later watches stay open silently.
async fn serve() -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let seen = Arc::clone(&s);
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let Ok(b) = sock.read_u8().await else { return };
                    head.push(b);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head.split(' ').nth(1).unwrap_or("").to_owned();
                let first_watch = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(target.clone());
                    target.contains("watch=1")
                        && seen.iter().filter(|t| t.contains("watch=1")).count() == 1
                };
                if !target.contains("watch=1") {
                    let body = format!(
                        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"abc/7"}},"items":[{}]}}"#,
                        pod("a", "abc/5")
                    );
                    let res = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    sock.write_all(res.as_bytes()).await.ok();
                    return;
                }
                let res = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                sock.write_all(res.as_bytes()).await.ok();
                if first_watch {
                    for frame in [
                        format!(r#"{{"type":"ADDED","object":{}}}"#, pod("b", "abc/8")),
                        r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"abc/9"}}}"#.to_owned(),
                    ] {
                        let line = format!("{frame}\n");
                        let chunk = format!("{:x}\r\n{line}\r\n", line.len());
                        sock.write_all(chunk.as_bytes()).await.ok();
                    }
                    sock.flush().await.ok();
                }
                // Keep the watch open until the client goes away.
                let mut buf = [0u8; 64];
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn a_server_whose_versions_are_not_numbers_syncs_and_watches_without_relisting() {
    let (url, seen) = serve().await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods")
        .unwrap()
        .typed::<Pod>();
    let writer = Writer::<Pod>::default();
    let store = writer.store();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let e = Arc::clone(&errors);
    let task = tokio::spawn(
        reflector(writer, watcher(lw, Config::default())).for_each(move |r| {
            if let Err(err) = r {
                e.lock().unwrap().push(err.to_string());
            }
            async {}
        }),
    );
    tokio::time::timeout(Duration::from_secs(30), store.wait_until_synced())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "never synced; errors: {:?}; requests: {:?}",
                errors.lock().unwrap(),
                seen.lock().unwrap()
            )
        })
        .unwrap();
    // The watch's event and bookmark arrive: the store is at the bookmark's version.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while store.resource_version() != "abc/9" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "store at {:?}; errors: {:?}; requests: {:?}",
            store.resource_version(),
            errors.lock().unwrap(),
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut names: Vec<String> = store.list().iter().map(|p| p.key().to_string()).collect();
    names.sort();
    assert_eq!(names, ["ns/a", "ns/b"]);
    let b = store.get_by_name(Some("ns"), "b").unwrap();
    assert_eq!(b.metadata.resource_version.as_deref(), Some("abc/8"));

    let seen = seen.lock().unwrap().clone();
    let lists: Vec<&String> = seen.iter().filter(|t| !t.contains("watch=1")).collect();
    let watches: Vec<&String> = seen.iter().filter(|t| t.contains("watch=1")).collect();
    assert_eq!(lists.len(), 1, "one list, no relist: {seen:?}");
    // The first list asks for any version ("0"); the watch starts from the list's version,
    // sent back exactly as received (URL-encoded).
    assert!(lists[0].contains("resourceVersion=0"), "{seen:?}");
    assert!(
        watches[0].contains("resourceVersion=abc%2F7"),
        "the watch must start from the list's version: {seen:?}"
    );
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
    task.abort();
}

/// The dynamic lister-watcher (`Object`, listwatch's stored form, whose version is a number)
/// against the same server: its objects do not decode, so the list fails as a whole (as in
/// client-go and kube-rs: a list committed without them would delete them from a synced
/// store), each failure reported with the object's key and version (use a typed object
/// there); the store never syncs on a partial list and no watch starts.
#[tokio::test]
async fn the_dynamic_lister_fails_and_reports_a_list_it_cannot_hold() {
    let (url, seen) = serve().await;
    let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
    let writer = Writer::<listwatch_api::Object>::default();
    let store = writer.store();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let e = Arc::clone(&errors);
    let task = tokio::spawn(
        reflector(writer, watcher(lw, Config::default())).for_each(move |r| {
            if let Err(err) = r {
                e.lock().unwrap().push(err.to_string());
            }
            async {}
        }),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !store.has_synced(),
        "a list without its objects was committed"
    );
    assert_eq!(store.len(), 0);
    let errors = errors.lock().unwrap().clone();
    assert!(!errors.is_empty(), "the failed list was not reported");
    assert!(
        errors[0].contains("ns/a") && errors[0].contains("abc/5"),
        "{errors:?}"
    );
    let seen = seen.lock().unwrap().clone();
    let watches = seen.iter().filter(|t| t.contains("watch=1")).count();
    assert_eq!(watches, 0, "a watch after a failed list: {seen:?}");
    task.abort();
}
