//! The informer's subscribers: each has its own bounded queue, so a slow one delays only
//! itself; a lagging one is caught up with coalesced deltas and never left with a wrong
//! view; handlers come and go at any time with their own has-synced and resync; transforms
//! and filters. In-process lister-watcher over listwatch-memstore, paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::{FutureExt, StreamExt};
use listwatch_api::Object;
use listwatch_memstore::MemStore;
use listwatch_runtime::{
    Config, Delta, EventHandler, Filtered, Informer, InformerConfig, InformerError, Subscription,
    SyncError,
};
use listwatch_storage::Storage;

fn config() -> InformerConfig<Object> {
    InformerConfig::default().reflector(Config::default().page_size(2))
}

async fn seeded(n: usize) -> MemStore {
    let store = MemStore::new();
    for i in 0..n {
        create(&store, &format!("p{i}"), "v0").await;
    }
    store
}

/// Everything the subscription has ready now, replayed into `model`.
fn drain(sub: &mut Subscription<Object>, model: &mut BTreeMap<String, u64>) -> Vec<Delta<Object>> {
    let mut got = Vec::new();
    while let Some(Some(d)) = tokio::task::unconstrained(sub.next()).now_or_never() {
        replay(model, &d);
        got.push(d);
    }
    got
}

fn as_map(state: Vec<(String, u64)>) -> BTreeMap<String, u64> {
    state.into_iter().collect()
}

#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl EventHandler<Object> for Log {
    fn on_add(&mut self, o: &Arc<Object>, initial: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("add {} {initial}", o.name()));
    }
    fn on_update(&mut self, old: &Arc<Object>, new: &Arc<Object>) {
        let what = if Arc::ptr_eq(old, new) {
            "sync"
        } else {
            "update"
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("{what} {}", new.name()));
    }
    fn on_delete(&mut self, o: &Arc<Object>, unknown: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("delete {} {unknown}", o.name()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_never_reads_delays_neither_the_store_nor_the_other_handlers() {
    let backend = seeded(1).await;
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config().subscriber_buffer(2),
    );
    let stuck = informer.subscribe();
    let fast = Log::default();
    let _reg = informer.add_handler(fast.clone());
    informer.wait_until_synced().await.unwrap();
    for i in 1..10 {
        create(&backend, &format!("p{i}"), "v").await;
    }
    let store = informer.store();
    assert!(eventually(Duration::from_secs(60), || store.len() == 10).await);
    assert!(eventually(Duration::from_secs(60), || fast.len() == 10).await);
    drop(stuck);
}

#[tokio::test(start_paused = true)]
async fn a_lagging_subscriber_is_caught_up_with_coalesced_deltas_and_told_of_deletions() {
    let backend = seeded(3).await;
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config().subscriber_buffer(2),
    );
    informer.wait_until_synced().await.unwrap();
    let mut sub = informer.subscribe();
    let mut model = BTreeMap::new();
    assert_eq!(drain(&mut sub, &mut model).len(), 3);

    // Far more changes than the queue holds, while the subscriber reads nothing.
    for round in 0..5 {
        update(&backend, "p0", &format!("r{round}")).await;
    }
    delete(&backend, "p1").await;
    create(&backend, "new", "v").await;
    let store = informer.store();
    let rv = backend.current_revision();
    assert!(
        eventually(Duration::from_secs(10), || store.resource_version()
            == rv.to_string())
        .await
    );

    let got = drain(&mut sub, &mut model);
    assert_eq!(
        model,
        as_map(store_state(&store)),
        "the replay ends at the store's state"
    );
    // Three exact deltas (the queue's capacity, 2, plus the event that overflowed it), then
    // one catch-up: p0's remaining updates coalesced into one, p1's deletion told as
    // final-state-unknown, `new` added.
    let kinds: Vec<String> = got
        .iter()
        .map(|d| match d {
            Delta::Added { object, .. } => format!("add {}", object.name()),
            Delta::Updated { new, .. } => format!("update {}", new.name()),
            Delta::Deleted {
                object,
                final_state_unknown,
            } => format!("delete {} {final_state_unknown}", object.name()),
            Delta::Sync(o) => format!("sync {}", o.name()),
        })
        .collect();
    assert_eq!(&kinds[..3], ["update p0"; 3], "{kinds:?}");
    let mut rest = kinds[3..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        ["add new", "delete p1 true", "update p0"],
        "{kinds:?}"
    );

    // Exact deltas resume after the catch-up.
    update(&backend, "new", "again").await;
    let rv = backend.current_revision();
    assert!(
        eventually(Duration::from_secs(10), || store.resource_version()
            == rv.to_string())
        .await
    );
    let got = drain(&mut sub, &mut model);
    assert_eq!(got.len(), 1);
    assert_eq!(model, as_map(store_state(&store)));
}

