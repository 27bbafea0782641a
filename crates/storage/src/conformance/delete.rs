//! Delete: unconditional (returns the object at a new revision); UID and RV preconditions;
//! stale cached-object suggestions; a conflicting write during delete retries and
//! re-validates; deleting a deleted object is `NotFound`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Error, GetOptions, Object, Preconditions, Result, Storage, Updated, no_validation};

fn stale() -> Error {
    Error::InvalidObject {
        message: "stale object".into(),
    }
}

async fn assert_gone<S: Storage>(s: &S, key: &crate::Key, ctx: &str) {
    assert_err(s.get(key, &GetOptions::default()).await, is_not_found, ctx);
}

/// Delete returns the last state at the deletion's (new) revision; the key is gone.
pub async fn delete_returns_last_state_at_new_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_returns_last_state_at_new_revision") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let stored = create(&s, &pod).await;
    let out = s
        .delete(&pod.key(), None, no_validation(), None)
        .await
        .expect("delete");
    assert!(
        out.resource_version() > stored.resource_version(),
        "delete did not move the revision"
    );
    assert_same(
        &out,
        &stored.with_resource_version(out.resource_version()),
        "deleted object",
    );
    assert!(current(&s).await >= out.resource_version());
    assert_gone(&s, &pod.key(), "get after delete").await;
    Verdict::Passed
}

/// Deleting a key that never existed is `NotFound`.
pub async fn delete_missing_key_is_not_found<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_missing_key_is_not_found") {
        return v;
    }
    let s = h.new_store().await;
    let _ = create(&s, &Pod::new("ns", "foo")).await;
    let key = Pod::new("ns", "non-existing").key();
    let e = assert_err(
        s.delete(&key, None, no_validation(), None).await,
        is_not_found,
        "delete missing",
    );
    assert_eq!(e.to_status().code, 404);
    Verdict::Passed
}

/// Deleting an object twice: the second delete is `NotFound`.
pub async fn delete_of_deleted_object_is_not_found<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_of_deleted_object_is_not_found") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let _ = create(&s, &pod).await;
    let _ = delete(&s, &pod.key()).await;
    assert_err(
        s.delete(&pod.key(), None, no_validation(), None).await,
        is_not_found,
        "second delete",
    );
    Verdict::Passed
}

/// A UID precondition that does not hold is a `Conflict` and deletes nothing; one that holds
/// deletes.
pub async fn delete_with_uid_precondition<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_with_uid_precondition") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo").uid("A");
    let stored = create(&s, &pod).await;
    let wrong = Preconditions {
        uid: Some("B".into()),
        resource_version: None,
    };
    let e = assert_err(
        s.delete(&pod.key(), Some(&wrong), no_validation(), None)
            .await,
        is_conflict,
        "uid mismatch",
    );
    assert_eq!(e.to_status().code, 409);
    assert_same(
        &get(&s, &pod.key()).await.expect("kept"),
        &stored,
        "object after failed delete",
    );
    let right = Preconditions {
        uid: Some("A".into()),
        resource_version: None,
    };
    let out = s
        .delete(&pod.key(), Some(&right), no_validation(), None)
        .await
        .expect("uid match");
    assert_same(
        &out,
        &stored.with_resource_version(out.resource_version()),
        "deleted object",
    );
    assert_gone(&s, &pod.key(), "get after delete").await;
    Verdict::Passed
}

/// A resource-version precondition naming an old version is a `Conflict`; the current one
/// deletes.
pub async fn delete_with_resource_version_precondition<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_with_resource_version_precondition") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "foo");
    let created = create(&s, &pod).await;
    let updated = update(&s, &pod.key(), |o| with_label(o, "v", "2")).await;
    let old = Preconditions {
        uid: None,
        resource_version: Some(created.resource_version()),
    };
    assert_err(
        s.delete(&pod.key(), Some(&old), no_validation(), None)
            .await,
        is_conflict,
        "stale rv precondition",
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("kept"),
        &updated,
        "object after failed delete",
    );
    let cur = Preconditions {
        uid: None,
        resource_version: Some(updated.resource_version()),
    };
    let out = s
        .delete(&pod.key(), Some(&cur), no_validation(), None)
        .await
        .expect("current rv precondition");
    assert_same(
        &out,
        &updated.with_resource_version(out.resource_version()),
        "deleted object",
    );
    Verdict::Passed
}

