//! Flow control: who gets the server's request seats and watch slots, and in which order —
//! a small version of upstream's API Priority and Fairness (APF,
//! `k8s.io/apiserver/pkg/util/flowcontrol`), keyed per client.
//!
//! Every request belongs to a *flow*, named by its [`ClientKey`]: the authenticated user once
//! authentication sets it, until then the remote address the connection layer sets. Three
//! kinds of limits apply, each global and per flow:
//!
//! - **Seats** (`--max-requests-inflight` for reads, `--max-mutating-requests-inflight` for
//!   writes; each is like one APF priority level). A request is *admitted* to its flow when
//!   it arrives, before its body is read, and asks for a seat once its body is in memory, so
//!   a slow body never holds a seat. A free seat is taken at once; otherwise the request
//!   waits in its flow's queue, at most a quarter of its deadline and at most a minute (as
//!   upstream's queue wait). A request takes as many seats as its work estimate says
//!   ([`estimate`]: one, or for a list one per 100 KB it holds at once, capped per level —
//!   upstream's `SizeBasedListCostEstimate`), so a flood of large lists holds its share of
//!   the level, not every seat. One flow holds at most [`flow_cap`] seats of a level (half of
//!   them, never less than one request's maximum width): past it its requests wait in its
//!   queue while other flows are served, even with seats free — so a client stalling wide
//!   lists it never reads (each holds its seats while its answer is sent) cannot take the
//!   whole level while others wait (red team rt5). Upstream has no per-flow cap: it splits
//!   clients into priority levels by FlowSchema and shuffle-shards flows onto queues; with
//!   one level per kind here, the cap is what keeps one flow from the rest. Freed seats go
//!   to the waiting flow holding the fewest seats,
//!   ties to the flow served least recently — APF's fair-queuing dispatch with requests of
//!   unknown duration, which is max-min fairness of seats; the request in line waits until
//!   its width is free, and no narrower one passes it (so a wide request is never starved;
//!   it is also what upstream's dispatcher does). 429 when the
//!   flow already has [`Limits::max_queued_requests_per_client`] requests
//!   waiting (for a body or a seat), when the level's queue is full and this flow's queue is
//!   the longest (otherwise the longest queue's newest request is dropped to make room), and
//!   when the wait runs out.
//! - **Watches** (`--max-watches`, `--max-watches-per-client`): a watch holds its slot for its
//!   whole life, so it is never queued: over either limit it gets 429 at once. Once half of
//!   the slots are taken, a client holding more watches than there are free slots gets 429
//!   too ([`WatchLimits`]): a few clients cannot take every slot between them.
//! - **Body memory** ([`Limits::max_buffered_body_bytes`]): bytes of request
//!   bodies in memory — being read, queued or being served. Bodies are read before a seat is
//!   taken, so this bounds what many concurrent uploads can make the server hold; a chunk
//!   that does not fit is a 429.
//!
//! - **Exempt** requests ([`Exempt`]: authentication marks those of group
//!   [`EXEMPT_GROUP`], `system:masters`, upstream's mandatory `exempt` FlowSchema) take no
//!   seat and are never queued or refused for lack of one; they count in the metrics of
//!   the level `exempt`. Upstream's `probes` FlowSchema (`/healthz`, `/livez`, `/readyz`
//!   exempt for everyone) needs nothing here: those paths never reach flow control.
//!
//! What it does not do (upstream does): configurable priority levels and flow schemas
//! (every other client is one flow of one level per kind), borrowing seats between levels,
//! the width of writes (upstream adds seats for a write's many watchers), virtual-time
//! accounting of how long requests actually ran, and shuffle
//! sharding — flows are exact: per-flow state exists only while a flow has a seat, a
//! waiting request or an open watch, so it is bounded by the limits, not by the number of
//! clients. A client with many addresses (before authentication) is many flows.
//!
//! Invariants:
//! - work conserving up to width and the per-flow cap: requests wait only while the one in
//!   line needs more seats than are free, or while every queued flow is at its cap;
//! - no flow holds more than [`flow_cap`] seats of a level;
//! - seats in use never exceed the level's, and a request's width is in
//!   `1..=estimate::max_width(seats)`;
//! - seats, queue places, watch slots and body bytes are released exactly once, by a
//!   guard's `Drop`, also when a request is cancelled (client gone, deadline);
//! - the locks are taken when a request arrives, is seated and ends, and when a watch opens
//!   and closes — never per watch event.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;

use crate::metrics::{GaugeGuard, Metrics};