#[tokio::test(start_paused = true)]
async fn handlers_come_and_go_at_any_time_each_with_its_own_sync() {
    let backend = seeded(2).await;
    let informer = Informer::spawn(StorageLw::new(backend.clone()), config());
    let early = Log::default();
    let early_reg = informer.add_handler(early.clone());
    assert!(!early_reg.has_synced());
    informer.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || early_reg.has_synced()).await);
    let mut e = early.take();
    e.sort();
    assert_eq!(e, ["add p0 true", "add p1 true"]);

    // A late subscriber has synced only once it has consumed the state it started from.
    let mut late = informer.subscribe();
    assert!(!late.has_synced());
    let mut model = BTreeMap::new();
    for _ in 0..2 {
        let d = late.next().await.unwrap();
        assert!(matches!(
            d,
            Delta::Added {
                in_initial_list: true,
                ..
            }
        ));
        replay(&mut model, &d);
        assert!(!late.has_synced());
    }
    assert!(late.next().now_or_never().is_none());
    assert!(late.has_synced());

    // Removing a handler stops it; the others go on.
    early_reg.remove();
    create(&backend, "p2", "v").await;
    let second = Log::default();
    let second_reg = informer.add_handler(second.clone());
    assert!(eventually(Duration::from_secs(5), || second.len() == 3).await);
    assert!(second_reg.has_synced());
    let d = late.next().await.unwrap();
    assert!(matches!(&d, Delta::Added { object, in_initial_list: false } if object.name() == "p2"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        early.take().is_empty(),
        "a removed handler is called no more"
    );
}

#[tokio::test(start_paused = true)]
async fn each_handler_resyncs_on_its_own_period() {
    let backend = seeded(2).await;
    let informer = Informer::spawn(StorageLw::new(backend.clone()), config());
    let every_10s = Log::default();
    let never = Log::default();
    let _a = informer.add_handler_with_resync(every_10s.clone(), Duration::from_secs(10));
    let _b = informer.add_handler(never.clone());
    informer.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || never.len() == 2).await);
    tokio::time::sleep(Duration::from_secs(35)).await;
    let syncs = every_10s
        .take()
        .iter()
        .filter(|s| s.starts_with("sync"))
        .count();
    assert_eq!(syncs, 6, "3 periods x 2 objects");
    assert_eq!(never.take().len(), 2, "no resync without a period");
}

#[tokio::test(start_paused = true)]
async fn a_transform_rewrites_objects_before_the_store() {
    let backend = seeded(2).await;
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config().transform(|o: Object| {
            let mut v = o.to_value().unwrap();
            v["metadata"].as_object_mut().unwrap().remove("labels");
            Object::from_value(v, &listwatch_api::SelectableFields::none()).unwrap()
        }),
    );
    informer.wait_until_synced().await.unwrap();
    create(&backend, "p2", "v").await;
    let store = informer.store();
    assert!(eventually(Duration::from_secs(5), || store.len() == 3).await);
    for o in store.list() {
        assert!(o.labels().is_empty(), "{} kept its labels", o.name());
    }
    assert_eq!(
        as_map(store_state(&store)),
        as_map(backend_state(&backend).await)
    );
}

