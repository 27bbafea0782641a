//! The request compute pool: where the CPU of a request runs, apart from the threads that
//! drive the sockets (issue 24, "CPU work off the reactor").
//!
//! The server has two tokio runtimes. The embedder's (the *I/O runtime*) runs the accept
//! loop, every connection, the polling of response bodies (watches, streamed lists: the
//! pieces of a body that compute — Table, YAML and metadata items, Table and metadata
//! watch frames not encoded yet, gzip compression of lists and watch-lists — run on this
//! module's pool through an [`Offloader`]), the
//! cheap handlers (`/healthz`, `/readyz`, `/livez`, discovery, OpenAPI, `/metrics`, GET and
//! LIST answered as plain JSON), flow control, the cachers' dispatchers and the storage
//! watch tasks. This module owns the other one: a multi-threaded runtime of
//! `request_workers` threads (the endpoints' `Config::request_workers`) (default: the machine's available
//! parallelism) onto which the handler of every request that computes is spawned — every
//! write verb (decode, patch, apply, validation, admission, the storage's update closure,
//! the encoding of the answer), `/scale` reads, and every GET or LIST answered as a Table,
//! YAML or partial metadata — see `handlers::computes`. The I/O side awaits the task.
//!
//! Which request enters the pool next is decided by the fair admission gate in front of it
//! (`gate.rs`): at most [`ADMITTED_PER_WORKER`] × `request_workers` tasks are in the pool
//! (computing or in its run queue) at once; the others wait on the I/O runtime in their
//! client's flow, and a freed place goes to the flow with the fewest tasks in the pool.
//!
//! Invariants:
//! - at most `request_workers` requests compute at once (the pool's threads), whatever the
//!   seats allow, and at most `ADMITTED_PER_WORKER × request_workers` hold a place in the
//!   pool; the others wait at the gate, each on its seat. A pooled request that *waits*
//!   (a GET's or LIST's storage read, which may wait up to the watch cache's freshness
//!   timeout for a resource version) gives its place back for the wait ([`waiting`]) and
//!   queues for one again before computing on: a place is held for computation, never
//!   for a wait (a write's storage call keeps its place: its update closure computes). A seat (and the
//!   request body's share of the body budget) is released when the task ends, not when the
//!   client stops waiting: a request whose client left or whose deadline passed still
//!   counts against its flow-control level until its CPU is done, so seats bound the work
//!   queued here;
//! - the per-request work is bounded by the limits each computation enforces (3 MiB body,
//!   100 levels, YAML expansion, JSON patch operations and touched elements, selector
//!   requirements, Table and YAML output bounds) and by the request's deadline: past it
//!   the client gets its 504 at once (from the I/O side) and the task is aborted at its
//!   next await;
//! - the task is aborted when the I/O side stops waiting for it (client gone, deadline);
//! - a panic in the task is re-raised on the I/O side, where the router's panic layer turns
//!   it into a 500 `Status`, as for a handler that runs there;
//! - the I/O runtime never waits synchronously for this one; the runtime is shut down in
//!   the background when the API is dropped (on a thread of its own: a runtime may not be
//!   dropped on one of its own workers or inside another runtime).
//!
//! With `request_workers` 0 there is no pool, no gate, and every handler runs on the I/O runtime,
//! as before this module existed. Tests that pause tokio's clock need that: while a task
//! computes on the pool the paused runtime is idle, so its clock jumps to the request's
//! deadline.

mod gate;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use crate::flowcontrol::ClientKey;
use crate::metrics::Metrics;

/// Tasks admitted into the pool per worker thread. Two: an admitted write spends part of
/// its life awaiting storage (a round trip to etcd, the watch cache catching up), and with
/// one task per thread the thread would idle meanwhile; a second admitted task per thread
/// fills those gaps. More would only lengthen the pool's first-come-first-served run queue,
/// which is what a newcomer waits in once admitted: with `2 × N` admitted and N threads, a
/// request of a client with nothing in the pool waits for at most about `2 × N` tasks
/// of others to finish (the next free place, then the run queue), however many requests
/// other clients keep queued.
pub const ADMITTED_PER_WORKER: usize = 2;

