//! List: invalid RV combinations; RV with continue; RV too high; Exact / NotOlderThan / legacy
//! semantics at every historical RV; limit + continue walks; selective filters across pages;
//! rare objects; keys that prefix each other; namespace scope from the key vs a field
//! selector; consistent lists; compaction → 410 with an inconsistent continue token; Exact and
//! NotOlderThan re-lists are identical.
//!
//! Expected results come from a model of the writes each case made ([`History`]), so that no
//! absolute revision is ever assumed.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Key, ListOptions, Object, ObjectList, ResourceVersionMatch, Storage};

use ResourceVersionMatch::{Exact, NotOlderThan};

/// The multi-level data of upstream's list tests:
/// `first/bar` (then updated), `second/bar`, `second/foo`, `second/baz` (then deleted),
/// `third/barfoo`, `third/foo`.
struct Seeded {
    /// A revision before any pod was written.
    initial: u64,
    /// As created, in creation order: first/bar, second/bar, second/foo, third/barfoo,
    /// third/foo, second/baz.
    created: Vec<Object>,
    /// first/bar with `spec.nodeName=fakeNode`.
    updated: Object,
    history: History,
}

fn with_node(o: &Object, node: &str) -> Object {
    modify(o, |m| {
        m.insert("spec".into(), json!({ "nodeName": node }));
    })
}

async fn seed<S: Storage>(s: &S) -> Seeded {
    let initial = bump(s, "initial").await;
    let mut history = History::default();
    let mut created = Vec::new();
    for (ns, name) in [
        ("first", "bar"),
        ("second", "bar"),
        ("second", "foo"),
        ("third", "barfoo"),
        ("third", "foo"),
        ("second", "baz"),
    ] {
        let p = Pod::new(ns, name);
        let o = create(s, &p).await;
        history.put(&p.key(), &o);
        created.push(o);
    }
    let first_bar = Pod::new("first", "bar").key();
    let updated = update(s, &first_bar, |o| with_node(o, "fakeNode")).await;
    history.put(&first_bar, &updated);
    let baz_pod = Pod::new("second", "baz").key();
    let gone = delete(s, &baz_pod).await;
    history.delete(&baz_pod, gone.resource_version());
    Seeded {
        initial,
        created,
        updated,
        history,
    }
}

fn at(rv: Option<u64>, m: Option<ResourceVersionMatch>) -> ListOptions {
    ListOptions::recursive().at(rv, m)
}

fn limited(mut o: ListOptions, limit: u64) -> ListOptions {
    o.limit = Some(limit);
    o
}

fn cont(token: &str) -> ListOptions {
    ListOptions {
        continue_token: Some(token.to_owned()),
        ..ListOptions::recursive()
    }
}

/// Asserts a list equals the model's state at the list's own revision, which must be at least
/// `min_rv`.
#[track_caller]
fn assert_snapshot(l: &ObjectList, history: &History, key: &Key, min_rv: u64, ctx: &str) {
    assert!(
        l.resource_version >= min_rv,
        "{ctx}: list at {} older than {min_rv}",
        l.resource_version
    );
    assert_items(
        &l.items,
        &history.state_at(l.resource_version, key),
        &format!("{ctx} (list at {})", l.resource_version),
    );
}

/// Follows continue tokens from `first`, checking every page's revision, and returns all items.
async fn walk<S: Storage>(
    s: &S,
    key: &Key,
    first: ObjectList,
    limit: u64,
    ctx: &str,
) -> (Vec<Object>, usize) {
    let rv = first.resource_version;
    let mut items = first.items.clone();
    let mut page = first;
    let mut pages = 1;
    while let Some(token) = page.continue_token.clone() {
        assert!(
            page.items.len() as u64 <= limit,
            "{ctx}: page {pages} has {} items over limit {limit}",
            page.items.len()
        );
        page = list(s, key, &limited(cont(&token), limit)).await;
        assert_eq!(
            page.resource_version,
            rv,
            "{ctx}: page {} read at another revision",
            pages + 1
        );
        items.extend(page.items.iter().cloned());
        pages += 1;
        assert!(pages < 1000, "{ctx}: endless pagination");
    }
    (items, pages)
}

/// resourceVersionMatch without a version, and Exact with version 0, are bad requests.
pub async fn list_rejects_invalid_resource_version_match<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_rejects_invalid_resource_version_match") {
        return v;
    }
    let s = h.new_store().await;
    let _ = create(&s, &Pod::new("ns", "foo")).await;
    for (opts, what) in [
        (at(Some(0), Some(Exact)), "Exact at 0"),
        (at(None, Some(Exact)), "Exact without a version"),
        (
            at(None, Some(NotOlderThan)),
            "NotOlderThan without a version",
        ),
    ] {
        let e = assert_err(s.list(&pods(None), &opts).await, is_bad_request, what);
        assert_eq!(e.to_status().code, 400, "{what}");
    }
    Verdict::Passed
}

