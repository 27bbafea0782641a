//! Regression tests from the red team's probes (rtcl) of issue 32, each failing before its
//! fix: a relist never reports a live object deleted, whether one of its objects does not
//! decode or the transform panics on it (client-go and kube-rs fail such a list as a whole
//! and keep the last good store); the findings M1, M4–M6 and L1–L3 below. The rate limiter's
//! (M2, M3) are in `rate_limit.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scripted;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use listwatch_client::events::{EventData, EventType, MAX_QUEUED, Recorder};
use listwatch_client::{
    Action, Api, Controller, EventHandler, HttpClient, HttpConfig, Informer, InformerConfig,
    ObjectKey, SyncError,
};

use scripted::{Reply, pod, pod_list, scripted};

#[derive(Default, Clone)]
struct Deltas(Arc<Mutex<Vec<String>>>);

impl EventHandler<Pod> for Deltas {
    fn on_add(&mut self, o: &Arc<Pod>, _: bool) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("add {name}"));
    }
    fn on_update(&mut self, _: &Arc<Pod>, o: &Arc<Pod>) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("update {name}"));
    }
    fn on_delete(&mut self, o: &Arc<Pod>, unknown: bool) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push(format!("delete {name} (final state unknown: {unknown})"));
    }
}

/// Item 3 variant: a relist in which an object that exists no longer decodes (a field of
/// the wrong type written through a CRD without a structural schema, a schema drift).
/// client-go fails that list (decode error: the store keeps its last good state and the
/// list is retried); kube-rs fails the whole page the same way. Here the item is skipped,
/// so the relist's replace *deletes* the live object from the store and every handler gets
/// `on_delete` — a `run_with_objects` reconcile then gets `None`, which its doc says means
/// "gone: clean up".
#[tokio::test]
async fn an_undecodable_object_in_a_relist_is_not_reported_deleted() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                // The watch expires: the reflector relists.
                Reply::Watch(vec![
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}"#.into(),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else if n == 0 {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        } else {
            // `a` still exists; its spec.nodeName is now a number.
            Reply::Body(200, pod_list(20, &[pod("a", 15, "7")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    let deltas = Deltas::default();
    let _reg = informer.add_handler(deltas.clone());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    // Let the 410 and the relist happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = deltas.0.lock().unwrap().clone();
    assert!(
        informer.store().get_by_name(Some("ns"), "a").is_some()
            && !seen.iter().any(|d| d.starts_with("delete a")),
        "a live object was reported deleted because one field did not decode: store has a = {:?}, deltas {seen:?}",
        informer.store().get_by_name(Some("ns"), "a").is_some(),
    );
}

/// Item 4 variant: a transform that panics on the new version of an object that exists
/// (one the relist after a 410 brings) skips it, so the relist's replace deletes the live
/// object and handlers get `on_delete` (reported to `errors()` only). client-go's
/// HandleCrash re-panics (the process restarts, no wrong view); kube-rs's `modify` panics
/// the stream's task. Same mechanism as the undecodable relist item above.
#[tokio::test]
async fn a_transform_panic_in_a_relist_does_not_report_a_live_object_deleted() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                Reply::Watch(vec![
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}"#.into(),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else if n == 0 {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        } else {
            Reply::Body(200, pod_list(20, &[pod("a", 15, "\"node-2\"")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let config = InformerConfig::default().transform(|p: Pod| {
        assert!(
            p.metadata.resource_version.as_deref() != Some("15"),
            "transform bug on this version"
        );
        p
    });
    let informer = Informer::spawn(Api::<Pod>::all(client), config);
    let deltas = Deltas::default();
    let _reg = informer.add_handler(deltas.clone());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = deltas.0.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|d| d.starts_with("delete a")),
        "a live object was reported deleted because the transform panicked on it: {seen:?}"
    );
}

/// rtcl L1: `HttpConfig::infer` with an empty kubeconfig file present (a container image's
/// empty ~/.kube/config, a KUBECONFIG pointing at an empty mounted file) used to fail inside
/// a pod instead of using the in-cluster configuration. client-go's deferred loading treats
/// an empty merged config (`ErrEmptyConfig`) as no kubeconfig and goes on to in-cluster.
#[test]
fn infer_with_an_empty_kubeconfig_uses_the_in_cluster_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("config");
    std::fs::write(&kc, "").unwrap();
    let blank = dir.path().join("blank");
    std::fs::write(&blank, "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
    let sa = dir.path().join("sa");
    std::fs::create_dir(&sa).unwrap();
    std::fs::write(sa.join("token"), "t").unwrap();
    std::fs::write(sa.join("ca.crt"), "ca").unwrap();
    std::fs::write(sa.join("namespace"), "ops\n").unwrap();
    let c = HttpConfig::infer_from(&[kc.clone(), blank], "10.0.0.1", "443", &sa);
    match c {
        Ok(c) => assert_eq!(c.base_url, "https://10.0.0.1:443"),
        Err(e) => panic!("in a pod with an empty kubeconfig file: {e}"),
    }
    // Out of a cluster, the error still names the kubeconfig looked at.
    let e = HttpConfig::infer_from(std::slice::from_ref(&kc), "", "", &sa).unwrap_err();
    assert!(e.to_string().contains("config"), "{e}");
    // A kubeconfig that is not empty but broken is its error, not another cluster.
    std::fs::write(&kc, "current-context: gone\n").unwrap();
    let e = HttpConfig::infer_from(std::slice::from_ref(&kc), "10.0.0.1", "443", &sa).unwrap_err();
    assert!(e.to_string().contains("gone"), "{e}");
}

/// rtcl L2: `owned_by` / `controller_owner_key` matched the owner reference's whole
/// `apiVersion`, so a child created while the owner was served at another version (a CRD
/// moved from `v1beta1` to `v1`, children kept) no longer woke its owner. controller-runtime's
/// `EnqueueRequestForOwner` compares group and kind only; the garbage collector too.
#[test]
fn an_owner_reference_of_another_version_of_the_owner_still_maps_to_it() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use listwatch_client::relations::controller_owner_key;
    let child = |api_version: &str| ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("ns".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "1234".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        ..ReplicaSet::default()
    };
    assert_eq!(
        controller_owner_key::<Deployment, _>(&child("apps/v1beta2"))
            .map(|k| k.as_str().to_owned()),
        Some("ns/web".to_owned()),
        "a child whose controller reference names apps/v1beta2 Deployment web is not mapped to it"
    );
    // Another group is another kind.
    assert_eq!(
        controller_owner_key::<Deployment, _>(&child("extensions/v1beta1")),
        None
    );
}

/// rtcl M6: a controller whose `run` ended by its `shutdown` future (a custom leadership
/// loop: stop on a lost lease, run again on the next term) was dead for good: the shared
/// queue stayed shut down, keys added afterwards were dropped, and the next `run` returned
/// no error, reconciled nothing and waited — a silent no-op.
#[tokio::test(start_paused = true)]
async fn a_controller_run_again_after_a_graceful_stop_reconciles() {
    let c = Controller::default();
    let first = c.clone().run(
        1,
        |_k: ObjectKey| async { Ok::<_, String>(Action::Done) },
        tokio::time::sleep(Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    assert!(first.await);
    // The next term.
    c.queue().add(ObjectKey::new(Some("ns"), "a"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let second = tokio::spawn(c.clone().run(
        1,
        move |k: ObjectKey| {
            tx.send(k.as_str().to_owned()).ok();
            async { Ok::<_, String>(Action::Done) }
        },
        std::future::pending::<()>(),
        Duration::from_secs(1),
    ));
    let got = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    second.abort();
    assert_eq!(
        got.ok().flatten().as_deref(),
        Some("ns/a"),
        "the second run reconciled nothing and reported nothing"
    );
}

/// rtcl M1: against a server that refuses the list with 403 (RBAC missing), the informer's
/// wait failed at once but the store's — the one the reference operator and its readers
/// hold — waited for good (the store had no view of the informer's failures).
#[tokio::test]
async fn the_store_wait_the_reference_operator_uses_does_not_hang_on_a_403() {
    let (url, _log) = scripted(|_, _, _| {
        Reply::Body(
            403,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"pods is forbidden"}"#.into(),
        )
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    let fatal = tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced()).await;
    assert!(matches!(fatal, Ok(Err(_))), "informer wait: {fatal:?}");
    let store_wait =
        tokio::time::timeout(Duration::from_secs(5), informer.store().wait_until_synced()).await;
    match store_wait {
        Ok(Err(SyncError::Fatal(e))) => assert!(e.to_string().contains("403"), "{e}"),
        other => panic!("Store::wait_until_synced on a 403: {other:?}"),
    }
}

/// rtcl L3: a MODIFIED and then the DELETED of `a`, both undecodable. Both were skipped, so
/// the store kept `a` (at its old version) for good while the server had none. The delete
/// names its object: it is removed by its key, handlers told (final state unknown).
#[tokio::test]
async fn an_undecodable_delete_in_a_watch_leaves_no_ghost() {
    let (url, _log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                let m = pod("a", 11, "7");
                let d = pod("a", 12, "7");
                Reply::Watch(vec![
                    format!(r#"{{"type":"MODIFIED","object":{m}}}"#),
                    format!(r#"{{"type":"DELETED","object":{d}}}"#),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    let deltas = Deltas::default();
    let _reg = informer.add_handler(deltas.clone());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while informer.store().get_by_name(Some("ns"), "a").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let ghost = informer.store().get_by_name(Some("ns"), "a");
    assert!(
        gone.is_ok(),
        "the server deleted a, the store still has it at version {:?} (synced: {})",
        ghost.and_then(|p| p.metadata.resource_version.clone()),
        informer.has_synced()
    );
    assert_eq!(informer.store().resource_version(), "12");
    let handled = tokio::time::timeout(Duration::from_secs(10), async {
        while !deltas
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|d| d.starts_with("delete a"))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(handled.is_ok(), "{:?}", deltas.0.lock().unwrap());
    assert!(
        deltas
            .0
            .lock()
            .unwrap()
            .contains(&"delete a (final state unknown: true)".to_owned())
    );
}

/// L3, the other half: a DELETED whose object does not decode and cannot even be named (its
/// metadata does not read) ends the watch and forces a relist, as client-go does after a
/// watch decode error; watching again from the same version would meet it again. Here the
/// relist no longer has `a`. Before, the reflector only watched again and kept `a`.
#[tokio::test]
async fn an_unnamable_undecodable_delete_forces_a_relist() {
    let (url, log) = scripted(|_, target, n| {
        if target.contains("watch=") {
            if n == 0 {
                Reply::Watch(vec![
                    r#"{"type":"DELETED","object":{"kind":"Pod","apiVersion":"v1","metadata":7}}"#
                        .into(),
                ])
            } else {
                Reply::Watch(vec![])
            }
        } else if n == 0 {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"node-1\"")]))
        } else {
            Reply::Body(200, pod_list(12, &[]))
        }
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let informer = Informer::spawn(Api::<Pod>::all(client), InformerConfig::default());
    tokio::time::timeout(Duration::from_secs(10), informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while informer.store().get_by_name(Some("ns"), "a").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let lists = log
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t)| !t.contains("watch="))
        .count();
    assert!(
        gone.is_ok(),
        "no relist after the undecodable delete ({lists} lists)"
    );
}

fn website() -> ObjectReference {
    ObjectReference {
        api_version: Some("example.com/v1".into()),
        kind: Some("Website".into()),
        namespace: Some("ns".into()),
        name: Some("w".into()),
        uid: Some("u1".into()),
        ..ObjectReference::default()
    }
}

/// rtcl M4: the recorder's series key included the message, so events differing only in it
/// (an error text with a version) were each a new Event, for ever. client-go's
/// EventCorrelator combines similar events after 10 distinct messages in 10 minutes into one
/// "(combined from similar events)" Event whose count is raised, and its spam filter lets 25
/// writes about one object through, then one per 5 minutes: 50 failures with varying
/// messages make at most 11 Events (here 10 creates, 15 count updates, 25 held back).
#[tokio::test]
async fn events_differing_only_in_their_message_do_not_create_an_event_each() {
    let (url, log) = scripted(|method, _, _| {
        let body = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"ns"}}"#;
        Reply::Body(if method == "POST" { 201 } else { 200 }, body.into())
    })
    .await;
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let recorder = Recorder::new(client, "example.com/op", "op-0");
    for i in 0..50 {
        let data = EventData {
            type_: EventType::Warning,
            reason: "ReconcileFailed".into(),
            action: "Reconcile".into(),
            note: Some(format!(
                "Operation cannot be fulfilled: the object has been modified (resourceVersion {})",
                1000 + i
            )),
        };
        recorder.publish(&website(), &data).await.unwrap();
    }
    assert!(recorder.flush(Duration::from_secs(30)).await);
    let log = log.lock().unwrap();
    let creates = log.iter().filter(|(m, _)| m == "POST").count();
    let updates = log.iter().filter(|(m, _)| m == "PATCH").count();
    assert!(
        creates <= 11,
        "{creates} Event objects created for one failing reconcile ({} writes in all)",
        log.len()
    );
    assert_eq!((creates, updates), (10, 15), "{log:?}");
    let stats = recorder.stats();
    assert_eq!((stats.queued, stats.written, stats.filtered), (50, 25, 25));
}

/// rtcl M5: `Recorder::publish` is awaited inside the reconcile and retried an unreachable
/// server 12 times with waits up to 2 s: each publish held the reconcile ~15 s. client-go's
/// `Eventf` never blocks (the broadcaster queues and retries in the background). Now it
/// queues and returns; past the queue's bound events are dropped and counted, never waited
/// for.
#[tokio::test(start_paused = true)]
async fn publishing_an_event_does_not_hold_the_reconcile_while_the_server_is_unreachable() {
    // A port with nothing listening: every connection is refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = HttpClient::new(HttpConfig::new(&url).unwrap()).unwrap();
    let recorder = Recorder::new(client, "example.com/op", "op-0");
    let data = EventData {
        type_: EventType::Normal,
        reason: "ChildrenApplied".into(),
        action: "Reconcile".into(),
        note: None,
    };
    let start = tokio::time::Instant::now();
    let r = recorder.publish(&website(), &data).await;
    let held = start.elapsed();
    assert!(
        held < Duration::from_secs(1),
        "publish held the reconcile {held:?} (virtual) before returning {r:?}"
    );
    // A burst past the queue's bound: dropped and counted, nothing waited for.
    for _ in 0..MAX_QUEUED + 10 {
        recorder.publish(&website(), &data).await.unwrap();
    }
    assert_eq!(start.elapsed(), held, "publish waited for the queue");
    let stats = recorder.stats();
    assert!(stats.dropped >= 9, "{stats:?}");
    assert_eq!(stats.queued + stats.dropped, MAX_QUEUED as u64 + 11);
}
