//! TTLs through GuaranteedUpdate (upstream's `TestGuaranteedUpdateWithTTL` and beyond): the TTL
//! an update function returns applies to the state it writes — an update can create an
//! expiring object, an update of an expiring object with a TTL keeps it expiring (Kubernetes'
//! Events, updated in place as their count grows), and an update without one makes the object
//! permanent, as a Put without a lease does in etcd.

use std::time::Duration;

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Error, Object, Result, Storage, Updated, WatchEvent};

/// The short TTL the cases wait for (etcd rounds a lease up to its minimum, ~2 s).
const SHORT: Duration = Duration::from_secs(1);

/// Waits for the DELETED event of an expiry on `w`, skipping bookmarks; returns the object.
async fn expect_expiry(w: &mut crate::WatchStream, ctx: &str) -> Object {
    let mut last = 0;
    match next_non_bookmark(w, &mut last, ctx).await {
        WatchEvent::Deleted(o) => o,
        other => panic!(
            "{ctx}: expected DELETED on ttl expiry, got {}",
            describe(&other)
        ),
    }
}

/// An update of a missing key (ignore-not-found) returning a TTL creates an object that then
/// expires, seen as DELETED (upstream's case).
pub async fn update_with_ttl_creates_an_expiring_object<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_ttl_creates_an_expiring_object") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let obj = pod.obj();
    let mut f =
        |_: Option<&Object>| -> Result<Updated> { Ok(Updated::with_ttl(obj.clone(), SHORT)) };
    let out = s
        .guaranteed_update(&pod.key(), None, true, &mut f, None)
        .await
        .expect("create through update with a ttl");
    let mut w = watch(
        &s,
        &pod.key(),
        &from_rv(Some(out.resource_version()), &pod.key()),
    )
    .await;
    let gone = expect_expiry(&mut w, "expiry of an object created by update").await;
    assert!(gone.same_content(&out), "expired object: {}", show(&gone));
    assert!(gone.resource_version() > out.resource_version());
    assert!(
        get(&s, &pod.key()).await.is_none(),
        "still there after expiry"
    );
    Verdict::Passed
}

/// An object created with a long TTL and updated with a short one expires after the short
/// one, with its updated content: the TTL an update returns governs from that write on (an
/// Event updated in place keeps expiring).
pub async fn update_with_ttl_keeps_the_object_expiring<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_ttl_keeps_the_object_expiring") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "event");
    s.create(&pod.key(), pod.obj(), Some(Duration::from_secs(3600)))
        .await
        .expect("create with a ttl");
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        let cur = cur.ok_or_else(|| Error::internal("missing"))?;
        Ok(Updated::with_ttl(with_annotation(cur, "count", "2"), SHORT))
    };
    let out = s
        .guaranteed_update(&pod.key(), None, false, &mut f, None)
        .await
        .expect("update with a ttl");
    assert_eq!(
        out.to_value().expect("json")["metadata"]["annotations"]["count"],
        "2"
    );
    let mut w = watch(
        &s,
        &pod.key(),
        &from_rv(Some(out.resource_version()), &pod.key()),
    )
    .await;
    let gone = expect_expiry(&mut w, "expiry after an update with a ttl").await;
    assert!(gone.same_content(&out), "expired object: {}", show(&gone));
    assert!(gone.resource_version() > out.resource_version());
    assert!(
        get(&s, &pod.key()).await.is_none(),
        "still there after expiry"
    );
    Verdict::Passed
}

/// An update returning no TTL makes an expiring object permanent: it outlives a later object
/// with the same TTL it had.
pub async fn update_without_ttl_ends_the_expiry<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_without_ttl_ends_the_expiry") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "kept");
    s.create(&pod.key(), pod.obj(), Some(SHORT))
        .await
        .expect("create with a ttl");
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        cur.map(|o| with_annotation(o, "kept", "yes").into())
            .ok_or_else(|| Error::internal("missing"))
    };
    let kept = s
        .guaranteed_update(&pod.key(), None, false, &mut f, None)
        .await
        .expect("update without a ttl");
    // A sentinel with the same TTL, created after: once it expired, the first object's
    // original TTL has run out too.
    let sentinel = Pod::new("ns", "sentinel");
    let sent = s
        .create(&sentinel.key(), sentinel.obj(), Some(SHORT))
        .await
        .expect("create the sentinel");
    let mut w = watch(
        &s,
        &pods(Some("ns")),
        &from_rv(Some(sent.resource_version()), &pods(Some("ns"))),
    )
    .await;
    let gone = expect_expiry(&mut w, "expiry of the sentinel").await;
    assert!(
        gone.same_content(&sent),
        "the object updated without a ttl expired: {}",
        show(&gone)
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("outlived its old ttl"),
        &kept,
        "object updated without a ttl",
    );
    Verdict::Passed
}
