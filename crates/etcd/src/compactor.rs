//! The compactor: keeps etcd's history to roughly one interval by compacting, every interval,
//! the revision it saw on the previous round (Kubernetes' `etcd3/compact.go` protocol).
//!
//! Several servers may run a compactor against one etcd. They coordinate through one
//! well-known key (default `compact_rev_key`): its *version* (number of writes) is a logical
//! compaction time. A round succeeds only if the key's version still equals the time this
//! compactor last saw (a compare-and-swap); the winner bumps the time and compacts, the losers
//! adopt the new time and try again next interval. So in steady state exactly one compaction
//! happens per interval, and when the winning server dies another takes over within two
//! intervals.
//!
//! Every server also learns the compactions the others make, so that its watch cache answers
//! 410 below them (`Storage::compacted_revision`): a round it loses reads the revision the
//! winner wrote to the key, and, whether or not it compacts at all (an interval of zero, as
//! upstream's `--etcd-compaction-interval=0`), it reads the key every [`OBSERVE_INTERVAL`].
//! A compaction made without the key (e.g. `etcdctl compact`) is learnt when a watch meets it.
//!
//! Invariants: a compaction never removes history younger than one interval (it compacts the
//! revision seen one round earlier), and the first round after start never compacts.

use std::time::Duration;

use bytes::Bytes;
use listwatch_storage::{Error, Result};
use tokio::task::JoinHandle;

use crate::client::{EtcdClient, require_leader};
use crate::proto::etcdserverpb::{
    CompactionRequest, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, compare,
    request_op, response_op,
};
use crate::store::{kv_client, rev_of};

/// Upstream's compaction interval.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// Upstream's coordination key.
pub const DEFAULT_COMPACT_KEY: &str = "compact_rev_key";

/// How often a server reads the coordination key to learn the other servers' compactions
/// (upstream's cacher reads the compaction revision as often: `compactorPollPeriod`).
pub const OBSERVE_INTERVAL: Duration = Duration::from_secs(15);

/// One compactor's memory between rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactorState {
    /// The coordination key's version this compactor last saw (logical compaction time).
    pub time: i64,
    /// The store revision seen on the last round: what the next successful round compacts.
    pub revision: u64,
}

/// What a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundOutcome {
    /// This compactor won the round and compacted at the revision.
    Compacted(u64),
    /// This compactor won the first round; there was nothing known to compact yet.
    Started,
    /// Another compactor won since this one's last round.
    Lost,
}

/// Runs compaction rounds on a timer; dropping (or [`Compactor::stop`]) ends it.
#[derive(Debug)]
pub struct Compactor {
    task: JoinHandle<()>,
}

impl Compactor {
    /// Starts compacting every `interval` (never when it is zero), coordinating through
    /// `key`, and reading `key` every [`OBSERVE_INTERVAL`] to learn the other servers'
    /// compactions.
    pub fn spawn(client: EtcdClient, interval: Duration, key: impl Into<String>) -> Self {
        Self::spawn_observing_every(client, interval, key, OBSERVE_INTERVAL)
    }

    /// [`Compactor::spawn`] with another observation period (tests).
    pub fn spawn_observing_every(
        client: EtcdClient,
        interval: Duration,
        key: impl Into<String>,
        observe: Duration,
    ) -> Self {
        let key: String = key.into();
        let task = tokio::spawn(async move {
            let mut state = CompactorState::default();
            let start = tokio::time::Instant::now();
            // An interval of zero never compacts.
            let mut rounds = (!interval.is_zero()).then(|| {
                let mut t = tokio::time::interval_at(start + interval, interval);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            let observe = observe.max(Duration::from_millis(100));
            let mut looks = tokio::time::interval_at(start + observe, observe);
            looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = next_round(rounds.as_mut()) => {
                        let (next, outcome) = compact_round(&client, &key, state).await;
                        match outcome {
                            Ok(outcome) => tracing::debug!(
                                ?outcome,
                                revision = next.revision,
                                "etcd compaction round"
                            ),
                            Err(e) => tracing::warn!(error = %e, "etcd compaction round failed"),
                        }
                        state = next;
                    }
                    _ = looks.tick() => {
                        if let Err(e) = observe_compaction(&client, &key).await {
                            tracing::debug!(error = %e, "reading the compaction key failed");
                        }
                    }
                }
            }
        });
        Self { task }
    }

