//! Watch: ADDED/MODIFIED/DELETED; a MODIFIED entering or leaving the selection becomes
//! ADDED/DELETED; from RV 0 (state first, also after compaction); from a non-zero RV; from a
//! compacted RV → 410; DELETED carries the deletion's RV; dropping the stream cancels it; a
//! delayed consumer gets events in order; a stalled watcher does not block another; cluster-
//! and namespace-scoped watches; bookmarks and progress notify; nothing after an ERROR event.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use super::support::*;
use super::{Harness, Verdict, WAIT, gate};
use crate::{
    Bookmark, Key, ListOptions, Object, SelectionPredicate, Storage, WatchEvent, WatchStream,
};

/// The event a step must produce.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Added,
    Modified,
    Deleted,
}

/// One write of a scenario and the event (if any) it must produce.
enum Step {
    Put(Pod, Option<Kind>),
    Delete(Pod, Option<Kind>),
}

use Kind::{Added, Deleted, Modified};

/// Performs `steps`, checking after each one that the watch delivers exactly the expected
/// event: ADDED/MODIFIED carry the written object, DELETED the previous state at the write's
/// revision. Writes producing no event are caught when a later event arrives first.
async fn run_steps<S: Storage>(s: &S, w: &mut WatchStream, steps: Vec<Step>, ctx: &str) {
    let mut state: HashMap<String, Object> = HashMap::new();
    for (i, step) in steps.into_iter().enumerate() {
        let (path, written, deleted, kind) = match step {
            Step::Put(p, k) => (p.key().path().to_owned(), put(s, &p).await, false, k),
            Step::Delete(p, k) => (
                p.key().path().to_owned(),
                delete(s, &p.key()).await,
                true,
                k,
            ),
        };
        let prev = if deleted {
            state.remove(&path)
        } else {
            state.insert(path.clone(), written.clone())
        };
        let Some(kind) = kind else { continue };
        let want = match kind {
            Added => Expect::Added(written),
            Modified => match prev {
                Some(prev) => Expect::ModifiedFrom(written, prev),
                None => panic!("{ctx} step {i}: nothing was modified"),
            },
            Deleted => {
                let prev = prev.unwrap_or_else(|| panic!("{ctx} step {i}: nothing to delete"));
                Expect::Deleted(prev.with_resource_version(written.resource_version()))
            }
        };
        let ev = next_event(w, &format!("{ctx} step {i}")).await;
        check_event(&ev, &want, &format!("{ctx} step {i}"));
    }
}

/// A watch from the revision of a consistent list of `key`.
async fn watch_from_now<S: Storage>(
    s: &S,
    key: &Key,
    predicate: SelectionPredicate,
) -> WatchStream {
    let l = list(s, &pods(None), &ListOptions::recursive()).await;
    let opts = ListOptions {
        predicate,
        ..from_rv(Some(l.resource_version), key)
    };
    watch(s, key, &opts).await
}

/// Create, update and delete are seen as ADDED, MODIFIED, DELETED (the last state at the
/// deletion's revision), by a namespace watch and by an object watch, and writes elsewhere are
/// not seen.
pub async fn watch_collection_reports_added_modified_deleted<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_collection_reports_added_modified_deleted") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    for (ns, recursive) in [("test-ns-1", true), ("test-ns-2", false)] {
        let foo_pod = Pod::new(ns, "foo");
        let key = if recursive {
            pods(Some(ns))
        } else {
            foo_pod.key()
        };
        let mut w = watch_from_now(&s, &key, SelectionPredicate::everything()).await;
        let _ = put(&s, &Pod::new(&format!("{ns}-bad"), "foo")).await;
        let steps = vec![
            Step::Put(Pod::new(ns, "foo"), Some(Added)),
            Step::Put(Pod::new(ns, "foo").node("bar"), Some(Modified)),
            Step::Delete(Pod::new(ns, "foo"), Some(Deleted)),
            Step::Put(Pod::new(ns, "foo").phase("Pending"), Some(Added)),
        ];
        run_steps(&s, &mut w, steps, &format!("recursive={recursive}")).await;
    }
    Verdict::Passed
}