mod body;
pub mod estimate;
mod watches;

pub use body::{BodyBudget, BodyHold};
pub use watches::{WatchLimits, WatchSlot, fair_share_threshold};

/// The flow a request is accounted to: set as a request extension by whoever knows the
/// client best. The connection layer sets [`ClientKey::Address`] from the peer address;
/// authentication overwrites it with [`ClientKey::User`] for an authenticated user (and
/// leaves the address for anonymous requests, which are one user upstream but many
/// clients). A request without one (the router called in-process) is
/// [`ClientKey::Unidentified`], and all such requests share one flow.
///
/// ```
/// use listwatch_server::flowcontrol::ClientKey;
/// let peer: std::net::SocketAddr = "[::ffff:10.0.0.7]:51234".parse().unwrap();
/// assert_eq!(ClientKey::address(peer.ip()).to_string(), "10.0.0.7");
/// assert_eq!(ClientKey::user("alice").to_string(), "user alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// An authenticated user, by name.
    User(Arc<str>),
    /// The remote IP address of the connection.
    Address(IpAddr),
    /// Nobody labelled the request.
    Unidentified,
}

impl ClientKey {
    /// The flow of an authenticated user.
    pub fn user(name: impl Into<Arc<str>>) -> Self {
        ClientKey::User(name.into())
    }

    /// The flow of a remote address (an IPv4-mapped IPv6 address counts as its IPv4
    /// address, so a dual-stack listener sees one client once).
    pub fn address(ip: IpAddr) -> Self {
        ClientKey::Address(ip.to_canonical())
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::User(u) => write!(f, "user {u}"),
            ClientKey::Address(a) => write!(f, "{a}"),
            ClientKey::Unidentified => f.write_str("unidentified"),
        }
    }
}

/// Marks a request flow control does not limit (a request extension, set by authentication
/// for users of group [`EXEMPT_GROUP`]): upstream's mandatory `exempt` FlowSchema and
/// priority level. Such a request is never queued and never refused for lack of a seat; it
/// holds no seat, and counts in the metrics of the level `exempt`
/// ([`FlowControl::level`]). Watch slots and body memory still apply to it: they bound
/// memory, not turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exempt;

/// The group whose requests are [`Exempt`] (upstream's `exempt` FlowSchema matches it).
pub const EXEMPT_GROUP: &str = "system:masters";

/// Why flow control refused a request (the `reason` label of
/// `apiserver_flowcontrol_rejected_requests_total`, upstream's words where it has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The flow has too many waiting requests, or the level's queue is full.
    QueueFull,
    /// The request waited in its queue past its wait limit.
    TimeOut,
    /// Every watch slot is taken.
    ConcurrencyLimit,
    /// The client has all the watches it may open.
    ClientConcurrencyLimit,
    /// Most watch slots are taken and the client holds more than its share of them.
    FairShare,
    /// Request bodies in memory reached their budget.
    BodyMemory,
}

impl Rejection {
    /// The `reason` label of the rejection.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::QueueFull => "queue-full",
            Rejection::TimeOut => "time-out",
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::ClientConcurrencyLimit => "client-concurrency-limit",
            Rejection::FairShare => "client-fair-share",
            Rejection::BodyMemory => "body-memory",
        }
    }
}

/// The API's flow control: one level per kind of request, the watch slots, the body budget.
pub struct FlowControl {
    /// The seats of non-mutating requests.
    pub read_only: Arc<Level>,
    /// The seats of mutating requests.
    pub mutating: Arc<Level>,
    /// The level of [`Exempt`] requests: no limit, counted in the metrics only.
    pub exempt: Arc<Level>,
    /// The watch slots.
    pub watches: Arc<WatchLimits>,
    /// The memory of request bodies.
    pub bodies: BodyBudget,
}

/// The limits of flow control (the endpoints' `Config` fields of the same names, from
/// kube-apiserver's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Non-mutating requests served at once (`--max-requests-inflight`).
    pub max_requests_inflight: usize,
    /// Mutating requests served at once (`--max-mutating-requests-inflight`).
    pub max_mutating_requests_inflight: usize,
    /// Watches open at once.
    pub max_watches: usize,
    /// Watches one client may have open at once.
    pub max_watches_per_client: usize,
    /// Requests of one client that may wait at once, per level.
    pub max_queued_requests_per_client: usize,
    /// Bytes of request bodies held in memory at once.
    pub max_buffered_body_bytes: usize,
}

