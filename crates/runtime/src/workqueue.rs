//! [`WorkQueue`]: client-go's rate-limited, de-duplicating work queue
//! (`k8s.io/client-go/util/workqueue`), what controllers pair with informers.
//!
//! Invariants (client-go's `Type`, `delayingType`, `rateLimitingType`):
//! - **de-duplicated**: a key added while it waits is queued once;
//! - **never two workers on one key**: a key added while it is being processed waits until
//!   [`done`](WorkQueue::done), then is queued again (once);
//! - **fair**: keys are handed out in the order they became ready;
//! - **delayed adds** ([`add_after`](WorkQueue::add_after)) become ready at their time; a key
//!   delayed twice keeps the earlier time;
//! - **rate-limited adds** ([`add_rate_limited`](WorkQueue::add_rate_limited)) wait the longer
//!   of a per-key exponential backoff (5 ms doubling to 1000 s, reset by
//!   [`forget`](WorkQueue::forget)) and an overall token bucket (10 per second, burst 100):
//!   client-go's `DefaultControllerRateLimiter`;
//! - **shutdown**: after [`shut_down`](WorkQueue::shut_down) adds are ignored, delayed keys
//!   are dropped, keys already queued are still handed out, then [`get`](WorkQueue::get)
//!   returns `None`; [`shut_down_with_drain`](WorkQueue::shut_down_with_drain) also waits
//!   (with a deadline) for the keys being processed to be done;
//! - memory is bounded by the number of distinct keys (each key is in the queue, the delay
//!   heap and the failure map at most once);
//! - **no stranded key**: a key taken with [`get_guarded`](WorkQueue::get_guarded) is handed
//!   back by its [`Processing`] guard if the worker is cancelled (its future dropped, its task
//!   aborted, a panic) before [`Processing::done`]: the key is queued again, as if added
//!   while being processed. A key taken with the plain [`get`](WorkQueue::get) whose
//!   [`done`](WorkQueue::done) never comes stays out of the queue for good (client-go's
//!   contract, where a worker cannot be cancelled mid-item).

use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::token_bucket::TokenBucket;

/// The rate limits of [`WorkQueue::add_rate_limited`]. [`Default`] is client-go's
/// `DefaultControllerRateLimiter`.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// First per-key delay (5 ms), doubled at each failure.
    pub base_delay: Duration,
    /// Largest per-key delay (1000 s).
    pub max_delay: Duration,
    /// Overall rate of rate-limited adds per second (10).
    pub qps: f64,
    /// Burst of the overall rate (100).
    pub burst: u32,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