/// An object watch sees only its object: not `foobar`, not `fo`, not the same name elsewhere.
pub async fn watch_single_object_reports_only_that_object<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_single_object_reports_only_that_object") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let mut w = watch_from_now(
        &s,
        &Pod::new("ns", "foo").key(),
        SelectionPredicate::everything(),
    )
    .await;
    let steps = vec![
        Step::Put(Pod::new("ns", "foobar"), None),
        Step::Put(Pod::new("ns", "fo"), None),
        Step::Put(Pod::new("other", "foo"), None),
        Step::Put(Pod::new("ns", "foo"), Some(Added)),
        Step::Put(Pod::new("ns", "foobar").phase("Running"), None),
        Step::Put(Pod::new("ns", "foo").phase("Running"), Some(Modified)),
        Step::Delete(Pod::new("ns", "foobar"), None),
        Step::Delete(Pod::new("ns", "foo"), Some(Deleted)),
    ];
    run_steps(&s, &mut w, steps, "object watch").await;
    Verdict::Passed
}

/// An update that makes an object match the field selector is seen as ADDED (with the new
/// state); later changes inside the selection as MODIFIED.
pub async fn watch_modified_entering_selection_becomes_added<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_modified_entering_selection_becomes_added") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    for recursive in [true, false] {
        let ns = if recursive { "rec" } else { "one" };
        let key = if recursive {
            pods(Some(ns))
        } else {
            Pod::new(ns, "foo").key()
        };
        let mut w = watch_from_now(&s, &key, pred("", "spec.nodeName=bar")).await;
        let steps = vec![
            Step::Put(Pod::new(ns, "foo"), None),
            Step::Put(Pod::new(ns, "foo").node("bar"), Some(Added)),
            Step::Put(
                Pod::new(ns, "foo").node("bar").phase("Running"),
                Some(Modified),
            ),
        ];
        run_steps(
            &s,
            &mut w,
            steps,
            &format!("entering, recursive={recursive}"),
        )
        .await;
    }
    Verdict::Passed
}

/// An update that makes an object stop matching is seen as DELETED carrying the previous
/// state at the update's revision; matching again is ADDED.
pub async fn watch_modified_leaving_selection_becomes_deleted<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_modified_leaving_selection_becomes_deleted") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    for recursive in [true, false] {
        let ns = if recursive { "rec" } else { "one" };
        let key = if recursive {
            pods(Some(ns))
        } else {
            Pod::new(ns, "foo").key()
        };
        let mut w = watch_from_now(&s, &key, pred("", "spec.nodeName!=bar")).await;
        let steps = vec![
            Step::Put(Pod::new(ns, "foo"), Some(Added)),
            Step::Put(Pod::new(ns, "foo").node("bar"), Some(Deleted)),
            Step::Put(Pod::new(ns, "foo").node("bar").phase("Running"), None),
            Step::Put(Pod::new(ns, "foo").node("baz"), Some(Added)),
        ];
        run_steps(
            &s,
            &mut w,
            steps,
            &format!("leaving, recursive={recursive}"),
        )
        .await;
    }
    Verdict::Passed
}

/// Upstream's "filtering" sequence with a label selector: ADDED, DELETED (left), ADDED (back),
/// MODIFIED, DELETED (really deleted).
pub async fn watch_label_selection_sequence<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_label_selection_sequence") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let mut w = watch_from_now(&s, &pods(Some("ns")), pred("select=true", "")).await;
    let steps = vec![
        Step::Put(Pod::new("ns", "foo").label("select", "true"), Some(Added)),
        Step::Put(Pod::new("ns", "foo"), Some(Deleted)),
        Step::Put(Pod::new("ns", "foo").label("select", "true"), Some(Added)),
        Step::Put(
            Pod::new("ns", "foo").label("select", "true").node("bar"),
            Some(Modified),
        ),
        Step::Delete(Pod::new("ns", "foo"), Some(Deleted)),
    ];
    run_steps(&s, &mut w, steps, "label filtering").await;
    Verdict::Passed
}