impl FlowControl {
    /// The flow control of `config`'s limits, counting in `metrics`.
    pub fn new(config: &Limits, metrics: &Metrics) -> Self {
        let per_flow = config.max_queued_requests_per_client;
        Self {
            read_only: Level::new(
                "readOnly",
                config.max_requests_inflight,
                per_flow,
                metrics.clone(),
            ),
            mutating: Level::new(
                "mutating",
                config.max_mutating_requests_inflight,
                per_flow,
                metrics.clone(),
            ),
            exempt: Level::new("exempt", 0, per_flow, metrics.clone()),
            watches: WatchLimits::new(
                config.max_watches,
                config.max_watches_per_client,
                metrics.clone(),
            ),
            bodies: BodyBudget::new(config.max_buffered_body_bytes),
        }
    }
}

impl FlowControl {
    /// The level of a request: [`Exempt`] ones in `exempt` whatever they do, others in
    /// `mutating` or `read_only`.
    pub fn level(&self, mutating: bool, exempt: bool) -> &Arc<Level> {
        match (exempt, mutating) {
            (true, _) => &self.exempt,
            (false, true) => &self.mutating,
            (false, false) => &self.read_only,
        }
    }
}

/// Upstream's queue wait limit: a quarter of the request's deadline, at most a minute.
pub fn queue_wait_limit(deadline: Duration) -> Duration {
    (deadline / 4).min(Duration::from_secs(60))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one still holds consistent state.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------
// Seats: the synchronous core (every decision) and its async wrapper (waiting, guards).
// ---------------------------------------------------------------------------------------

/// One flow's share of a level.
#[derive(Debug, Default)]
struct Flow {
    /// Seats held (a request holds its width).
    in_use: usize,
    /// Admitted requests without a seat: reading their body, or queued.
    waiting: usize,
    /// Queued requests and their widths, oldest first.
    queue: VecDeque<(u64, usize)>,
    /// The level's dispatch count when this flow last got a seat (0: never).
    last_served: u64,
}

/// What asking for a seat did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Seated,
    /// Queued; `evicted` is a request dropped from the longest queue to make room.
    Queued {
        evicted: Option<u64>,
    },
    Rejected,
}

/// A queued request given its seats by a dispatch: its flow, its id, its width.
type Dispatched = (ClientKey, u64, usize);

/// Every decision of one level, without clocks or channels (so a model can check it).
#[derive(Debug)]
struct Core {
    seats: usize,
    /// The most seats one request takes ([`estimate::max_width`] of `seats`).
    max_width: usize,
    /// The most seats one flow holds at once ([`flow_cap`]).
    flow_cap: usize,
    queue_capacity: usize,
    per_flow: usize,
    /// Seats held, summed over the flows.
    in_use: usize,
    /// Queued requests.
    queued: usize,
    dispatches: u64,
    flows: HashMap<ClientKey, Flow>,
}

impl Core {
    fn new(seats: usize, per_flow: usize) -> Self {
        let per_flow = per_flow.max(1);
        Self {
            seats,
            max_width: estimate::max_width(seats),
            flow_cap: flow_cap(seats),
            // Room for one flow's whole queue, and for every seat to turn over once.
            queue_capacity: seats.max(per_flow),
            per_flow,
            in_use: 0,
            queued: 0,
            dispatches: 0,
            flows: HashMap::new(),
        }
    }

    /// A request's width as this level counts it: at least one, at most `max_width`.
    fn width(&self, asked: usize) -> usize {
        asked.clamp(1, self.max_width)
    }

    /// A request arrives; false when its flow already has `per_flow` waiting.
    fn admit(&mut self, key: &ClientKey) -> bool {
        if self
            .flows
            .get(key)
            .is_some_and(|f| f.waiting >= self.per_flow)
        {
            return false;
        }
        self.flows.entry(key.clone()).or_default().waiting += 1;
        true
    }

    /// An admitted request leaves without a seat (its body failed).
    fn abandon(&mut self, key: &ClientKey) {
        if let Some(f) = self.flows.get_mut(key) {
            f.waiting = f.waiting.saturating_sub(1);
        }
        self.forget_if_idle(key);
    }

    /// The order in which queued requests are dispatched: the flow holding the fewest
    /// seats, then the flow served least recently, then the oldest request.
    fn rank(f: &Flow, head: u64) -> (usize, u64, u64) {
        (f.in_use, f.last_served, head)
    }

