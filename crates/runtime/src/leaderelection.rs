//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection` (the protocol kube-controller-manager and kube-scheduler use):
//! several processes run a [`LeaderElector`] on one Lease, and at most one of them runs the
//! work it guards (the "singletons") at a time.
//!
//! It owns the election loop and the lease record; the Lease itself is read and written
//! through a [`LeaseLock`]: listwatch-client's `HttpLeaseLock` over any Kubernetes-compatible
//! server, or the embedder's own (the listwatch apiserver's is in-process over its storage).
//!
//! The protocol (client-go's): a candidate reads the Lease; it takes it when it is absent
//! (create), released (empty `holderIdentity`) or expired — nobody changed the record for
//! its `leaseDurationSeconds`, timed on the candidate's own monotonic clock from the moment
//! it first saw that record (never from the record's `renewTime`, so clocks need not agree,
//! only run at the same rate). Every write is a create or an update conditional on the
//! `resourceVersion` read (optimistic concurrency), so of two candidates only one wins. The
//! leader renews every `retryPeriod` (`renewTime` = now, `acquireTime` and
//! `leaseTransitions` kept); a takeover sets `acquireTime` and adds one to
//! `leaseTransitions`.
//!
//! Invariants:
//! - **Never two leaders past the renew deadline.** A leader counts its lease from the
//!   instant *before* the read that led to its last successful write; if no renewal succeeds
//!   within `renewDeadline` of that instant, it stops leading (drops the work) at that
//!   deadline, whatever its requests are doing. Another candidate can only write the Lease
//!   once it has seen that write unchanged for `leaseDurationSeconds` (or by a conditional
//!   update that fails because the record changed), and it saw the write after it was made:
//!   so it takes over no earlier than `leaseDuration` after the old leader's instant, which
//!   is after the old leader's deadline because [`LeaderElectionConfig::validate`] requires
//!   `renewDeadline < leaseDuration`. The margin between the two covers the work's stop (a
//!   dropped future stops at its next await) and clock rate differences. What it cannot
//!   cover: a request the old leader sent before its deadline and that the server applies
//!   after it (as with client-go).
//! - **A leader that sees another holder stops at once**, without waiting for its deadline.
//! - **Identities must be unique**: a record naming this candidate's identity that this
//!   candidate did not write (another process given the same identity) counts as another
//!   holder's, logged as an error; client-go would let both lead.
//! - **Bounded waits**: every lock call is bounded by the renew deadline (while leading) or
//!   by the retry period plus the renew deadline (while a candidate), and shutdown
//!   interrupts any of them.
//! - On shutdown a leader stops its work first and then, with
//!   [`LeaderElectionConfig::release_on_cancel`], releases the Lease (empty holder, a lease of
//!   1 s), so that another candidate takes over at its next try instead of a lease duration
//!   later (client-go's `ReleaseOnCancel`).

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// kube-controller-manager's `--leader-elect-lease-duration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// kube-controller-manager's `--leader-elect-renew-deadline`.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// kube-controller-manager's `--leader-elect-retry-period`.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: a candidate waits between 1 and 1 + this many retry periods.
const JITTER: f64 = 1.2;
/// The longest lease duration honoured from a record (a larger one is read as this).
const MAX_RECORD_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The election fields of a Lease's `spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds the lease; empty when nobody does (released).
    pub holder_identity: String,
    /// How long the holder's lease lasts after each renewal, in seconds.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired it (RFC 3339 with microseconds, a `MicroTime`).
    pub acquire_time: Option<String>,
    /// When the holder last renewed it.
    pub renew_time: Option<String>,
    /// How many times the holder changed.
    pub lease_transitions: i32,
}

impl LeaseRecord {
    /// The record as a Lease `spec`.
    pub fn to_spec(&self) -> Value {
        let mut spec = json!({
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        });
        if !self.holder_identity.is_empty() {
            spec["holderIdentity"] = json!(self.holder_identity);
        }
        if let Some(t) = &self.acquire_time {
            spec["acquireTime"] = json!(t);
        }
        if let Some(t) = &self.renew_time {
            spec["renewTime"] = json!(t);
        }
        spec
    }