/// A version (other than 0) or a match together with a continue token is a bad request;
/// version 0 with a token is ignored.
pub async fn list_rejects_resource_version_with_continue<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_rejects_resource_version_with_continue") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let second = pods(Some("second"));
    let first = list(&s, &second, &limited(ListOptions::recursive(), 1)).await;
    let token = first.continue_token.clone().expect("a continue token");
    let mut with_rv = limited(cont(&token), 1);
    with_rv.resource_version = Some(seeded.created[0].resource_version());
    assert_err(
        s.list(&second, &with_rv).await,
        is_bad_request,
        "continue with a version",
    );
    let mut with_match = limited(cont(&token), 1);
    with_match.resource_version = Some(first.resource_version);
    with_match.resource_version_match = Some(NotOlderThan);
    assert_err(
        s.list(&second, &with_match).await,
        is_bad_request,
        "continue with a match",
    );
    let mut zero = limited(cont(&token), 1);
    zero.resource_version = Some(0);
    let page = list(&s, &second, &zero).await;
    assert_eq!(
        page.resource_version, first.resource_version,
        "continuing with version 0"
    );
    assert_items(
        &page.items,
        &seeded.history.state_at(first.resource_version, &second)[1..2],
        "second page",
    );
    Verdict::Passed
}

/// Tokens that are not base64, have no start key, revision 0, another version, or a start
/// key escaping the collection are bad requests.
pub async fn list_rejects_malformed_continue_tokens<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_rejects_malformed_continue_tokens") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let rv = seeded.updated.resource_version();
    let raw = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let tokens = [
        ("not base64", "!!!".to_owned()),
        ("not json", URL_SAFE_NO_PAD.encode("hello")),
        (
            "empty start",
            raw(json!({"v":"meta.k8s.io/v1","rv":rv,"start":""})),
        ),
        (
            "revision 0",
            raw(json!({"v":"meta.k8s.io/v1","rv":0,"start":"second/bar\u{0}"})),
        ),
        (
            "other version",
            raw(json!({"v":"meta.k8s.io/v2","rv":rv,"start":"second/bar\u{0}"})),
        ),
        (
            "path traversal",
            raw(json!({"v":"meta.k8s.io/v1","rv":rv,"start":"../secrets/x"})),
        ),
    ];
    for (what, token) in tokens {
        assert_err(
            s.list(&pods(None), &cont(&token)).await,
            is_bad_request,
            what,
        );
    }
    Verdict::Passed
}

/// A version beyond the store's is `TooLargeResourceVersion` for legacy, NotOlderThan and
/// Exact lists.
pub async fn list_with_resource_version_too_high_is_too_large<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_with_resource_version_too_high_is_too_large") {
        return v;
    }
    let s = h.new_store().await;
    let _ = seed(&s).await;
    let far = i64::MAX as u64;
    for m in [None, Some(NotOlderThan), Some(Exact)] {
        let e = assert_err(
            s.list(&pods(None), &at(Some(far), m)).await,
            is_too_large,
            &format!("{m:?} at max"),
        );
        assert_eq!(e.to_status().code, 504);
    }
    if h.capabilities().isolated_revisions {
        let next = current(&s).await + 1;
        assert_err(
            s.list(&pods(None), &at(Some(next), Some(Exact))).await,
            is_too_large,
            "Exact at current + 1",
        );
    }
    Verdict::Passed
}

/// Exact lists return the state at every revision written, echoing the revision.
pub async fn list_exact_at_every_historical_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_exact_at_every_historical_revision") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let mut revs = vec![seeded.initial];
    revs.extend(seeded.history.revisions());
    for key in [pods(None), pods(Some("second")), pods(Some("first"))] {
        for &rev in &revs {
            let l = list(&s, &key, &at(Some(rev), Some(Exact))).await;
            assert_eq!(l.resource_version, rev, "Exact at {rev} must echo it");
            assert_items(
                &l.items,
                &seeded.history.state_at(rev, &key),
                &format!("Exact {key} at {rev}"),
            );
            assert_eq!(l.continue_token, None);
        }
    }
    Verdict::Passed
}

/// NotOlderThan lists at every revision return a real state at a revision at least that one.
pub async fn list_not_older_than_at_every_historical_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_not_older_than_at_every_historical_revision") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let mut revs = vec![seeded.initial];
    revs.extend(seeded.history.revisions());
    for key in [pods(None), pods(Some("second"))] {
        for &rev in &revs {
            let l = list(&s, &key, &at(Some(rev), Some(NotOlderThan))).await;
            assert_snapshot(
                &l,
                &seeded.history,
                &key,
                rev,
                &format!("NotOlderThan {key} at {rev}"),
            );
        }
    }
    let last = *revs.last().expect("writes");
    let l = list(&s, &pods(None), &at(Some(last), Some(NotOlderThan))).await;
    assert_items(
        &l.items,
        &seeded.history.state_at(last, &pods(None)),
        "NotOlderThan the last write is the latest state",
    );
    Verdict::Passed
}