/// A stale suggestion does not fool delete: it deletes and returns the current state.
pub async fn delete_with_stale_suggestion_returns_current_state<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_with_stale_suggestion_returns_current_state") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "name");
    let original = create(&s, &pod).await;
    let updated = update(&s, &pod.key(), |o| with_label(o, "foo", "bar")).await;
    let out = s
        .delete(&pod.key(), None, no_validation(), Some(original))
        .await
        .expect("delete with stale suggestion");
    assert_same(
        &out,
        &updated.with_resource_version(out.resource_version()),
        "deleted object",
    );
    assert!(out.resource_version() > updated.resource_version());
    assert_gone(&s, &pod.key(), "get after delete").await;
    Verdict::Passed
}

/// Deleting again with the suggestion of an already deleted object is `NotFound`.
pub async fn delete_with_suggestion_of_deleted_object_is_not_found<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_with_suggestion_of_deleted_object_is_not_found") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "name");
    let original = create(&s, &pod).await;
    s.delete(&pod.key(), None, no_validation(), Some(original.clone()))
        .await
        .expect("first delete");
    assert_err(
        s.delete(&pod.key(), None, no_validation(), Some(original))
            .await,
        is_not_found,
        "delete with the suggestion of a deleted object",
    );
    Verdict::Passed
}

/// A validation error is returned as is, after one call on a fresh suggestion, and the object
/// stays.
pub async fn delete_validation_error_is_returned_and_keeps_object<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_validation_error_is_returned_and_keeps_object") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "name");
    let original = create(&s, &pod).await;
    let calls = AtomicUsize::new(0);
    let validate = |_: &Object| -> Result<()> {
        calls.fetch_add(1, Ordering::SeqCst);
        Err(Error::bad_request("validation error"))
    };
    let e = s
        .delete(&pod.key(), None, &validate, Some(original.clone()))
        .await
        .expect_err("validation fails");
    assert_eq!(
        e,
        Error::bad_request("validation error"),
        "the validation error is returned as is"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "validate calls with a fresh suggestion"
    );
    assert_same(
        &get(&s, &pod.key()).await.expect("kept"),
        &original,
        "object after refused delete",
    );
    Verdict::Passed
}

/// With a stale suggestion that fails validation, delete validates the fresh state (at most
/// two calls) and deletes.
pub async fn delete_revalidates_fresh_state_after_stale_suggestion<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_revalidates_fresh_state_after_stale_suggestion") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "name");
    let original = create(&s, &pod).await;
    let _ = update(&s, &pod.key(), |o| with_label(o, "foo", "bar")).await;
    let calls = AtomicUsize::new(0);
    let validate = |o: &Object| -> Result<()> {
        calls.fetch_add(1, Ordering::SeqCst);
        if label_of(o, "foo") == Some("bar") {
            Ok(())
        } else {
            Err(stale())
        }
    };
    s.delete(&pod.key(), None, &validate, Some(original))
        .await
        .expect("delete validates the fresh state");
    let n = calls.load(Ordering::SeqCst);
    assert!((1..=2).contains(&n), "validate called {n} times");
    assert_gone(&s, &pod.key(), "get after delete").await;
    Verdict::Passed
}