#[test]
fn a_filtered_handler_sees_updates_across_its_selection_as_adds_and_deletes() {
    let log = Log::default();
    let mut h = Filtered::new(log.clone(), |o: &Object| o.name().starts_with('a'));
    let o = |name: &str| Arc::new(pod(name, &[], "x"));
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Added {
            object: o("b"),
            in_initial_list: true,
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Added {
            object: o("a1"),
            in_initial_list: true,
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Updated {
            old: o("b"),
            new: o("a2"),
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Updated {
            old: o("a1"),
            new: o("a3"),
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Updated {
            old: o("a2"),
            new: o("c"),
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Deleted {
            object: o("c"),
            final_state_unknown: false,
        },
    );
    listwatch_runtime::dispatch(
        &mut h,
        &Delta::Deleted {
            object: o("a3"),
            final_state_unknown: true,
        },
    );
    assert_eq!(
        log.take(),
        [
            "add a1 true",
            "add a2 false",
            "update a3",
            "delete a2 false",
            "delete a3 true"
        ]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Update(u8),
    Delete(u8),
    Expire,
    /// Subscriber i reads up to n deltas.
    Read(u8, u8),
    Sleep(u16),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Create),
        4 => (0u8..6).prop_map(Op::Update),
        3 => (0u8..6).prop_map(Op::Delete),
        1 => Just(Op::Expire),
        4 => (0u8..3, 0u8..6).prop_map(|(s, n)| Op::Read(s, n)),
        2 => (0u16..2000).prop_map(Op::Sleep),
    ]
}

/// Three subscribers with tiny queues read at random paces (one joins late); every delta
/// each one receives is consistent with what it saw before (`replay` checks), and each
/// ends with exactly the store's state.
async fn run_ops(ops: Vec<Op>, buffer: usize) {
    let backend = MemStore::new();
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(lw.clone(), config().subscriber_buffer(buffer));
    let mut subs: Vec<Subscription<Object>> = vec![informer.subscribe(), informer.subscribe()];
    let mut models = vec![BTreeMap::new(); 3];
    for (i, op) in ops.into_iter().enumerate() {
        if i == 5 {
            subs.push(informer.subscribe());
        }
        match op {
            Op::Create(i) => {
                let _ = backend
                    .create(
                        &key(&format!("k{i}")),
                        pod(&format!("k{i}"), &[], "0"),
                        None,
                    )
                    .await;
            }
            Op::Update(i) => {
                let name = format!("k{i}");
                let new = pod(&name, &[], &format!("{}", backend.current_revision()));
                let _ = backend
                    .guaranteed_update(
                        &key(&name),
                        None,
                        false,
                        &mut |_| Ok(new.clone().into()),
                        None,
                    )
                    .await;
            }
            Op::Delete(i) => {
                let _ = backend
                    .delete(
                        &key(&format!("k{i}")),
                        None,
                        listwatch_storage::no_validation(),
                        None,
                    )
                    .await;
            }
            Op::Expire => lw.expire_watches(),
            Op::Read(s, n) => {
                if let Some(sub) = subs.get_mut(usize::from(s)) {
                    for _ in 0..n {
                        match tokio::task::unconstrained(sub.next()).now_or_never() {
                            Some(Some(d)) => replay(&mut models[usize::from(s)], &d),
                            _ => break,
                        }
                    }
                }
            }
            Op::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms.into())).await,
        }
    }
    let revision = backend.current_revision();
    let store = informer.store();
    assert!(
        eventually(Duration::from_secs(600), || store.has_synced()
            && store
                .resource_version()
                .parse::<u64>()
                .is_ok_and(|v| v >= revision))
        .await
    );
    let want = as_map(store_state(&store));
    for (sub, model) in subs.iter_mut().zip(models.iter_mut()) {
        drain(sub, model);
        assert_eq!(*model, want, "a subscriber's replay differs from the store");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..Default::default()
    })]

    #[test]
    fn subscribers_at_any_pace_each_replay_to_the_store(
        ops in proptest::collection::vec(op(), 1..60),
        buffer in 1usize..4,
    ) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(run_ops(ops, buffer));
    }
}

fn forbidden() -> Box<listwatch_api::Status> {
    Box::new(listwatch_api::Status::failure(
        403,
        "Forbidden",
        "pods is forbidden: User \"x\" cannot list resource \"pods\"",
    ))
}

