use super::*;
use listwatch_api::{Object, SelectableFields};

fn obj(ns: &str, name: &str, rv: u64, node: &str) -> Object {
    Object::from_value(
        serde_json::json!({"metadata":{"name":name,"namespace":ns,"resourceVersion":rv.to_string()},
            "spec":{"nodeName":node}}),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn node_index() -> (String, IndexFn<Object>) {
    (
        "node".into(),
        Arc::new(|o: &Object| {
            o.to_value()
                .ok()
                .and_then(|v| v["spec"]["nodeName"].as_str().map(|s| vec![s.to_owned()]))
                .unwrap_or_default()
        }),
    )
}

#[test]
fn relist_reports_changes_and_vanished_keys_as_final_state_unknown() {
    let mut w = Writer::new(vec![node_index()]);
    let r = w.store();
    w.apply(Event::Init);
    for o in [
        obj("ns", "a", 1, "n1"),
        obj("ns", "b", 2, "n1"),
        obj("ns", "c", 3, "n2"),
    ] {
        assert!(w.apply(Event::InitApply(o)).is_empty());
    }
    assert!(
        r.is_empty(),
        "readers see nothing until the relist completes"
    );
    let d = w.apply(Event::InitDone {
        resource_version: "3".into(),
    });
    assert_eq!(d.len(), 3);
    assert!(d.iter().all(|d| matches!(
        d,
        Delta::Added {
            in_initial_list: true,
            ..
        }
    )));
    assert_eq!(r.len(), 3);
    assert!(r.has_synced());

    w.apply(Event::Init);
    w.apply(Event::InitApply(obj("ns", "a", 1, "n1")));
    w.apply(Event::InitApply(obj("ns", "b", 7, "n2")));
    w.apply(Event::InitApply(obj("ns", "d", 8, "n3")));
    assert_eq!(r.len(), 3, "the old state stays visible during a relist");
    assert!(r.get_by_name(Some("ns"), "c").is_some());
    let d = w.apply(Event::InitDone {
        resource_version: "8".into(),
    });
    let mut kinds: Vec<String> = d
        .iter()
        .map(|d| match d {
            Delta::Added {
                object,
                in_initial_list,
            } => format!("add {} {in_initial_list}", object.name()),
            Delta::Updated { new, .. } => format!("update {}", new.name()),
            Delta::Deleted {
                object,
                final_state_unknown,
            } => {
                format!("delete {} {final_state_unknown}", object.name())
            }
            Delta::Sync(o) => format!("sync {}", o.name()),
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["add d false", "delete c true", "update b"]);
    assert_eq!(r.resource_version(), "8");
    let mut n2: Vec<String> = r
        .by_index("node", "n2")
        .unwrap()
        .iter()
        .map(|o| o.name().to_owned())
        .collect();
    n2.sort();
    assert_eq!(n2, ["b"], "c left n2 and b moved there");
    assert_eq!(r.by_index("node", "n1").unwrap().len(), 1);
    assert!(r.by_index("missing", "x").is_none());
}

#[test]
fn unchanged_objects_keep_the_stored_copy_across_a_relist() {
    let mut w = Writer::default();
    let r = w.store();
    w.apply(Event::Init);
    w.apply(Event::InitApply(obj("ns", "a", 4, "n")));
    w.apply(Event::InitDone {
        resource_version: "4".into(),
    });
    let before = r.get_by_name(Some("ns"), "a").unwrap();
    w.apply(Event::Init);
    w.apply(Event::InitApply(obj("ns", "a", 4, "n")));
    assert!(
        w.apply(Event::InitDone {
            resource_version: "9".into()
        })
        .is_empty()
    );
    assert!(Arc::ptr_eq(
        &before,
        &r.get_by_name(Some("ns"), "a").unwrap()
    ));
}

#[test]
fn watch_events_update_objects_indexes_and_version() {
    let mut w = Writer::new(vec![node_index(), namespace_index()]);
    let r = w.store();
    w.apply(Event::Init);
    w.apply(Event::InitDone {
        resource_version: "1".into(),
    });
    assert!(matches!(
        &w.apply(Event::Apply(obj("ns", "a", 2, "n1")))[..],
        [Delta::Added {
            in_initial_list: false,
            ..
        }]
    ));
    assert!(matches!(
        &w.apply(Event::Apply(obj("ns", "a", 3, "n2")))[..],
        [Delta::Updated { .. }]
    ));
    assert_eq!(r.by_index("node", "n1").unwrap().len(), 0);
    assert_eq!(r.index_values("node").unwrap(), ["n2"]);
    assert_eq!(r.by_index(NAMESPACE_INDEX, "ns").unwrap().len(), 1);
    assert!(matches!(
        &w.apply(Event::Delete(obj("ns", "a", 4, "n2")))[..],
        [Delta::Deleted {
            final_state_unknown: false,
            ..
        }]
    ));
    assert!(w.apply(Event::Delete(obj("ns", "zz", 5, "n2"))).is_empty());
    w.apply(Event::Bookmark {
        resource_version: "9".into(),
    });
    assert_eq!(r.resource_version(), "9");
    assert!(r.is_empty());
    assert!(r.index_values("node").unwrap().is_empty());
}

/// (name, resource version) of every object, sorted.
type Objects = Vec<(String, u64)>;
/// Each node index value with the names under it, sorted.
type NodeIndex = Vec<(String, Vec<String>)>;

/// What readers see: the objects and the node index.
fn seen(r: &Store<Object>) -> (Objects, NodeIndex) {
    let mut objects: Vec<(String, u64)> = r
        .list()
        .iter()
        .map(|o| (o.name().to_owned(), o.resource_version()))
        .collect();
    objects.sort();
    let mut values = r.index_values("node").unwrap();
    values.sort();
    let index = values
        .into_iter()
        .map(|v| {
            let mut names: Vec<String> = r
                .by_index("node", &v)
                .unwrap()
                .iter()
                .map(|o| o.name().to_owned())
                .collect();
            names.sort();
            (v, names)
        })
        .collect();
    (objects, index)
}

#[test]
fn a_panicking_index_function_changes_nothing_readers_see() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::atomic::{AtomicBool, Ordering};

    let armed = Arc::new(AtomicBool::new(false));
    let node = node_index().1;
    let index: IndexFn<Object> = {
        let armed = Arc::clone(&armed);
        Arc::new(move |o: &Object| {
            assert!(
                !(armed.load(Ordering::SeqCst) && o.name() == "doomed"),
                "index function panics on doomed"
            );
            node(o)
        })
    };
    let mut w = Writer::new(vec![("node".into(), index)]);
    let r = w.store();
    w.apply(Event::Init);
    for o in [
        obj("ns", "a", 1, "n1"),
        obj("ns", "b", 2, "n1"),
        obj("ns", "doomed", 3, "n2"),
    ] {
        w.apply(Event::InitApply(o));
    }
    w.apply(Event::InitDone {
        resource_version: "3".into(),
    });
    let before = seen(&r);
    assert_eq!(before.0.len(), 3);

    // A relist that changes a, adds c and drops doomed, whose index values are needed to
    // remove it: the function panics on it, after a and c would have been applied.
    armed.store(true, Ordering::SeqCst);
    w.apply(Event::Init);
    w.apply(Event::InitApply(obj("ns", "a", 5, "n3")));
    w.apply(Event::InitApply(obj("ns", "b", 2, "n1")));
    w.apply(Event::InitApply(obj("ns", "c", 6, "n1")));
    let commit = catch_unwind(AssertUnwindSafe(|| {
        w.apply(Event::InitDone {
            resource_version: "6".into(),
        })
    }));
    assert!(commit.is_err(), "the index function panicked");
    assert_eq!(seen(&r), before, "no half-applied relist is visible");
    assert_eq!(r.resource_version(), "3");
    assert!(
        !w.shared.state.is_poisoned(),
        "no panic under the write lock"
    );

    // A watch update and a delete of doomed: the same, nothing changes.
    for event in [
        Event::Apply(obj("ns", "doomed", 7, "n4")),
        Event::Delete(obj("ns", "doomed", 8, "n2")),
    ] {
        assert!(catch_unwind(AssertUnwindSafe(|| w.apply(event))).is_err());
        assert_eq!(seen(&r), before);
        assert!(!w.shared.state.is_poisoned());
    }

    // Once the function behaves, the writer carries on from the state readers saw.
    armed.store(false, Ordering::SeqCst);
    assert!(matches!(
        &w.apply(Event::Apply(obj("ns", "doomed", 9, "n4")))[..],
        [Delta::Updated { .. }]
    ));
    assert_eq!(
        seen(&r).1,
        [
            ("n1".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            ("n4".to_owned(), vec!["doomed".to_owned()]),
        ]
    );
}

#[tokio::test]
async fn wait_until_synced_returns_after_the_first_relist_or_errs_when_the_writer_goes() {
    let mut w: Writer<Object> = Writer::default();
    let r = w.store();
    let waiter = tokio::spawn({
        let r = r.clone();
        async move { r.wait_until_synced().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    w.apply(Event::Init);
    w.apply(Event::InitDone {
        resource_version: "1".into(),
    });
    assert!(matches!(waiter.await.unwrap(), Ok(())));

    let w2: Writer<Object> = Writer::default();
    let r2 = w2.store();
    drop(w2);
    assert!(matches!(
        r2.wait_until_synced().await,
        Err(crate::SyncError::Stopped)
    ));
}

/// rtcl M1: a list refused for good (403, 404) used to leave `Store::wait_until_synced`
/// waiting for ever (only the informer's own wait failed). The reflector reports it to the
/// store: the wait fails with `SyncError::Fatal` while it lasts, waits again once a later
/// try fails otherwise, and succeeds at the first sync; nothing is reported after it.
#[tokio::test]
async fn a_list_refused_for_good_fails_the_stores_wait_until_a_later_try() {
    use crate::error::Error;
    use crate::informer_error::SyncError;
    use futures::StreamExt;
    use listwatch_api::Status;
    let (tx, rx) = futures::channel::mpsc::unbounded::<crate::error::Result<Event<Object>>>();
    let w: Writer<Object> = Writer::default();
    let r = w.store();
    let mut deltas = Box::pin(crate::reflector(w, rx));
    let forbidden = || {
        Error::Api(Box::new(Status::failure(
            403,
            "Forbidden",
            "pods is forbidden",
        )))
    };
    tx.unbounded_send(Err(forbidden())).unwrap();
    assert!(deltas.next().await.unwrap().is_err());
    match r.wait_until_synced().await {
        Err(SyncError::Fatal(e)) => assert!(e.to_string().contains("403"), "{e}"),
        other => panic!("the store's wait on a 403: {other:?}"),
    }
    // A later try that fails otherwise (the server went away): waiting again.
    tx.unbounded_send(Err(Error::Http("cut".into()))).unwrap();
    assert!(deltas.next().await.unwrap().is_err());
    let waiter = tokio::spawn({
        let r = r.clone();
        async move { r.wait_until_synced().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    tx.unbounded_send(Ok(Event::Init)).unwrap();
    tx.unbounded_send(Ok(Event::InitDone {
        resource_version: "1".into(),
    }))
    .unwrap();
    tx.unbounded_send(Err(forbidden())).unwrap();
    while let Some(d) = deltas.next().await {
        if d.is_err() {
            break;
        }
    }
    assert!(matches!(waiter.await.unwrap(), Ok(())));
    assert!(
        matches!(r.wait_until_synced().await, Ok(())),
        "a 403 after the sync is not a sync failure"
    );
}
