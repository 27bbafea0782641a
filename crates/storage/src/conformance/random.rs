//! Model-based cases: a seeded pseudo-random history of creates, updates and deletes, then
//! every list and watch the cases can think of compared with the model of that history.
//!
//! The history is deterministic (a fixed-seed xorshift), so a failure reproduces; it stays
//! under 100 writes so that a watch cache's smallest event window still holds all of it.

use super::support::*;
use super::{Harness, Verdict, gate};
use crate::{Key, ListOptions, ResourceVersionMatch, SelectionPredicate, Storage};

/// A tiny deterministic generator (xorshift64*); no need for a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMESPACES: [&str; 3] = ["r0", "r1", "r2"];
const WRITES: usize = 80;

/// Runs the random history; returns the model and the revision of every write.
async fn random_history<S: Storage>(s: &S, seed: u64) -> (History, Vec<u64>) {
    let mut rng = Rng(seed);
    let mut history = History::default();
    let mut revs = Vec::with_capacity(WRITES);
    let mut live = std::collections::BTreeSet::new();
    for i in 0..WRITES {
        let ns = NAMESPACES[rng.below(3) as usize];
        let name = format!("p{}", rng.below(6));
        let key = Pod::new(ns, &name).key();
        let id = (ns, name.clone());
        if live.contains(&id) && rng.below(10) < 3 {
            let gone = delete(s, &key).await;
            history.delete(&key, gone.resource_version());
            revs.push(gone.resource_version());
            live.remove(&id);
            continue;
        }
        let mut pod = Pod::new(ns, &name).label("app", ["a", "b"][rng.below(2) as usize]);
        pod = match rng.below(3) {
            0 => pod.node("n1"),
            1 => pod.node("n2"),
            _ => pod,
        };
        if rng.below(2) == 0 {
            pod = pod.phase("Running");
        }
        // A generation label makes every write change the object.
        let written = put(s, &pod.label("gen", &i.to_string())).await;
        history.put(&key, &written);
        revs.push(written.resource_version());
        live.insert(id);
    }
    (history, revs)
}

fn predicates() -> Vec<(&'static str, SelectionPredicate)> {
    vec![
        ("everything", SelectionPredicate::everything()),
        ("app=a", pred("app=a", "")),
        ("spec.nodeName=n1", pred("", "spec.nodeName=n1")),
        (
            "app=a,spec.nodeName!=n2",
            pred("app=a", "spec.nodeName!=n2"),
        ),
    ]
}

/// Watches of every scope and selector, from several past revisions and from 0, replay the
/// random history exactly as the model says; a final write shows nothing else was queued.
pub async fn watch_replays_a_random_history_exactly<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "watch_replays_a_random_history_exactly") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let (mut history, revs) = random_history(&s, 0x5EED_0001).await;
    let last = *revs.last().expect("writes");
    sync(&s, last).await;
    let keys: Vec<Key> = vec![pods(None), pods(Some("r1")), Pod::new("r1", "p0").key()];
    let starts = [
        Some(revs[0]),
        Some(revs[10]),
        Some(revs[40]),
        Some(revs[WRITES - 1]),
        Some(0),
    ];
    let mut watches = Vec::new();
    for key in &keys {
        for (pname, p) in predicates() {
            for start in starts {
                let opts = ListOptions {
                    predicate: p.clone(),
                    ..from_rv(start, key)
                };
                let w = watch(&s, key, &opts).await;
                watches.push((key.clone(), pname, p.clone(), start, w));
            }
        }
    }
    // First the replay of the history, with no write in flight (a cache may close a watcher
    // that is not read while new events arrive)...
    for (key, pname, p, start, w) in &mut watches {
        let from = match *start {
            Some(0) | None => last,
            Some(r) => r,
        };
        let mut want = Vec::new();
        if matches!(*start, Some(0)) {
            // From 0: the state at the revision the watch started from, as ADDED.
            let state = history.state_at(last, key);
            want.extend(
                state
                    .into_iter()
                    .filter(|o| p.matches(o))
                    .map(Expect::Added),
            );
        }
        want.extend(history.events_after(from, key, p));
        expect_events(w, &want, &format!("watch {key} [{pname}] from {start:?}")).await;
    }
    // ...then one write every watch above must see (the object key, app=a, on n1): anything
    // else a watch had queued would arrive before it.
    let last_pod = Pod::new("r1", "p0")
        .label("app", "a")
        .node("n1")
        .label("gen", "final");
    let final_write = put(&s, &last_pod).await;
    history.put(&last_pod.key(), &final_write);
    for (key, pname, p, start, mut w) in watches {
        let want = history.events_after(last, &key, &p);
        let ctx = format!("watch {key} [{pname}] from {start:?}, the final write");
        assert_eq!(want.len(), 1, "{ctx}: the model expects exactly one event");
        expect_events(&mut w, &want, &ctx).await;
    }
    Verdict::Passed
}

