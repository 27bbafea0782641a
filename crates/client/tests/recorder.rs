//! The event recorder against a scripted server (`scripted/`): its spam filter keeps a hot
//! object's bucket while thousands of other objects get events (rtcl2 L2: its caches are
//! LRU, as client-go's).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scripted;

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use listwatch_client::events::{EventData, EventType, MAX_SERIES, Recorder};
use listwatch_client::{HttpClient, HttpConfig};
use scripted::{Reply, scripted};

/// client-go's `EventSourceObjectSpamFilter` keeps its buckets in an LRU (a `Get`
/// refreshes): an object that keeps failing keeps its spent bucket, however many other
/// objects got an event since; a FIFO forgot it after 4096 others and let a fresh burst
/// of 25 through, again and again.
#[tokio::test]
async fn a_hot_objects_spam_bucket_is_not_forgotten_while_it_keeps_firing() {
    let (url, _log) = scripted(|_, _, _| {
        Reply::Body(
            201,
            r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"ns"}}"#.into(),
        )
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let recorder = Recorder::new(client, "example.com/test", "test-0");
    let object = |name: &str| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some("ns".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    };
    let failing = |i: usize| EventData {
        type_: EventType::Warning,
        reason: "ReconcileFailed".into(),
        action: "Reconcile".into(),
        note: Some(format!("attempt {i}")),
    };
    let hot = object("hot");
    let mut hot_events = 0;
    // The hot object spends its burst.
    for _ in 0..30 {
        recorder.publish(&hot, &failing(hot_events)).await.unwrap();
        hot_events += 1;
    }
    // 4096+ other objects, one event each; the hot one keeps failing every 100 of them.
    for i in 0..(MAX_SERIES + 100) {
        recorder
            .publish(&object(&format!("o{i}")), &failing(0))
            .await
            .unwrap();
        if i % 100 == 0 {
            recorder.publish(&hot, &failing(hot_events)).await.unwrap();
            hot_events += 1;
        }
        if i % 500 == 0 {
            assert!(recorder.flush(Duration::from_secs(60)).await);
        }
    }
    assert!(recorder.flush(Duration::from_secs(60)).await);
    let before = recorder.stats();
    for _ in 0..10 {
        recorder.publish(&hot, &failing(hot_events)).await.unwrap();
        hot_events += 1;
    }
    assert!(recorder.flush(Duration::from_secs(60)).await);
    let after = recorder.stats();
    assert_eq!(
        after.filtered - before.filtered,
        10,
        "the hot object got a fresh burst: {} of 10 more written; stats {after:?}",
        after.written - before.written
    );
}