/// A watch from RV 0 first delivers the current state as ADDED (in key order), then changes.
pub async fn watch_from_zero_sends_current_state_first<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_from_zero_sends_current_state_first") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = Pod::new("test-ns", "foo");
    let stored = create(&s, &foo_pod).await;
    sync(&s, stored.resource_version()).await;
    let mut w = watch(&s, &foo_pod.key(), &from_rv(Some(0), &foo_pod.key())).await;
    expect_events(
        &mut w,
        &[Expect::Added(stored.clone())],
        "object watch from 0",
    )
    .await;
    let updated = update(&s, &foo_pod.key(), |o| with_annotation(o, "a", "1")).await;
    expect_events(
        &mut w,
        &[Expect::ModifiedFrom(updated.clone(), stored.clone())],
        "change after the state",
    )
    .await;
    drop(w);
    sync(&s, updated.resource_version()).await;
    let mut w = watch(&s, &foo_pod.key(), &from_rv(Some(0), &foo_pod.key())).await;
    expect_events(
        &mut w,
        &[Expect::Added(updated.clone())],
        "second object watch from 0",
    )
    .await;
    drop(w);
    let bar_pod = create(&s, &Pod::new("test-ns", "bar")).await;
    let baz_pod = create(&s, &Pod::new("other-ns", "baz")).await;
    sync(&s, baz_pod.resource_version()).await;
    let mut w = watch(
        &s,
        &pods(Some("test-ns")),
        &from_rv(Some(0), &pods(Some("test-ns"))),
    )
    .await;
    expect_events(
        &mut w,
        &[Expect::Added(bar_pod), Expect::Added(updated.clone())],
        "namespace watch from 0",
    )
    .await;
    let gone = delete(&s, &foo_pod.key()).await;
    expect_events(
        &mut w,
        &[Expect::Deleted(
            updated.with_resource_version(gone.resource_version()),
        )],
        "delete after the state",
    )
    .await;
    Verdict::Passed
}

/// After compaction, a watch from RV 0 still delivers the current state as ADDED.
pub async fn watch_from_zero_after_compaction_sends_current_state<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_from_zero_after_compaction_sends_current_state") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = Pod::new("test-ns", "foo");
    let _ = create(&s, &foo_pod).await;
    let _ = update(&s, &foo_pod.key(), |o| with_annotation(o, "a", "1")).await;
    let last = update(&s, &foo_pod.key(), |o| with_annotation(o, "a", "2")).await;
    h.compact(&s, last.resource_version())
        .await
        .expect("compact");
    sync(&s, last.resource_version()).await;
    let mut w = watch(&s, &foo_pod.key(), &from_rv(Some(0), &foo_pod.key())).await;
    expect_events(
        &mut w,
        &[Expect::Added(last.clone())],
        "watch from 0 after compaction",
    )
    .await;
    let next = update(&s, &foo_pod.key(), |o| with_annotation(o, "a", "3")).await;
    expect_events(&mut w, &[Expect::Modified(next)], "change after compaction").await;
    Verdict::Passed
}

/// A watch from an object's revision delivers only later changes (no ADDED for the state).
pub async fn watch_from_non_zero_sends_only_later_changes<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_from_non_zero_sends_only_later_changes") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = Pod::new("test-ns", "foo");
    let stored = create(&s, &foo_pod).await;
    let mut from = stored.resource_version();
    for key in [foo_pod.key(), pods(Some("test-ns"))] {
        let mut w = watch(&s, &key, &from_rv(Some(from), &key)).await;
        let v = format!("{}", key.is_collection());
        let out = update(&s, &foo_pod.key(), |o| with_annotation(o, "version", &v)).await;
        from = out.resource_version();
        expect_events(
            &mut w,
            &[Expect::Modified(out)],
            &format!("watch {key} from the latest write"),
        )
        .await;
    }
    Verdict::Passed
}

/// A watch from a past revision replays every later change in revision order.
pub async fn watch_from_past_revision_replays_history_in_order<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_from_past_revision_replays_history_in_order") {
        return v;
    }
    let s = h.new_store().await;
    let a = Pod::new("ns", "a");
    let a1 = create(&s, &a).await;
    let a2 = update(&s, &a.key(), |o| with_label(o, "v", "2")).await;
    let _ = create(&s, &Pod::new("elsewhere", "x")).await;
    let b = create(&s, &Pod::new("ns", "b")).await;
    let gone = delete(&s, &a.key()).await;
    let key = pods(Some("ns"));
    let mut w = watch(&s, &key, &from_rv(Some(a1.resource_version()), &key)).await;
    let want = [
        Expect::ModifiedFrom(a2.clone(), a1.clone()),
        Expect::Added(b),
        Expect::Deleted(a2.with_resource_version(gone.resource_version())),
    ];
    expect_events(&mut w, &want, "replay from the first write").await;
    Verdict::Passed
}

/// Asserts a watch from a compacted revision fails with `Expired`: as the result, or as the
/// stream's first event followed by the end of the stream.
async fn assert_watch_expired<S: Storage>(
    s: &S,
    key: &Key,
    rv: u64,
    ctx: &str,
) -> Option<WatchStream> {
    match s.watch(key, &from_rv(Some(rv), key)).await {
        Err(e) => {
            assert!(e.is_expired(), "{ctx}: expected Expired, got {e:?}");
            assert_eq!(e.to_status().code, 410);
            None
        }
        Ok(mut w) => match next_event(&mut w, ctx).await {
            WatchEvent::Error(e) => {
                assert!(
                    e.is_expired(),
                    "{ctx}: expected an Expired error event, got {e:?}"
                );
                Some(w)
            }
            other => panic!("{ctx}: expected an ERROR event, got {}", describe(&other)),
        },
    }
}

