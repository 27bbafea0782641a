//! GuaranteedUpdate: basic; a no-op write is skipped; conflict retry; stale suggestion plus
//! conflict; ignore-not-found creates; preconditions.

use std::sync::Arc;

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Error, Object, Preconditions, Result, Storage, Updated};

/// An update writes the new state at a new revision, which get then reads.
pub async fn update_existing_object_writes_new_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_existing_object_writes_new_revision") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo").uid("A");
    let stored = create(&s, &pod).await;
    let mut seen = None;
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        let cur = cur.ok_or_else(|| Error::internal("missing"))?;
        seen = Some(cur.clone());
        Ok(with_annotation(cur, "version", "1").into())
    };
    let out = s
        .guaranteed_update(&pod.key(), None, false, &mut f, None)
        .await
        .expect("update");
    assert_same(
        &seen.expect("closure called"),
        &stored,
        "the closure sees the stored state",
    );
    assert!(
        out.resource_version() > stored.resource_version(),
        "update did not move the revision"
    );
    assert!(
        out.same_content(&with_annotation(&stored, "version", "1")),
        "updated content {}",
        show(&out)
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &out,
        "get after update",
    );
    Verdict::Passed
}

/// Updating a missing key without ignore-not-found is `NotFound`, without calling the closure.
pub async fn update_missing_key_is_not_found<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_missing_key_is_not_found") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "non-existing");
    let mut calls = 0;
    let obj = pod.obj();
    let mut f = |_: Option<&Object>| -> Result<Updated> {
        calls += 1;
        Ok(obj.clone().into())
    };
    assert_err(
        s.guaranteed_update(&pod.key(), None, false, &mut f, None)
            .await,
        is_not_found,
        "update missing",
    );
    assert_eq!(calls, 0, "the closure was called for a missing object");
    assert!(get(&s, &pod.key()).await.is_none());
    Verdict::Passed
}

/// With ignore-not-found, the closure gets `None` and its object is created.
pub async fn update_with_ignore_not_found_creates<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_ignore_not_found_creates") {
        return v;
    }
    let s = h.new_store().await;
    let before = bump(&s, "before").await;
    let pod = Pod::new("ns", "new");
    let obj = pod.obj();
    let mut got_none = false;
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        got_none = cur.is_none();
        Ok(obj.clone().into())
    };
    let out = s
        .guaranteed_update(&pod.key(), None, true, &mut f, None)
        .await
        .expect("create through update");
    assert!(got_none, "the closure must see no current object");
    assert!(out.resource_version() > before);
    assert!(out.same_content(&pod.obj()));
    assert_same(
        &get(&s, &pod.key()).await.expect("created"),
        &out,
        "get after create-by-update",
    );
    Verdict::Passed
}

/// An update producing the stored bytes writes nothing: same object, same revision.
pub async fn update_that_changes_nothing_writes_nothing<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_that_changes_nothing_writes_nothing") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo").uid("A");
    let stored = create(&s, &pod).await;
    let rev_before = current(&s).await;
    let prec = Preconditions {
        uid: Some("A".into()),
        resource_version: None,
    };
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        // A fresh object with the same content (not the same allocation).
        cur.map(|o| modify(o, |_| {}).into())
            .ok_or_else(|| Error::internal("missing"))
    };
    let out = s
        .guaranteed_update(&pod.key(), Some(&prec), false, &mut f, None)
        .await
        .expect("no-op update");
    assert_same(&out, &stored, "a no-op update returns the current object");
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &stored,
        "stored object after no-op",
    );
    if h.capabilities().isolated_revisions {
        assert_eq!(
            current(&s).await,
            rev_before,
            "a no-op update moved the store's revision"
        );
    }
    Verdict::Passed
}

/// An error from the closure is returned as is and nothing is written.
pub async fn update_error_from_closure_is_returned_without_write<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_error_from_closure_is_returned_without_write") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let stored = create(&s, &pod).await;
    let mut f =
        |_: Option<&Object>| -> Result<Updated> { Err(Error::bad_request("admission says no")) };
    let e = s
        .guaranteed_update(&pod.key(), None, false, &mut f, None)
        .await
        .expect_err("closure fails");
    assert_eq!(e, Error::bad_request("admission says no"));
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &stored,
        "object after failed update",
    );
    Verdict::Passed
}

/// A write landing while the closure runs makes the update retry on the fresh state: the
/// closure runs exactly twice and both changes survive.
pub async fn update_retries_on_conflict_with_fresh_state<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_retries_on_conflict_with_fresh_state") {
        return v;
    }
    let s = Arc::new(h.new_store().await);
    let pod = Pod::new("ns", "foo");
    let _ = create(&*s, &pod).await;
    let mut calls = 0;
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        calls += 1;
        let cur = cur.ok_or_else(|| Error::internal("missing"))?;
        if calls == 1 {
            let (s2, key) = (Arc::clone(&s), pod.key());
            block_on_from_callback(async move {
                let mut g = |c: Option<&Object>| -> Result<Updated> {
                    c.map(|o| with_label(o, "other", "1").into())
                        .ok_or_else(|| Error::internal("missing"))
                };
                s2.guaranteed_update(&key, None, false, &mut g, None).await
            })?;
        }
        Ok(with_label(cur, "mine", "1").into())
    };
    let out = s
        .guaranteed_update(&pod.key(), None, false, &mut f, None)
        .await
        .expect("update with conflict");
    assert_eq!(
        calls, 2,
        "the closure runs once, then once more after the conflict"
    );
    assert_eq!(
        label_of(&out, "other"),
        Some("1"),
        "the concurrent write was lost: {}",
        show(&out)
    );
    assert_eq!(
        label_of(&out, "mine"),
        Some("1"),
        "the retried write was lost: {}",
        show(&out)
    );
    assert_same(
        &get(&*s, &pod.key()).await.expect("present"),
        &out,
        "get after update",
    );
    Verdict::Passed
}

