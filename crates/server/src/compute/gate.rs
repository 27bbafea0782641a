//! Fair admission into the request compute pool: which request's task enters the pool
//! next (issue 24, "a client's tiny write does not wait behind another client's expensive
//! ones").
//!
//! The pool's own run queue is first come, first served, and seats (flow control) are far
//! more than pool threads: one client holding many expensive requests on its seats would
//! put every other client's request behind all of them. The gate sits in front of the
//! pool: at most [`Gate::limit`] tasks are *admitted* (spawned onto the pool, running or in
//! its run queue) at once; the other requests wait here, on the I/O runtime, each in its
//! flow's queue (the flow-control [`ClientKey`]). A freed place goes to the waiting flow
//! with the fewest admitted tasks, ties to the flow that has waited longest for a grant
//! (round robin): a client with one waiting request enters before the second request of a
//! client that already has one admitted.
//!
//! Invariants:
//! - at most `limit` permits exist at once; a permit is released exactly once, by its
//!   `Drop`, when the task holding it ends (also when it is aborted) — or, if it was granted
//!   to a waiter that left meanwhile, when that waiter's channel is dropped;
//! - work conserving: a request waits only while `limit` permits are out;
//! - a waiter that goes away (client gone, deadline passed: the future is dropped) leaves
//!   its queue under the lock; waiting has no deadline of its own — the caller's deadline
//!   covers it (the 504 comes from the I/O side, as for a task that computes too long);
//! - the queues are bounded by the seats: a request waits here only while holding a
//!   flow-control seat, so at most `--max-requests-inflight` + `--max-mutating-requests-inflight`
//!   requests wait, and per-flow state exists only while the flow has a waiting or an
//!   admitted request;
//! - the lock is taken when a request asks, is granted, leaves and ends — never while a
//!   task computes; no permit is dropped under it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

use crate::flowcontrol::ClientKey;

/// The gate in front of the pool (see the module docs).
#[derive(Clone)]
pub(crate) struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    limit: usize,
    state: Mutex<State>,
    waiting: Gauge,
    admitted: Gauge,
}

#[derive(Default)]
struct State {
    /// Permits out.
    admitted: usize,
    flows: HashMap<ClientKey, Flow>,
    /// Flows with a waiter, in the order they last got a grant or began to wait (front:
    /// longest ago). Each flow appears at most once.
    ring: VecDeque<ClientKey>,
    next_id: u64,
    waiting: usize,
}

#[derive(Default)]
struct Flow {
    admitted: usize,
    waiters: VecDeque<(u64, oneshot::Sender<Permit>)>,
}

/// A place in the pool: held by the task until it ends.
pub(crate) struct Permit {
    /// `None` once disarmed (a grant its waiter never took, dropped under the lock).
    gate: Option<(Arc<Inner>, ClientKey)>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gate {
    /// A gate admitting at most `limit` (at least 1) tasks at once, publishing its counts
    /// on `waiting` and `admitted`.
    pub(crate) fn new(limit: usize, waiting: Gauge, admitted: Gauge) -> Self {
        Self {
            inner: Arc::new(Inner {
                limit: limit.max(1),
                state: Mutex::new(State::default()),
                waiting,
                admitted,
            }),
        }
    }

    /// How many tasks may be admitted at once.
    pub(crate) fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Waits for a place for a task of `flow`.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue, or gives back the place if it was
    /// granted meanwhile.
    pub(crate) async fn enter(self, flow: ClientKey) -> Permit {
        let (rx, id) = {
            let mut st = lock(&self.inner.state);
            let free = st.admitted < self.inner.limit;
            if free && st.waiting == 0 {
                st.admitted += 1;
                st.flows.entry(flow.clone()).or_default().admitted += 1;
                self.inner.publish(&st);
                return Permit {
                    gate: Some((Arc::clone(&self.inner), flow.clone())),
                };
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            let f = st.flows.entry(flow.clone()).or_default();
            let first = f.waiters.is_empty();
            f.waiters.push_back((id, tx));
            if first {
                st.ring.push_back(flow.clone());
            }
            st.waiting += 1;
            // Work conserving even if a place were free with others waiting.
            self.inner.grant(&mut st);
            self.inner.publish(&st);
            (rx, id)
        };
        let mut waiter = Waiter {
            inner: Arc::clone(&self.inner),
            flow,
            id,
            rx,
        };
        loop {
            match (&mut waiter.rx).await {
                Ok(permit) => return permit,
                // Unreachable: the sender is dropped only with a permit sent or this waiter
                // removed, and this waiter is still here. Ask again rather than hang.
                Err(_) => {
                    let mut st = lock(&self.inner.state);
                    let (tx, rx) = oneshot::channel();
                    let f = st.flows.entry(waiter.flow.clone()).or_default();
                    let first = f.waiters.is_empty();
                    f.waiters.push_back((id, tx));
                    if first {
                        st.ring.push_back(waiter.flow.clone());
                    }
                    st.waiting += 1;
                    waiter.rx = rx;
                    self.inner.grant(&mut st);
                    self.inner.publish(&st);
                }
            }
        }
    }
}

/// A request waiting for a place: leaves its queue when dropped before its grant.
struct Waiter {
    inner: Arc<Inner>,
    flow: ClientKey,
    id: u64,
    rx: oneshot::Receiver<Permit>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.inner.state);
            let mut removed = false;
            if let Some(f) = st.flows.get_mut(&self.flow)
                && let Some(i) = f.waiters.iter().position(|(id, _)| *id == self.id)
            {
                f.waiters.remove(i);
                removed = true;
            }
            if removed {
                st.waiting -= 1;
                st.forget_if_idle(&self.flow);
                self.inner.publish(&st);
            }
        }
        // A permit granted meanwhile (not taken) is dropped with `rx`, after the lock.
        self.rx.close();
    }
}