/// 403s on the first list: the wait fails with the error instead of hanging; the informer
/// goes on retrying, and syncs once the list is allowed.
#[tokio::test(start_paused = true)]
async fn wait_until_synced_fails_on_a_forbidden_list_instead_of_hanging() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    // Forbidden for the first 30 tries (over 12 minutes of backoff), then allowed (RBAC fixed).
    lw.fail_lists((0..30).map(|_| Fault::Status(forbidden())));
    let informer = Informer::spawn(lw.clone(), config());
    let mut errors = informer.errors();
    let waited = tokio::time::timeout(Duration::from_secs(600), informer.wait_until_synced()).await;
    let Ok(Err(SyncError::Fatal(InformerError::Reflector(e)))) = waited else {
        panic!("expected a fatal 403 within 10 minutes, got {waited:?}");
    };
    assert_eq!(e.code(), Some(403));
    let reported = errors.recv().await.unwrap();
    assert!(reported.to_string().contains("403"), "{reported}");
    // The next try is allowed: the informer syncs by itself (a wait made while the last try
    // had failed fatally fails at once, the store's included; the wait that outlasts
    // failures does not).
    let store = informer.store();
    assert!(matches!(
        store.wait_until_synced().await,
        Err(SyncError::Fatal(_))
    ));
    let waited = tokio::time::timeout(
        Duration::from_secs(3600),
        store.wait_until_synced_ignoring_failures(),
    )
    .await;
    assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
    assert_eq!(store.len(), 2);
    assert!(matches!(informer.wait_until_synced().await, Ok(())));
}

/// A failure reported before `errors()` was first called (here the first list's 403, long
/// before the call) reaches that first receiver: a caller that spawns and then subscribes
/// loses nothing to the race between the two (before, the receiver only had later failures,
/// and `api client_toolkit::informer_failures_reach_code_against_the_binary` failed under
/// load when the driver's first list beat the subscription).
#[tokio::test(start_paused = true)]
async fn the_first_errors_receiver_has_the_failures_from_the_start() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_lists((0..30).map(|_| Fault::Status(forbidden())));
    let informer = Informer::spawn(lw.clone(), config());
    let waited = tokio::time::timeout(Duration::from_secs(600), informer.wait_until_synced()).await;
    assert!(
        matches!(waited, Ok(Err(SyncError::Fatal(_)))),
        "expected the 403 first: {waited:?}"
    );
    // Only now the first receiver: it still has the 403 reported before it existed.
    let mut first = informer.errors();
    let reported = first
        .try_recv()
        .expect("the failure reported before the call");
    assert!(reported.to_string().contains("403"), "{reported}");
    // A later receiver starts from its call.
    let mut later = informer.errors();
    assert!(later.try_recv().is_err());
}

/// A list refused with 400 (a field selector the resource does not support, as
/// kube-apiserver answers `field label not supported`) is refused the same way on every
/// retry: the wait fails with it instead of hanging.
#[tokio::test(start_paused = true)]
async fn wait_until_synced_fails_on_a_bad_request_instead_of_hanging() {
    let backend = seeded(2).await;
    let lw = StorageLw::new(backend.clone());
    lw.fail_lists((0..1000).map(|_| {
        Fault::Status(Box::new(listwatch_api::Status::failure(
            400,
            "BadRequest",
            "field label not supported: spec.color",
        )))
    }));
    let informer = Informer::spawn(lw.clone(), config());
    let waited = tokio::time::timeout(Duration::from_secs(600), informer.wait_until_synced()).await;
    let Ok(Err(SyncError::Fatal(InformerError::Reflector(e)))) = waited else {
        panic!("expected a fatal 400 within 10 minutes, got {waited:?}");
    };
    assert_eq!(e.code(), Some(400));
    assert!(e.to_string().contains("field label not supported"), "{e}");
}

/// A transform that panics on one object of the list: the list fails as a whole (a list
/// committed without the object would delete it from a synced store), the panic is reported
/// with its key, the first wait fails instead of hanging, and the informer keeps retrying
/// (before, its driver died and the store froze).
#[tokio::test(start_paused = true)]
async fn a_transform_panic_in_the_list_fails_the_list_reports_it_and_the_informer_goes_on() {
    let backend = seeded(2).await;
    create(&backend, "bad", "v").await;
    let lw = StorageLw::new(backend.clone());
    let informer = Informer::spawn(
        lw.clone(),
        config().transform(|o: Object| {
            assert!(o.name() != "bad", "injected transform panic");
            o
        }),
    );
    let mut errors = informer.errors();
    let waited = tokio::time::timeout(Duration::from_secs(600), informer.wait_until_synced()).await;
    let Ok(Err(SyncError::Fatal(InformerError::TransformPanicked { key, message }))) = waited
    else {
        panic!("expected a fatal TransformPanicked, got {waited:?}");
    };
    assert_eq!(key.name(), "bad");
    assert!(message.contains("injected transform panic"), "{message}");
    assert!(matches!(
        errors.recv().await.unwrap(),
        InformerError::TransformPanicked { .. }
    ));
    assert!(!informer.has_synced());
    assert_eq!(informer.store().len(), 0);
    // The informer goes on: it retries the list.
    let lists = lw.lists().len();
    assert!(
        eventually(Duration::from_secs(120), || lw.lists().len() > lists).await,
        "the list was not retried"
    );
}