/// A watch from a compacted revision is `Expired` (410).
pub async fn watch_from_compacted_revision_is_expired<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_from_compacted_revision_is_expired") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = Pod::new("test-ns", "foo");
    let created = create(&s, &foo_pod).await;
    let _ = update(&s, &foo_pod.key(), |o| with_label(o, "v", "2")).await;
    let last = update(&s, &foo_pod.key(), |o| with_label(o, "v", "3")).await;
    h.compact(&s, last.resource_version())
        .await
        .expect("compact");
    for key in [foo_pod.key(), pods(Some("test-ns"))] {
        if let Some(mut w) = assert_watch_expired(
            &s,
            &key,
            created.resource_version(),
            &format!("watch {key}"),
        )
        .await
        {
            expect_end(&mut w, "after the error event").await;
        }
    }
    Verdict::Passed
}

/// The DELETED event carries the revision delete returned, newer than the object's.
pub async fn watch_deleted_event_carries_the_deletion_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_deleted_event_carries_the_deletion_revision") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = Pod::new("test-ns", "foo");
    let stored = create(&s, &foo_pod).await;
    let mut w = watch(
        &s,
        &foo_pod.key(),
        &from_rv(Some(stored.resource_version()), &foo_pod.key()),
    )
    .await;
    let out = delete(&s, &foo_pod.key()).await;
    assert!(out.resource_version() > stored.resource_version());
    match next_event(&mut w, "delete").await {
        WatchEvent::Deleted(o) => {
            assert_eq!(
                o.resource_version(),
                out.resource_version(),
                "DELETED revision"
            );
            assert_same(&o, &out, "DELETED object");
        }
        other => panic!("expected DELETED, got {}", describe(&other)),
    }
    Verdict::Passed
}

/// Dropping watch streams (unread, or half read) cancels them: writes keep flowing and new
/// watches work.
pub async fn watch_dropped_stream_does_not_block_writers<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_dropped_stream_does_not_block_writers") {
        return v;
    }
    let s = h.new_store().await;
    let start = bump(&s, "start").await;
    let key = pods(Some("ns"));
    let unread = watch(&s, &key, &from_rv(Some(start), &key)).await;
    let mut half = watch(&s, &key, &from_rv(Some(start), &key)).await;
    let first = create(&s, &Pod::new("ns", "p-000")).await;
    expect_events(&mut half, &[Expect::Added(first)], "before dropping").await;
    drop(unread);
    drop(half);
    let writes = async {
        let mut last = None;
        for i in 1..300 {
            last = Some(create(&s, &Pod::new("ns", &format!("p-{i:03}"))).await);
        }
        last.expect("writes")
    };
    let last = tokio::time::timeout(WAIT * 3, writes)
        .await
        .expect("writes after dropping watches stalled");
    let mut w = watch(&s, &key, &from_rv(Some(last.resource_version() - 1), &key)).await;
    let ev = next_event(&mut w, "a new watch").await;
    assert_eq!(
        ev.resource_version(),
        Some(last.resource_version()),
        "new watch: {}",
        describe(&ev)
    );
    Verdict::Passed
}

/// A consumer that reads late gets the events in order, with no gap: all of them, or a prefix
/// of at least 10 followed by the end of the stream (a backend may close a watcher it cannot
/// buffer for).
pub async fn watch_delayed_consumer_gets_events_in_order<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_delayed_consumer_gets_events_in_order") {
        return v;
    }
    let s = h.new_store().await;
    let stored = create(&s, &Pod::new("test-ns", "foo")).await;
    let key = pods(Some("test-ns"));
    let mut w = watch(&s, &key, &from_rv(Some(stored.resource_version()), &key)).await;
    let mut created = Vec::new();
    for i in 0..21 {
        created.push(put(&s, &Pod::new("test-ns", &format!("foo-{i:02}"))).await);
    }
    let mut got = 0;
    for want in &created {
        match tokio::time::timeout(WAIT, w.next()).await {
            Ok(Some(WatchEvent::Error(_)) | None) => break,
            Ok(Some(ev)) => {
                check_event(
                    &ev,
                    &Expect::Added(want.clone()),
                    &format!("delayed event {got}"),
                );
                got += 1;
            }
            Err(_) => panic!("no event within {WAIT:?} after {got} events"),
        }
    }
    assert!(
        got >= 10,
        "only {got} of 21 events delivered to a delayed consumer"
    );
    if got < created.len() {
        // What ended early must stay ended.
        let rest = tokio::time::timeout(WAIT, w.next()).await;
        assert!(
            matches!(rest, Ok(None) | Ok(Some(WatchEvent::Error(_)))),
            "events after the watch ended"
        );
    }
    Verdict::Passed
}