impl State {
    /// Drops the flow's state (and ring place) once it has nothing waiting or admitted.
    fn forget_if_idle(&mut self, flow: &ClientKey) {
        let Some(f) = self.flows.get(flow) else {
            return;
        };
        if f.waiters.is_empty() {
            if let Some(i) = self.ring.iter().position(|k| k == flow) {
                self.ring.remove(i);
            }
            if f.admitted == 0 {
                self.flows.remove(flow);
            }
        }
    }

    /// The waiting flow to serve next: the fewest admitted tasks, ties to the front of the
    /// ring (longest since its last grant).
    fn next_flow(&self) -> Option<usize> {
        self.ring
            .iter()
            .enumerate()
            .min_by_key(|(i, k)| (self.flows.get(*k).map_or(0, |f| f.admitted), *i))
            .map(|(i, _)| i)
    }
}

impl Inner {
    /// Hands free places to waiters, under the lock.
    fn grant(self: &Arc<Self>, st: &mut State) {
        while st.admitted < self.limit {
            let Some(i) = st.next_flow() else {
                return;
            };
            let Some(key) = st.ring.remove(i) else {
                return;
            };
            let Some(f) = st.flows.get_mut(&key) else {
                continue;
            };
            let Some((_, tx)) = f.waiters.pop_front() else {
                continue;
            };
            st.waiting -= 1;
            let permit = Permit {
                gate: Some((Arc::clone(self), key.clone())),
            };
            match tx.send(permit) {
                Ok(()) => {
                    st.admitted += 1;
                    if let Some(f) = st.flows.get_mut(&key) {
                        f.admitted += 1;
                    }
                }
                // The waiter is going away (its drop waits for this lock): not counted,
                // and disarmed so that dropping it here does not take the lock again.
                Err(mut p) => p.gate = None,
            }
            if st.flows.get(&key).is_some_and(|f| !f.waiters.is_empty()) {
                st.ring.push_back(key);
            } else {
                st.forget_if_idle(&key);
            }
        }
    }

    fn publish(&self, st: &State) {
        self.waiting
            .set(i64::try_from(st.waiting).unwrap_or(i64::MAX));
        self.admitted
            .set(i64::try_from(st.admitted).unwrap_or(i64::MAX));
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some((inner, key)) = self.gate.take() else {
            return;
        };
        let mut st = lock(&inner.state);
        st.admitted = st.admitted.saturating_sub(1);
        if let Some(f) = st.flows.get_mut(&key) {
            f.admitted = f.admitted.saturating_sub(1);
        }
        st.forget_if_idle(&key);
        inner.grant(&mut st);
        inner.publish(&st);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    fn key(n: u8) -> ClientKey {
        ClientKey::address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
    }

    fn gate(limit: usize) -> Gate {
        Gate::new(limit, Gauge::default(), Gauge::default())
    }

    fn counts(g: &Gate) -> (usize, usize, usize) {
        let st = lock(&g.inner.state);
        (st.admitted, st.waiting, st.flows.len())
    }

    /// Polls `fut` once: whether it is ready, and the future (pinned) to go on with.
    async fn ready<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(20), fut)
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_flow_with_nothing_admitted_goes_before_a_busier_flows_next_request() {
        let g = gate(2);
        let a1 = g.clone().enter(key(1)).await;
        let _a2 = g.clone().enter(key(1)).await;
        // Both places are A's; A queues two more, then B one.
        let mut a3 = Box::pin(g.clone().enter(key(1)));
        let mut a4 = Box::pin(g.clone().enter(key(1)));
        assert!(ready(&mut a3).await.is_none());
        assert!(ready(&mut a4).await.is_none());
        let mut b1 = Box::pin(g.clone().enter(key(2)));
        assert!(ready(&mut b1).await.is_none());
        assert_eq!(counts(&g), (2, 3, 2));
        drop(a1);
        let _b1 = ready(&mut b1).await.expect("B enters first");
        assert!(ready(&mut a3).await.is_none(), "A's third waits");
        assert_eq!(counts(&g), (2, 2, 2));
    }

    #[tokio::test]
    async fn equal_flows_are_served_round_robin() {
        let g = gate(1);
        let first = g.clone().enter(key(9)).await;
        let mut order = Vec::new();
        let mut waiting: Vec<_> = [1, 1, 2, 2, 3]
            .into_iter()
            .map(|n| (n, Box::pin(g.clone().enter(key(n)))))
            .collect();
        for (_, w) in &mut waiting {
            assert!(ready(w).await.is_none());
        }
        let mut held = Some(first);
        while !waiting.is_empty() {
            drop(held.take());
            let mut got = None;
            for (i, (_, w)) in waiting.iter_mut().enumerate() {
                if let Some(p) = ready(w).await {
                    got = Some((i, p));
                    break;
                }
            }
            let (i, p) = got.expect("a waiter is granted the freed place");
            order.push(waiting.remove(i).0);
            held = Some(p);
        }
        assert_eq!(order, [1, 2, 3, 1, 2]);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_gives_up_its_place_and_state() {
        let g = gate(1);
        let a = g.clone().enter(key(1)).await;
        let mut b = Box::pin(g.clone().enter(key(2)));
        assert!(ready(&mut b).await.is_none());
        drop(b);
        assert_eq!(counts(&g), (1, 0, 1));
        // Granted but never taken: the place comes back when the waiter goes.
        let mut c = Box::pin(g.clone().enter(key(3)));
        assert!(ready(&mut c).await.is_none());
        drop(a);
        drop(c);
        assert_eq!(counts(&g), (0, 0, 0));
        let _d = ready(&mut Box::pin(g.clone().enter(key(4))))
            .await
            .expect("the place is free");
    }
}
