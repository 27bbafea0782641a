//! The elector against an in-memory lock on a paused clock: which candidate leads, when the
//! work of each starts and stops (recorded by the work itself), and what the record says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use listwatch_api::Status;

use super::*;

/// One Lease in memory; a candidate's view of it can be cut off (its calls hang).
#[derive(Default)]
struct Shared {
    lease: Mutex<Option<(LeaseRecord, u64)>>,
    writes: Mutex<u64>,
}

#[derive(Clone)]
struct MemLock {
    shared: Arc<Shared>,
    cut: Arc<AtomicBool>,
}

impl MemLock {
    fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: Arc::clone(shared),
            cut: Arc::default(),
        }
    }

    async fn reachable(&self) {
        if self.cut.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    fn state(&self) -> Option<LeaseState> {
        self.shared
            .lease
            .lock()
            .unwrap()
            .as_ref()
            .map(|(r, v)| LeaseState {
                record: r.clone(),
                resource_version: v.to_string(),
            })
    }

    fn write(&self, record: &LeaseRecord) -> LeaseState {
        let mut n = self.shared.writes.lock().unwrap();
        *n += 1;
        *self.shared.lease.lock().unwrap() = Some((record.clone(), *n));
        LeaseState {
            record: record.clone(),
            resource_version: n.to_string(),
        }
    }
}

fn conflict() -> Error {
    Error::api(Status::failure(
        409,
        "Conflict",
        "the object has been modified",
    ))
}

#[async_trait]
impl LeaseLock for MemLock {
    async fn get(&self) -> Result<Option<LeaseState>> {
        self.reachable().await;
        Ok(self.state())
    }

    async fn create(&self, record: &LeaseRecord) -> Result<LeaseState> {
        self.reachable().await;
        if self.state().is_some() {
            return Err(Error::api(Status::failure(409, "AlreadyExists", "exists")));
        }
        Ok(self.write(record))
    }

    async fn update(&self, record: &LeaseRecord, resource_version: &str) -> Result<LeaseState> {
        self.reachable().await;
        match self.state() {
            Some(s) if s.resource_version == resource_version => Ok(self.write(record)),
            _ => Err(conflict()),
        }
    }

    fn describe(&self) -> String {
        "kube-system/test".into()
    }
}

/// (when, who, started?) for every start and stop of a candidate's work.
type Log = Arc<Mutex<Vec<(Instant, &'static str, bool)>>>;

/// Records the work's stop when dropped.
struct Stopped(Log, &'static str);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.lock().unwrap().push((Instant::now(), self.1, false));
    }
}

struct Candidate {
    lock: MemLock,
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
    leading: watch::Receiver<bool>,
}

fn candidate(shared: &Arc<Shared>, id: &'static str, log: &Log) -> Candidate {
    let lock = MemLock::new(shared);
    let elector = LeaderElector::new(lock.clone(), LeaderElectionConfig::new(id)).unwrap();
    let leading = elector.leading();
    let stop = Arc::new(tokio::sync::Notify::new());
    let log = Arc::clone(log);
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        elector
            .run(
                || {
                    let log = Arc::clone(&log);
                    async move {
                        log.lock().unwrap().push((Instant::now(), id, true));
                        let _guard = Stopped(log, id);
                        std::future::pending::<()>().await;
                    }
                },
                async move { stopped.notified().await },
            )
            .await;
    });
    Candidate {
        lock,
        stop,
        task,
        leading,
    }
}

async fn until_leading(c: &mut Candidate) {
    c.leading.wait_for(|l| *l).await.unwrap();
}

/// Checks the log never has two works running at once; returns the starts in order.
fn starts_without_overlap(log: &Log) -> Vec<(Instant, &'static str)> {
    let log = log.lock().unwrap();
    let mut running: Option<&'static str> = None;
    let mut starts = Vec::new();
    for (at, who, started) in log.iter() {
        if *started {
            assert!(
                running.is_none(),
                "{who} started while {running:?} ran: {log:?}"
            );
            running = Some(who);
            starts.push((*at, *who));
        } else {
            assert_eq!(running, Some(*who), "{log:?}");
            running = None;
        }
    }
    starts
}