/// A version without a match (legacy) means "not older than", at every revision.
pub async fn list_legacy_resource_version_at_every_historical_revision<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "list_legacy_resource_version_at_every_historical_revision",
    ) {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let mut revs = vec![seeded.initial];
    revs.extend(seeded.history.revisions());
    for key in [pods(None), pods(Some("third"))] {
        for &rev in &revs {
            let l = list(&s, &key, &at(Some(rev), None)).await;
            assert_snapshot(
                &l,
                &seeded.history,
                &key,
                rev,
                &format!("legacy {key} at {rev}"),
            );
        }
    }
    Verdict::Passed
}

/// A version without a match but with a limit (upstream's "legacy exact match") reads exactly
/// at that version, like Exact: every page of the walk is the state at it, echoing it.
pub async fn list_legacy_resource_version_with_limit_is_exact<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_legacy_resource_version_with_limit_is_exact") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let mut revs = vec![seeded.initial];
    revs.extend(seeded.history.revisions());
    for key in [pods(None), pods(Some("second"))] {
        for &rev in revs.iter().filter(|r| **r > 0) {
            let ctx = format!("legacy {key} at {rev} with limit 1");
            let first = list(&s, &key, &limited(at(Some(rev), None), 1)).await;
            assert_eq!(
                first.resource_version, rev,
                "{ctx}: must read exactly at {rev}"
            );
            let (items, _) = walk(&s, &key, first, 1, &ctx).await;
            assert_items(&items, &seeded.history.state_at(rev, &key), &ctx);
        }
    }
    Verdict::Passed
}

/// RV 0 (legacy and NotOlderThan) returns some real state consistent with its revision; with
/// a limit it returns either one page or (a cache ignoring the limit) everything.
pub async fn list_at_resource_version_zero_is_a_consistent_snapshot<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_at_resource_version_zero_is_a_consistent_snapshot") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    for key in [pods(None), pods(Some("second")), pods(Some("empty"))] {
        for m in [None, Some(NotOlderThan)] {
            let l = list(&s, &key, &at(Some(0), m)).await;
            assert_snapshot(&l, &seeded.history, &key, 0, &format!("{m:?} {key} at 0"));
        }
    }
    let second = pods(Some("second"));
    let l = list(&s, &second, &limited(at(Some(0), None), 1)).await;
    let state = seeded.history.state_at(l.resource_version, &second);
    if l.continue_token.is_some() {
        assert_items(&l.items, &state[..1], "RV 0 with limit 1");
        let (items, pages) = walk(&s, &second, l, 1, "RV 0 with limit 1").await;
        assert_items(&items, &state, "RV 0 with limit 1, every page");
        assert_eq!(pages, state.len(), "RV 0 with limit 1: one object a page");
    } else {
        assert_items(&l.items, &state, "RV 0 with the limit ignored");
    }
    Verdict::Passed
}

/// The four legacy-list forms (no resourceVersionMatch), as upstream's etcd3 store and
/// cacher read them, once the history before the first pod is compacted away:
/// - RV n > 0 with a limit is Exact at n ("legacy exact match"): 410 below the compaction,
///   the state at n (echoing it) at or above it;
/// - RV n without a limit is NotOlderThan: a state at least as new as n, also below the
///   compaction;
/// - RV 0 with a limit is "any": some real state (a cache may ignore the limit), never 410;
/// - no RV with a limit is consistent: the latest state.
pub async fn list_legacy_forms_after_compaction<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_legacy_forms_after_compaction") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let compact_at = seeded.created[0].resource_version();
    h.compact(&s, compact_at).await.expect("compact");
    let all = pods(None);
    let last = seeded
        .history
        .revisions()
        .into_iter()
        .max()
        .expect("writes");

    let e = assert_err(
        s.list(&all, &limited(at(Some(seeded.initial), None), 1))
            .await,
        is_expired,
        "legacy RV below the compaction with a limit",
    );
    assert_eq!(e.to_status().code, 410);
    let ctx = format!("legacy RV {compact_at} (the compacted revision) with limit 2");
    let first = list(&s, &all, &limited(at(Some(compact_at), None), 2)).await;
    assert_eq!(first.resource_version, compact_at, "{ctx}: Exact at it");
    let (items, _) = walk(&s, &all, first, 2, &ctx).await;
    assert_items(&items, &seeded.history.state_at(compact_at, &all), &ctx);

    let l = list(&s, &all, &at(Some(seeded.initial), None)).await;
    assert_snapshot(
        &l,
        &seeded.history,
        &all,
        seeded.initial,
        "legacy RV below the compaction without a limit (NotOlderThan)",
    );

    let zero = list(&s, &all, &limited(at(Some(0), None), 2)).await;
    let rv = zero.resource_version;
    let (items, _) = walk(&s, &all, zero, 2, "RV 0 with limit 2").await;
    assert_items(
        &items,
        &seeded.history.state_at(rv, &all),
        &format!("RV 0 with limit 2, every page (at {rv})"),
    );

    let consistent = list(&s, &all, &limited(ListOptions::recursive(), 2)).await;
    assert!(
        consistent.resource_version >= last,
        "no RV with a limit read at {}, before the last write at {last}",
        consistent.resource_version
    );
    let (items, _) = walk(&s, &all, consistent, 2, "no RV with limit 2").await;
    assert_items(
        &items,
        &seeded.history.state_at(last, &all),
        "no RV with limit 2 is the latest state",
    );
    Verdict::Passed
}