/// With a stale suggestion, a conflict error from the closure makes the store re-read the live
/// object and call the closure again, once.
pub async fn update_with_stale_suggestion_and_conflict_rereads<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_stale_suggestion_and_conflict_rereads") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let original = create(&s, &pod).await;
    let updated = update(&s, &pod.key(), |o| with_label(o, "generation", "2")).await;
    let mut stale_calls = 0;
    let key = pod.key();
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        let cur = cur.ok_or_else(|| Error::internal("missing"))?;
        if label_of(cur, "generation") != Some("2") {
            stale_calls += 1;
            return Err(key.conflict("simulated stale object"));
        }
        Ok(with_label(cur, "generation", "3").into())
    };
    let out = s
        .guaranteed_update(&pod.key(), None, false, &mut f, Some(original))
        .await
        .expect("update");
    assert!(
        stale_calls <= 1,
        "the closure saw the stale suggestion {stale_calls} times"
    );
    assert_eq!(label_of(&out, "generation"), Some("3"));
    assert!(out.resource_version() > updated.resource_version());
    Verdict::Passed
}

/// With an up-to-date suggestion, a failing closure is called at most twice and its error is
/// returned.
pub async fn update_with_current_suggestion_calls_closure_at_most_twice<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "update_with_current_suggestion_calls_closure_at_most_twice",
    ) {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let _ = create(&s, &pod).await;
    let current_obj = update(&s, &pod.key(), |o| with_label(o, "generation", "3")).await;
    let mut attempts = 0;
    let mut f = |_: Option<&Object>| -> Result<Updated> {
        attempts += 1;
        Err(Error::bad_request("validation or admission error"))
    };
    let e = s
        .guaranteed_update(&pod.key(), None, false, &mut f, Some(current_obj.clone()))
        .await
        .expect_err("closure fails");
    assert_eq!(e, Error::bad_request("validation or admission error"));
    assert!(
        (1..=2).contains(&attempts),
        "the closure was called {attempts} times"
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &current_obj,
        "object after failed update",
    );
    Verdict::Passed
}

/// A UID precondition that fails is a `Conflict` (nothing written); one that holds updates.
pub async fn update_with_uid_precondition<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_uid_precondition") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo").uid("A");
    let stored = create(&s, &pod).await;
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        cur.map(|o| with_annotation(o, "version", "2").into())
            .ok_or_else(|| Error::internal("missing"))
    };
    let wrong = Preconditions {
        uid: Some("B".into()),
        resource_version: None,
    };
    let e = assert_err(
        s.guaranteed_update(&pod.key(), Some(&wrong), false, &mut f, None)
            .await,
        is_conflict,
        "uid mismatch",
    );
    assert_eq!(e.to_status().code, 409);
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &stored,
        "object after failed precondition",
    );
    let right = Preconditions {
        uid: Some("A".into()),
        resource_version: None,
    };
    let out = s
        .guaranteed_update(&pod.key(), Some(&right), false, &mut f, None)
        .await
        .expect("uid match");
    assert!(out.resource_version() > stored.resource_version());
    Verdict::Passed
}

/// A resource-version precondition naming an old version is a `Conflict`, even with a
/// suggestion at that version; the current version updates.
pub async fn update_with_resource_version_precondition<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "update_with_resource_version_precondition") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let created = create(&s, &pod).await;
    let updated = update(&s, &pod.key(), |o| with_label(o, "v", "2")).await;
    let mut f = |cur: Option<&Object>| -> Result<Updated> {
        cur.map(|o| with_label(o, "v", "3").into())
            .ok_or_else(|| Error::internal("missing"))
    };
    let old = Preconditions {
        uid: None,
        resource_version: Some(created.resource_version()),
    };
    assert_err(
        s.guaranteed_update(&pod.key(), Some(&old), false, &mut f, Some(created.clone()))
            .await,
        is_conflict,
        "stale rv precondition with a stale suggestion",
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("present"),
        &updated,
        "object after failed precondition",
    );
    let cur = Preconditions {
        uid: None,
        resource_version: Some(updated.resource_version()),
    };
    let out = s
        .guaranteed_update(&pod.key(), Some(&cur), false, &mut f, None)
        .await
        .expect("current rv");
    assert_eq!(label_of(&out, "v"), Some("3"));
    Verdict::Passed
}