/// A watcher that never reads does not hold up another watcher of the same key, nor the
/// writers; the stalled one, if ended, saw a gapless prefix.
pub async fn watch_stalled_watcher_does_not_block_another<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_stalled_watcher_does_not_block_another") {
        return v;
    }
    let s = Arc::new(h.new_store().await);
    let start = bump(&*s, "start").await;
    let key = pods(Some("ns"));
    let mut stalled = watch(&*s, &key, &from_rv(Some(start), &key)).await;
    let mut live = watch(&*s, &key, &from_rv(Some(start), &key)).await;
    const N: usize = 300;
    let writer = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let mut out = Vec::with_capacity(N);
            for i in 0..N {
                out.push(create(&*s, &Pod::new("ns", &format!("p-{i:03}"))).await);
            }
            out
        })
    };
    let mut seen = Vec::with_capacity(N);
    for i in 0..N {
        match next_event(&mut live, &format!("live watcher event {i}")).await {
            WatchEvent::Added(o) => seen.push(o),
            other => panic!("live watcher event {i}: {}", describe(&other)),
        }
    }
    let written = tokio::time::timeout(WAIT, writer)
        .await
        .expect("writers finished")
        .expect("writer task");
    assert_items(
        &seen,
        &written,
        "the live watcher sees every write in order",
    );
    let mut i = 0;
    while i < N {
        match tokio::time::timeout(WAIT, stalled.next()).await {
            Ok(Some(WatchEvent::Added(o))) => {
                assert_same(&o, &written[i], &format!("stalled watcher event {i}"));
                i += 1;
            }
            Ok(Some(WatchEvent::Error(_)) | None) => break,
            Ok(Some(other)) => panic!("stalled watcher: {}", describe(&other)),
            Err(_) => panic!("stalled watcher neither delivered nor ended after {i} events"),
        }
    }
    Verdict::Passed
}

/// Cluster-scoped watches: everything; a node field selector (matching and filtering out); a
/// single object with a name selector.
pub async fn watch_cluster_scoped_objects<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_cluster_scoped_objects") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let all = pods(None);
    let c = Pod::cluster;

    let mut w = watch_from_now(&s, &all, SelectionPredicate::everything()).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(c("t1-foo1"), Some(Added)),
            Step::Put(c("t1-foo1").phase("Running"), Some(Modified)),
            Step::Put(c("t1-foo2").node("t1-bar1"), Some(Added)),
        ],
        "cluster-wide, everything",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &all, pred("", "spec.nodeName=t2-bar1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(c("t2-foo1"), None),
            Step::Put(c("t2-foo1").node("t2-bar1"), Some(Added)),
        ],
        "cluster-wide, node selector",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &all, pred("", "spec.nodeName!=t3-bar1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(c("t3-foo1"), Some(Added)),
            Step::Put(c("t3-foo2"), Some(Added)),
            Step::Put(c("t3-foo1").phase("Running"), Some(Modified)),
            Step::Put(c("t3-foo1").node("t3-bar1"), Some(Deleted)),
        ],
        "cluster-wide, node selector filtering out",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &c("t4-foo1").key(), pred("", "metadata.name=t4-foo1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(c("t4-foo1"), Some(Added)),
            Step::Put(c("t4-foo2"), None),
            Step::Put(c("t4-foo1").phase("Running"), Some(Modified)),
            Step::Put(c("t4-foo2").phase("Running"), None),
            Step::Put(c("t4-foo1").node("n"), Some(Modified)),
        ],
        "one object",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(
        &s,
        &c("t6-foo1").key(),
        pred("", "spec.nodeName!=t6-bar1,metadata.name=t6-foo1"),
    )
    .await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(c("t6-foo1"), Some(Added)),
            Step::Put(c("t6-foo2"), None),
            Step::Put(c("t6-foo1").phase("Running"), Some(Modified)),
            Step::Put(c("t6-foo1").node("t6-bar1"), Some(Deleted)),
            Step::Put(c("t6-foo2").node("t6-bar1"), None),
            Step::Put(c("t6-foo1").node("t6-bar2"), Some(Added)),
        ],
        "one object, node selector filtering out",
    )
    .await;
    Verdict::Passed
}

