//! Stats: the object count under a key follows creates and deletes, not updates.

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Storage, no_validation};

async fn count<S: Storage>(s: &S, key: &crate::Key) -> u64 {
    // A consistent list first, so a cache has caught up (as upstream's suite does).
    let _ = list(s, key, &crate::ListOptions::recursive()).await;
    s.stats(key).await.expect("stats").object_count
}

/// The count follows creates and deletes; updates and failed deletes leave it alone.
pub async fn stats_counts_objects<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "stats_counts_objects") {
        return v;
    }
    let s = h.new_store().await;
    let all = pods(None);
    assert_eq!(count(&s, &all).await, 0, "empty store");
    let foo_pod = Pod::new("ns", "foo");
    let bar_pod = Pod::new("ns", "bar");
    let _ = create(&s, &foo_pod).await;
    assert_eq!(count(&s, &all).await, 1);
    let _ = create(&s, &bar_pod).await;
    assert_eq!(count(&s, &all).await, 2);
    let _ = update(&s, &bar_pod.key(), |o| with_label(o, "foo", "bar")).await;
    assert_eq!(count(&s, &all).await, 2, "after an update");
    let _ = delete(&s, &foo_pod.key()).await;
    assert_eq!(count(&s, &all).await, 1, "after a delete");
    assert!(
        s.delete(&foo_pod.key(), None, no_validation(), None)
            .await
            .is_err()
    );
    assert_eq!(count(&s, &all).await, 1, "after a failed delete");
    let _ = delete(&s, &bar_pod.key()).await;
    assert_eq!(count(&s, &all).await, 0, "after deleting everything");
    Verdict::Passed
}

/// The count is of the objects under the key only: one namespace, or one resource.
pub async fn stats_is_scoped_to_the_key<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "stats_is_scoped_to_the_key") {
        return v;
    }
    let s = h.new_store().await;
    for (ns, name) in [("a", "1"), ("a", "2"), ("ab", "1"), ("b", "1")] {
        let _ = create(&s, &Pod::new(ns, name)).await;
    }
    let _ = bump(&s, "not-a-pod").await;
    assert_eq!(count(&s, &pods(None)).await, 4, "all pods");
    assert_eq!(count(&s, &pods(Some("a"))).await, 2, "namespace a (not ab)");
    assert_eq!(count(&s, &pods(Some("ab"))).await, 1, "namespace ab");
    assert_eq!(count(&s, &pods(Some("c"))).await, 0, "empty namespace");
    Verdict::Passed
}