/// When only the stale suggestion passes validation, delete fails with the validation error
/// and keeps the current object.
pub async fn delete_fails_when_only_stale_suggestion_passes_validation<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "delete_fails_when_only_stale_suggestion_passes_validation",
    ) {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("ns", "name").label("foo", "bar");
    let original = create(&s, &pod).await;
    let updated = update(&s, &pod.key(), |o| with_label(o, "foo", "barbar")).await;
    let calls = AtomicUsize::new(0);
    let validate = |o: &Object| -> Result<()> {
        calls.fetch_add(1, Ordering::SeqCst);
        if label_of(o, "foo") == Some("bar") {
            Ok(())
        } else {
            Err(stale())
        }
    };
    let e = s
        .delete(&pod.key(), None, &validate, Some(original))
        .await
        .expect_err("current state fails validation");
    assert_eq!(e, stale());
    let n = calls.load(Ordering::SeqCst);
    assert!((1..=2).contains(&n), "validate called {n} times");
    assert_same(
        &get(&s, &pod.key()).await.expect("kept"),
        &updated,
        "object after refused delete",
    );
    Verdict::Passed
}

/// Preconditions are checked against the current state, not a stale suggestion: a UID only
/// the current state has deletes; a UID only the suggestion has is a `Conflict`.
pub async fn delete_precondition_rechecks_current_state_after_stale_suggestion<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "delete_precondition_rechecks_current_state_after_stale_suggestion",
    ) {
        return v;
    }
    let s = h.new_store().await;
    let prec = Preconditions {
        uid: Some("myUID".into()),
        resource_version: None,
    };

    let a = Pod::new("ns", "a");
    let original = create(&s, &a).await;
    let _ = update(&s, &a.key(), |o| with_uid(o, "myUID")).await;
    s.delete(&a.key(), Some(&prec), no_validation(), Some(original))
        .await
        .expect("the current state passes the precondition");
    assert_gone(&s, &a.key(), "get after delete").await;

    let b = Pod::new("ns", "b").uid("myUID");
    let original = create(&s, &b).await;
    let updated = update(&s, &b.key(), |o| with_uid(o, "otherUID")).await;
    assert_err(
        s.delete(&b.key(), Some(&prec), no_validation(), Some(original))
            .await,
        is_conflict,
        "only the stale suggestion passes the precondition",
    );
    assert_same(
        &get(&s, &b.key()).await.expect("kept"),
        &updated,
        "object after refused delete",
    );
    Verdict::Passed
}

/// A write that lands between validation and deletion makes delete retry: it validates again
/// (exactly twice in all) and returns the newly written state at the deletion's revision.
pub async fn delete_retries_and_revalidates_after_conflicting_write<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "delete_retries_and_revalidates_after_conflicting_write") {
        return v;
    }
    let s = Arc::new(h.new_store().await);
    let pod = Pod::new("ns", "name");
    let _ = create(&*s, &pod).await;
    let calls = AtomicUsize::new(0);
    let written: Mutex<Option<Object>> = Mutex::new(None);
    let validate = |_: &Object| -> Result<()> {
        if calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return Ok(());
        }
        let (s2, key) = (Arc::clone(&s), pod.key());
        let out = block_on_from_callback(async move {
            let mut f = |cur: Option<&Object>| -> Result<Updated> {
                cur.map(|o| with_label(o, "foo", "bar").into())
                    .ok_or_else(|| Error::internal("vanished"))
            };
            s2.guaranteed_update(&key, None, false, &mut f, None).await
        })?;
        *written.lock().expect("lock") = Some(out);
        Ok(())
    };
    let out = s
        .delete(&pod.key(), None, &validate, None)
        .await
        .expect("delete after a conflicting write");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "validate calls (once, then once after the conflict)"
    );
    let updated = written
        .lock()
        .expect("lock")
        .clone()
        .expect("the conflicting write happened");
    assert_same(
        &out,
        &updated.with_resource_version(out.resource_version()),
        "deleted object",
    );
    assert!(out.resource_version() > updated.resource_version());
    assert_gone(&*s, &pod.key(), "get after delete").await;
    Verdict::Passed
}
