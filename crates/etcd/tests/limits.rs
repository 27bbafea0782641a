//! etcd's limits reach clients as Kubernetes statuses a client can act on, not as 500s: an
//! object above etcd's request limit is 413 (both etcd's own check, "request is too large",
//! and gRPC's message limit a little above it), and an etcd out of space (its backend quota
//! exceeded, NOSPACE alarm raised) is 429 with a Retry-After, while reads keep working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::EtcdStore;
use listwatch_etcd::testing::EtcdServer;
use listwatch_storage::{Error, GetOptions, Key, Storage, Updated};

fn pod_of_size(name: &str, bytes: usize) -> Object {
    let padding = "x".repeat(bytes);
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":"{padding}"}}"#)
            .as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn objects_above_etcds_request_limit_are_413() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    // etcd's default --max-request-bytes is 1.5 MiB; gRPC refuses messages above 2 MiB.
    for (name, size) in [("etcd-check", 1_800_000), ("grpc-check", 3_000_000)] {
        let err = store
            .create(&key(name), pod_of_size(name, size), None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::RequestTooLarge { .. }), "{err:?}");
        let status = err.to_status();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (413, "RequestEntityTooLarge")
        );
    }
    // An update that grows an object past the limit is refused the same way.
    store
        .create(&key("small"), pod_of_size("small", 10), None)
        .await
        .unwrap();
    let mut grow = |_: Option<&Object>| -> listwatch_storage::Result<Updated> {
        Ok(pod_of_size("small", 1_800_000).into())
    };
    let err = store
        .guaranteed_update(&key("small"), None, false, &mut grow, None)
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code, 413, "{err:?}");
    let kept = store
        .get(&key("small"), &GetOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert!(kept.same_content(&pod_of_size("small", 10)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn an_etcd_out_of_space_is_429_with_retry_after_and_still_reads() {
    let server = EtcdServer::builder()
        .quota_backend_bytes(2 * 1024 * 1024)
        .start()
        .await
        .unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let mut written = Vec::new();
    let mut refused = None;
    // 100 KiB objects: the quota runs out after a few dozen (bounded).
    for i in 0..200 {
        let name = format!("p{i:03}");
        match store
            .create(&key(&name), pod_of_size(&name, 100 * 1024), None)
            .await
        {
            Ok(o) => written.push(o),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let err = refused.expect("etcd never ran out of space");
    assert!(matches!(err, Error::TooManyRequests { .. }), "{err:?}");
    let status = err.to_status();
    assert_eq!(status.code, 429, "{status:?}");
    assert!(status.retry_after() >= 1);
    assert!(!written.is_empty());
    // Reads still work, and readiness says why writes do not.
    let first = written.first().unwrap();
    let got = store
        .get(&key("p000"), &GetOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, first);
    let not_ready = store.readiness().await.unwrap_err();
    assert!(
        matches!(&not_ready, Error::NotReady { message, .. } if message.contains("NOSPACE")),
        "{not_ready:?}"
    );
}