struct Delayed<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Delayed<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<K> Eq for Delayed<K> {}
impl<K> PartialOrd for Delayed<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Delayed<K> {
    // Reversed: BinaryHeap is a max-heap, the earliest must come first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys that need processing (queued, or added again while processing).
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed keys and when each is due (the heap may hold stale entries for a key whose
    /// time moved earlier; `waiting` is the truth).
    delayed: BinaryHeap<Delayed<K>>,
    waiting: HashMap<K, Instant>,
    seq: u64,
    failures: HashMap<K, u32>,
    /// The overall rate limit of rate-limited adds.
    bucket: TokenBucket,
    shutting_down: bool,
}

/// A rate-limited, de-duplicating work queue of keys. Cheap to clone (shared).
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    notify: Arc<Notify>,
    limits: Arc<RateLimits>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            notify: Arc::clone(&self.notify),
            limits: Arc::clone(&self.limits),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new(RateLimits::default())
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue with these rate limits.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: BinaryHeap::new(),
                waiting: HashMap::new(),
                seq: 0,
                failures: HashMap::new(),
                bucket: TokenBucket::new(limits.qps, limits.burst),
                shutting_down: false,
            })),
            notify: Arc::new(Notify::new()),
            limits: Arc::new(limits),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // A panic while holding the lock leaves the state consistent (every update is a
        // few field writes), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` unless it is already waiting; a key being processed is queued again
    /// when it is done.
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if Self::add_locked(&mut s, key) {
            drop(s);
            self.notify.notify_one();
        }
    }

    fn add_locked(s: &mut State<K>, key: K) -> bool {
        if s.shutting_down || s.dirty.contains(&key) {
            return false;
        }
        s.dirty.insert(key.clone());
        if s.processing.contains(&key) {
            return false;
        }
        s.queue.push_back(key);
        true
    }

    /// Queues `key` once `delay` has passed (at once for a zero delay).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut s = self.lock();
        if s.shutting_down {
            return;
        }
        let at = crate::instant::from_now(delay);
        if s.waiting.get(&key).is_some_and(|t| *t <= at) {
            return;
        }
        s.waiting.insert(key.clone(), at);
        s.seq += 1;
        let seq = s.seq;
        s.delayed.push(Delayed { at, seq, key });
        drop(s);
        // A waiting `get` may need to wake earlier.
        self.notify.notify_waiters();
    }

    /// Queues `key` after its rate-limited delay (see [`RateLimits`]) and counts a failure.
    pub fn add_rate_limited(&self, key: K) {
        let delay = self.when(&key);
        self.add_after(key, delay);
    }

    /// The delay of the next rate-limited add of `key` (and records it).
    fn when(&self, key: &K) -> Duration {
        let mut s = self.lock();
        let n = s.failures.entry(key.clone()).or_insert(0);
        let exp = self
            .limits
            .base_delay
            .saturating_mul(2u32.saturating_pow(*n))
            .min(self.limits.max_delay);
        *n = n.saturating_add(1);
        // golang.org/x/time/rate's Reserve: tokens may go negative.
        let bucket = s.bucket.reserve(None).unwrap_or_else(|wait| wait);
        exp.max(bucket)
    }

    /// Stops the per-key backoff of `key` (after a success).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// How many rate-limited adds `key` had since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keys waiting (not counting delayed or processing ones).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key to process; `None` once shut down and empty. The caller must call
    /// [`done`](Self::done) with it when finished.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_due = {
                let mut s = self.lock();
                Self::promote_due(&mut s);
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    return Some(key);
                }
                if s.shutting_down {
                    drop(s);
                    // Let other waiting workers see the shutdown too.
                    self.notify.notify_waiters();
                    return None;
                }
                s.delayed.peek().map(|d| d.at)
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// [`get`](Self::get), with the key held by a guard: [`Processing::done`] marks it
    /// processed; dropping the guard without `done` (a cancelled or panicking worker) queues
    /// the key again so that it is not stranded in processing.
    pub async fn get_guarded(&self) -> Option<Processing<K>> {
        let key = self.get().await?;
        Some(Processing {
            queue: self.clone(),
            key: Some(key),
        })
    }

    /// Hands back a key whose processing was abandoned: queued again (unless shutting down)
    /// and no longer processing.
    fn abandon(&self, key: &K) {
        {
            let mut s = self.lock();
            if !s.shutting_down {
                s.dirty.insert(key.clone());
            }
        }
        self.done(key);
    }

    /// Moves delayed keys that are due into the queue.
    fn promote_due(s: &mut State<K>) {
        let now = Instant::now();
        while s.delayed.peek().is_some_and(|d| d.at <= now) {
            let Some(d) = s.delayed.pop() else { break };
            // A stale entry: the key was re-delayed to another time or already promoted.
            if s.waiting.get(&d.key) != Some(&d.at) {
                continue;
            }
            s.waiting.remove(&d.key);
            Self::add_locked(s, d.key);
        }
    }

    /// Marks `key` as processed; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.processing.remove(key);
        let requeue = s.dirty.contains(key);
        if requeue {
            s.queue.push_back(key.clone());
        }
        drop(s);
        // Wakes a worker for the requeued key, or a drain waiting for processing to end.
        self.notify.notify_waiters();
    }

    /// Stops the queue: adds are ignored from now on, delayed keys are dropped; keys already
    /// queued are still handed out, then `get` returns `None`.
    pub fn shut_down(&self) {
        let mut s = self.lock();
        s.shutting_down = true;
        s.delayed.clear();
        s.waiting.clear();
        drop(s);
        self.notify.notify_waiters();
    }

    /// [`shut_down`](Self::shut_down), then waits until no key is queued or being processed
    /// (client-go's `ShutDownWithDrain`), at most `deadline`; returns whether it drained.
    pub async fn shut_down_with_drain(&self, deadline: Duration) -> bool {
        self.shut_down();
        let drained = async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let s = self.lock();
                    if s.processing.is_empty() && s.queue.is_empty() {
                        return;
                    }
                }
                notified.await;
            }
        };
        tokio::time::timeout(deadline, drained).await.is_ok()
    }

    /// Stops the queue without draining its backlog: like [`shut_down`](Self::shut_down), but
    /// keys not yet handed out are dropped too (and a key added while being processed is not
    /// handed out again), then waits at most `deadline` for the keys being processed to be
    /// done (client-go's `ShutDownWithDrain` waits for those only); returns whether they were.
    pub async fn shut_down_in_flight(&self, deadline: Duration) -> bool {
        {
            let mut s = self.lock();
            s.queue.clear();
            s.dirty.clear();
        }
        self.shut_down_with_drain(deadline).await
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}