/// No RV with a limit is a consistent read: right after each write (to the listed
/// collection, then elsewhere), a paged walk shows the state with that write, at a revision
/// at least the write's (exactly it where nothing else writes).
pub async fn list_without_resource_version_with_limit_is_consistent<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_without_resource_version_with_limit_is_consistent") {
        return v;
    }
    let s = h.new_store().await;
    let key = pods(Some("paged"));
    let mut history = History::default();
    let isolated = h.capabilities().isolated_revisions;
    for i in 0..4 {
        let p = Pod::new("paged", &format!("p{i}"));
        let o = create(&s, &p).await;
        history.put(&p.key(), &o);
        let other = bump(&s, &format!("after-{i}")).await;
        for (rev, what) in [
            (o.resource_version(), "the write"),
            (other, "a later write"),
        ] {
            let ctx = format!("no RV, limit 1, after {what} {i}");
            let first = list(&s, &key, &limited(ListOptions::recursive(), 1)).await;
            assert!(
                first.resource_version >= rev,
                "{ctx}: read at {}, before the write at {rev}",
                first.resource_version
            );
            if isolated {
                assert_eq!(first.resource_version, other, "{ctx}: the current revision");
            }
            let (items, pages) = walk(&s, &key, first, 1, &ctx).await;
            assert_items(&items, &history.state_at(o.resource_version(), &key), &ctx);
            assert_eq!(pages, i + 1, "{ctx}: one object a page");
        }
    }
    Verdict::Passed
}

/// After compaction, an Exact list before the compacted revision is `Expired` (410); at the
/// compacted revision itself it still works.
pub async fn list_exact_before_compaction_is_expired<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_exact_before_compaction_is_expired") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let compact_at = seeded.created[0].resource_version();
    h.compact(&s, compact_at).await.expect("compact");
    let e = assert_err(
        s.list(&pods(None), &at(Some(seeded.initial), Some(Exact)))
            .await,
        is_expired,
        "Exact before compaction",
    );
    assert_eq!(e.to_status().code, 410);
    let l = list(&s, &pods(None), &at(Some(compact_at), Some(Exact))).await;
    assert_eq!(l.resource_version, compact_at);
    assert_items(
        &l.items,
        &seeded.history.state_at(compact_at, &pods(None)),
        "Exact at the compacted revision",
    );
    Verdict::Passed
}

/// Consistent lists with limit 2 walk every object page by page at one revision; a continue
/// token comes exactly when more remain.
pub async fn list_limit_and_continue_walk_every_page<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_limit_and_continue_walk_every_page") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let all = pods(None);
    let first = list(&s, &all, &limited(ListOptions::recursive(), 2)).await;
    let state = seeded.history.state_at(first.resource_version, &all);
    assert_eq!(state.len(), 5);
    assert_items(&first.items, &state[..2], "first page");
    assert!(first.continue_token.is_some(), "more pages remain");
    if let Some(n) = first.remaining_item_count {
        assert_eq!(n, 3, "remaining item count after the first page");
    }
    let (items, pages) = walk(&s, &all, first, 2, "limit 2").await;
    assert_items(&items, &state, "all pages");
    assert_eq!(pages, 3);
    Verdict::Passed
}

/// Limit 1 gives one object per page, in key order, with correct remaining counts.
pub async fn list_limit_one_walks_every_object<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_limit_one_walks_every_object") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    for key in [pods(None), pods(Some("second"))] {
        let mut page = list(&s, &key, &limited(ListOptions::recursive(), 1)).await;
        let state = seeded.history.state_at(page.resource_version, &key);
        for (i, want) in state.iter().enumerate() {
            assert_items(
                &page.items,
                std::slice::from_ref(want),
                &format!("{key} page {i}"),
            );
            let left = state.len() - i - 1;
            if let Some(n) = page.remaining_item_count {
                assert_eq!(n as usize, left, "{key} remaining after page {i}");
            }
            match (&page.continue_token, left) {
                (None, 0) => break,
                (Some(t), l) if l > 0 => page = list(&s, &key, &limited(cont(t), 1)).await,
                (t, l) => panic!("{key} page {i}: continue {t:?} with {l} objects left"),
            }
        }
    }
    Verdict::Passed
}

/// An Exact list with a limit pages through the state at that past revision.
pub async fn list_exact_with_limit_pages_through_history<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_exact_with_limit_pages_through_history") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let all = pods(None);
    for (idx, limit) in [(1, 1), (2, 2), (3, 4), (4, 1), (5, 2)] {
        let rev = seeded.created[idx].resource_version();
        let state = seeded.history.state_at(rev, &all);
        let first = list(&s, &all, &limited(at(Some(rev), Some(Exact)), limit)).await;
        assert_eq!(first.resource_version, rev);
        let n = (limit as usize).min(state.len());
        assert_items(
            &first.items,
            &state[..n],
            &format!("Exact at {rev} limit {limit}"),
        );
        assert_eq!(
            first.continue_token.is_some(),
            state.len() > n,
            "continue at {rev} limit {limit}"
        );
        let (items, _) = walk(&s, &all, first, limit, &format!("Exact at {rev}")).await;
        assert_items(&items, &state, &format!("all pages at {rev}"));
    }
    Verdict::Passed
}

