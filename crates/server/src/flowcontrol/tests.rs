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
    // Four seats: a flow holds at most two; a and c hold them all.
    let level = Level::new("readOnly", 4, 50, metrics());
    let (a, b, c) = (client(1), client(2), client(3));
    let s1 = seat(&level, &a, Duration::from_secs(15)).await.unwrap();
    let s2 = seat(&level, &a, Duration::from_secs(15)).await.unwrap();
    let c_seats = [
        seat(&level, &c, Duration::ZERO).await.unwrap(),
        seat(&level, &c, Duration::ZERO).await.unwrap(),
    ];
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
    drop((b_seat, a_seat, c_seats));
    let st = lock(level.state.as_ref().unwrap());
    assert_eq!((st.core.in_use, st.core.queued), (0, 0));
    assert!(st.core.flows.is_empty() && st.waiters.is_empty());
}

/// The seats a level holds and the requests it queues, as its metrics show them.
fn seats_and_queue(level: &Level) -> (usize, usize) {
    let st = lock(level.state.as_ref().unwrap());
    let (in_use, queued) = (st.core.in_use, st.core.queued);
    assert_eq!(level.gauges.executing_seats.get(), in_use as i64);
    assert_eq!(level.gauges.inqueue.get(), queued as i64);
    (in_use, queued)
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_wide_lists_holds_at_most_half_the_level_and_other_flows_are_served_at_once() {
    // 100 seats: one request takes at most 15, one flow holds at most 50; a large list from
    // the cache asks for 10.
    let level = Level::new("readOnly", 100, 50, metrics());
    assert_eq!(flow_cap(100), 50);
    let (lister, getter, other) = (client(1), client(2), client(3));
    let list_width = estimate::list_seats(&estimate::ListWork {
        stats: Some((1_000, 4_000)),
        from_cache: true,
        ..Default::default()
    });
    assert_eq!(list_width, 10);
    let list = |who: &ClientKey| {
        let level = Arc::clone(&level);
        let who = who.clone();
        tokio::spawn(async move {
            level
                .admit(&who)?
                .width(list_width)
                .seat(Duration::from_secs(60))
                .await
        })
    };
    let mut lists = Vec::new();
    for _ in 0..12 {
        lists.push(list(&lister));
        tokio::task::yield_now().await;
    }
    // Five lists hold the lister's half; seven wait although fifty seats are free.
    assert_eq!(seats_and_queue(&level), (50, 7));
    let mut running = Vec::new();
    for l in lists.drain(..5) {
        running.push(l.await.unwrap().unwrap());
    }
    assert!(running.iter().all(|s| s.width() == 10));
    // Another client's GET and lists are seated at once, past the lister's queue.
    let get = seat(&level, &getter, Duration::ZERO)
        .await
        .expect("the GET is served at once");
    assert_eq!(get.width(), 1);
    let others: Vec<Seat> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(list(&other).await.unwrap().expect("another flow's list"));
        }
        v
    };
    assert_eq!(seats_and_queue(&level), (91, 7));
    // A freed list of the lister's: its next list takes its place.
    drop(running.pop());
    let sixth = lists.remove(0).await.unwrap().unwrap();
    assert_eq!(seats_and_queue(&level), (91, 6));
    drop((get, others, sixth, running));
    for l in lists {
        drop(l.await.unwrap().unwrap());
    }
    assert_eq!(seats_and_queue(&level), (0, 0));
    let st = lock(level.state.as_ref().unwrap());
    assert!(st.core.flows.is_empty() && st.waiters.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_wide_request_in_line_gets_its_seats_when_a_narrower_one_behind_it_gives_up() {
    let level = Level::new("readOnly", 20, 50, metrics());
    assert_eq!(Core::new(20, 50).max_width, 3);
    let (a, b, c) = (client(1), client(2), client(3));
    let mut held = Vec::new();
    // a holds its cap (10), c eight.
    for who in [&a, &c] {
        for _ in 0..(if *who == a { 10 } else { 8 }) {
            held.push(seat(&level, who, Duration::ZERO).await.unwrap());
        }
    }
    // b asks for 3 (2 free): in line. A narrower request of c queues behind it.
    let wide = tokio::spawn({
        let level = Arc::clone(&level);
        async move {
            level
                .admit(&b)?
                .width(50)
                .seat(Duration::from_secs(60))
                .await
        }
    });
    tokio::task::yield_now().await;
    let narrow = level.admit(&c).unwrap().seat(Duration::from_secs(5));
    assert_eq!(narrow.await.err(), Some(Rejection::TimeOut));
    assert_eq!(seats_and_queue(&level), (18, 1));
    drop(held.pop());
    let wide = wide.await.unwrap().unwrap();
    assert_eq!(wide.width(), 3, "capped at the level's maximum");
    assert_eq!(seats_and_queue(&level), (20, 0));
}

#[tokio::test(start_paused = true)]
async fn an_exempt_request_is_seated_when_its_level_is_full() {
    let mut registry = prometheus_client::registry::Registry::default();
    let m = Metrics::register(&mut registry);
    let executing = |level: &str| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let series = format!(
            "apiserver_flowcontrol_current_executing_requests{{priority_level=\"{level}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.parse::<i64>().ok())
            .unwrap()
    };
    let limits = Limits {
        max_requests_inflight: 1,
        max_mutating_requests_inflight: 1,
        max_watches: 1,
        max_watches_per_client: 1,
        max_queued_requests_per_client: 1,
        max_buffered_body_bytes: 1,
    };
    let flow = FlowControl::new(&limits, &m);
    let held = seat(flow.level(false, false), &client(1), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        seat(flow.level(false, false), &client(2), Duration::ZERO)
            .await
            .err(),
        Some(Rejection::TimeOut)
    );
    // The same client, exempt, reading and writing: seated at once, holding no seat.
    let mut exempt = Vec::new();
    for mutating in [false, true, false] {
        let s = seat(flow.level(mutating, true), &client(2), Duration::ZERO)
            .await
            .expect("exempt");
        assert_eq!(s.width(), 0);
        exempt.push(s);
    }
    assert_eq!(seats_and_queue(&flow.read_only), (1, 0));
    assert_eq!((executing("exempt"), executing("readOnly")), (3, 1));
    drop((held, exempt));
    assert_eq!((executing("exempt"), executing("readOnly")), (0, 0));
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
    /// Seats asked for (as the level counts them) once it asks.
    width: usize,
    /// Order of entering the queue.
    queued_at: u64,
}

struct Model {
    seats: usize,
    cap: usize,
    /// The most seats one flow holds.
    flow_cap: usize,
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

    /// Seats held, by one flow or by all.
    fn held(&self, flow: Option<u8>) -> usize {
        self.reqs
            .iter()
            .filter(|r| flow.is_none_or(|f| r.flow == f) && r.st == St::Seated)
            .map(|r| r.width)
            .sum()
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
            width: 0,
            queued_at: 0,
        });
        true
    }

    /// The queue heads, each flow's oldest queued request.
    fn heads(&self) -> Vec<&Req> {
        self.reqs
            .iter()
            .filter(|q| q.st == St::Queued)
            .filter(|q| {
                !self
                    .reqs
                    .iter()
                    .any(|o| o.flow == q.flow && o.st == St::Queued && o.queued_at < q.queued_at)
            })
            .collect()
    }

    /// The heads dispatch may take: their flow stays within its cap.
    fn eligible_heads(&self) -> Vec<&Req> {
        self.heads()
            .into_iter()
            .filter(|h| self.held(Some(h.flow)) + h.width <= self.flow_cap)
            .collect()
    }

    /// Fewest seats held, then served least recently, then oldest head.
    fn rank(&self, flow: u8, id: u64) -> (usize, u64, u64) {
        (
            self.held(Some(flow)),
            self.last_served.get(&flow).copied().unwrap_or(0),
            id,
        )
    }

    fn request(&mut self, id: u64, width: usize) -> (Outcome, Option<u64>) {
        let i = self.reqs.iter().position(|r| r.id == id).unwrap();
        let flow = self.reqs[i].flow;
        self.reqs[i].width = width;
        let mine = self.count(Some(flow), &[St::Queued]);
        if mine == 0
            && self.held(None) + width <= self.seats
            && self.held(Some(flow)) + width <= self.flow_cap
        {
            let my_rank = self.rank(flow, id);
            if self
                .eligible_heads()
                .iter()
                .all(|h| self.rank(h.flow, h.id) > my_rank)
            {
                self.reqs[i].st = St::Seated;
                self.serve(flow);
                return (Outcome::Seated, None);
            }
        }
        let mut evicted = None;
        if self.count(None, &[St::Queued]) >= self.cap {
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
                let seated = self.held(Some(f));
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

    /// Seats the heads in rank order while the one in line fits.
    fn dispatch(&mut self) -> Vec<u64> {
        let mut seated = Vec::new();
        while let Some((id, flow, width)) = self
            .eligible_heads()
            .iter()
            .min_by_key(|h| self.rank(h.flow, h.id))
            .map(|h| (h.id, h.flow, h.width))
        {
            if self.held(None) + width > self.seats {
                break;
            }
            let i = self.reqs.iter().position(|r| r.id == id).unwrap();
            self.reqs[i].st = St::Seated;
            self.serve(flow);
            seated.push(id);
        }
        seated
    }

    /// The seated request `id` ends.
    fn release(&mut self, id: u64) -> Vec<u64> {
        let r = self.remove(id).unwrap();
        self.forget(r.flow);
        self.dispatch()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Arrive(u8),
    /// Index into admitted-but-unqueued requests: ask for seats (a width, before the cap).
    Request(usize, usize),
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
        3 => (any::<usize>(), prop_oneof![3 => Just(1usize), 1 => 1usize..8]).prop_map(|(i, w)| Op::Request(i, w)),
        1 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::Withdraw),
        3 => any::<usize>().prop_map(Op::Finish),
    ]
}

