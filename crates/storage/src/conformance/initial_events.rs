//! Watch with sendInitialEvents × resource version {unset, 0, past, current} × bookmarks,
//! as upstream's `RunWatchSemantics` checks it, plus the initial-events-end bookmark at the
//! global revision and a single-object selector.
//!
//! "Past" is a revision before the initial pods were created (upstream uses "1"; absolute
//! revisions are never assumed here).

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{ListOptions, Object, ResourceVersionMatch, Storage, WatchEvent, WatchStream};

/// Where the watch starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    Unset,
    Zero,
    Past,
    Current,
}

/// Reads the initial-events-end bookmark, which must come next and sit at or after
/// `min_rv`, no later than the store's revision, and exactly at `exact` when given.
async fn expect_initial_events_end<S: Storage>(
    s: &S,
    w: &mut WatchStream,
    min_rv: u64,
    exact: Option<u64>,
    ctx: &str,
) -> u64 {
    match next_event(w, ctx).await {
        WatchEvent::Bookmark(b) => {
            assert!(
                b.initial_events_end,
                "{ctx}: the bookmark after the initial events must mark their end: {b:?}"
            );
            assert!(
                b.resource_version >= min_rv,
                "{ctx}: initial-events-end at {} before the state's {min_rv}",
                b.resource_version
            );
            assert!(
                b.resource_version <= current(s).await,
                "{ctx}: initial-events-end bookmark from the future"
            );
            if let Some(x) = exact {
                assert_eq!(
                    b.resource_version, x,
                    "{ctx}: initial-events-end must be at the global revision"
                );
            }
            b.resource_version
        }
        other => panic!(
            "{ctx}: expected the initial-events-end bookmark, got {}",
            describe(&other)
        ),
    }
}

async fn matrix<H: Harness>(
    h: &H,
    name: &str,
    send_initial_events: Option<bool>,
    from: Start,
    bookmarks: bool,
) -> Verdict {
    if let Some(v) = gate(h, name) {
        return v;
    }
    let s = h.new_store().await;
    let past = bump(&s, "past").await;
    let ns = "ns-initial";
    let key = pods(Some(ns));
    let mut initial: Vec<Object> = Vec::new();
    for i in 1..=3 {
        initial.push(create(&s, &Pod::new(ns, &format!("pod-{i}"))).await);
    }
    let last_initial = initial.last().map_or(0, Object::resource_version);
    // Lets a cache catch up with the initial pods, as upstream's suite does.
    let synced = list(
        &s,
        &key,
        &ListOptions::recursive().at(Some(last_initial), Some(ResourceVersionMatch::NotOlderThan)),
    )
    .await;
    assert_eq!(synced.items.len(), 3);
    let now = current(&s).await;
    let rv = match from {
        Start::Unset => None,
        Start::Zero => Some(0),
        Start::Past => Some(past),
        Start::Current => Some(now),
    };
    let opts = ListOptions {
        resource_version: rv,
        allow_watch_bookmarks: bookmarks,
        send_initial_events,
        ..ListOptions::recursive()
    };
    let mut w = watch(&s, &key, &opts).await;
    let state_first = match send_initial_events {
        Some(true) => true,
        Some(false) => matches!(from, Start::Past),
        None => !matches!(from, Start::Current),
    };
    let ctx = format!("{name}: initial events");
    if state_first {
        let want: Vec<_> = initial.iter().cloned().map(Expect::Added).collect();
        expect_events(&mut w, &want, &ctx).await;
    }
    if send_initial_events == Some(true) && bookmarks {
        let exact = h.capabilities().isolated_revisions.then_some(now);
        let _ = expect_initial_events_end(&s, &mut w, last_initial, exact, &ctx).await;
    }
    let mut later = Vec::new();
    for i in 4..=6 {
        later.push(Expect::Added(
            create(&s, &Pod::new(ns, &format!("pod-{i}"))).await,
        ));
    }
    let ctx = format!("{name}: events after the watch started");
    if bookmarks {
        expect_events_skipping_bookmarks(&mut w, &later, &ctx).await;
    } else {
        expect_events(&mut w, &later, &ctx).await;
    }
    Verdict::Passed
}