/// Later pages read at the first page's revision: objects created or changed meanwhile do
/// not show up.
pub async fn list_pages_read_at_the_first_page_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_pages_read_at_the_first_page_revision") {
        return v;
    }
    let s = h.new_store().await;
    let mut created = Vec::new();
    for i in 0..4 {
        created.push(create(&s, &Pod::new("paging", &format!("test-{i}"))).await);
    }
    let key = pods(Some("paging"));
    let mut got = Vec::new();
    let mut calls = 0;
    let mut opts = limited(ListOptions::recursive(), 1);
    loop {
        calls += 1;
        let page = list(&s, &key, &opts).await;
        got.extend(page.items.iter().cloned());
        let Some(t) = page.continue_token else { break };
        if calls == 2 {
            let _ = create(&s, &Pod::new("paging", "test-5")).await;
            let _ = update(&s, &Pod::new("paging", "test-3").key(), |o| {
                with_label(o, "late", "1")
            })
            .await;
        }
        opts = limited(cont(&t), 1);
        assert!(calls < 10, "endless pagination");
    }
    assert_eq!(calls, 4, "pages");
    assert_items(&got, &created, "pages show the state of the first page");
    Verdict::Passed
}

/// A selective filter fills a page from further keys: `metadata.name!=bar` with limit 2 over
/// 1/foo, 2/bar, 3/foo, 4/foo gives [1/foo, 3/foo] then [4/foo].
pub async fn list_selective_filter_fills_pages_across_gaps<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_selective_filter_fills_pages_across_gaps") {
        return v;
    }
    let s = h.new_store().await;
    let mut o = Vec::new();
    for (ns, name) in [("1", "foo"), ("2", "bar"), ("3", "foo"), ("4", "foo")] {
        o.push(create(&s, &Pod::new(ns, name)).await);
    }
    let mut opts = limited(ListOptions::recursive(), 2);
    opts.predicate = pred("", "metadata.name!=bar");
    let first = list(&s, &pods(None), &opts).await;
    assert_items(
        &first.items,
        &[o[0].clone(), o[2].clone()],
        "first filtered page",
    );
    assert!(
        first.resource_version >= o[3].resource_version(),
        "list older than the writes"
    );
    assert_eq!(
        first.remaining_item_count, None,
        "no remaining count with a filter"
    );
    let token = first.continue_token.expect("more keys remain");
    let mut next = cont(&token);
    next.limit = Some(2);
    next.predicate = pred("", "metadata.name!=bar");
    let second = list(&s, &pods(None), &next).await;
    assert_items(&second.items, &[o[3].clone()], "second filtered page");
    assert_eq!(second.continue_token, None);
    assert_eq!(second.resource_version, first.resource_version);
    Verdict::Passed
}

/// Name filters with limits over the multi-level data, as upstream checks them.
pub async fn list_selective_filter_with_limit_across_namespaces<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_selective_filter_with_limit_across_namespaces") {
        return v;
    }
    let s = h.new_store().await;
    let seeded = seed(&s).await;
    let c = &seeded.created;
    let cases: [(&str, u64, Vec<Object>, bool); 5] = [
        ("metadata.name=barfoo", 1, vec![c[3].clone()], true),
        ("metadata.name=barfoo", 2, vec![c[3].clone()], false),
        (
            "metadata.name=bar",
            2,
            vec![seeded.updated.clone(), c[1].clone()],
            true,
        ),
        (
            "metadata.name=foo",
            2,
            vec![c[2].clone(), c[4].clone()],
            false,
        ),
        (
            "metadata.name=foo",
            5,
            vec![c[2].clone(), c[4].clone()],
            false,
        ),
    ];
    for (field, limit, want, more) in cases {
        let mut opts = limited(ListOptions::recursive(), limit);
        opts.predicate = pred("", field);
        let l = list(&s, &pods(None), &opts).await;
        assert_items(&l.items, &want, &format!("{field} limit {limit}"));
        let all: Vec<_> = seeded
            .history
            .state_at(l.resource_version, &pods(None))
            .into_iter()
            .filter(|o| opts.predicate.matches(o))
            .collect();
        // `more` is etcd's rule: a token whenever keys remain after the page, matching or
        // not. A backend that knows no match remains (a cache) may leave it out; one must
        // never be missing while matching objects remain, nor appear when no key remains.
        let matches_remain = all.len() > l.items.len();
        match (l.continue_token.is_some(), more, matches_remain) {
            (false, _, true) => {
                panic!("{field} limit {limit}: no continue token, but objects remain")
            }
            (true, false, _) => {
                panic!("{field} limit {limit}: a continue token, but no key remains")
            }
            _ => {}
        }
        let mut got = l.items.clone();
        let mut token = l.continue_token.clone();
        while let Some(t) = token {
            let mut next = cont(&t);
            next.limit = Some(limit);
            next.predicate = pred("", field);
            let page = list(&s, &pods(None), &next).await;
            assert_eq!(
                page.resource_version, l.resource_version,
                "{field}: continued page revision"
            );
            got.extend(page.items);
            token = page.continue_token;
        }
        assert_items(&got, &all, &format!("{field} limit {limit}: every page"));
    }
    let mut opts = limited(ListOptions::recursive(), 5);
    opts.predicate = pred("", "spec.nodeName=fakeNode");
    assert_items(
        &list(&s, &pods(None), &opts).await.items,
        std::slice::from_ref(&seeded.updated),
        "the updated version is listed",
    );
    opts.predicate = pred("", "metadata.name=baz");
    assert_items(
        &list(&s, &pods(None), &opts).await.items,
        &[],
        "the deleted object is not listed",
    );
    Verdict::Passed
}