/// An index function that panics on one object after the sync: that event is skipped and
/// reported, and the informer keeps applying events.
#[tokio::test(start_paused = true)]
async fn a_panicking_index_function_skips_the_event_reports_it_and_the_informer_goes_on() {
    let backend = seeded(2).await;
    let index: listwatch_runtime::IndexFn<Object> = Arc::new(|o: &Object| {
        assert!(o.name() != "bad", "injected index panic");
        vec![o.name().to_owned()]
    });
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config().index("by-name", index),
    );
    let mut errors = informer.errors();
    informer.wait_until_synced().await.unwrap();
    create(&backend, "bad", "v").await;
    let reported = tokio::time::timeout(Duration::from_secs(60), errors.recv()).await;
    let Ok(Ok(InformerError::IndexPanicked { event, .. })) = reported else {
        panic!("expected IndexPanicked, got {reported:?}");
    };
    assert!(event.ends_with("bad"), "{event}");
    create(&backend, "later", "v").await;
    let store = informer.store();
    assert!(
        eventually(Duration::from_secs(60), || store.len() == 3).await,
        "the informer stopped after the panic: {} objects",
        store.len()
    );
    assert_eq!(store.by_index("by-name", "later").map(|v| v.len()), Some(1));
}

struct PanicsOn(&'static str, Log);

impl EventHandler<Object> for PanicsOn {
    fn on_add(&mut self, o: &Arc<Object>, initial: bool) {
        assert!(o.name() != self.0, "injected handler panic");
        self.1.on_add(o, initial);
    }
}

/// A handler that panics on one delta is reported and keeps receiving the next ones (before,
/// the panic ended its task silently).
#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_reported_and_keeps_handling() {
    let backend = seeded(1).await;
    let informer = Informer::spawn(StorageLw::new(backend.clone()), config());
    let mut errors = informer.errors();
    let log = Log::default();
    let _reg = informer.add_handler(PanicsOn("bad", log.clone()));
    informer.wait_until_synced().await.unwrap();
    create(&backend, "bad", "v").await;
    create(&backend, "later", "v").await;
    let reported = tokio::time::timeout(Duration::from_secs(60), errors.recv()).await;
    let Ok(Ok(InformerError::HandlerPanicked { key, .. })) = reported else {
        panic!("expected HandlerPanicked, got {reported:?}");
    };
    assert_eq!(key.name(), "bad");
    assert!(
        eventually(Duration::from_secs(60), || log.len() == 2).await,
        "the handler stopped after its panic: {:?}",
        log.take()
    );
    assert_eq!(log.take(), ["add p0 true", "add later false"]);
}

/// A subscriber that does not read while resyncs come due: its queue stays within its
/// buffer or the store's size (plus an event), instead of growing by the store's size every
/// period.
#[tokio::test(start_paused = true)]
async fn resyncs_respect_the_subscriber_queue_bound() {
    let backend = seeded(3).await;
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config()
            .subscriber_buffer(4)
            .resync_period(Duration::from_secs(1)),
    );
    informer.wait_until_synced().await.unwrap();
    let stuck = informer.subscribe();
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert!(
        stuck.queued() <= 4 + 3,
        "a subscriber that never reads holds {} deltas after 100 resync periods",
        stuck.queued()
    );
}

/// A resync period of `Duration::MAX` ("practically never") is a period, not a panic:
/// `now + period` overflowed `Instant` in the subscription (and killed the caller).
#[tokio::test(start_paused = true)]
async fn a_resync_period_of_duration_max_never_resyncs_and_does_not_panic() {
    let backend = seeded(2).await;
    let informer = Informer::spawn(
        StorageLw::new(backend.clone()),
        config().resync_period(Duration::MAX),
    );
    let log = Log::default();
    let _h = informer.add_handler_with_resync(log.clone(), Duration::MAX);
    let _s = informer.subscribe();
    informer.wait_until_synced().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || log.len() == 2).await);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(log.take().len(), 2, "the initial adds only, no resync");
}