    /// The queued request dispatch would take next: its flow, id and width. A flow whose
    /// next request would take it past its cap is not in line.
    fn next_in_line(&self) -> Option<Dispatched> {
        self.flows
            .iter()
            .filter_map(|(k, f)| f.queue.front().map(|&(id, w)| (k, f, id, w)))
            .filter(|(_, f, _, w)| self.within_cap(f.in_use, *w))
            .min_by_key(|(_, f, id, _)| Self::rank(f, *id))
            .map(|(k, _, id, w)| (k.clone(), id, w))
    }

    /// Whether a flow holding `held` seats may take `width` more.
    fn within_cap(&self, held: usize, width: usize) -> bool {
        held + width <= self.flow_cap
    }

    /// Whether `width` more seats fit.
    fn fits(&self, width: usize) -> bool {
        self.in_use + width <= self.seats
    }

    /// An admitted request of `width` seats asks for them; `id` names it in the queue. It is
    /// seated at once when its seats are free and dispatch would take it before every
    /// queued request (its flow has none queued and ranks first); otherwise it queues.
    fn request_seat(&mut self, key: &ClientKey, id: u64, width: usize) -> Outcome {
        let width = self.width(width);
        let mine = self.flows.get(key).map_or(0, |f| f.queue.len());
        let held = self.flows.get(key).map_or(0, |f| f.in_use);
        if self.fits(width) && mine == 0 && self.within_cap(held, width) {
            let my_rank = self
                .flows
                .get(key)
                .map_or((0, 0, id), |f| Self::rank(f, id));
            // Ahead of every queued request dispatch would take (flows at their cap wait).
            let first = self.flows.iter().all(|(_, f)| {
                f.queue.front().is_none_or(|&(head, w)| {
                    Self::rank(f, head) > my_rank || !self.within_cap(f.in_use, w)
                })
            });
            if first {
                self.seat(key, width);
                return Outcome::Seated;
            }
        }
        let mut evicted = None;
        if self.queued >= self.queue_capacity {
            // The longest queue (of the flow holding most seats, among equals) gives up its
            // newest request, unless it would then be shorter than this flow's.
            let victim = self
                .flows
                .iter()
                .filter(|(k, f)| *k != key && f.queue.len() > mine + 1)
                .max_by_key(|(_, f)| (f.queue.len(), f.in_use, f.queue.back().map(|q| q.0)))
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else {
                self.abandon(key);
                return Outcome::Rejected;
            };
            if let Some(f) = self.flows.get_mut(&victim) {
                evicted = f.queue.pop_back().map(|q| q.0);
                f.waiting = f.waiting.saturating_sub(1);
                self.queued -= 1;
            }
            self.forget_if_idle(&victim);
        }
        self.flows
            .entry(key.clone())
            .or_default()
            .queue
            .push_back((id, width));
        self.queued += 1;
        Outcome::Queued { evicted }
    }

    /// A queued request gives up; false when it is no longer queued (seated or evicted).
    /// The caller dispatches afterwards: the request may have been the one in line.
    fn withdraw(&mut self, key: &ClientKey, id: u64) -> bool {
        let Some(f) = self.flows.get_mut(key) else {
            return false;
        };
        let Some(pos) = f.queue.iter().position(|q| q.0 == id) else {
            return false;
        };
        f.queue.remove(pos);
        f.waiting = f.waiting.saturating_sub(1);
        self.queued -= 1;
        self.forget_if_idle(key);
        true
    }

    /// `width` seats of `key` are freed; returns the queued requests that take seats.
    fn release(&mut self, key: &ClientKey, width: usize) -> Vec<Dispatched> {
        if let Some(f) = self.flows.get_mut(key) {
            let width = width.min(f.in_use);
            f.in_use -= width;
            self.in_use = self.in_use.saturating_sub(width);
        }
        self.forget_if_idle(key);
        self.dispatch()
    }

    /// Seats queued requests in rank order while the one in line fits (it is never skipped
    /// for a narrower one behind it, so a wide request is not starved by narrow ones).
    fn dispatch(&mut self) -> Vec<Dispatched> {
        let mut seated = Vec::new();
        while let Some((key, id, width)) = self.next_in_line() {
            if !self.fits(width) {
                break;
            }
            if let Some(f) = self.flows.get_mut(&key) {
                f.queue.pop_front();
            }
            self.queued -= 1;
            self.seat(&key, width);
            seated.push((key, id, width));
        }
        seated
    }

    fn seat(&mut self, key: &ClientKey, width: usize) {
        self.dispatches += 1;
        let f = self.flows.entry(key.clone()).or_default();
        f.waiting = f.waiting.saturating_sub(1);
        f.in_use += width;
        f.last_served = self.dispatches;
        self.in_use += width;
    }