/// A filter matching one object among hundreds, with limit 1, returns it in one page without
/// a continue token.
pub async fn list_finds_a_rare_object_in_one_page<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_finds_a_rare_object_in_one_page") {
        return v;
    }
    let s = h.new_store().await;
    let mut last = None;
    for i in 0..300 {
        last = Some(create(&s, &Pod::new("rare", &format!("pod-{i:03}"))).await);
    }
    let mut opts = limited(ListOptions::recursive(), 1);
    opts.predicate = pred("", "metadata.name=pod-299");
    let l = list(&s, &pods(None), &opts).await;
    assert_items(&l.items, &[last.expect("created")], "the rare object");
    assert_eq!(l.continue_token, None, "nothing remains after the last key");
    Verdict::Passed
}

/// `foo` and `foobar`, `test-ns` and `test-ns2`: an object key lists only its object, a
/// namespace only its own objects, for consistent, Exact and NotOlderThan lists.
pub async fn list_keys_that_prefix_each_other_stay_apart<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_keys_that_prefix_each_other_stay_apart") {
        return v;
    }
    let s = h.new_store().await;
    let foo_pod = create(&s, &Pod::new("test-ns", "foo")).await;
    let foobar = create(&s, &Pod::new("test-ns", "foobar")).await;
    let baz_pod = create(&s, &Pod::new("test-ns2", "baz")).await;
    let last = baz_pod.resource_version();
    let mut kinds = vec![
        ("consistent", None, None),
        ("NotOlderThan", Some(last), Some(NotOlderThan)),
    ];
    if h.capabilities().exact_history {
        kinds.push(("Exact", Some(last), Some(Exact)));
    }
    for (kind, rv, m) in kinds {
        let one = |key: Key| {
            (
                key.clone(),
                ListOptions {
                    resource_version: rv,
                    resource_version_match: m,
                    ..ListOptions::default()
                },
            )
        };
        let many = |key: Key| (key, at(rv, m));
        let cases = [
            (one(Pod::new("test-ns", "foo").key()), vec![foo_pod.clone()]),
            (
                one(Pod::new("test-ns", "foobar").key()),
                vec![foobar.clone()],
            ),
            (one(Pod::new("test-ns", "fo").key()), vec![]),
            (
                many(pods(Some("test-ns"))),
                vec![foo_pod.clone(), foobar.clone()],
            ),
            (many(pods(Some("test-ns2"))), vec![baz_pod.clone()]),
            (many(pods(Some("test"))), vec![]),
            (
                many(pods(None)),
                vec![foo_pod.clone(), foobar.clone(), baz_pod.clone()],
            ),
        ];
        for ((key, opts), want) in cases {
            let l = list(&s, &key, &opts).await;
            assert_items(&l.items, &want, &format!("{kind} list of {key}"));
        }
    }
    Verdict::Passed
}

/// Listing a namespace by key equals listing everything with a `metadata.namespace` field
/// selector; a selector naming another namespace gives nothing.
pub async fn list_namespace_scope_from_key_matches_field_selector<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_namespace_scope_from_key_matches_field_selector") {
        return v;
    }
    let s = h.new_store().await;
    let a = create(&s, &Pod::new("ns1", "foo1")).await;
    let _ = create(&s, &Pod::new("ns2", "foo1")).await;
    let b = create(&s, &Pod::new("ns1", "foo2").phase("Running")).await;
    let _ = create(&s, &Pod::new("ns2", "foo2").phase("Running")).await;
    let want = vec![a, b];
    let by_key = list(&s, &pods(Some("ns1")), &ListOptions::recursive()).await;
    assert_items(&by_key.items, &want, "namespace from the key");
    let mut sel = ListOptions::recursive();
    sel.predicate = pred("", "metadata.namespace=ns1");
    assert_items(
        &list(&s, &pods(None), &sel).await.items,
        &want,
        "namespace from a field selector",
    );
    assert_items(
        &list(&s, &pods(Some("ns1")), &sel).await.items,
        &want,
        "namespace from both",
    );
    sel.predicate = pred("", "metadata.namespace=ns2");
    assert_items(
        &list(&s, &pods(Some("ns1")), &sel).await.items,
        &[],
        "key and selector disagree",
    );
    Verdict::Passed
}