/// Namespaced watches: all namespaces with a namespace, node or name selector; one namespace
/// by key; one object by key with a node selector.
pub async fn watch_namespace_scoped_with_field_selectors<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_namespace_scoped_with_field_selectors") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let p = Pod::new;

    let mut w = watch_from_now(&s, &pods(None), SelectionPredicate::everything()).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t1-ns1", "t1-foo1"), Some(Added)),
            Step::Put(p("t1-ns2", "t1-foo2"), Some(Added)),
            Step::Put(p("t1-ns1", "t1-foo1").phase("Running"), Some(Modified)),
            Step::Put(p("t1-ns2", "t1-foo2").phase("Running"), Some(Modified)),
        ],
        "all namespaces",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &pods(None), pred("", "metadata.namespace=t2-ns1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t2-ns1", "t2-foo1"), Some(Added)),
            Step::Put(p("t2-ns2", "t2-foo1"), None),
            Step::Put(p("t2-ns1", "t2-foo1").phase("Running"), Some(Modified)),
            Step::Put(p("t2-ns2", "t2-foo1").phase("Running"), None),
            Step::Delete(p("t2-ns1", "t2-foo1"), Some(Deleted)),
        ],
        "namespace field selector",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &pods(None), pred("", "spec.nodeName=t3-bar1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t3-ns1", "t3-foo1"), None),
            Step::Put(p("t3-ns2", "t3-foo2"), None),
            Step::Put(p("t3-ns1", "t3-foo1").node("t3-bar1"), Some(Added)),
            Step::Put(p("t3-ns2", "t3-foo2").node("t3-bar1"), Some(Added)),
        ],
        "node selector across namespaces",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &pods(Some("t5-ns1")), SelectionPredicate::everything()).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t5-ns1", "t5-foo1"), Some(Added)),
            Step::Put(p("t5-ns2", "t5-foo1"), None),
            Step::Put(p("t5-ns1", "t5-foo2"), Some(Added)),
            Step::Put(p("t5-ns1", "t5-foo1").phase("Running"), Some(Modified)),
            Step::Put(p("t5-ns2", "t5-foo1").phase("Running"), None),
            Step::Delete(p("t5-ns1", "t5-foo2"), Some(Deleted)),
        ],
        "one namespace by key",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(
        &s,
        &pods(Some("t9-ns2")),
        pred("", "spec.nodeName!=t9-bar1"),
    )
    .await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t9-ns1", "t9-foo1"), None),
            Step::Put(p("t9-ns2", "t9-foo1"), Some(Added)),
            Step::Put(p("t9-ns2", "t9-foo1").node("t9-bar1"), Some(Deleted)),
            Step::Put(p("t9-ns2", "t9-foo1").node("t9-bar2"), Some(Added)),
        ],
        "one namespace with a node selector",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(&s, &pods(None), pred("", "metadata.name=t10-foo1")).await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t10-ns1", "t10-foo1"), Some(Added)),
            Step::Put(p("t10-ns2", "t10-foo1"), Some(Added)),
            Step::Put(p("t10-ns1", "t10-foo2"), None),
            Step::Put(p("t10-ns1", "t10-foo1").phase("Running"), Some(Modified)),
            Step::Put(p("t10-ns1", "t10-foo1").node("t10-bar1"), Some(Modified)),
        ],
        "name selector across namespaces",
    )
    .await;
    drop(w);

    let mut w = watch_from_now(
        &s,
        &p("t19-ns1", "t19-foo2").key(),
        pred("", "spec.nodeName!=t19-bar1"),
    )
    .await;
    run_steps(
        &s,
        &mut w,
        vec![
            Step::Put(p("t19-ns1", "t19-foo1"), None),
            Step::Put(p("t19-ns2", "t19-foo2"), None),
            Step::Put(p("t19-ns1", "t19-foo2"), Some(Added)),
            Step::Put(p("t19-ns1", "t19-foo2").phase("Running"), Some(Modified)),
            Step::Put(p("t19-ns1", "t19-foo2").node("t19-bar1"), Some(Deleted)),
        ],
        "one object by key with a node selector",
    )
    .await;
    Verdict::Passed
}