    fn forget_if_idle(&mut self, key: &ClientKey) {
        if self
            .flows
            .get(key)
            .is_some_and(|f| f.in_use == 0 && f.waiting == 0)
        {
            self.flows.remove(key);
        }
    }
}

/// The most seats one flow of a level of `seats` holds at once: half of them, and never
/// less than one request's [`estimate::max_width`] (so any request of the level fits a flow
/// holding nothing).
pub fn flow_cap(seats: usize) -> usize {
    (seats / 2).max(estimate::max_width(seats))
}

/// What a queued request is told.
#[derive(Debug)]
enum Signal {
    Seated,
    Evicted,
}

struct LevelState {
    core: Core,
    waiters: HashMap<u64, oneshot::Sender<Signal>>,
    next_id: u64,
}

impl LevelState {
    fn publish(&self, gauges: &LevelGauges) {
        gauges
            .inqueue
            .set(i64::try_from(self.core.queued).unwrap_or(i64::MAX));
        gauges
            .executing_seats
            .set(i64::try_from(self.core.in_use).unwrap_or(i64::MAX));
    }

    /// Tells the requests a dispatch seated; a seat whose waiter is gone (unreachable: a
    /// waiter withdraws under this lock before it goes away) is passed on, so that a lost
    /// seat never shrinks the level for good.
    fn hand_out(&mut self, mut seated: Vec<Dispatched>) {
        while let Some((next, id, width)) = seated.pop() {
            let sent = self
                .waiters
                .remove(&id)
                .is_some_and(|tx| tx.send(Signal::Seated).is_ok());
            if !sent {
                seated.extend(self.core.release(&next, width));
            }
        }
    }
}

/// A level's gauges, updated under its lock.
struct LevelGauges {
    /// `apiserver_flowcontrol_current_inqueue_requests`.
    inqueue: Gauge,
    /// `apiserver_flowcontrol_current_executing_seats`.
    executing_seats: Gauge,
    /// `apiserver_flowcontrol_work_estimated_seats`.
    estimated_seats: Histogram,
}

/// One pool of seats (`readOnly` or `mutating`); `None` state: no limit.
pub struct Level {
    name: &'static str,
    state: Option<Mutex<LevelState>>,
    metrics: Metrics,
    gauges: LevelGauges,
}

impl Level {
    /// `seats == 0` means no limit (upstream's `--max-requests-inflight 0`).
    pub fn new(name: &'static str, seats: usize, per_flow: usize, metrics: Metrics) -> Arc<Self> {
        let state = (seats > 0).then(|| {
            Mutex::new(LevelState {
                core: Core::new(seats, per_flow),
                waiters: HashMap::new(),
                next_id: 0,
            })
        });
        Arc::new(Self {
            name,
            state,
            gauges: LevelGauges {
                inqueue: metrics.inqueue(name),
                executing_seats: metrics.executing_seats(name),
                estimated_seats: metrics.estimated_seats(name),
            },
            metrics,
        })
    }

    /// A request of `key` arrives; it will ask for one seat unless told its width
    /// ([`Ticket::width`]).
    pub fn admit(self: &Arc<Self>, key: &ClientKey) -> Result<Ticket, Rejection> {
        if let Some(state) = &self.state
            && !lock(state).core.admit(key)
        {
            self.reject(Rejection::QueueFull);
            return Err(Rejection::QueueFull);
        }
        Ok(Ticket {
            level: Arc::clone(self),
            key: key.clone(),
            width: 1,
            admitted: self.state.is_some(),
        })
    }

    fn reject(&self, why: Rejection) {
        self.metrics.rejected(self.name);
        self.metrics.flowcontrol_rejected(self.name, why.as_str());
    }

    /// The guard of `width` seats of `key` just taken.
    fn seated(self: &Arc<Self>, key: &ClientKey, width: usize) -> Seat {
        Seat {
            level: Some(Arc::clone(self)),
            key: key.clone(),
            width,
            _executing: self.metrics.executing_request(self.name),
        }
    }

    /// Frees `width` seats of `key` and seats the waiters that then fit, under the lock.
    fn release(&self, state: &mut LevelState, key: &ClientKey, width: usize) {
        let seated = state.core.release(key, width);
        state.hand_out(seated);
        state.publish(&self.gauges);
    }
}