fn pick(m: &Model, st: St, i: usize) -> Option<(u64, u8)> {
    let v: Vec<_> = m.reqs.iter().filter(|r| r.st == st).collect();
    (!v.is_empty()).then(|| (v[i % v.len()].id, v[i % v.len()].flow))
}

/// Runs the core and the model side by side on random operation sequences (levels of 1 to
/// 23 seats, so that some allow wide requests); returns how often each outcome of asking
/// for seats and of freeing them happened over all cases.
#[test]
fn core_decides_like_the_naive_model() {
    use std::cell::Cell;
    let hits = [
        Cell::new(0usize), // seated
        Cell::new(0),      // queued
        Cell::new(0),      // queued, evicting another flow's newest
        Cell::new(0),      // rejected
        Cell::new(0),      // freed seats passed to a waiter
        Cell::new(0),      // refused at arrival
        Cell::new(0),      // a wide request seated
        Cell::new(0),      // freed seats passed to several waiters at once
    ];
    let strategy = (
        prop_oneof![1usize..4, 12usize..24],
        1usize..5,
        proptest::collection::vec(op(), 1..200),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
    let result = runner.run(&strategy, |(seats, per_flow, ops)| {
        let mut core = Core::new(seats, per_flow);
        let mut model = Model {
            seats,
            cap: core.queue_capacity,
            flow_cap: flow_cap(seats),
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
                Op::Request(i, asked) => {
                    let Some((id, f)) = pick(&model, St::Admitted, i) else {
                        continue;
                    };
                    let width = core.width(asked);
                    prop_assert!(width >= 1 && width <= estimate::max_width(seats));
                    let (want, _) = model.request(id, width);
                    let got = core.request_seat(&key(f), id, width);
                    prop_assert_eq!(got, want);
                    bump(match got {
                        Outcome::Seated if width > 1 => 6,
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
                    let want = model.dispatch();
                    let got: Vec<u64> = core.dispatch().into_iter().map(|(_, id, _)| id).collect();
                    prop_assert_eq!(got, want);
                }
                Op::Finish(i) => {
                    let Some((id, f)) = pick(&model, St::Seated, i) else {
                        continue;
                    };
                    let width = model.reqs.iter().find(|r| r.id == id).unwrap().width;
                    let want = model.release(id);
                    let got: Vec<u64> = core
                        .release(&key(f), width)
                        .into_iter()
                        .map(|(_, id, _)| id)
                        .collect();
                    prop_assert_eq!(&got, &want);
                    if !got.is_empty() {
                        bump(if got.len() > 1 { 7 } else { 4 });
                    }
                }
            }
            prop_assert_eq!(core.in_use, model.held(None));
            prop_assert_eq!(core.queued, model.count(None, &[St::Queued]));
            prop_assert!(core.in_use <= seats && core.queued <= core.queue_capacity);
            // Work conserving up to width and the flows' caps: whoever is in line does not
            // fit, and every other queue head would take its flow past its cap.
            match core.next_in_line() {
                Some((_, _, width)) => {
                    prop_assert!(core.in_use + width > seats, "a request in line fits");
                }
                None => {
                    for f in core.flows.values() {
                        if let Some(&(_, w)) = f.queue.front() {
                            prop_assert!(!core.within_cap(f.in_use, w), "a head is left out");
                        }
                    }
                }
            }
            for (k, f) in &core.flows {
                prop_assert!(f.in_use > 0 || f.waiting > 0, "idle flow kept: {}", k);
                prop_assert!(f.in_use <= flow_cap(seats), "{} past its cap", k);
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
    // Several waiters seated by one release is rare at random; the next test makes it.
    assert!(
        hits[..7].iter().all(|n| *n > 0),
        "every branch reached: {hits:?}"
    );
}

#[test]
fn freeing_a_wide_requests_seats_seats_every_waiter_that_then_fits() {
    let mut core = Core::new(20, 50);
    let (a, b, c, d) = (client(1), client(2), client(3), client(4));
    assert!(core.admit(&a));
    assert_eq!(core.request_seat(&a, 1, 3), Outcome::Seated);
    let e = client(5);
    for id in 2..19 {
        // b takes its cap (10 of 20), e the rest.
        let who = if id < 12 { &b } else { &e };
        assert!(core.admit(who));
        assert_eq!(core.request_seat(who, id, 1), Outcome::Seated);
    }
    assert!(core.admit(&c) && core.admit(&d));
    assert_eq!(
        core.request_seat(&c, 30, 1),
        Outcome::Queued { evicted: None }
    );
    assert_eq!(
        core.request_seat(&d, 31, 1),
        Outcome::Queued { evicted: None }
    );
    assert_eq!(
        core.release(&a, 3),
        vec![(c.clone(), 30, 1), (d.clone(), 31, 1)]
    );
    assert_eq!((core.in_use, core.queued), (19, 0));
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
    assert_eq!(core.request_seat(&a, 1, 1), Outcome::Seated);
    assert!(core.admit(&a));
    assert_eq!(
        core.request_seat(&a, 2, 1),
        Outcome::Queued { evicted: None }
    );
    assert_eq!(
        core.request_seat(&a, 3, 1),
        Outcome::Queued { evicted: None }
    );
    assert_eq!(
        core.request_seat(&a, 4, 1),
        Outcome::Queued { evicted: None }
    );
    // Full (capacity 3): b takes a's newest place, c then a's next.
    assert_eq!(
        core.request_seat(&b, 5, 1),
        Outcome::Queued { evicted: Some(4) }
    );
    assert_eq!(
        core.request_seat(&c, 6, 1),
        Outcome::Queued { evicted: Some(3) }
    );
    // Every queue has one: nobody is longer than c's would be.
    assert_eq!(core.request_seat(&c, 7, 1), Outcome::Rejected);
    // The seat goes to a flow holding none, served least recently, oldest first.
    assert_eq!(core.release(&a, 1), vec![(b.clone(), 5, 1)]);
    assert_eq!(core.release(&b, 1), vec![(c.clone(), 6, 1)]);
    assert_eq!(core.release(&c, 1), vec![(a.clone(), 2, 1)]);
}