/// The request compute runtime (see the module docs).
pub struct ComputePool {
    /// `None` only while being dropped.
    runtime: Option<Runtime>,
    handle: Handle,
    workers: usize,
    gate: gate::Gate,
}

/// The pool stopped (the API is being dropped): the task never ran or was cut short.
#[derive(Debug, thiserror::Error)]
#[error("the request compute pool has stopped")]
pub struct PoolStopped;

impl ComputePool {
    /// A pool of `workers` threads behind a gate of `ADMITTED_PER_WORKER × workers` places;
    /// `Ok(None)` for 0 (handlers run on the I/O runtime).
    pub fn new(workers: usize, metrics: &Metrics) -> std::io::Result<Option<Self>> {
        if workers == 0 {
            return Ok(None);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("request-compute")
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (waiting, admitted) = metrics.compute_gate();
        Ok(Some(Self {
            runtime: Some(runtime),
            handle,
            workers,
            gate: gate::Gate::new(
                workers.saturating_mul(ADMITTED_PER_WORKER),
                waiting,
                admitted,
            ),
        }))
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// How many tasks may be in the pool at once (the gate's places).
    pub fn admission_limit(&self) -> usize {
        self.gate.limit()
    }

    /// Waits at the gate in `flow`'s queue, then runs `fut` on the pool and waits for it
    /// here; dropping the returned future leaves the queue or aborts the task (its place
    /// is given back when the task ends). A panic in the task is resumed on the caller's
    /// side.
    pub fn run<F>(
        &self,
        flow: ClientKey,
        fut: F,
    ) -> impl Future<Output = Result<F::Output, PoolStopped>> + use<F>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.offloader(flow).run(fut)
    }

    /// A handle that runs work of `flow` on the pool, for a response body that computes
    /// while it is sent (streamed Table, YAML and metadata lists, Table and metadata watch
    /// frames, gzipped lists and watch-lists): each piece waits at the gate in the flow's
    /// queue like a request would.
    pub fn offloader(&self, flow: ClientKey) -> Offloader {
        Offloader {
            gate: self.gate.clone(),
            handle: self.handle.clone(),
            flow,
        }
    }
}

/// Runs pieces of a response body's work on the pool, in one client's flow
/// ([`ComputePool::offloader`]); holds no place in the pool between pieces.
#[derive(Clone)]
pub struct Offloader {
    gate: gate::Gate,
    handle: Handle,
    flow: ClientKey,
}

impl Offloader {
    /// Waits at the gate in the flow's queue, then runs `fut` on the pool and waits for it
    /// here; dropping the returned future leaves the queue or aborts the task (its place is
    /// given back when the task ends). A panic in the task is resumed on the caller's side.
    pub fn run<F>(
        &self,
        fut: F,
    ) -> impl Future<Output = Result<F::Output, PoolStopped>> + Send + use<F>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (gate, handle, flow) = (self.gate.clone(), self.handle.clone(), self.flow.clone());
        async move {
            let permit = gate.clone().enter(flow.clone()).await;
            let place = Arc::new(Place {
                gate,
                flow,
                permit: Mutex::new(Some(permit)),
            });
            let task = AbortOnDrop(handle.spawn(async move {
                let out = PLACE.scope(Arc::clone(&place), fut).await;
                drop(place.take());
                out
            }));
            match task.await {
                Ok(v) => Ok(v),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Err(PoolStopped),
            }
        }
    }
}

tokio::task_local! {
    /// The place in the pool of the task running on it ([`Offloader::run`]).
    static PLACE: Arc<Place>;
}

/// A pooled task's place: its gate permit (absent while [`waiting`] has given it back),
/// and where to queue for it again.
struct Place {
    gate: gate::Gate,
    flow: ClientKey,
    permit: Mutex<Option<gate::Permit>>,
}