/// Field selectors on declared fields and label selectors filter lists, alone and together.
pub async fn list_field_and_label_selectors_filter_items<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_field_and_label_selectors_filter_items") {
        return v;
    }
    let s = h.new_store().await;
    let a = create(
        &s,
        &Pod::new("ns1", "a")
            .node("bar1")
            .label("app", "web")
            .phase("Running"),
    )
    .await;
    let b = create(
        &s,
        &Pod::new("ns1", "b")
            .node("bar2")
            .label("app", "api")
            .label("tier", "db"),
    )
    .await;
    let c = create(&s, &Pod::new("ns2", "c").node("bar1").label("app", "db")).await;
    let d = create(&s, &Pod::new("ns2", "d")).await;
    let cases = [
        ("", "spec.nodeName=bar1", vec![a.clone(), c.clone()]),
        ("", "spec.nodeName!=bar1", vec![b.clone(), d.clone()]),
        ("", "status.phase=Running", vec![a.clone()]),
        ("app=web", "", vec![a.clone()]),
        ("app in (web,api),tier!=db", "", vec![a.clone()]),
        ("!app", "", vec![d.clone()]),
        ("app", "spec.nodeName=bar1", vec![a.clone(), c.clone()]),
        // notin matches objects without the label, as in Kubernetes.
        (
            "app notin (web)",
            "metadata.namespace=ns2",
            vec![c.clone(), d.clone()],
        ),
    ];
    for (label, field, want) in cases {
        let mut opts = ListOptions::recursive();
        opts.predicate = pred(label, field);
        assert_items(
            &list(&s, &pods(None), &opts).await.items,
            &want,
            &format!("labels {label:?} fields {field:?}"),
        );
    }
    Verdict::Passed
}

/// Listing one object's key (not recursive) at the various versions.
pub async fn list_single_object_key<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_single_object_key") {
        return v;
    }
    let s = h.new_store().await;
    let pod = Pod::new("test-ns", "foo");
    let prev = create(&s, &pod).await;
    let stored = update(&s, &pod.key(), |o| with_annotation(o, "version", "second")).await;
    let _ = bump(&s, "after").await;
    let key = pod.key();
    let mut history = History::default();
    history.put(&key, &prev);
    history.put(&key, &stored);
    let one = |rv, m| ListOptions {
        resource_version: rv,
        resource_version_match: m,
        ..ListOptions::default()
    };
    assert_items(
        &list(&s, &key, &one(None, None)).await.items,
        std::slice::from_ref(&stored),
        "consistent",
    );
    for (rv, m, min) in [
        (Some(0), None, 0),
        (Some(0), Some(NotOlderThan), 0),
        (
            Some(prev.resource_version()),
            Some(NotOlderThan),
            prev.resource_version(),
        ),
        (
            Some(stored.resource_version()),
            None,
            stored.resource_version(),
        ),
        (
            Some(stored.resource_version()),
            Some(NotOlderThan),
            stored.resource_version(),
        ),
    ] {
        let l = list(&s, &key, &one(rv, m)).await;
        assert_snapshot(
            &l,
            &history,
            &key,
            min,
            &format!("object list at {rv:?} {m:?}"),
        );
    }
    if h.capabilities().exact_history {
        for o in [&prev, &stored] {
            let l = list(&s, &key, &one(Some(o.resource_version()), Some(Exact))).await;
            assert_items(&l.items, std::slice::from_ref(o), "Exact object list");
        }
    }
    assert_err(
        s.list(&key, &one(Some(i64::MAX as u64), None)).await,
        is_too_large,
        "object list too high",
    );
    let missing = Pod::new("test-ns", "non-existing").key();
    assert_items(
        &list(&s, &missing, &one(None, None)).await.items,
        &[],
        "missing object",
    );
    let mut other = one(None, None);
    other.predicate = pred("", "metadata.name!=foo");
    assert_items(
        &list(&s, &key, &other).await.items,
        &[],
        "object filtered out",
    );
    Verdict::Passed
}