/// A key taken from a [`WorkQueue`] by [`WorkQueue::get_guarded`], being processed.
///
/// [`done`](Processing::done) ends the processing; dropping the guard without it (the worker
/// was cancelled or panicked) queues the key again.
pub struct Processing<K: Clone + Eq + Hash + Send + 'static> {
    queue: WorkQueue<K>,
    /// `None` once done.
    key: Option<K>,
}

impl<K: Clone + Eq + Hash + Send + 'static> Processing<K> {
    /// The key being processed.
    pub fn key(&self) -> &K {
        // Only `done` (which consumes the guard) takes the key out.
        self.key
            .as_ref()
            .unwrap_or_else(|| unreachable!("key taken before done"))
    }

    /// Marks the key processed ([`WorkQueue::done`]).
    pub fn done(mut self) {
        if let Some(key) = self.key.take() {
            self.queue.done(&key);
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Drop for Processing<K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            tracing::debug!("work queue: a worker was cancelled mid-key; the key is queued again");
            self.queue.abandon(&key);
        }
    }
}

impl<K: Clone + Eq + Hash + Send + std::fmt::Debug + 'static> std::fmt::Debug for Processing<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Processing").field(&self.key).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_worker_cancelled_mid_key_hands_the_key_back() {
        let q: WorkQueue<&str> = WorkQueue::default();
        q.add("a");
        let worker = {
            let q = q.clone();
            tokio::spawn(async move {
                let _key = q.get_guarded().await;
                std::future::pending::<()>().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(get_now(&q).await, None, "a is being processed");
        worker.abort();
        let _ = worker.await;
        let again = tokio::time::timeout(Duration::from_secs(60), q.get_guarded()).await;
        let again = again.ok().flatten();
        assert_eq!(
            again.as_ref().map(Processing::key),
            Some(&"a"),
            "the cancelled worker's key must be handed out again"
        );
        if let Some(p) = again {
            p.done();
        }
        assert_eq!(get_now(&q).await, None, "done: not queued again");
        // A panicking worker hands its key back too.
        q.add("b");
        let panicking = {
            let q = q.clone();
            tokio::spawn(async move {
                let _key = q.get_guarded().await;
                panic!("injected panic mid-key");
            })
        };
        assert!(panicking.await.is_err());
        assert_eq!(get_now(&q).await, Some("b"));
    }

    async fn get_now<K: Clone + Eq + Hash + Send + 'static>(q: &WorkQueue<K>) -> Option<K> {
        tokio::time::timeout(Duration::from_millis(1), q.get())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_twice_is_queued_once_and_never_handed_to_two_workers() {
        let q = WorkQueue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(get_now(&q).await, Some("a"));
        // Added while processing: not handed out until done.
        q.add("a");
        assert_eq!(get_now(&q).await, Some("b"));
        assert_eq!(get_now(&q).await, None);
        q.done(&"a");
        assert_eq!(get_now(&q).await, Some("a"));
        q.done(&"a");
        q.done(&"b");
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_become_ready_in_time_order_and_the_earlier_time_wins() {
        let q = WorkQueue::default();
        q.add_after("late", Duration::from_secs(10));
        q.add_after("early", Duration::from_secs(5));
        q.add_after("late", Duration::from_secs(2));
        q.add_after("early", Duration::from_secs(50));
        let start = Instant::now();
        assert_eq!(q.get().await, Some("late"));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(q.get().await, Some("early"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_per_key_until_forgotten() {
        let q = WorkQueue::default();
        let mut delays = Vec::new();
        for _ in 0..4 {
            let start = Instant::now();
            q.add_rate_limited("k");
            assert_eq!(q.get().await, Some("k"));
            q.done(&"k");
            delays.push(start.elapsed());
        }
        let ms = Duration::from_millis;
        assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40)]);
        assert_eq!(q.num_requeues(&"k"), 4);
        q.forget(&"k");
        assert_eq!(q.num_requeues(&"k"), 0);
        let start = Instant::now();
        q.add_rate_limited("k");
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(start.elapsed(), ms(5));
        // The per-key delay is capped.
        let capped = WorkQueue::new(RateLimits {
            max_delay: ms(30),
            ..RateLimits::default()
        });
        for _ in 0..10 {
            capped.add_rate_limited("x");
            capped.get().await;
            capped.done(&"x");
        }
        let start = Instant::now();
        capped.add_rate_limited("x");
        capped.get().await;
        assert_eq!(start.elapsed(), ms(30));
    }

    #[tokio::test(start_paused = true)]
    async fn the_overall_bucket_spaces_adds_past_its_burst() {
        let q = WorkQueue::new(RateLimits {
            base_delay: Duration::ZERO,
            qps: 10.0,
            burst: 3,
            ..RateLimits::default()
        });
        let start = Instant::now();
        for k in 0..5 {
            q.add_rate_limited(k);
        }
        let mut at = Vec::new();
        for _ in 0..5 {
            q.get().await.unwrap();
            at.push(start.elapsed().as_millis());
        }
        // Three at once (the burst), then one per 100 ms.
        assert_eq!(at, [0, 0, 0, 100, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_hands_out_what_is_queued_then_none_and_drain_waits_for_workers() {
        let q = WorkQueue::default();
        q.add(1);
        q.add(2);
        q.add_after(3, Duration::from_secs(1));
        let one = q.get().await.unwrap();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.shut_down_with_drain(Duration::from_secs(60)).await })
        };
        tokio::task::yield_now().await;
        q.add(4);
        assert_eq!(q.get().await, Some(2));
        q.done(&2);
        assert_eq!(
            q.get().await,
            None,
            "3 was delayed and 4 added after shutdown"
        );
        assert!(!waiter.is_finished(), "1 is still being processed");
        tokio::time::sleep(Duration::from_secs(5)).await;
        q.done(&one);
        assert!(waiter.await.unwrap());
        // A worker that never finishes: the drain gives up at its deadline.
        let q = WorkQueue::default();
        q.add(1);
        let _stuck = q.get().await;
        assert!(!q.shut_down_with_drain(Duration::from_secs(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn blocked_workers_wake_for_new_keys_and_for_shutdown() {
        let q: WorkQueue<u32> = WorkQueue::default();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(k) = q.get().await {
                        got.push(k);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        q.done(&k);
                    }
                    got
                })
            })
            .collect();
        for k in 0..30 {
            q.add(k % 10);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(q.shut_down_with_drain(Duration::from_secs(10)).await);
        let mut all: Vec<u32> = Vec::new();
        for w in workers {
            all.extend(w.await.unwrap());
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    /// A delay of `Duration::MAX` (a caller's "never", a huge rate-limit delay) saturates
    /// instead of overflowing `Instant` (which panicked in the caller's worker).
    #[tokio::test(start_paused = true)]
    async fn a_delay_of_duration_max_saturates_instead_of_panicking() {
        let q = WorkQueue::<String>::default();
        q.add_after("never".to_owned(), Duration::MAX);
        q.add_after("soon".to_owned(), Duration::from_secs(1));
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(3600), q.get())
                .await
                .ok()
                .flatten()
                .as_deref(),
            Some("soon")
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), q.get())
                .await
                .is_err()
        );
    }
}