#[tokio::test(start_paused = true)]
async fn one_of_two_candidates_leads_and_renews() {
    let shared = Arc::new(Shared::default());
    let log: Log = Arc::default();
    let mut a = candidate(&shared, "a", &log);
    until_leading(&mut a).await;
    let b = candidate(&shared, "b", &log);
    // A minute of renewals: b never leads, a never stops.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!*b.leading.borrow());
    let starts = starts_without_overlap(&log);
    assert_eq!(starts.iter().map(|s| s.1).collect::<Vec<_>>(), ["a"]);
    let rec = a.lock.state().unwrap().record;
    assert_eq!(rec.holder_identity, "a");
    assert_eq!(rec.lease_duration_seconds, 15);
    assert_eq!(rec.lease_transitions, 0);
    assert!(rec.renew_time > rec.acquire_time, "{rec:?}");
    // ~30 renewals (every 2 s) and b's reads, never a write of b's.
    assert!(*shared.writes.lock().unwrap() >= 25);
}

/// Two candidates given the same identity (a misconfiguration): the second sees a record
/// naming its identity that it did not write, treats it as another holder's, and never
/// leads while the first renews. Before, it took the record for its own and both led.
#[tokio::test(start_paused = true)]
async fn two_candidates_with_the_same_identity_never_both_lead() {
    let shared = Arc::new(Shared::default());
    let log: Log = Arc::default();
    let mut a = candidate(&shared, "same", &log);
    until_leading(&mut a).await;
    let b = candidate(&shared, "same", &log);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(*a.leading.borrow());
    assert!(!*b.leading.borrow());
    let starts = starts_without_overlap(&log);
    assert_eq!(starts.len(), 1, "{starts:?}");
}

/// The leader is cut off from the Lease (its calls hang): it stops its work at its renew
/// deadline, and the other candidate starts only after that, once the record it saw has
/// been unchanged for the lease duration.
#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_stops_before_another_takes_over() {
    let shared = Arc::new(Shared::default());
    let log: Log = Arc::default();
    let mut a = candidate(&shared, "a", &log);
    until_leading(&mut a).await;
    let mut b = candidate(&shared, "b", &log);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let cut_at = Instant::now();
    a.lock.cut.store(true, Ordering::SeqCst);
    until_leading(&mut b).await;
    let log_now = log.lock().unwrap().clone();
    let starts = starts_without_overlap(&log);
    assert_eq!(starts.iter().map(|s| s.1).collect::<Vec<_>>(), ["a", "b"]);
    let a_stopped = log_now
        .iter()
        .find(|(_, who, started)| *who == "a" && !started)
        .unwrap()
        .0;
    // a stopped within its renew deadline of the cut, b started after a's last write had
    // been seen unchanged for the lease duration (plus at most one jittered retry).
    assert!(a_stopped <= cut_at + DEFAULT_RENEW_DEADLINE, "{log_now:?}");
    let b_started = starts[1].0;
    assert!(
        b_started
            >= a_stopped + (DEFAULT_LEASE_DURATION - DEFAULT_RENEW_DEADLINE) - DEFAULT_RETRY_PERIOD
    );
    // b first sees a's last write at its next try, and takes over at its first try after
    // that record has stood for the lease duration.
    let try_gap = DEFAULT_RETRY_PERIOD.mul_f64(1.0 + JITTER);
    assert!(b_started <= cut_at + try_gap + DEFAULT_LEASE_DURATION + try_gap);
    let rec = b.lock.state().unwrap().record;
    assert_eq!(rec.holder_identity, "b");
    assert_eq!(rec.lease_transitions, 1);
    assert_eq!(rec.acquire_time, rec.renew_time);
    // a comes back: it sees b's lease and stays a candidate.
    a.lock.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!*a.leading.borrow());
    assert_eq!(starts_without_overlap(&log).len(), 2);
}