macro_rules! matrix_case {
    ($(#[$doc:meta])* $name:ident, $sie:expr, $from:expr, $bookmarks:expr) => {
        $(#[$doc])*
        pub async fn $name<H: Harness>(h: &H) -> Verdict {
            matrix(h, stringify!($name), $sie, $from, $bookmarks).await
        }
    };
}

matrix_case!(
    /// sendInitialEvents=true, RV unset, bookmarks: state, end bookmark, then changes.
    initial_events_true_rv_unset_with_bookmarks, Some(true), Start::Unset, true);
matrix_case!(
    /// sendInitialEvents=true, RV unset, no bookmarks: state, then changes, no bookmark.
    initial_events_true_rv_unset_without_bookmarks, Some(true), Start::Unset, false);
matrix_case!(
    /// sendInitialEvents=false, RV unset, bookmarks: only changes.
    initial_events_false_rv_unset_with_bookmarks, Some(false), Start::Unset, true);
matrix_case!(
    /// sendInitialEvents=false, RV unset, no bookmarks: only changes.
    initial_events_false_rv_unset_without_bookmarks, Some(false), Start::Unset, false);
matrix_case!(
    /// sendInitialEvents=true, RV 0, bookmarks: state, end bookmark, then changes.
    initial_events_true_rv_zero_with_bookmarks, Some(true), Start::Zero, true);
matrix_case!(
    /// sendInitialEvents=true, RV 0, no bookmarks: state, then changes.
    initial_events_true_rv_zero_without_bookmarks, Some(true), Start::Zero, false);
matrix_case!(
    /// sendInitialEvents=false, RV 0, bookmarks: only changes.
    initial_events_false_rv_zero_with_bookmarks, Some(false), Start::Zero, true);
matrix_case!(
    /// sendInitialEvents=false, RV 0, no bookmarks: only changes.
    initial_events_false_rv_zero_without_bookmarks, Some(false), Start::Zero, false);
matrix_case!(
    /// sendInitialEvents=true, RV in the past, bookmarks: state, end bookmark, then changes.
    initial_events_true_rv_past_with_bookmarks, Some(true), Start::Past, true);
matrix_case!(
    /// sendInitialEvents=true, RV in the past, no bookmarks: state, then changes.
    initial_events_true_rv_past_without_bookmarks, Some(true), Start::Past, false);
matrix_case!(
    /// sendInitialEvents=false, RV in the past, bookmarks: the replayed creates, then changes.
    initial_events_false_rv_past_with_bookmarks, Some(false), Start::Past, true);
matrix_case!(
    /// sendInitialEvents=false, RV in the past, no bookmarks: the replayed creates, then changes.
    initial_events_false_rv_past_without_bookmarks, Some(false), Start::Past, false);
matrix_case!(
    /// sendInitialEvents=true, current RV, bookmarks: state, end bookmark, then changes.
    initial_events_true_rv_current_with_bookmarks, Some(true), Start::Current, true);
matrix_case!(
    /// sendInitialEvents=true, current RV, no bookmarks: state, then changes.
    initial_events_true_rv_current_without_bookmarks, Some(true), Start::Current, false);
matrix_case!(
    /// sendInitialEvents=false, current RV, bookmarks: only changes.
    initial_events_false_rv_current_with_bookmarks, Some(false), Start::Current, true);
matrix_case!(
    /// sendInitialEvents=false, current RV, no bookmarks: only changes.
    initial_events_false_rv_current_without_bookmarks, Some(false), Start::Current, false);
matrix_case!(
    /// Legacy (sendInitialEvents unset), RV 0: state as ADDED, then changes.
    initial_events_legacy_rv_zero, None, Start::Zero, false);
matrix_case!(
    /// Legacy (sendInitialEvents unset), RV unset: state as ADDED, then changes.
    initial_events_legacy_rv_unset, None, Start::Unset, false);

/// The initial-events-end bookmark carries the global revision, even when the last write was
/// to another namespace; nothing but the next change follows it.
pub async fn initial_events_end_bookmark_is_at_the_global_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "initial_events_end_bookmark_is_at_the_global_revision") {
        return v;
    }
    let s = h.new_store().await;
    let ns = "ns-foo";
    let mut initial = Vec::new();
    for i in 1..=5 {
        initial.push(Expect::Added(
            create(&s, &Pod::new(ns, &format!("pod-{i}"))).await,
        ));
    }
    let other = create(&s, &Pod::new("other-ns-foo", "pod-1")).await;
    let opts = ListOptions {
        allow_watch_bookmarks: true,
        send_initial_events: Some(true),
        ..ListOptions::recursive()
    };
    let key = pods(Some(ns));
    let mut w = watch(&s, &key, &opts).await;
    expect_events(&mut w, &initial, "initial events").await;
    let exact = h
        .capabilities()
        .isolated_revisions
        .then_some(other.resource_version());
    let _ = expect_initial_events_end(
        &s,
        &mut w,
        other.resource_version(),
        exact,
        "end of initial events",
    )
    .await;
    let next = create(&s, &Pod::new(ns, "pod-6")).await;
    expect_events_skipping_bookmarks(&mut w, &[Expect::Added(next)], "the next change").await;
    Verdict::Passed
}

/// With a `metadata.name` selector over all pods, the initial events are that one pod, and
/// the end bookmark is at the global revision.
pub async fn initial_events_for_a_single_object_selector<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "initial_events_for_a_single_object_selector") {
        return v;
    }
    let s = h.new_store().await;
    let ns = "ns-foo";
    let wanted = create(&s, &Pod::new(ns, "pod-1")).await;
    let mut last = wanted.clone();
    for i in 2..=5 {
        last = create(&s, &Pod::new(ns, &format!("pod-{i}"))).await;
    }
    let opts = ListOptions {
        allow_watch_bookmarks: true,
        send_initial_events: Some(true),
        predicate: pred("", "metadata.name=pod-1"),
        ..ListOptions::recursive()
    };
    let mut w = watch(&s, &pods(None), &opts).await;
    expect_events(&mut w, &[Expect::Added(wanted.clone())], "initial events").await;
    let exact = h
        .capabilities()
        .isolated_revisions
        .then_some(last.resource_version());
    let _ = expect_initial_events_end(
        &s,
        &mut w,
        last.resource_version(),
        exact,
        "end of initial events",
    )
    .await;
    let _ = update(&s, &Pod::new(ns, "pod-2").key(), |o| {
        with_label(o, "v", "2")
    })
    .await;
    let changed = update(&s, &wanted_key(ns), |o| with_label(o, "v", "2")).await;
    expect_events_skipping_bookmarks(&mut w, &[Expect::Modified(changed)], "the next change").await;
    Verdict::Passed
}

fn wanted_key(ns: &str) -> crate::Key {
    Pod::new(ns, "pod-1").key()
}