impl Place {
    fn take(&self) -> Option<gate::Permit> {
        self.permit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn put(&self, permit: gate::Permit) {
        *self.permit.lock().unwrap_or_else(PoisonError::into_inner) = Some(permit);
    }
}

/// Awaits `fut` — a wait, not computation: a storage read, the watch cache catching up to
/// a resource version — without holding a place in the pool: a pooled task gives its place
/// back meanwhile and queues for one again (in its flow, behind the gate like a new
/// request) before it goes on computing. Outside a pooled task (no pool, or the I/O
/// runtime) it is just `fut.await`.
///
/// Without it a request that waits holds a place for nothing: a few clients' lists at a
/// future resource version (each waiting up to the cache's 3 s freshness timeout) held
/// every place and every other client's writes queued behind them.
///
/// Cancel safe: dropped while waiting or queueing, the task holds no place (the gate's
/// waiter leaves its queue); its end drops whatever place it holds.
pub async fn waiting<F: Future>(fut: F) -> F::Output {
    let held = PLACE
        .try_with(|p| p.take().map(|permit| (Arc::clone(p), permit)))
        .ok()
        .flatten();
    let Some((place, permit)) = held else {
        return fut.await;
    };
    drop(permit);
    let out = fut.await;
    let permit = place.gate.clone().enter(place.flow.clone()).await;
    place.put(permit);
    out
}

impl Drop for ComputePool {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Dropping may happen on one of the pool's own workers (the last request holding
        // the API) or inside the I/O runtime; neither may block on this runtime's shutdown.
        let spawned = std::thread::Builder::new()
            .name("request-compute-stop".into())
            .spawn(move || runtime.shutdown_background());
        if let Err(e) = spawned {
            // No thread to stop it on: leave it to the process's exit.
            tracing::warn!(error = %e, "cannot stop the request compute pool");
        }
    }
}

/// A task handle that aborts its task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn metrics() -> Metrics {
        Metrics::register(&mut prometheus_client::registry::Registry::default())
    }

    #[tokio::test]
    async fn a_task_runs_on_the_pool_threads() {
        let pool = ComputePool::new(2, &metrics()).unwrap().unwrap();
        let name = pool
            .run(ClientKey::Unidentified, async {
                std::thread::current().name().map(str::to_owned)
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("request-compute"));
        assert_eq!(pool.workers(), 2);
        assert!(ComputePool::new(0, &metrics()).unwrap().is_none());
    }

    #[tokio::test]
    async fn a_panic_in_the_task_is_resumed_on_the_caller() {
        use futures::FutureExt;
        let pool = ComputePool::new(1, &metrics()).unwrap().unwrap();
        let caught = std::panic::AssertUnwindSafe(
            pool.run(ClientKey::Unidentified, async { panic!("boom") }),
        )
        .catch_unwind()
        .await
        .expect_err("the panic reaches the caller");
        assert_eq!(caught.downcast_ref::<&str>(), Some(&"boom"));
    }

    #[tokio::test]
    async fn dropping_the_wait_aborts_the_task() {
        let pool = ComputePool::new(1, &metrics()).unwrap().unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&finished);
        let wait = pool.run(ClientKey::Unidentified, async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            f.store(true, Ordering::SeqCst);
        });
        let _ = tokio::time::timeout(Duration::from_millis(20), wait).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!finished.load(Ordering::SeqCst), "the task was aborted");
    }

    #[test]
    fn the_pool_can_be_dropped_inside_a_runtime_and_on_its_own_worker() {
        let io = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        io.block_on(async {
            let pool = ComputePool::new(1, &metrics()).unwrap().unwrap();
            drop(pool);
            let pool = Arc::new(ComputePool::new(1, &metrics()).unwrap().unwrap());
            let held = Arc::clone(&pool);
            let wait = pool.run(ClientKey::Unidentified, async move {
                drop(held);
            });
            drop(pool);
            // The last reference went on the pool's own worker; the wait ends either way.
            let _ = tokio::time::timeout(Duration::from_secs(10), wait).await;
        });
    }
}