/// A leader that sees another holder in the record stops at once.
#[tokio::test(start_paused = true)]
async fn a_leader_that_sees_another_holder_stops_at_once() {
    let shared = Arc::new(Shared::default());
    let log: Log = Arc::default();
    let mut a = candidate(&shared, "a", &log);
    until_leading(&mut a).await;
    let taken = Instant::now();
    let mut rec = a.lock.state().unwrap().record;
    rec.holder_identity = "intruder".into();
    a.lock.write(&rec);
    a.leading.wait_for(|l| !*l).await.unwrap();
    assert!(Instant::now() <= taken + DEFAULT_RETRY_PERIOD);
}

/// A leader shut down releases the lease: the other candidate takes over at its next try,
/// not a lease duration later.
#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_the_next_try() {
    let shared = Arc::new(Shared::default());
    let log: Log = Arc::default();
    let mut a = candidate(&shared, "a", &log);
    until_leading(&mut a).await;
    let mut b = candidate(&shared, "b", &log);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stopped_at = Instant::now();
    a.stop.notify_one();
    a.task.await.unwrap();
    assert_eq!(a.lock.state().unwrap().record.holder_identity, "");
    until_leading(&mut b).await;
    assert!(Instant::now() <= stopped_at + DEFAULT_RETRY_PERIOD.mul_f64(1.0 + JITTER));
    starts_without_overlap(&log);
    assert_eq!(b.lock.state().unwrap().record.lease_transitions, 1);
    b.stop.notify_one();
    b.task.await.unwrap();
}