/// An admitted request without a seat; dropping it leaves the flow's waiting count.
pub struct Ticket {
    level: Arc<Level>,
    key: ClientKey,
    /// The seats it asks for (the level caps it: at least 1, at most its maximum width).
    width: usize,
    admitted: bool,
}

impl Ticket {
    /// Asks for `seats` seats instead of one (a list's work estimate, [`estimate`]).
    #[must_use]
    pub fn width(mut self, seats: usize) -> Self {
        self.width = seats;
        self
    }

    /// Takes its seats, waiting in the flow's queue at most `wait`.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives up the queue place, or the seats if they were
    /// granted meanwhile.
    pub async fn seat(mut self, wait: Duration) -> Result<Seat, Rejection> {
        let level = Arc::clone(&self.level);
        let Some(state) = &level.state else {
            return Ok(Seat {
                level: None,
                key: self.key.clone(),
                width: 0,
                _executing: level.metrics.executing_request(level.name),
            });
        };
        let (tx, rx) = oneshot::channel();
        let (id, width) = {
            let mut st = lock(state);
            let id = st.next_id;
            st.next_id += 1;
            let width = st.core.width(self.width);
            level.gauges.estimated_seats.observe(width as f64);
            // From here on the outcome owns the waiting count.
            self.admitted = false;
            match st.core.request_seat(&self.key, id, width) {
                Outcome::Seated => {
                    st.publish(&level.gauges);
                    return Ok(level.seated(&self.key, width));
                }
                Outcome::Rejected => {
                    drop(st);
                    level.reject(Rejection::QueueFull);
                    return Err(Rejection::QueueFull);
                }
                Outcome::Queued { evicted } => {
                    st.waiters.insert(id, tx);
                    if let Some(tx) = evicted.and_then(|e| st.waiters.remove(&e)) {
                        let _ = tx.send(Signal::Evicted);
                    }
                    st.publish(&level.gauges);
                }
            }
            (id, width)
        };
        let mut waiting = Waiting {
            level: Arc::clone(&level),
            key: self.key.clone(),
            id,
            width,
            rx,
            settled: false,
        };
        let result = match tokio::time::timeout(wait, &mut waiting.rx).await {
            Ok(Ok(Signal::Seated)) => {
                waiting.settled = true;
                Ok(level.seated(&self.key, width))
            }
            Ok(Ok(Signal::Evicted)) => {
                waiting.settled = true;
                Err(Rejection::QueueFull)
            }
            // Timed out (or, unreachably, the sender is gone): leave the queue, unless a
            // signal arrived meanwhile.
            Ok(Err(_)) | Err(_) => waiting.settle(),
        };
        if let Err(why) = result {
            level.reject(why);
        }
        result
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.admitted
            && let Some(state) = &self.level.state
        {
            lock(state).core.abandon(&self.key);
        }
    }
}

/// A queued request; dropping it unsettled leaves the queue (or frees the seats it got).
struct Waiting {
    level: Arc<Level>,
    key: ClientKey,
    id: u64,
    width: usize,
    rx: oneshot::Receiver<Signal>,
    settled: bool,
}

impl Waiting {
    fn settle(&mut self) -> Result<Seat, Rejection> {
        self.settled = true;
        let Some(state) = &self.level.state else {
            return Err(Rejection::TimeOut);
        };
        let mut st = lock(state);
        if st.core.withdraw(&self.key, self.id) {
            st.waiters.remove(&self.id);
            // It may have been the request in line, holding back narrower ones.
            let seated = st.core.dispatch();
            st.hand_out(seated);
            st.publish(&self.level.gauges);
            return Err(Rejection::TimeOut);
        }
        // No longer queued: its signal was sent under this lock.
        match self.rx.try_recv() {
            Ok(Signal::Seated) => Ok(self.level.seated(&self.key, self.width)),
            Ok(Signal::Evicted) | Err(_) => Err(Rejection::QueueFull),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.settled {
            // Seats granted meanwhile are dropped here, which passes them on.
            let _ = self.settle();
        }
    }
}

/// Held seats; dropping them passes them to the waiters that then fit.
pub struct Seat {
    level: Option<Arc<Level>>,
    key: ClientKey,
    /// The seats held (as the level counted the request's width).
    width: usize,
    /// `apiserver_flowcontrol_current_executing_requests` of the level.
    _executing: GaugeGuard,
}

impl Seat {
    /// The seats held (0 in a level without a limit).
    pub fn width(&self) -> usize {
        self.width
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(level) = &self.level
            && let Some(state) = &level.state
        {
            level.release(&mut lock(state), &self.key, self.width);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