/// Exact lists at every revision of the random history, with and without selectors and page
/// by page, equal the model; NotOlderThan lists equal the model at the revision they report.
pub async fn list_matches_a_random_history_at_every_revision<H: Harness>(h: &H) -> Verdict {
    if let Some(v) = gate(h, "list_matches_a_random_history_at_every_revision") {
        return v;
    }
    let s = h.new_store().await;
    let _ = bump(&s, "start").await;
    let (history, revs) = random_history(&s, 0x5EED_0002).await;
    let keys = [pods(None), pods(Some("r2"))];
    for key in &keys {
        for (pname, p) in predicates() {
            for &rev in &revs {
                let opts = ListOptions {
                    predicate: p.clone(),
                    ..ListOptions::recursive().at(Some(rev), Some(ResourceVersionMatch::Exact))
                };
                let l = list(&s, key, &opts).await;
                let want: Vec<_> = history
                    .state_at(rev, key)
                    .into_iter()
                    .filter(|o| p.matches(o))
                    .collect();
                assert_eq!(l.resource_version, rev);
                assert_items(&l.items, &want, &format!("Exact {key} [{pname}] at {rev}"));
            }
        }
    }
    for &rev in revs.iter().step_by(9) {
        for (pname, p) in predicates() {
            let mut opts = ListOptions {
                predicate: p.clone(),
                limit: Some(3),
                ..ListOptions::recursive().at(Some(rev), Some(ResourceVersionMatch::Exact))
            };
            let mut got = Vec::new();
            let mut pages = 0;
            loop {
                let page = list(&s, &pods(None), &opts).await;
                assert_eq!(
                    page.resource_version, rev,
                    "page {pages} of [{pname}] at {rev}"
                );
                assert!(page.items.len() <= 3);
                got.extend(page.items);
                pages += 1;
                assert!(pages <= WRITES, "endless pagination");
                match page.continue_token {
                    Some(t) => {
                        opts = ListOptions {
                            predicate: p.clone(),
                            limit: Some(3),
                            continue_token: Some(t),
                            ..ListOptions::recursive()
                        };
                    }
                    None => break,
                }
            }
            let want: Vec<_> = history
                .state_at(rev, &pods(None))
                .into_iter()
                .filter(|o| p.matches(o))
                .collect();
            assert_items(&got, &want, &format!("pages of [{pname}] at {rev}"));
        }
        let l = list(
            &s,
            &pods(None),
            &ListOptions::recursive().at(Some(rev), Some(ResourceVersionMatch::NotOlderThan)),
        )
        .await;
        assert!(l.resource_version >= rev);
        assert_items(
            &l.items,
            &history.state_at(l.resource_version, &pods(None)),
            &format!("NotOlderThan {rev}"),
        );
    }
    Verdict::Passed
}

const WRITERS: usize = 4;
const WRITES_EACH: usize = 50;

/// Concurrent writers (one namespace each) and watchers reading as the writes happen: every
/// watcher sees every write in its scope exactly once, in revision order, as the model of the
/// writes (ordered by their revisions) says.
pub async fn watch_concurrent_writes_reach_every_watcher_once_in_order<H: Harness>(
    h: &H,
) -> Verdict {
    if let Some(v) = gate(
        h,
        "watch_concurrent_writes_reach_every_watcher_once_in_order",
    ) {
        return v;
    }
    let s = std::sync::Arc::new(h.new_store().await);
    let start = bump(&*s, "start").await;
    let scopes = [pods(None), pods(None), pods(Some("w0"))];
    let expected_counts = [WRITERS * WRITES_EACH, WRITERS * WRITES_EACH, WRITES_EACH];
    let mut readers = Vec::new();
    for (scope, n) in scopes.iter().zip(expected_counts) {
        let mut w = watch(&*s, scope, &from_rv(Some(start), scope)).await;
        let ctx = format!("watcher of {scope}");
        readers.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(n);
            for i in 0..n {
                got.push(next_event(&mut w, &format!("{ctx}, event {i} of {n}")).await);
            }
            (w, got)
        }));
    }
    let mut writers = Vec::new();
    for wi in 0..WRITERS {
        let s = std::sync::Arc::clone(&s);
        writers.push(tokio::spawn(async move {
            let ns = format!("w{wi}");
            let mut log = Vec::with_capacity(WRITES_EACH);
            let mut rng = Rng(0xC0FF_EE00 + wi as u64);
            let mut live = std::collections::BTreeSet::new();
            for i in 0..WRITES_EACH {
                let name = format!("p{}", rng.below(4));
                let key = Pod::new(&ns, &name).key();
                if live.contains(&name) && rng.below(4) == 0 {
                    let gone = delete(&*s, &key).await;
                    log.push((gone.resource_version(), key, None));
                    live.remove(&name);
                } else {
                    let pod = Pod::new(&ns, &name).label("gen", &i.to_string());
                    let o = put(&*s, &pod).await;
                    log.push((o.resource_version(), key, Some(o)));
                    live.insert(name);
                }
            }
            log
        }));
    }
    let mut all = Vec::new();
    for w in writers {
        all.extend(
            tokio::time::timeout(super::WAIT * 3, w)
                .await
                .expect("writers finish")
                .expect("writer task"),
        );
    }
    all.sort_by_key(|(rev, _, _)| *rev);
    let mut history = History::default();
    for (i, (rev, key, obj)) in all.iter().enumerate() {
        if i > 0 {
            assert!(*rev > all[i - 1].0, "two writes at revision {rev}");
        }
        match obj {
            Some(o) => history.put(key, o),
            None => history.delete(key, *rev),
        }
    }
    for (reader, scope) in readers.into_iter().zip(&scopes) {
        let (_w, got) = tokio::time::timeout(super::WAIT * 3, reader)
            .await
            .expect("reader finishes")
            .expect("reader task");
        let want = history.events_after(start, scope, &SelectionPredicate::everything());
        assert_eq!(got.len(), want.len(), "watcher of {scope}: event count");
        for (i, (ev, exp)) in got.iter().zip(&want).enumerate() {
            check_event(ev, exp, &format!("watcher of {scope}, event {i}"));
        }
    }
    Verdict::Passed
}