    /// Stops the compactor.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The next tick of the rounds' timer; never when there is none.
async fn next_round(rounds: Option<&mut tokio::time::Interval>) {
    match rounds {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// One round of the protocol (see the module docs): the state for the next round, and what
/// the round did.
///
/// The state advances as far as the round got, also when it fails (as upstream's): a round
/// that won the coordination key and then failed to compact has still bumped the key's
/// version, so the next round must compare against the new time — keeping the old one would
/// lose this compactor's own compare-and-swap and skip a round. A round whose transaction
/// failed keeps the state it was given.
pub async fn compact_round(
    client: &EtcdClient,
    key: &str,
    state: CompactorState,
) -> (CompactorState, Result<RoundOutcome>) {
    let k = Bytes::from(key.as_bytes().to_vec());
    let txn = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Version as i32,
            key: k.clone(),
            target_union: Some(compare::TargetUnion::Version(state.time)),
            range_end: Bytes::new(),
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: k.clone(),
                // The value is informational: the last compacted revision.
                value: Bytes::from(state.revision.to_string().into_bytes()),
                ..Default::default()
            })),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: k,
                ..Default::default()
            })),
        }],
    };
    let resp = match client
        .unary("compaction txn", false, |ch| {
            let txn = txn.clone();
            async move { kv_client(ch).txn(require_leader(txn)).await }
        })
        .await
    {
        Ok(resp) => resp,
        Err(f) => return (state, Err(f.into_error(0))),
    };
    let current = rev_of(resp.header.as_ref().map_or(0, |h| h.revision));
    if !resp.succeeded {
        let time = match resp.responses.first().and_then(|r| r.response.as_ref()) {
            // A deleted key has version 0, which the next round's comparison then expects.
            Some(response_op::Response::ResponseRange(r)) => {
                // The winner wrote the revision it compacts: now this server knows it too.
                let compacted = r.kvs.first().and_then(|kv| {
                    std::str::from_utf8(&kv.value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                });
                client.note_compacted(compacted.unwrap_or(0));
                r.kvs.first().map_or(0, |kv| kv.version)
            }
            _ => {
                return (
                    state,
                    Err(Error::internal(
                        "compaction transaction failed without the key's value",
                    )),
                );
            }
        };
        let next = CompactorState {
            time,
            revision: current,
        };
        return (next, Ok(RoundOutcome::Lost));
    }
    let next = CompactorState {
        time: state.time + 1,
        revision: current,
    };
    if state.revision == 0 {
        return (next, Ok(RoundOutcome::Started));
    }
    let req = CompactionRequest {
        revision: i64::try_from(state.revision).unwrap_or(i64::MAX),
        physical: false,
    };
    let compacted = client
        .unary("compact", false, |ch| async move {
            kv_client(ch).compact(require_leader(req)).await
        })
        .await;
    let outcome = match compacted {
        // Or someone compacted past it already (e.g. by hand): the goal is met.
        Ok(_) | Err(crate::client::Failure::Compacted) => {
            client.note_compacted(state.revision);
            Ok(RoundOutcome::Compacted(state.revision))
        }
        Err(f) => Err(f.into_error(state.revision)),
    };
    (next, outcome)
}

/// Reads the coordination key and records the revision the last winning compactor wrote to
/// it (see [`EtcdClient::compacted_revision`]); returns that revision (0 when there is none).
/// A value that is not a revision is ignored.
pub async fn observe_compaction(client: &EtcdClient, key: &str) -> Result<u64> {
    let req = RangeRequest {
        key: Bytes::from(key.as_bytes().to_vec()),
        ..Default::default()
    };
    let resp = client
        .unary("compaction key", true, |ch| {
            let req = req.clone();
            async move { kv_client(ch).range(require_leader(req)).await }
        })
        .await
        .map_err(|f| f.into_error(0))?;
    let revision = resp
        .kvs
        .first()
        .and_then(|kv| std::str::from_utf8(&kv.value).ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    client.note_compacted(revision);
    Ok(revision)
}

/// The coordination key's version — the protocol's logical compaction time, i.e. how many
/// rounds any server won (0 when the key does not exist). For tools and tests; compactors
/// keep their own.
pub async fn compaction_time(client: &EtcdClient, key: &str) -> Result<i64> {
    let req = RangeRequest {
        key: Bytes::from(key.as_bytes().to_vec()),
        ..Default::default()
    };
    let resp = client
        .unary("compaction key", true, |ch| {
            let req = req.clone();
            async move { kv_client(ch).range(require_leader(req)).await }
        })
        .await
        .map_err(|f| f.into_error(0))?;
    Ok(resp.kvs.first().map_or(0, |kv| kv.version))
}

/// Compacts etcd's history at `revision` right away (tests and tools).
pub async fn compact_now(client: &EtcdClient, revision: u64) -> Result<()> {
    let req = CompactionRequest {
        revision: i64::try_from(revision).unwrap_or(i64::MAX),
        physical: true,
    };
    match client
        .unary("compact", false, |ch| async move {
            kv_client(ch).compact(require_leader(req)).await
        })
        .await
    {
        Ok(_) => {
            client.note_compacted(revision);
            Ok(())
        }
        Err(f) => Err(f.into_error(revision)),
    }
}