/// A consistent list (RV unset) sees every write at once: create, update, delete.
pub async fn list_consistent_read_sees_every_write<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_consistent_read_sees_every_write") {
        return v;
    }
    let s = h.new_store().await;
    let key = pods(Some("default"));
    let pod = Pod::new("default", "foo");
    let isolated = h.capabilities().isolated_revisions;
    let check = |l: &ObjectList, want: Vec<Object>, rev: u64, ctx: &str| {
        assert!(
            l.resource_version >= rev,
            "{ctx}: consistent list at {} before the write at {rev}",
            l.resource_version
        );
        if isolated {
            assert_eq!(l.resource_version, rev, "{ctx}: consistent list revision");
        }
        assert_items(&l.items, &want, ctx);
    };
    let before = list(&s, &key, &ListOptions::recursive()).await;
    assert!(before.items.is_empty());
    let created = create(&s, &pod).await;
    check(
        &list(&s, &key, &ListOptions::recursive()).await,
        vec![created.clone()],
        created.resource_version(),
        "after create",
    );
    let updated = update(&s, &pod.key(), |o| with_label(o, "v", "2")).await;
    let rev = updated.resource_version();
    check(
        &list(&s, &key, &ListOptions::recursive()).await,
        vec![updated],
        rev,
        "after update",
    );
    let gone = delete(&s, &pod.key()).await;
    check(
        &list(&s, &key, &ListOptions::recursive()).await,
        vec![],
        gone.resource_version(),
        "after delete",
    );
    Verdict::Passed
}

/// A consistent list reports the store's current revision, even when the listed collection
/// did not change.
pub async fn list_consistent_read_reports_the_current_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_consistent_read_reports_the_current_revision") {
        return v;
    }
    let s = h.new_store().await;
    let _ = create(&s, &Pod::new("default", "foo")).await;
    for i in 0..3 {
        let rev = bump(&s, &format!("b{i}")).await;
        let l = list(&s, &pods(Some("empty")), &ListOptions::recursive()).await;
        assert!(
            l.resource_version >= rev,
            "consistent list at {} before the write at {rev}",
            l.resource_version
        );
        if h.capabilities().isolated_revisions {
            assert_eq!(l.resource_version, rev);
            assert_eq!(current(&s).await, rev);
        }
        assert!(l.items.is_empty());
    }
    Verdict::Passed
}

/// A continue token whose revision was compacted is `Expired` (410) with a fresh token that
/// continues, at the latest revision, after the same key.
pub async fn list_continue_after_compaction_is_expired_with_fresh_token<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "list_continue_after_compaction_is_expired_with_fresh_token",
    ) {
        return v;
    }
    let s = h.new_store().await;
    let mut o = Vec::new();
    for (ns, name) in [("first", "bar"), ("second", "bar"), ("second", "foo")] {
        o.push(create(&s, &Pod::new(ns, name)).await);
    }
    let first = list(&s, &pods(None), &limited(ListOptions::recursive(), 1)).await;
    assert_items(&first.items, &o[..1], "first page");
    let token = first.continue_token.expect("more pages");
    let updated = update(&s, &Pod::new("second", "foo").key(), |x| {
        with_label(x, "state", "new")
    })
    .await;
    h.compact(&s, updated.resource_version())
        .await
        .expect("compact");
    let e = assert_err(
        s.list(&pods(None), &cont(&token)).await,
        is_expired,
        "continue after compaction",
    );
    let st = e.to_status();
    assert_eq!(st.code, 410);
    let fresh = match e {
        crate::Error::Expired {
            continue_token: Some(t),
            ..
        } => t,
        other => panic!("expired continuation without a fresh token: {other:?}"),
    };
    assert_eq!(st.metadata.continue_token.as_deref(), Some(fresh.as_str()));
    let page = list(&s, &pods(None), &limited(cont(&fresh), 1)).await;
    assert!(
        page.resource_version >= updated.resource_version(),
        "the fresh token reads at the latest revision"
    );
    assert_items(&page.items, &o[1..2], "page after the fresh token");
    let t = page.continue_token.clone().expect("one more page");
    let last = list(&s, &pods(None), &limited(cont(&t), 1)).await;
    assert_items(&last.items, &[updated], "last page shows the update");
    assert_eq!(last.continue_token, None);
    assert_eq!(last.resource_version, page.resource_version);
    Verdict::Passed
}

/// Re-listing at the returned revision with Exact gives an identical result, for a
/// consistent and for a NotOlderThan first list.
pub async fn list_exact_and_not_older_than_relists_are_identical<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_exact_and_not_older_than_relists_are_identical") {
        return v;
    }
    let s = h.new_store().await;
    for i in 0..5 {
        let even = if i % 2 == 0 { "true" } else { "false" };
        let _ = create(&s, &Pod::cluster(&format!("pod-{i}")).label("even", even)).await;
    }
    let mut opts = limited(ListOptions::recursive(), 2);
    opts.predicate = pred("even=true", "");
    let l1 = list(&s, &pods(None), &opts).await;
    assert_eq!(l1.items.len(), 2);
    let mut exact = opts.clone();
    exact.resource_version = Some(l1.resource_version);
    exact.resource_version_match = Some(Exact);
    assert_eq!(
        list(&s, &pods(None), &exact).await,
        l1,
        "Exact re-list of a consistent list"
    );
    let mut nots = opts.clone();
    nots.resource_version = Some(l1.resource_version);
    nots.resource_version_match = Some(NotOlderThan);
    let l3 = list(&s, &pods(None), &nots).await;
    exact.resource_version = Some(l3.resource_version);
    assert_eq!(
        list(&s, &pods(None), &exact).await,
        l3,
        "Exact re-list of a NotOlderThan list"
    );
    Verdict::Passed
}
