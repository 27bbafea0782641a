//! Unit tests of flow control: the levels with a paused clock, the watch and body limits,
//! and the seat core against a naive model.

use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn client(n: u8) -> ClientKey {
    ClientKey::address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

fn metrics() -> Metrics {
    Metrics::register(&mut prometheus_client::registry::Registry::default())
}

async fn seat(level: &Arc<Level>, key: &ClientKey, wait: Duration) -> Result<Seat, Rejection> {
    level.admit(key)?.seat(wait).await
}

#[test]
fn addresses_are_canonical_and_keys_print_readably() {
    let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
    assert_eq!(
        ClientKey::address(mapped),
        ClientKey::address(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
    );
    assert_eq!(ClientKey::Unidentified.to_string(), "unidentified");
}

#[tokio::test(start_paused = true)]
async fn a_freed_seat_goes_to_the_flow_holding_fewest_not_to_the_flooder() {
    let level = Level::new("readOnly", 2, 50, metrics());
    let (a, b) = (client(1), client(2));
    let s1 = seat(&level, &a, Duration::from_secs(15)).await.unwrap();
    let s2 = seat(&level, &a, Duration::from_secs(15)).await.unwrap();
    // The flooder queues first, then the other client.
    let a3 = tokio::spawn({
        let level = Arc::clone(&level);
        let a = a.clone();
        async move { seat(&level, &a, Duration::from_secs(15)).await }
    });
    tokio::task::yield_now().await;
    let b1 = tokio::spawn({
        let level = Arc::clone(&level);
        let b = b.clone();
        async move { seat(&level, &b, Duration::from_secs(15)).await }
    });
    tokio::task::yield_now().await;
    drop(s1);
    let b_seat = b1
        .await
        .unwrap()
        .expect("b is seated first: it holds no seat");
    assert!(!a3.is_finished(), "the flooder still waits");
    drop(s2);
    let a_seat = a3.await.unwrap().expect("then the flooder");
    drop((b_seat, a_seat));
    let st = lock(level.state.as_ref().unwrap());
    assert_eq!((st.core.in_use, st.core.queued), (0, 0));
    assert!(st.core.flows.is_empty() && st.waiters.is_empty());
}

#[tokio::test(start_paused = true)]
async fn waiting_past_the_limit_is_a_time_out_and_leaves_the_queue() {
    let level = Level::new("mutating", 1, 50, metrics());
    let a = client(1);
    let held = seat(&level, &a, Duration::from_secs(1)).await.unwrap();
    let started = tokio::time::Instant::now();
    let late = seat(&level, &client(2), Duration::from_secs(15)).await;
    assert_eq!(late.err(), Some(Rejection::TimeOut));
    assert_eq!(started.elapsed(), Duration::from_secs(15));
    drop(held);
    let st = lock(level.state.as_ref().unwrap());
    assert_eq!(
        (st.core.in_use, st.core.queued, st.core.flows.len()),
        (0, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_gives_its_place_or_its_seat_back() {
    let level = Level::new("readOnly", 1, 50, metrics());
    let held = seat(&level, &client(1), Duration::from_secs(1))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let level = Arc::clone(&level);
        async move { seat(&level, &client(2), Duration::from_secs(60)).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(lock(level.state.as_ref().unwrap()).core.queued, 1);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(lock(level.state.as_ref().unwrap()).core.queued, 0);
    drop(held);
    // The seat is free again for anyone.
    let again = seat(&level, &client(3), Duration::ZERO).await;
    assert!(again.is_ok());
}

#[tokio::test(start_paused = true)]
async fn one_flows_waiting_requests_are_capped_and_a_full_queue_drops_the_longest() {
    let level = Level::new("readOnly", 1, 3, metrics());
    let (a, b) = (client(1), client(2));
    let _held = seat(&level, &a, Duration::from_secs(1)).await.unwrap();
    let mut queued = Vec::new();
    for _ in 0..3 {
        let level = Arc::clone(&level);
        let a = a.clone();
        queued.push(tokio::spawn(async move {
            seat(&level, &a, Duration::from_secs(60)).await
        }));
        tokio::task::yield_now().await;
    }
    // Three waiting: a fourth of the same client is refused at arrival.
    assert_eq!(level.admit(&a).err(), Some(Rejection::QueueFull));
    // The queue (capacity 3) is full of a's requests; b displaces a's newest.
    let b_wait = tokio::spawn({
        let level = Arc::clone(&level);
        async move { seat(&level, &b, Duration::from_secs(60)).await }
    });
    tokio::task::yield_now().await;
    let newest = queued.pop().unwrap().await.unwrap();
    assert_eq!(newest.err(), Some(Rejection::QueueFull));
    assert!(!b_wait.is_finished());
}

#[test]
fn no_limit_means_no_accounting() {
    let level = Level::new("readOnly", 0, 1, metrics());
    let tickets: Vec<_> = (0..100).map(|_| level.admit(&client(1)).unwrap()).collect();
    assert_eq!(tickets.len(), 100);
    let watches = WatchLimits::new(0, 0, metrics());
    let slots: Vec<_> = (0..100)
        .map(|_| watches.try_open(&client(1)).unwrap())
        .collect();
    assert_eq!(slots.len(), 100);
    let mut hold = BodyBudget::new(0).hold();
    assert!(hold.take(usize::MAX).is_ok());
}

#[test]
fn watch_slots_are_capped_per_client_and_in_total() {
    let limits = WatchLimits::new(3, 2, metrics());
    let (a, b) = (client(1), client(2));
    let a1 = limits.try_open(&a).unwrap();
    let _a2 = limits.try_open(&a).unwrap();
    assert_eq!(
        limits.try_open(&a).err(),
        Some(Rejection::ClientConcurrencyLimit)
    );
    let _b1 = limits.try_open(&b).unwrap();
    assert_eq!(limits.try_open(&b).err(), Some(Rejection::ConcurrencyLimit));
    drop(a1);
    let b2 = limits.try_open(&b);
    assert!(b2.is_ok());
    assert_eq!(lock(&limits.count).open, 3);
    drop(b2);
    assert_eq!(lock(&limits.count).by_client.get(&b), Some(&1));
}

#[test]
fn past_half_of_the_slots_a_client_holds_at_most_what_is_still_free() {
    let limits = WatchLimits::new(100, 100, metrics());
    let open_all = |key: &ClientKey| {
        let mut held = Vec::new();
        let why = loop {
            match limits.try_open(key) {
                Ok(s) => held.push(s),
                Err(why) => break why,
            }
        };
        (held, why)
    };
    // The first client opens freely to 50, then while it holds no more than the free
    // slots: 51 (50 free at 50 open; at 51, 49 free).
    let (a, why) = open_all(&client(1));
    assert_eq!((a.len(), why), (51, Rejection::FairShare));
    // The next one: m ≤ 49 − m, so 25; then 13, 6, 3, 2 — each still gets a slot.
    let (b, _) = open_all(&client(2));
    assert_eq!(b.len(), 25);
    let mut got = vec![a.len(), b.len()];
    let mut kept = vec![a, b];
    for i in 3..20 {
        let (h, _) = open_all(&client(i));
        got.push(h.len());
        kept.push(h);
        if lock(&limits.count).open == 100 {
            break;
        }
    }
    assert_eq!(got, vec![51, 25, 13, 6, 3, 2]);
    assert_eq!(lock(&limits.count).open, 100);
    // A client at the top of the pool is refused as the pool's cap says.
    assert_eq!(
        limits.try_open(&client(99)).err(),
        Some(Rejection::ConcurrencyLimit)
    );
    // Slots freed by the big holder go to others first: it holds more than is free.
    kept[0].truncate(41);
    assert_eq!(
        limits.try_open(&client(1)).err(),
        Some(Rejection::FairShare)
    );
    assert!(limits.try_open(&client(50)).is_ok());
    // Without a per-client limit one client may take every slot.
    let unlimited = WatchLimits::new(10, 0, metrics());
    let all: Vec<_> = (0..10)
        .map(|_| unlimited.try_open(&client(1)).unwrap())
        .collect();
    assert_eq!(all.len(), 10);
}

#[test]
fn body_bytes_are_held_until_the_hold_drops() {
    let budget = BodyBudget::new(100);
    let mut a = budget.hold();
    a.take(60).unwrap();
    a.take(30).unwrap();
    assert_eq!(a.held(), 90);
    let mut b = budget.hold();
    assert_eq!(b.take(20), Err(Rejection::BodyMemory));
    drop(a);
    b.take(100).unwrap();
}

#[test]
fn queue_wait_is_a_quarter_of_the_deadline_at_most_a_minute() {
    assert_eq!(
        queue_wait_limit(Duration::from_secs(60)),
        Duration::from_secs(15)
    );
    assert_eq!(
        queue_wait_limit(Duration::from_secs(3600)),
        Duration::from_secs(60)
    );
}

// -----------------------------------------------------------------------------------
// The core against a naive model: every request in one list, every decision by scanning.
// -----------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Admitted,
    Queued,
    Seated,
}

#[derive(Debug)]
struct Req {
    id: u64,
    flow: u8,
    st: St,
    /// Order of entering the queue.
    queued_at: u64,
}

struct Model {
    seats: usize,
    cap: usize,
    per_flow: usize,
    reqs: Vec<Req>,
    clock: u64,
    last_served: HashMap<u8, u64>,
    dispatches: u64,
}

impl Model {
    fn count(&self, flow: Option<u8>, st: &[St]) -> usize {
        self.reqs
            .iter()
            .filter(|r| flow.is_none_or(|f| r.flow == f) && st.contains(&r.st))
            .count()
    }

    fn serve(&mut self, flow: u8) {
        self.dispatches += 1;
        self.last_served.insert(flow, self.dispatches);
    }

    fn forget(&mut self, flow: u8) {
        if self.count(Some(flow), &[St::Admitted, St::Queued, St::Seated]) == 0 {
            self.last_served.remove(&flow);
        }
    }

    fn admit(&mut self, flow: u8, id: u64) -> bool {
        if self.count(Some(flow), &[St::Admitted, St::Queued]) >= self.per_flow {
            return false;
        }
        self.reqs.push(Req {
            id,
            flow,
            st: St::Admitted,
            queued_at: 0,
        });
        true
    }

    fn request(&mut self, id: u64) -> (Outcome, Option<u64>) {
        let i = self.reqs.iter().position(|r| r.id == id).unwrap();
        let flow = self.reqs[i].flow;
        if self.count(None, &[St::Seated]) < self.seats {
            self.reqs[i].st = St::Seated;
            self.serve(flow);
            return (Outcome::Seated, None);
        }
        let mut evicted = None;
        if self.count(None, &[St::Queued]) >= self.cap {
            let mine = self.count(Some(flow), &[St::Queued]);
            let mut best: Option<(usize, usize, u64, u8)> = None;
            for f in self
                .reqs
                .iter()
                .map(|r| r.flow)
                .collect::<std::collections::BTreeSet<_>>()
            {
                let len = self.count(Some(f), &[St::Queued]);
                if f == flow || len <= mine + 1 {
                    continue;
                }
                let seated = self.count(Some(f), &[St::Seated]);
                // The newest queued request, by its id (as the core names it).
                let newest = self
                    .reqs
                    .iter()
                    .filter(|r| r.flow == f && r.st == St::Queued)
                    .max_by_key(|r| r.queued_at)
                    .map(|r| r.id)
                    .unwrap();
                let cand = (len, seated, newest, f);
                if best.is_none_or(|b| (cand.0, cand.1, cand.2) > (b.0, b.1, b.2)) {
                    best = Some(cand);
                }
            }
            let Some((_, _, newest, victim)) = best else {
                self.reqs.remove(i);
                self.forget(flow);
                return (Outcome::Rejected, None);
            };
            evicted = self.remove(newest).map(|r| r.id);
            self.forget(victim);
        }
        let i = self.reqs.iter().position(|r| r.id == id).unwrap();
        self.clock += 1;
        self.reqs[i].st = St::Queued;
        self.reqs[i].queued_at = self.clock;
        (Outcome::Queued { evicted }, evicted)
    }

    fn remove(&mut self, id: u64) -> Option<Req> {
        let i = self.reqs.iter().position(|r| r.id == id)?;
        Some(self.reqs.remove(i))
    }

    /// The seated request `id` ends.
    fn release(&mut self, id: u64) -> Option<u64> {
        let r = self.remove(id).unwrap();
        self.forget(r.flow);
        if self.count(None, &[St::Seated]) >= self.seats {
            return None;
        }
        // Fewest seats, then served least recently, then oldest head.
        let next =
            self.reqs
                .iter()
                .filter(|q| q.st == St::Queued)
                .filter(|q| {
                    !self.reqs.iter().any(|o| {
                        o.flow == q.flow && o.st == St::Queued && o.queued_at < q.queued_at
                    })
                })
                .min_by_key(|q| {
                    (
                        self.count(Some(q.flow), &[St::Seated]),
                        self.last_served.get(&q.flow).copied().unwrap_or(0),
                        q.id,
                    )
                })
                .map(|q| q.id)?;
        let i = self.reqs.iter().position(|r| r.id == next).unwrap();
        self.reqs[i].st = St::Seated;
        let flow = self.reqs[i].flow;
        self.serve(flow);
        Some(next)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Arrive(u8),
    /// Index into admitted-but-unqueued requests: ask for a seat.
    Request(usize),
    /// Index into admitted-but-unqueued requests: the body failed.
    Abandon(usize),
    /// Index into queued requests: give up.
    Withdraw(usize),
    /// Index into seated requests: end.
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4).prop_map(Op::Arrive),
        3 => any::<usize>().prop_map(Op::Request),
        1 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::Withdraw),
        3 => any::<usize>().prop_map(Op::Finish),
    ]
}

fn pick(m: &Model, st: St, i: usize) -> Option<(u64, u8)> {
    let v: Vec<_> = m.reqs.iter().filter(|r| r.st == st).collect();
    (!v.is_empty()).then(|| (v[i % v.len()].id, v[i % v.len()].flow))
}

/// Runs the core and the model side by side on random operation sequences; returns how
/// often each outcome of asking for a seat and of freeing one happened over all cases.
#[test]
fn core_decides_like_the_naive_model() {
    use std::cell::Cell;
    let hits = [
        Cell::new(0usize), // seated
        Cell::new(0),      // queued
        Cell::new(0),      // queued, evicting another flow's newest
        Cell::new(0),      // rejected
        Cell::new(0),      // a freed seat passed to a waiter
        Cell::new(0),      // refused at arrival
    ];
    let strategy = (
        1usize..4,
        1usize..5,
        proptest::collection::vec(op(), 1..200),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
    let result = runner.run(&strategy, |(seats, per_flow, ops)| {
        let mut core = Core::new(seats, per_flow);
        let mut model = Model {
            seats,
            cap: core.queue_capacity,
            per_flow,
            reqs: Vec::new(),
            clock: 0,
            last_served: HashMap::new(),
            dispatches: 0,
        };
        let key = client;
        let bump = |i: usize| hits[i].set(hits[i].get() + 1);
        let mut next_id = 0u64;
        for op in ops {
            match op {
                Op::Arrive(f) => {
                    next_id += 1;
                    let admitted = core.admit(&key(f));
                    prop_assert_eq!(admitted, model.admit(f, next_id));
                    if !admitted {
                        bump(5);
                    }
                }
                Op::Request(i) => {
                    let Some((id, f)) = pick(&model, St::Admitted, i) else {
                        continue;
                    };
                    let (want, _) = model.request(id);
                    let got = core.request_seat(&key(f), id);
                    prop_assert_eq!(got, want);
                    bump(match got {
                        Outcome::Seated => 0,
                        Outcome::Queued { evicted: None } => 1,
                        Outcome::Queued { evicted: Some(_) } => 2,
                        Outcome::Rejected => 3,
                    });
                }
                Op::Abandon(i) => {
                    let Some((id, f)) = pick(&model, St::Admitted, i) else {
                        continue;
                    };
                    model.remove(id);
                    model.forget(f);
                    core.abandon(&key(f));
                }
                Op::Withdraw(i) => {
                    let Some((id, f)) = pick(&model, St::Queued, i) else {
                        continue;
                    };
                    model.remove(id);
                    model.forget(f);
                    prop_assert!(core.withdraw(&key(f), id));
                }
                Op::Finish(i) => {
                    let Some((id, f)) = pick(&model, St::Seated, i) else {
                        continue;
                    };
                    let want = model.release(id);
                    let got = core.release(&key(f)).map(|(_, id)| id);
                    prop_assert_eq!(got, want);
                    if got.is_some() {
                        bump(4);
                    }
                }
            }
            prop_assert_eq!(core.in_use, model.count(None, &[St::Seated]));
            prop_assert_eq!(core.queued, model.count(None, &[St::Queued]));
            prop_assert!(core.in_use <= seats && core.queued <= core.queue_capacity);
            prop_assert!(core.queued == 0 || core.in_use == seats, "work conserving");
            for (k, f) in &core.flows {
                prop_assert!(f.in_use > 0 || f.waiting > 0, "idle flow kept: {}", k);
                prop_assert!(f.queue.len() <= f.waiting && f.waiting <= per_flow);
            }
            prop_assert_eq!(
                core.flows.values().map(|f| f.in_use).sum::<usize>(),
                core.in_use
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let hits: Vec<usize> = hits.iter().map(Cell::get).collect();
    assert!(
        hits.iter().all(|n| *n > 0),
        "every branch reached: {hits:?}"
    );
}

#[test]
fn a_full_queue_takes_room_from_the_longest_and_refuses_equals() {
    let mut core = Core::new(1, 3);
    let (a, b, c) = (client(1), client(2), client(3));
    for _ in 0..3 {
        assert!(core.admit(&a));
    }
    assert!(!core.admit(&a), "three waiting is the cap");
    assert!(core.admit(&b) && core.admit(&c) && core.admit(&c));
    assert_eq!(core.request_seat(&a, 1), Outcome::Seated);
    assert!(core.admit(&a));
    assert_eq!(core.request_seat(&a, 2), Outcome::Queued { evicted: None });
    assert_eq!(core.request_seat(&a, 3), Outcome::Queued { evicted: None });
    assert_eq!(core.request_seat(&a, 4), Outcome::Queued { evicted: None });
    // Full (capacity 3): b takes a's newest place, c then a's next.
    assert_eq!(
        core.request_seat(&b, 5),
        Outcome::Queued { evicted: Some(4) }
    );
    assert_eq!(
        core.request_seat(&c, 6),
        Outcome::Queued { evicted: Some(3) }
    );
    // Every queue has one: nobody is longer than c's would be.
    assert_eq!(core.request_seat(&c, 7), Outcome::Rejected);
    // The seat goes to a flow holding none, served least recently, oldest first.
    assert_eq!(core.release(&a), Some((b.clone(), 5)));
    assert_eq!(core.release(&b), Some((c.clone(), 6)));
    assert_eq!(core.release(&c), Some((a.clone(), 2)));
}
