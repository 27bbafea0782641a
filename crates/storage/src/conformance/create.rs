//! Create: sets the resource version; a preset version is rejected; an existing key is
//! `AlreadyExists`; a TTL expiry is seen as DELETED.

use std::time::Duration;

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{GetOptions, Storage, WatchEvent};

/// Create returns the object at a new revision, newer than anything before, and get reads it.
pub async fn create_sets_resource_version<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "create_sets_resource_version") {
        return v;
    }
    let s = h.new_store().await;
    let before = bump(&s, "before").await;
    let pod = Pod::new("ns", "foo").label("app", "web");
    let out = create(&s, &pod).await;
    assert!(
        out.resource_version() > before,
        "create at {} not after {before}",
        out.resource_version()
    );
    assert!(
        out.same_content(&pod.obj()),
        "stored content differs: {}",
        show(&out)
    );
    let read = get(&s, &pod.key())
        .await
        .expect("created object is readable");
    assert_same(&read, &out, "get after create");
    assert!(current(&s).await >= out.resource_version());
    Verdict::Passed
}

/// Successive creates get strictly increasing revisions, none above the current revision.
pub async fn create_revisions_strictly_increase<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "create_revisions_strictly_increase") {
        return v;
    }
    let s = h.new_store().await;
    let mut last = 0;
    for i in 0..10 {
        let out = create(&s, &Pod::new(&format!("ns{}", i % 3), &format!("p{i}"))).await;
        assert!(
            out.resource_version() > last,
            "create {i} at {} after {last}",
            out.resource_version()
        );
        last = out.resource_version();
    }
    assert!(current(&s).await >= last);
    Verdict::Passed
}

/// Creating an object that already carries a resource version is a bad request and stores
/// nothing.
pub async fn create_with_preset_resource_version_is_rejected<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "create_with_preset_resource_version_is_rejected") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "bar").rv(1);
    assert_err(
        s.create(&pod.key(), pod.obj(), None).await,
        is_bad_request,
        "create with rv set",
    );
    assert!(
        get(&s, &pod.key()).await.is_none(),
        "a rejected create stored the object"
    );
    Verdict::Passed
}

/// Creating on a taken key is `AlreadyExists` and leaves the stored object alone.
pub async fn create_on_existing_key_is_already_exists<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "create_on_existing_key_is_already_exists") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let first = create(&s, &pod).await;
    let again = Pod::new("ns", "foo").label("second", "true");
    let e = assert_err(
        s.create(&again.key(), again.obj(), None).await,
        |e| matches!(e, crate::Error::AlreadyExists { .. }),
        "second create",
    );
    assert_eq!(e.to_status().code, 409);
    assert_same(
        &get(&s, &pod.key()).await.expect("still there"),
        &first,
        "object after failed create",
    );
    Verdict::Passed
}

/// An object created with a TTL expires, and a watch sees the expiry as DELETED with the last
/// state at a newer revision.
pub async fn create_with_ttl_expires_as_deleted_event<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "create_with_ttl_expires_as_deleted_event") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let out = s
        .create(&pod.key(), pod.obj(), Some(Duration::from_secs(1)))
        .await
        .expect("create with ttl");
    let mut w = watch(
        &s,
        &pod.key(),
        &from_rv(Some(out.resource_version()), &pod.key()),
    )
    .await;
    match next_event(&mut w, "ttl expiry").await {
        WatchEvent::Deleted(o) => {
            assert!(o.same_content(&out), "expired object content: {}", show(&o));
            assert!(
                o.resource_version() > out.resource_version(),
                "expiry at {} not after creation",
                o.resource_version()
            );
        }
        other => panic!("expected DELETED on ttl expiry, got {}", describe(&other)),
    }
    let gone = s.get(&pod.key(), &GetOptions::default()).await;
    assert_err(gone, is_not_found, "get after ttl expiry");
    Verdict::Passed
}