#[test]
fn configs_that_break_the_invariants_are_refused() {
    let ok = LeaderElectionConfig::new("x");
    assert!(ok.validate().is_ok());
    for bad in [
        LeaderElectionConfig {
            identity: String::new(),
            ..ok.clone()
        },
        LeaderElectionConfig {
            renew_deadline: Duration::from_secs(15),
            ..ok.clone()
        },
        // 15.9 s is written as 15: not longer than a 15 s deadline.
        LeaderElectionConfig {
            lease_duration: Duration::from_millis(15_900),
            renew_deadline: Duration::from_secs(15),
            ..ok.clone()
        },
        LeaderElectionConfig {
            retry_period: Duration::from_secs(9),
            ..ok.clone()
        },
        LeaderElectionConfig {
            retry_period: Duration::ZERO,
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn records_round_trip_through_a_lease_spec() {
    let rec = LeaseRecord {
        holder_identity: "h_1".into(),
        lease_duration_seconds: 15,
        acquire_time: Some("2026-12-01T10:00:00.000001Z".into()),
        renew_time: Some("2026-12-01T10:00:02.500000Z".into()),
        lease_transitions: 3,
    };
    assert_eq!(LeaseRecord::from_spec(&rec.to_spec()), rec);
    let released = LeaseRecord::default().to_spec();
    assert!(released.get("holderIdentity").is_none(), "{released}");
    // Hostile values read as empty, never panic.
    let odd = LeaseRecord::from_spec(&json!({"leaseDurationSeconds": 1e30, "holderIdentity": 7}));
    assert_eq!(odd, LeaseRecord::default());
    assert_eq!(
        odd.duration(Duration::from_secs(15)),
        Duration::from_secs(15)
    );
    let huge = LeaseRecord {
        lease_duration_seconds: i32::MAX,
        ..LeaseRecord::default()
    };
    assert_eq!(huge.duration(Duration::from_secs(15)), MAX_RECORD_DURATION);
    let t = micro_time_now();
    assert_eq!(t.len(), "2026-12-01T10:00:00.000000Z".len(), "{t}");
}

/// A leader losing its lease mid-reconcile drops its work; the controller's key it was
/// reconciling is handed back, so after re-election it is reconciled again.
#[tokio::test(start_paused = true)]
async fn after_re_election_a_key_cancelled_mid_reconcile_is_reconciled_again() {
    use crate::{Action, Controller, ObjectKey};
    let shared = Arc::new(Shared::default());
    let lock = MemLock::new(&shared);
    let elector = LeaderElector::new(lock.clone(), LeaderElectionConfig::new("a")).unwrap();
    let mut leading = elector.leading();
    let controller = Controller::default();
    controller.queue().add(ObjectKey::new(Some("ns"), "k"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
    let term = Arc::new(Mutex::new(0u32));
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        elector
            .run(
                || {
                    let tx = tx.clone();
                    let term = {
                        let mut t = term.lock().unwrap();
                        *t += 1;
                        *t
                    };
                    let c = controller.clone();
                    async move {
                        c.run(
                            1,
                            move |key: ObjectKey| {
                                let tx = tx.clone();
                                async move {
                                    tx.send((term, key.as_str().to_owned())).ok();
                                    if term == 1 {
                                        // The first term's reconcile outlives the lease.
                                        std::future::pending::<()>().await;
                                    }
                                    Ok::<_, String>(Action::Done)
                                }
                            },
                            std::future::pending::<()>(),
                            Duration::from_secs(5),
                        )
                        .await;
                    }
                },
                async move { stopped.notified().await },
            )
            .await;
    });
    leading.wait_for(|l| *l).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    assert_eq!(first.ok().flatten(), Some((1, "ns/k".to_owned())));
    // Another holder takes the lease, then releases it: "a" stops, then leads again.
    let mut rec = lock.state().unwrap().record;
    rec.holder_identity = "intruder".into();
    lock.write(&rec);
    leading.wait_for(|l| !*l).await.unwrap();
    rec.holder_identity = String::new();
    lock.write(&rec);
    leading.wait_for(|l| *l).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    assert_eq!(
        second.ok().flatten(),
        Some((2, "ns/k".to_owned())),
        "the key cancelled with the lost lease was not reconciled after re-election"
    );
    stop.notify_one();
    task.await.unwrap();
}

/// A controller run with its store under the elector: each term (the first, and the one
/// after a lost lease) reconciles every object of the store again.
#[tokio::test(start_paused = true)]
async fn each_term_reconciles_every_object_again() {
    use crate::reflector::Event;
    use crate::{Action, Controller, ObjectKey};
    use listwatch_api::{Object, SelectableFields};

    let mut writer = crate::store::Writer::<Object>::default();
    let store = writer.store();
    writer.apply(Event::Init);
    for name in ["a", "b"] {
        let o = Object::from_json(
            format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"3"}}}}"#)
                .as_bytes(),
            &SelectableFields::none(),
        )
        .unwrap();
        writer.apply(Event::InitApply(o));
    }
    writer.apply(Event::InitDone {
        resource_version: "3".into(),
    });
    let shared = Arc::new(Shared::default());
    let lock = MemLock::new(&shared);
    let elector = LeaderElector::new(lock.clone(), LeaderElectionConfig::new("a")).unwrap();
    let mut leading = elector.leading();
    let controller = Controller::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
    let term = Arc::new(Mutex::new(0u32));
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        elector
            .run(
                || {
                    let tx = tx.clone();
                    let term = {
                        let mut t = term.lock().unwrap();
                        *t += 1;
                        *t
                    };
                    let c = controller.clone();
                    let store = store.clone();
                    async move {
                        c.run_with_objects(
                            store,
                            1,
                            move |key: ObjectKey, _object: Option<Arc<Object>>| {
                                tx.send((term, key.as_str().to_owned())).ok();
                                async { Ok::<_, String>(Action::Done) }
                            },
                            std::future::pending::<()>(),
                            Duration::from_secs(5),
                        )
                        .await;
                    }
                },
                async move { stopped.notified().await },
            )
            .await;
    });
    let take_two = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<(u32, String)>| {
        let mut got = Vec::new();
        for _ in 0..2 {
            match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
                Ok(Some(item)) => got.push(item),
                _ => break,
            }
        }
        got.sort();
        got
    };
    leading.wait_for(|l| *l).await.unwrap();
    assert_eq!(
        take_two(&mut rx).await,
        [(1, "ns/a".to_owned()), (1, "ns/b".to_owned())]
    );
    let mut rec = lock.state().unwrap().record;
    rec.holder_identity = "intruder".into();
    lock.write(&rec);
    leading.wait_for(|l| !*l).await.unwrap();
    rec.holder_identity = String::new();
    lock.write(&rec);
    leading.wait_for(|l| *l).await.unwrap();
    assert_eq!(
        take_two(&mut rx).await,
        [(2, "ns/a".to_owned()), (2, "ns/b".to_owned())],
        "the second term did not reconcile every object"
    );
    stop.notify_one();
    task.await.unwrap();
}