fn bookmark_opts(rv: u64, key: &Key, allow: bool) -> ListOptions {
    ListOptions {
        allow_watch_bookmarks: allow,
        progress_notify: true,
        ..from_rv(Some(rv), key)
    }
}

/// Reads bookmarks until one at or after `target`, each newer than or equal to the last;
/// object events are not expected.
async fn await_bookmark(w: &mut WatchStream, target: u64, ctx: &str) -> Bookmark {
    let mut last = 0;
    loop {
        match next_event(w, ctx).await {
            WatchEvent::Bookmark(b) => {
                assert!(
                    !b.initial_events_end,
                    "{ctx}: {b:?} is not an initial-events-end"
                );
                assert!(
                    b.resource_version >= last,
                    "{ctx}: bookmarks went back from {last} to {}",
                    b.resource_version
                );
                last = b.resource_version;
                if b.resource_version >= target {
                    return b;
                }
            }
            other => panic!("{ctx}: expected a bookmark, got {}", describe(&other)),
        }
    }
}

/// With progress notification but without allowWatchBookmarks, progress requests yield no
/// bookmark: the next event is always the next write. A second watch that allows bookmarks
/// shows each request was served before the write is made.
pub async fn watch_without_allow_bookmarks_sends_no_bookmarks<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_without_allow_bookmarks_sends_no_bookmarks") {
        return v;
    }
    let s = h.new_store().await;
    let start = bump(&s, "start").await;
    let key = pods(Some("test-ns"));
    let mut quiet = watch(&s, &key, &bookmark_opts(start, &key, false)).await;
    let mut control = watch(&s, &key, &bookmark_opts(start, &key, true)).await;
    let mut control_last = 0;
    for i in 0..3 {
        let target = current(&s).await;
        s.request_watch_progress().await.expect("request progress");
        let b = await_bookmark(&mut control, target, &format!("control bookmark {i}")).await;
        control_last = control_last.max(b.resource_version);
        let pod = create(&s, &Pod::new("test-ns", &format!("p{i}"))).await;
        expect_events(
            &mut quiet,
            &[Expect::Added(pod.clone())],
            &format!("no bookmarks without allowWatchBookmarks ({i})"),
        )
        .await;
        let ev = next_non_bookmark(&mut control, &mut control_last, "control").await;
        check_event(&ev, &Expect::Added(pod), "control");
    }
    Verdict::Passed
}

/// A progress request makes a watch with progress notification report a bookmark at or after
/// the revision current at the request, after the events before it.
pub async fn watch_progress_notify_sends_bookmark_after_last_event<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_progress_notify_sends_bookmark_after_last_event") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("test-ns", "name");
    let created = create(&s, &pod).await;
    let mut w = watch(
        &s,
        &pod.key(),
        &bookmark_opts(created.resource_version(), &pod.key(), true),
    )
    .await;
    let other = bump(&s, "elsewhere").await;
    let target = current(&s).await;
    assert!(target >= other);
    s.request_watch_progress().await.expect("request progress");
    let b = await_bookmark(&mut w, target, "idle progress").await;
    assert!(
        b.resource_version <= current(&s).await,
        "bookmark from the future"
    );
    let updated = update(&s, &pod.key(), |o| with_label(o, "v", "2")).await;
    let mut last = b.resource_version;
    let ev = next_non_bookmark(&mut w, &mut last, "update").await;
    check_event(&ev, &Expect::Modified(updated.clone()), "update");
    s.request_watch_progress().await.expect("request progress");
    let b = await_bookmark(
        &mut w,
        updated.resource_version(),
        "progress after an event",
    )
    .await;
    assert!(b.resource_version >= updated.resource_version());
    Verdict::Passed
}

/// While writes and progress requests interleave, bookmarks never go back before the last
/// event, and events strictly increase.
pub async fn watch_bookmarks_carry_monotonic_revisions<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_bookmarks_carry_monotonic_revisions") {
        return v;
    }
    let s = Arc::new(h.new_store().await);
    let start = bump(&*s, "start").await;
    let key = pods(Some("test-ns"));
    let mut w = watch(&*s, &key, &bookmark_opts(start, &key, true)).await;
    const N: usize = 50;
    let writer = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let mut last = 0;
            for i in 0..N {
                last = create(&*s, &Pod::new("test-ns", &format!("foo-{i:02}")))
                    .await
                    .resource_version();
                s.request_watch_progress().await.expect("request progress");
            }
            last
        })
    };
    let (mut events, mut last) = (0, 0u64);
    while events < N {
        match next_event(&mut w, &format!("after {events} events")).await {
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.resource_version >= last,
                    "bookmark at {} after {last}",
                    b.resource_version
                );
                last = b.resource_version;
            }
            WatchEvent::Added(o) => {
                assert!(
                    o.resource_version() > last,
                    "event at {} after {last}",
                    o.resource_version()
                );
                last = o.resource_version();
                events += 1;
            }
            other => panic!("unexpected {}", describe(&other)),
        }
    }
    let last_write = tokio::time::timeout(WAIT, writer)
        .await
        .expect("writer finished")
        .expect("writer task");
    s.request_watch_progress().await.expect("request progress");
    let b = await_bookmark(&mut w, last_write, "final progress").await;
    assert!(b.resource_version >= last);
    Verdict::Passed
}