    /// The record of a Lease `spec` (missing or mistyped fields read as empty).
    pub fn from_spec(spec: &Value) -> Self {
        let text = |k: &str| spec.get(k).and_then(Value::as_str).map(str::to_owned);
        let int = |k: &str| {
            spec.get(k)
                .and_then(Value::as_i64)
                .and_then(|n| i32::try_from(n).ok())
                .unwrap_or(0)
        };
        Self {
            holder_identity: text("holderIdentity").unwrap_or_default(),
            lease_duration_seconds: int("leaseDurationSeconds"),
            acquire_time: text("acquireTime"),
            renew_time: text("renewTime"),
            lease_transitions: int("leaseTransitions"),
        }
    }

    /// How long this record's lease lasts (`fallback` when it states none).
    fn duration(&self, fallback: Duration) -> Duration {
        match u64::try_from(self.lease_duration_seconds) {
            Ok(s) if s > 0 => Duration::from_secs(s).min(MAX_RECORD_DURATION),
            _ => fallback,
        }
    }
}

/// A Lease as read or written: its record and its `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// The election fields.
    pub record: LeaseRecord,
    /// The version a conditional update must name.
    pub resource_version: String,
}

/// Reads and writes one Lease (client-go's `resourcelock.Interface`).
///
/// `create` must fail when the Lease exists and `update` when its `resourceVersion` is no
/// longer `resource_version` (409 Conflict): the election's safety rests on it.
#[async_trait]
pub trait LeaseLock: Send + Sync {
    /// The Lease, or `None` when it does not exist.
    async fn get(&self) -> Result<Option<LeaseState>>;
    /// Creates the Lease with `record`; fails if it exists.
    async fn create(&self, record: &LeaseRecord) -> Result<LeaseState>;
    /// Replaces the Lease's record if its version is still `resource_version`.
    async fn update(&self, record: &LeaseRecord, resource_version: &str) -> Result<LeaseState>;
    /// `namespace/name`, for logs.
    fn describe(&self) -> String;
}

/// The record and version of a Lease object.
pub fn lease_state(lease: &Value) -> Result<LeaseState> {
    let resource_version = lease
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Decode("a Lease without metadata.resourceVersion".into()))?
        .to_owned();
    Ok(LeaseState {
        record: LeaseRecord::from_spec(lease.get("spec").unwrap_or(&Value::Null)),
        resource_version,
    })
}

/// How an elector behaves (client-go's `LeaderElectionConfig`).
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// This candidate's identity, unique among the candidates (e.g. host name and a random
    /// suffix).
    pub identity: String,
    /// How long a lease lasts after each renewal (whole seconds are written to the Lease).
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews and a candidate tries (with jitter).
    pub retry_period: Duration,
    /// Release the lease when stopped while leading.
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// kube-controller-manager's defaults (15 s, 10 s, 2 s), releasing on cancel.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: true,
        }
    }

    /// Checks what the invariants need: a non-empty identity, and
    /// `leaseDuration (whole seconds) > renewDeadline > 1.2 × retryPeriod > 0` (client-go's
    /// checks).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(format!("leader election: {m}")));
        if self.identity.is_empty() {
            return bad("the identity is empty".into());
        }
        if self.retry_period.is_zero() {
            return bad("the retry period must be positive".into());
        }
        let whole = Duration::from_secs(self.lease_duration.as_secs());
        if whole <= self.renew_deadline {
            return bad(format!(
                "the lease duration ({whole:?} in whole seconds) must be longer than the renew \
                 deadline ({:?})",
                self.renew_deadline
            ));
        }
        if i32::try_from(whole.as_secs()).is_err() {
            return bad("the lease duration does not fit a Lease".into());
        }
        if self.renew_deadline.as_secs_f64() <= JITTER * self.retry_period.as_secs_f64() {
            return bad(format!(
                "the renew deadline ({:?}) must be longer than {JITTER} × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }
}

/// What one try found.
enum Try {
    /// This candidate holds the lease (acquired or renewed).
    Holds,
    /// Someone else holds a valid lease.
    HeldBy(String),
}

/// Why leading ended.
enum Ended {
    Shutdown,
    Lost(String),
}

/// One candidate of a leader election. See the module docs for the protocol and its
/// invariants.
pub struct LeaderElector<L> {
    lock: L,
    config: LeaderElectionConfig,
    /// The record last seen (or written) and when it was first seen.
    observed: Option<(LeaseState, Instant)>,
    /// The resource version of this candidate's last successful write of the Lease: a record
    /// naming this identity at another version was written by someone else.
    written: Option<String>,
    leading: watch::Sender<bool>,
}

impl<L: LeaseLock> std::fmt::Debug for LeaderElector<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &self.lock.describe())
            .field("identity", &self.config.identity)
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}

