//! Get: existing; RV 0; at the creation RV; NotOlderThan the current RV; RV too high → 504;
//! missing → 404; ignore-not-found.

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{GetOptions, Storage};

/// Creates `ns/foo`, updates it once, then creates `ns/bar` to move the revision on.
/// Returns (created foo, updated foo, created bar).
async fn seed<S: Storage>(s: &S) -> (crate::Key, crate::Object, crate::Object, crate::Object) {
    let foo_pod = Pod::new("ns", "foo");
    let created = create(s, &foo_pod).await;
    let updated = update(s, &foo_pod.key(), |o| {
        with_annotation(o, "test-annotation", "1")
    })
    .await;
    let bar_pod = create(s, &Pod::new("ns", "bar")).await;
    (foo_pod.key(), created, updated, bar_pod)
}

async fn get_at<S: Storage>(
    s: &S,
    key: &crate::Key,
    rv: Option<u64>,
    ignore: bool,
) -> crate::Result<Option<crate::Object>> {
    s.get(
        key,
        &GetOptions {
            resource_version: rv,
            ignore_not_found: ignore,
        },
    )
    .await
}

/// Get with no version reads the latest state.
pub async fn get_existing_returns_latest_state<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_existing_returns_latest_state") {
        return v;
    }
    let s = h.new_store().await;
    let (key, _, updated, _) = seed(&s).await;
    let got = get_at(&s, &key, None, false)
        .await
        .expect("get")
        .expect("present");
    assert_same(&got, &updated, "get latest");
    Verdict::Passed
}

/// Get at RV 0 may serve any state the store knows (a cache may lag), but only a real one:
/// absent, as created, or as updated.
pub async fn get_at_resource_version_zero_returns_a_known_state<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_at_resource_version_zero_returns_a_known_state") {
        return v;
    }
    let s = h.new_store().await;
    let (key, created, updated, _) = seed(&s).await;
    let got = get_at(&s, &key, Some(0), true).await.expect("get at 0");
    match got {
        None => {}
        Some(o) => assert!(
            o == created || o == updated,
            "get at 0 returned an unknown state {}",
            show(&o)
        ),
    }
    Verdict::Passed
}

/// Get at the creation revision means "not older than": the created or the updated state.
pub async fn get_at_creation_resource_version_returns_that_or_newer<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_at_creation_resource_version_returns_that_or_newer") {
        return v;
    }
    let s = h.new_store().await;
    let (key, created, updated, _) = seed(&s).await;
    let got = get_at(&s, &key, Some(created.resource_version()), false)
        .await
        .expect("get")
        .expect("present");
    assert!(
        got == created || got == updated,
        "get at creation rv returned {}",
        show(&got)
    );
    Verdict::Passed
}

/// Get not older than the object's current revision returns exactly the current state.
pub async fn get_not_older_than_current_returns_current<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_not_older_than_current_returns_current") {
        return v;
    }
    let s = h.new_store().await;
    let (key, _, updated, _) = seed(&s).await;
    let got = get_at(&s, &key, Some(updated.resource_version()), false)
        .await
        .expect("get")
        .expect("present");
    assert_same(&got, &updated, "get at the object's revision");
    Verdict::Passed
}

/// Get at the store's latest write (to another key) returns the object's current state.
pub async fn get_at_latest_store_revision_returns_current<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_at_latest_store_revision_returns_current") {
        return v;
    }
    let s = h.new_store().await;
    let (key, _, updated, bar_pod) = seed(&s).await;
    let got = get_at(&s, &key, Some(bar_pod.resource_version()), false)
        .await
        .expect("get")
        .expect("present");
    assert_same(&got, &updated, "get at the latest revision");
    Verdict::Passed
}

/// Get at a revision far beyond the store's is `TooLargeResourceVersion` (504 with retry).
pub async fn get_with_resource_version_too_high_is_too_large<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_with_resource_version_too_high_is_too_large") {
        return v;
    }
    let s = h.new_store().await;
    let (key, _, _, _) = seed(&s).await;
    let e = assert_err(
        get_at(&s, &key, Some(i64::MAX as u64), false).await,
        is_too_large,
        "get at max rv",
    );
    let st = e.to_status();
    assert_eq!((st.code, st.reason.as_str()), (504, "Timeout"));
    Verdict::Passed
}

/// Get of a missing key is `NotFound` naming the resource and the object.
pub async fn get_missing_key_is_not_found<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_missing_key_is_not_found") {
        return v;
    }
    let s = h.new_store().await;
    let _ = seed(&s).await;
    let key = Pod::new("ns", "non-existing").key();
    let e = assert_err(
        get_at(&s, &key, None, false).await,
        is_not_found,
        "get missing",
    );
    assert_eq!(e, key.not_found());
    Verdict::Passed
}

/// Get of a missing key with ignore-not-found is `Ok(None)`.
pub async fn get_missing_key_with_ignore_not_found_is_none<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "get_missing_key_with_ignore_not_found_is_none") {
        return v;
    }
    let s = h.new_store().await;
    let _ = seed(&s).await;
    let key = Pod::new("ns", "non-existing").key();
    assert_eq!(
        get_at(&s, &key, None, true)
            .await
            .expect("get ignoring not found"),
        None
    );
    Verdict::Passed
}