/// After an ERROR event nothing follows: the stream ends, even when matching writes come.
///
/// Two ways lead to an in-stream ERROR, and every backend must take at least one of them:
/// a watch from a compacted revision (etcd and the embedded store accept it and report
/// Expired in the stream; a cache may refuse it up front instead), and a watcher that stops
/// reading while the history it still needs is compacted away (a cache detaches such a
/// watcher, and its resume past the compaction is Expired; a backend that buffers the whole
/// backlog delivers every event instead).
pub async fn watch_nothing_after_error_event<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_nothing_after_error_event") {
        return v;
    }
    let s = h.new_store().await;
    let mut errors_in_stream = 0;
    let foo_pod = Pod::new("test", "foo");
    let created = create(&s, &foo_pod).await;
    let last = update(&s, &foo_pod.key(), |o| with_label(o, "v", "2")).await;
    h.compact(&s, last.resource_version())
        .await
        .expect("compact");
    let key = pods(None);
    let ws = assert_watch_expired(
        &s,
        &key,
        created.resource_version(),
        "watch from a compacted revision",
    )
    .await;
    let _ = create(&s, &Pod::new("test", "bar")).await;
    let _ = update(&s, &foo_pod.key(), |o| with_label(o, "v", "3")).await;
    if let Some(mut w) = ws {
        expect_end(&mut w, "after the error event").await;
        errors_in_stream += 1;
    }

    // A watcher that reads nothing while its backlog grows, then loses it to compaction.
    // More than a backend's per-watcher channel holds (the embedded store's default is 128), so
    // the backlog cannot all be queued before the compaction: some of it must be read
    // from history afterwards, where it is gone.
    const BEHIND: usize = 300;
    let node = "stalled-node";
    let from = current(&s).await;
    let opts = ListOptions {
        resource_version: Some(from),
        recursive: true,
        predicate: pred("", &format!("spec.nodeName={node}")),
        ..ListOptions::default()
    };
    let mut w = watch(&s, &key, &opts).await;
    let mut written = Vec::with_capacity(BEHIND);
    for i in 0..BEHIND {
        written.push(create(&s, &Pod::new("test", &format!("stalled-{i}")).node(node)).await);
    }
    let newest = written.last().map_or(from, Object::resource_version);
    h.compact(&s, newest).await.expect("compact");
    // A write on another node, seen by a watch from after the compaction: whoever hands
    // events to watchers (a cache's dispatcher) has dealt with the whole backlog by then.
    let mut probe = watch(&s, &key, &{
        let mut o = opts.clone();
        o.resource_version = Some(newest);
        o.predicate = pred("", "spec.nodeName=probe-node");
        o
    })
    .await;
    let probed = create(&s, &Pod::new("test", "probe").node("probe-node")).await;
    expect_events(&mut probe, &[Expect::Added(probed)], "probe watch").await;
    let mut got = 0;
    while got < BEHIND {
        let ctx = format!("stalled watch after {got} of {BEHIND} events");
        match next_event(&mut w, &ctx).await {
            WatchEvent::Added(o) => {
                assert_same(&o, &written[got], &ctx);
                got += 1;
            }
            WatchEvent::Error(e) => {
                assert!(e.is_expired(), "{ctx}: expected Expired, got {e:?}");
                let _ = create(&s, &Pod::new("test", "late").node(node)).await;
                expect_end(&mut w, "after the stalled watch's error event").await;
                errors_in_stream += 1;
                break;
            }
            other => panic!("{ctx}: unexpected {}", describe(&other)),
        }
    }
    assert!(
        errors_in_stream > 0,
        "the backend refused the compacted watch up front and delivered the stalled \
         watcher's whole compacted backlog: no in-stream ERROR event to check"
    );
    Verdict::Passed
}
