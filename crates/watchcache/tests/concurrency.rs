//! One writer and several reader threads at once: every view a reader takes is one consistent
//! version, versions only move forward, and a paginated walk whose pages come from ever newer
//! views is still the state at its first page's version (the pinned state).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, WatchEvent};
use listwatch_watchcache::{Config, Index, WatchCache};

const EVENTS: u64 = 3_000;
const LIST_RV: u64 = 100;

fn pod(i: u64, rv: u64) -> Object {
    let json = format!(
        r#"{{"metadata":{{"name":"p{i}","namespace":"ns{}"}},"spec":{{"nodeName":"n{}"}}}}"#,
        i % 3,
        i % 5
    );
    Object::from_json(json.as_bytes(), &SelectableFields::new(["spec.nodeName"]))
        .unwrap()
        .with_resource_version(rv)
}

#[test]
fn readers_racing_the_writer_always_see_whole_versions() {
    let config = Config::new("pods")
        .with_index(Index::field("spec.nodeName"))
        .with_capacity(64, 64, 1024);
    let mut cache = WatchCache::new(config);
    cache.replace(Vec::new(), LIST_RV).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(5));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (reader, done, start) = (cache.reader(), Arc::clone(&done), Arc::clone(&start));
            thread::spawn(move || {
                let all = Key::collection("pods", None).unwrap();
                let mut last = 0;
                let mut views = 0u64;
                let mut exact_served = 0u64;
                start.wait();
                loop {
                    // Read whether the writer is done before looking, so the last look sees
                    // its final version.
                    let finished = done.load(Ordering::Acquire);
                    let view = reader.view();
                    let rv = view.resource_version();
                    assert!(rv >= last, "versions go forward: {last} then {rv}");
                    last = rv;
                    // The writer only adds pods, one per version after the list.
                    let n = (rv - LIST_RV) as usize;
                    assert_eq!(view.len(), n);
                    let list = view.list(&all, &ListOptions::recursive()).unwrap();
                    assert_eq!((list.items.len(), list.resource_version), (n, rv));
                    // An Exact list in the middle agrees with the version's arithmetic
                    // whenever the window still covers it (it is rebuilt from the window
                    // exactly when a watch from there could be served), and is 410 only
                    // when it does not.
                    let mid = LIST_RV + (rv - LIST_RV) / 2;
                    let covered = view.events_since(mid).is_ok();
                    match view.list(
                        &all,
                        &ListOptions::recursive().at(Some(mid), Some(ResourceVersionMatch::Exact)),
                    ) {
                        Ok(past) => {
                            assert_eq!(past.items.len() as u64, mid - LIST_RV);
                            exact_served += 1;
                        }
                        Err(e) => {
                            assert!(e.is_expired(), "Exact at {mid} (view {rv}): {e:?}");
                            assert!(!covered, "the window covers {mid} (view {rv}): {e:?}");
                        }
                    }
                    // The window ends at the view's version, in order, with no gap.
                    let window = view.window();
                    let rvs: Vec<u64> = window.iter().map(|e| e.resource_version).collect();
                    assert!(rvs.windows(2).all(|w| w[1] == w[0] + 1));
                    assert_eq!(rvs.last().copied().unwrap_or(LIST_RV), rv);
                    views += 1;
                    if finished {
                        assert_eq!(rv, LIST_RV + EVENTS, "the last look sees everything");
                        break;
                    }
                }
                // The Exact branch ran (the window covers the middle early on): the
                // assertion above could fail.
                assert!(exact_served > 0, "no Exact list was ever served");
                views
            })
        })
        .collect();
    // A reader walking the list page by page, each page from the latest view while the
    // writer adds pods: every walk is exactly the pods of its first page's version.
    let walker = {
        let (reader, done, start) = (cache.reader(), Arc::clone(&done), Arc::clone(&start));
        thread::spawn(move || {
            let all = Key::collection("pods", None).unwrap();
            let mut walks = 0u64;
            start.wait();
            while !done.load(Ordering::Acquire) {
                let mut opts = ListOptions {
                    limit: Some(37),
                    ..ListOptions::recursive()
                };
                let mut names = std::collections::BTreeSet::new();
                let mut at = None;
                loop {
                    let page = reader.view().list(&all, &opts).unwrap();
                    assert_eq!(
                        *at.get_or_insert(page.resource_version),
                        page.resource_version
                    );
                    for o in &page.items {
                        assert!(names.insert(o.name().to_owned()), "{} twice", o.name());
                    }
                    match page.continue_token {
                        Some(t) => opts.continue_token = Some(t),
                        None => break,
                    }
                }
                let n = at.unwrap_or(LIST_RV) - LIST_RV;
                let want: std::collections::BTreeSet<String> =
                    (0..n).map(|i| format!("p{i}")).collect();
                assert_eq!(names, want, "the walk at {at:?}");
                walks += 1;
            }
            walks
        })
    };
    start.wait();
    for i in 0..EVENTS {
        cache
            .apply(WatchEvent::Added(pod(i, LIST_RV + 1 + i)))
            .unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0, "every reader looked at least once");
    }
    assert!(walker.join().unwrap() > 0, "the walker finished a walk");
    assert_eq!(cache.view().len(), EVENTS as usize);
}