impl<L: LeaseLock> LeaderElector<L> {
    /// An elector on `lock`; fails if `config` does not [validate](LeaderElectionConfig::validate).
    pub fn new(lock: L, config: LeaderElectionConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            lock,
            config,
            observed: None,
            written: None,
            leading: watch::channel(false).0,
        })
    }

    /// Whether this candidate is leading now (its work running), as it changes.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs the election until `shutdown` resolves. Each time this candidate becomes the
    /// leader, `lead()` is called and its future polled until leadership ends, when it is
    /// dropped (so the work must stop at any await point; a future that ends early leaves
    /// the lease held). After losing the lease it is a candidate again.
    ///
    /// # Cancel safety
    /// Dropping the returned future drops the work at once but does not release the lease
    /// (it expires); resolve `shutdown` for a release.
    pub async fn run<F, Fut>(mut self, mut lead: F, shutdown: impl Future<Output = ()>)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let lease = self.lock.describe();
        let id = self.config.identity.clone();
        loop {
            // A candidate until it holds the lease.
            let acquired_at = loop {
                let started = Instant::now();
                let bound = self.config.retry_period + self.config.renew_deadline;
                let outcome = tokio::select! {
                    () = &mut shutdown => return,
                    r = tokio::time::timeout(bound, self.try_acquire_or_renew()) => r,
                };
                match outcome {
                    Ok(Ok(Try::Holds)) => break started,
                    Ok(Ok(Try::HeldBy(_))) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(%lease, error = %e, "leader election: try failed")
                    }
                    Err(_) => tracing::debug!(%lease, "leader election: try timed out"),
                }
                let wait = jittered(self.config.retry_period);
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(wait) => {}
                }
            };
            tracing::info!(%lease, identity = %id, "leader election: leading");
            self.leading.send_replace(true);
            let ended = {
                // Work that ends by itself leaves the lease held until shutdown.
                let work = async {
                    lead().await;
                    std::future::pending::<std::convert::Infallible>().await
                };
                let renewals = self.renew_until_lost(acquired_at);
                tokio::select! {
                    biased;
                    () = &mut shutdown => Ended::Shutdown,
                    lost = renewals => Ended::Lost(lost),
                    never = work => match never {},
                }
                // The work is dropped here, before anything else happens.
            };
            self.leading.send_replace(false);
            match ended {
                Ended::Shutdown => {
                    tracing::info!(%lease, identity = %id, "leader election: stopped leading (shutdown)");
                    if self.config.release_on_cancel {
                        self.release().await;
                    }
                    return;
                }
                Ended::Lost(why) => {
                    tracing::warn!(%lease, identity = %id, reason = %why, "leader election: lost the lease; work stopped");
                }
            }
        }
    }

    /// Renews every retry period; returns (why) once the lease is lost: no renewal succeeded
    /// within the renew deadline of the last one's start, or another holder was seen.
    async fn renew_until_lost(&mut self, acquired_at: Instant) -> String {
        let mut renewed_at = acquired_at;
        loop {
            let deadline = crate::instant::after(renewed_at, self.config.renew_deadline);
            let next = crate::instant::from_now(self.config.retry_period).min(deadline);
            tokio::time::sleep_until(next).await;
            let started = Instant::now();
            if started >= deadline {
                return format!("no renewal within {:?}", self.config.renew_deadline);
            }
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(Try::Holds)) => renewed_at = started,
                Ok(Ok(Try::HeldBy(other))) => return format!("{other} holds the lease"),
                Ok(Err(e)) => {
                    tracing::debug!(lease = %self.lock.describe(), error = %e, "leader election: renewal failed")
                }
                Err(_) => return format!("no renewal within {:?}", self.config.renew_deadline),
            }
        }
    }

    /// One try (client-go's `tryAcquireOrRenew`).
    async fn try_acquire_or_renew(&mut self) -> Result<Try> {
        let now = micro_time_now();
        let fresh = LeaseRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: i32::try_from(self.config.lease_duration.as_secs())
                .unwrap_or(i32::MAX),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: 0,
        };
        let Some(current) = self.lock.get().await? else {
            let written = self.lock.create(&fresh).await?;
            self.written = Some(written.resource_version.clone());
            self.observed = Some((written, Instant::now()));
            return Ok(Try::Holds);
        };
        let seen = Instant::now();
        let first_seen = match &self.observed {
            Some((known, at)) if *known == current => *at,
            _ => {
                self.observed = Some((current.clone(), seen));
                seen
            }
        };
        let old = &current.record;
        let expires = first_seen.checked_add(old.duration(self.config.lease_duration));
        let valid = expires.is_none_or(|e| e > seen);
        if !old.holder_identity.is_empty() && old.holder_identity != self.config.identity && valid {
            return Ok(Try::HeldBy(old.holder_identity.clone()));
        }
        if old.holder_identity == self.config.identity
            && valid
            && self.written.as_deref() != Some(current.resource_version.as_str())
        {
            // Our identity, but not our write: another candidate was given the same identity
            // (client-go would let both lead). Treated as another holder: this one waits until
            // that lease expires (so a restarted process with a fixed identity waits one lease
            // duration before it takes over its old lease).
            tracing::error!(
                lease = %self.lock.describe(),
                identity = %self.config.identity,
                "leader election: another candidate holds the lease under this same identity; \
                 every candidate's identity (--leader-elect-identity) must be unique"
            );
            return Ok(Try::HeldBy(format!(
                "another candidate with the same identity {}",
                self.config.identity
            )));
        }
        let mut next = fresh;
        if old.holder_identity == self.config.identity {
            next.acquire_time.clone_from(&old.acquire_time);
            next.lease_transitions = old.lease_transitions;
        } else {
            next.lease_transitions = old.lease_transitions.saturating_add(1);
        }
        let written = self.lock.update(&next, &current.resource_version).await?;
        self.written = Some(written.resource_version.clone());
        self.observed = Some((written, Instant::now()));
        Ok(Try::Holds)
    }

    /// Gives the lease up (empty holder, a 1 s lease), if the last record seen is ours;
    /// bounded by the renew deadline.
    async fn release(&mut self) {
        let Some((state, _)) = &self.observed else {
            return;
        };
        if state.record.holder_identity != self.config.identity {
            return;
        }
        let now = micro_time_now();
        let record = LeaseRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: state.record.lease_transitions,
        };
        let rv = state.resource_version.clone();
        let lease = self.lock.describe();
        match tokio::time::timeout(self.config.renew_deadline, self.lock.update(&record, &rv)).await
        {
            Ok(Ok(_)) => tracing::info!(%lease, "leader election: lease released"),
            Ok(Err(e)) => {
                tracing::warn!(%lease, error = %e, "leader election: releasing the lease failed")
            }
            Err(_) => tracing::warn!(%lease, "leader election: releasing the lease timed out"),
        }
    }
}

/// `d` × a random factor in [1, 1 + [`JITTER`]).
fn jittered(d: Duration) -> Duration {
    let r: f64 = rand::rng().random();
    d.mul_f64(1.0 + JITTER * r)
}

/// Now as a Kubernetes `MicroTime` (`2006-01-02T15:04:05.000000Z`).
pub fn micro_time_now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// A unique identity for this process: the host name, then a random suffix (as
/// kube-controller-manager's `hostname_uuid`).
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let suffix: u64 = rand::rng().random();
    format!("{host}_{suffix:016x}")
}

#[cfg(test)]
mod tests;
