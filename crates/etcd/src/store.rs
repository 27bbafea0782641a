//! [`EtcdStore`]: the [`Storage`] interface for one resource over etcd, with the semantics of
//! Kubernetes' `storage/etcd3` store.
//!
//! Invariants:
//! - a key `/{resource}/{namespace}/{name}` lives at `{root}/{resource}/{namespace}/{name}` in
//!   etcd; the value is the object's JSON without `metadata.resourceVersion`
//!   ([`Object::stored_json`]); an object's resource version is its key's `mod_revision`, and a
//!   write's result carries the revision of the transaction that made it;
//! - every write is one etcd transaction that compares the key's `mod_revision` with the state
//!   the write was computed from (0 for a create), so a concurrent writer can never be
//!   overwritten; a failed comparison returns the current value in the same round trip and the
//!   update is recomputed from it;
//! - a list reads every page at one revision (the first page's header revision, or the
//!   requested / continued one), so a paginated list is a consistent snapshot;
//! - the first attempt of a write may trust a caller's cached copy (the suggestion), but an
//!   error computed from a copy that might be stale is only returned after re-reading etcd.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, Updated, ValidateDeleteFn, WatchStream, decode_continue,
    encode_continue,
};
use tonic::transport::Channel;

use crate::client::{EtcdClient, Failure, require_leader};
use crate::progress::ProgressHub;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::lease_client::LeaseClient;
use crate::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest, RangeRequest,
    RangeResponse, RequestOp, TxnRequest, TxnResponse, compare, request_op, response_op,
};
use crate::proto::mvccpb::KeyValue;
use crate::watch::WatchSpec;

/// The largest page asked of etcd while filling a selective list (upstream's `maxLimit`).
pub(crate) const MAX_PAGE: i64 = 10_000;

/// gRPC messages can be as large as etcd's own limit (a page of big objects).
const MAX_MESSAGE: usize = i32::MAX as usize;

/// Upstream's message for an expired continue token that comes with a fresh one.
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a \
    consistent list result. You can start a new list without the continue parameter, or use the \
    continue token in this response to retrieve the remainder of the results. Continuing with the \
    provided token results in an inconsistent list - objects that were created, modified, or \
    deleted between the time the first chunk was returned and now may show up in the list.";

/// The [`Storage`] of one resource in etcd.
///
/// Cheap to clone; clones share the client and the set of open watches (which
/// [`Storage::request_watch_progress`] reaches).
#[derive(Clone)]
pub struct EtcdStore {
    pub(crate) client: EtcdClient,
    /// Prepended to every key path; no trailing `/` (e.g. `/registry`).
    pub(crate) root: Arc<str>,
    /// How to parse this resource's objects.
    pub(crate) fields: SelectableFields,
    /// The open watches that asked for progress notifications.
    pub(crate) progress: Arc<ProgressHub>,
    /// The lease new TTL objects may share and when it expires; only locked briefly, never
    /// across an await.
    lease: Arc<Mutex<Option<(i64, Instant)>>>,
    /// What [`Storage::max_object_bytes`] declares: etcd's request limit less
    /// [`TXN_RESERVE`].
    max_object_bytes: usize,
}

/// Room left in an etcd request for what a write sends besides the object: the key (up
/// to a few hundred bytes) appears in the compare, the put and the read-back of a guarded
/// transaction, plus gRPC framing.
const TXN_RESERVE: usize = 4 * 1024;

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("root", &self.root)
            .field("client", &self.client)
            .finish()
    }
}

/// A stored object as one attempt of a write saw it.
struct State {
    /// The object, `None` when the key is absent.
    obj: Option<Object>,
    /// The key's mod_revision (0 when absent): what the write's comparison expects.
    rev: u64,
}

pub(crate) fn rev_of(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

fn as_i64(r: u64) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the keyspace.
    vec![0]
}

pub(crate) fn kv_client(ch: Channel) -> KvClient<Channel> {
    KvClient::new(ch)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

impl EtcdStore {
    /// A store for one resource: keys live under `root` (e.g. `/registry`; a test may use a
    /// fresh root to isolate itself), objects are parsed with `fields`.
    pub fn new(client: EtcdClient, root: impl Into<String>, fields: SelectableFields) -> Self {
        let root: String = root.into();
        let root = root.trim_end_matches('/').to_owned();
        Self {
            client,
            root: root.into(),
            fields,
            progress: Arc::new(ProgressHub::default()),
            lease: Arc::new(Mutex::new(None)),
            max_object_bytes: listwatch_storage::DEFAULT_MAX_OBJECT_BYTES - TXN_RESERVE,
        }
    }

    /// Declares etcd's `--max-request-bytes` (default 1.5 MiB), so that writers refuse an
    /// object etcd would refuse before sending it.
    #[must_use]
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_object_bytes = bytes.saturating_sub(TXN_RESERVE);
        self
    }

    /// The client this store uses.
    pub fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// The key root.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The etcd key of `key`.
    pub fn etcd_key(&self, key: &Key) -> String {
        format!("{}{}", self.root, key.path())
    }

    pub(crate) fn decode(&self, kv: &KeyValue) -> Result<Object> {
        let obj = Object::from_json(&kv.value, &self.fields).map_err(|e| Error::InvalidObject {
            message: format!(
                "stored object at {:?} does not decode: {e}",
                String::from_utf8_lossy(&kv.key)
            ),
        })?;
        Ok(obj.with_resource_version(rev_of(kv.mod_revision)))
    }

    pub(crate) async fn range(
        &self,
        req: RangeRequest,
    ) -> std::result::Result<RangeResponse, Failure> {
        let resp = self
            .client
            .unary("range", true, |ch| {
                let req = req.clone();
                async move { kv_client(ch).range(require_leader(req)).await }
            })
            .await?;
        self.client.observe_header(resp.header.as_ref());
        Ok(resp)
    }

    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        let resp = self
            .client
            .unary("txn", false, |ch| {
                let req = req.clone();
                async move { kv_client(ch).txn(require_leader(req)).await }
            })
            .await
            .map_err(|f| f.into_error(0))?;
        self.client.observe_header(resp.header.as_ref());
        Ok(resp)
    }

    /// The current revision, for error messages and expired continuations.
    pub(crate) async fn current_rev(&self) -> Result<u64> {
        let resp = self
            .range(RangeRequest {
                key: Bytes::from(self.root.as_bytes().to_vec()),
                count_only: true,
                ..Default::default()
            })
            .await
            .map_err(|f| f.into_error(0))?;
        Ok(rev_of(resp.header.map_or(0, |h| h.revision)))
    }

    /// A lease for an object that should expire after `ttl`: upstream's lease manager, which
    /// shares one lease between objects whose TTLs end within a small window (5% of the TTL,
    /// at most a minute), so that many short-lived objects (events) do not each cost a lease.
    /// Returns the lease and whether it is shared (a shared lease must never be revoked).
    async fn lease_for(&self, ttl: Duration) -> Result<(i64, bool)> {
        // etcd leases count whole seconds; round up so an object never expires early.
        let secs = (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1);
        let reuse = (secs / 20).min(60);
        let now = Instant::now();
        let want_until = now + Duration::from_secs(secs);
        if reuse > 0
            && let Ok(cache) = self.lease.lock()
            && let Some((id, expires)) = *cache
            && want_until < expires
            && want_until + Duration::from_secs(reuse) > expires
        {
            return Ok((id, true));
        }
        let req = LeaseGrantRequest {
            ttl: as_i64(secs + reuse),
            id: 0,
        };
        let resp = self
            .client
            .unary("lease grant", false, |ch| async move {
                LeaseClient::new(ch).lease_grant(require_leader(req)).await
            })
            .await
            .map_err(|f| f.into_error(0))?;
        if !resp.error.is_empty() {
            return Err(Error::internal(format!("etcd lease grant: {}", resp.error)));
        }
        if reuse == 0 {
            return Ok((resp.id, false));
        }
        if let Ok(mut cache) = self.lease.lock() {
            *cache = Some((resp.id, now + Duration::from_secs(secs + reuse)));
        }
        Ok((resp.id, true))
    }

    async fn revoke_lease(&self, id: i64) {
        let req = LeaseRevokeRequest { id };
        let res = self
            .client
            .unary("lease revoke", false, |ch| async move {
                LeaseClient::new(ch).lease_revoke(require_leader(req)).await
            })
            .await;
        if let Err(e) = res {
            // The lease expires on its own; this only tidies up early.
            tracing::debug!(lease = id, error = ?e, "could not revoke an unused lease");
        }
    }

    /// The state a read-modify-write starts from: the caller's suggestion (a possibly stale
    /// cached copy; `false`: not known to be current) or a fresh read (`true`).
    async fn first_state(
        &self,
        key: &Key,
        k: &Bytes,
        suggestion: Option<Object>,
        ignore_not_found: bool,
    ) -> Result<(State, bool)> {
        Ok(match suggestion {
            Some(s) => (
                State {
                    rev: s.resource_version(),
                    obj: Some(s),
                },
                false,
            ),
            None => (self.read_state(key, k, ignore_not_found).await?, true),
        })
    }

    async fn read_state(&self, key: &Key, k: &Bytes, ignore_not_found: bool) -> Result<State> {
        let resp = self
            .range(RangeRequest {
                key: k.clone(),
                ..Default::default()
            })
            .await
            .map_err(|f| f.into_error(0))?;
        self.state_from(key, resp.kvs.first(), ignore_not_found)
    }

    fn state_from(
        &self,
        key: &Key,
        kv: Option<&KeyValue>,
        ignore_not_found: bool,
    ) -> Result<State> {
        match kv {
            Some(kv) => Ok(State {
                obj: Some(self.decode(kv)?),
                rev: rev_of(kv.mod_revision),
            }),
            None if ignore_not_found => Ok(State { obj: None, rev: 0 }),
            None => Err(key.not_found()),
        }
    }

    /// The key's current value from the `Else: Get` branch of a failed transaction.
    fn state_from_failed_txn(
        &self,
        key: &Key,
        resp: &TxnResponse,
        ignore_not_found: bool,
    ) -> Result<State> {
        let range = match resp.responses.first().and_then(|r| r.response.as_ref()) {
            Some(response_op::Response::ResponseRange(r)) => r,
            _ => {
                return Err(Error::internal(
                    "etcd transaction failed without returning the current value",
                ));
            }
        };
        self.state_from(key, range.kvs.first(), ignore_not_found)
    }

    fn check_preconditions(
        &self,
        key: &Key,
        p: Option<&Preconditions>,
        obj: Option<&Object>,
    ) -> Result<()> {
        let Some(p) = p else { return Ok(()) };
        match obj {
            Some(o) => p.check(key, o),
            // Upstream checks an absent object as an empty one: any precondition fails.
            None if p.uid.is_some() || p.resource_version.is_some() => {
                let empty = Object::from_json(b"{}", &self.fields)
                    .map_err(|e| Error::internal(e.to_string()))?;
                p.check(key, &empty)
            }
            None => Ok(()),
        }
    }

    fn object_key(&self, key: &Key) -> Result<Bytes> {
        if key.is_collection() {
            return Err(Error::bad_request(format!(
                "{key} names a collection, not an object"
            )));
        }
        Ok(Bytes::from(self.etcd_key(key).into_bytes()))
    }

    /// Maps a failed list page to upstream's errors.
    async fn list_error(
        &self,
        f: Failure,
        continuing: bool,
        start: &[u8],
        prefix: &str,
        rev: u64,
    ) -> Error {
        match f {
            Failure::Compacted if continuing => {
                let start = String::from_utf8_lossy(start).into_owned();
                let token = match self.current_rev().await {
                    Ok(cur) => encode_continue(&start, prefix, cur).ok(),
                    Err(_) => None,
                };
                Error::Expired {
                    message: INCONSISTENT_CONTINUE.to_owned(),
                    continue_token: token,
                }
            }
            Failure::Compacted => Error::Expired {
                message: "The resourceVersion for the provided list is too old.".to_owned(),
                continue_token: None,
            },
            Failure::FutureRevision => Error::TooLargeResourceVersion {
                requested: rev,
                current: self.current_rev().await.unwrap_or(0),
            },
            other => other.into_error(rev),
        }
    }

    /// The watch parameters of `key` (prefix range for collections).
    pub(crate) fn watch_range(&self, key: &Key) -> (Bytes, Bytes) {
        let k = self.etcd_key(key).into_bytes();
        let end = if key.is_collection() {
            prefix_end(&k)
        } else {
            Vec::new()
        };
        (Bytes::from(k), Bytes::from(end))
    }
}

fn put_op(key: Bytes, value: Bytes, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key,
            value,
            lease,
            ..Default::default()
        })),
    }
}

fn get_op(key: Bytes) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key,
            ..Default::default()
        })),
    }
}

fn mod_revision_is(key: Bytes, rev: u64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        key,
        target_union: Some(compare::TargetUnion::ModRevision(as_i64(rev))),
        range_end: Bytes::new(),
    }
}

fn header_rev(resp: &TxnResponse) -> u64 {
    rev_of(resp.header.as_ref().map_or(0, |h| h.revision))
}

#[async_trait]
impl Storage for EtcdStore {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        let k = self.object_key(key)?;
        if obj.resource_version() != 0 {
            return Err(Error::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let (lease, shared) = match ttl {
            Some(ttl) => self.lease_for(ttl).await?,
            None => (0, false),
        };
        let resp = self
            .txn(TxnRequest {
                compare: vec![mod_revision_is(k.clone(), 0)],
                success: vec![put_op(k, obj.stored_json().clone(), lease)],
                failure: vec![],
            })
            .await?;
        if !resp.succeeded {
            if lease != 0 && !shared {
                self.revoke_lease(lease).await;
            }
            return Err(key.already_exists());
        }
        Ok(obj.with_resource_version(header_rev(&resp)))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let k = self.object_key(key)?;
        let resp = self
            .range(RangeRequest {
                key: k,
                ..Default::default()
            })
            .await
            .map_err(|f| f.into_error(0))?;
        let current = rev_of(resp.header.as_ref().map_or(0, |h| h.revision));
        if let Some(n) = opts.resource_version.filter(|n| *n > current) {
            return Err(Error::TooLargeResourceVersion {
                requested: n,
                current,
            });
        }
        match resp.kvs.first() {
            Some(kv) => self.decode(kv).map(Some),
            None if opts.ignore_not_found => Ok(None),
            None => Err(key.not_found()),
        }
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let pred = &opts.predicate;
        let collection = key.is_collection();
        let prefix = self.etcd_key(key);
        let range_end = if collection {
            Bytes::from(prefix_end(prefix.as_bytes()))
        } else {
            Bytes::new()
        };
        let requested = if collection {
            opts.page_limit().map(as_i64)
        } else {
            None
        };
        let paging = requested.is_some();
        let mut limit = requested.unwrap_or(0);
        let mut start: Vec<u8> = prefix.as_bytes().to_vec();
        let mut with_rev: u64 = 0;
        let continuing = collection && opts.continue_token.is_some();
        let min_rv = opts.resource_version.filter(|n| *n > 0);

        if let (true, Some(token)) = (collection, &opts.continue_token) {
            let (next, rv) = decode_continue(token, &prefix)?;
            start = next.into_bytes();
            with_rev = rv;
        } else if let Some(n) = min_rv {
            match opts.resource_version_match {
                Some(ResourceVersionMatch::Exact) => with_rev = n,
                // Legacy: an RV with a limit reads exactly at it (so pages line up).
                None if paging => with_rev = n,
                _ => {}
            }
        }

        // Where this call started: an expired continuation resumes here, not at the key the
        // internal pages advanced to, since the items collected so far are dropped with the
        // error (upstream's `continueKey`).
        let first_key = start.clone();
        let mut items = Vec::new();
        let mut last_key = Bytes::new();
        let mut has_more;
        let mut count;
        loop {
            let req = RangeRequest {
                key: Bytes::from(start.clone()),
                range_end: range_end.clone(),
                limit,
                revision: as_i64(with_rev),
                ..Default::default()
            };
            let resp = match self.range(req).await {
                Ok(r) => r,
                Err(f) => {
                    return Err(self
                        .list_error(f, continuing, &first_key, &prefix, with_rev)
                        .await);
                }
            };
            let header = rev_of(resp.header.as_ref().map_or(0, |h| h.revision));
            if let Some(n) = min_rv.filter(|n| *n > header) {
                return Err(Error::TooLargeResourceVersion {
                    requested: n,
                    current: header,
                });
            }
            has_more = resp.more;
            count = resp.count;
            if resp.kvs.is_empty() && resp.more {
                return Err(Error::internal(
                    "no results were found, but etcd indicated there were more values remaining",
                ));
            }
            if with_rev == 0 {
                with_rev = header;
            }
            for kv in &resp.kvs {
                if let Some(want) = requested
                    && as_i64(items.len() as u64) >= want
                {
                    has_more = true;
                    break;
                }
                last_key = kv.key.clone();
                let obj = self.decode(kv)?;
                if pred.is_empty() || pred.matches(&obj) {
                    items.push(obj);
                }
            }
            if !has_more || !paging {
                break;
            }
            if requested.is_some_and(|want| as_i64(items.len() as u64) >= want) {
                break;
            }
            // A selective filter left the page short: ask for more at once next time.
            if limit < MAX_PAGE {
                limit = (limit * 2).min(MAX_PAGE);
            }
            start = last_key.to_vec();
            start.push(0);
        }

        let mut list = ObjectList {
            items,
            resource_version: with_rev,
            continue_token: None,
            remaining_item_count: None,
        };
        if has_more {
            let mut next = String::from_utf8(last_key.to_vec())
                .map_err(|_| Error::internal("etcd returned a key that is not UTF-8"))?;
            next.push('\0');
            list.continue_token = Some(encode_continue(&next, &prefix, with_rev)?);
            if pred.is_empty() {
                list.remaining_item_count = Some(count - requested.unwrap_or(0));
            }
        }
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        crate::watch::start(self, WatchSpec::new(key, opts)).await
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let k = self.object_key(key)?;
        let (mut state, mut current) = self
            .first_state(key, &k, suggestion, ignore_not_found)
            .await?;
        loop {
            if let Err(e) = self.check_preconditions(key, preconditions, state.obj.as_ref()) {
                if current {
                    return Err(e);
                }
                state = self.read_state(key, &k, ignore_not_found).await?;
                current = true;
                continue;
            }
            let Updated { object: new, ttl } = match update(state.obj.as_ref()) {
                Ok(u) => u,
                Err(e) => {
                    if current {
                        return Err(e);
                    }
                    let stale_rev = state.rev;
                    state = self.read_state(key, &k, ignore_not_found).await?;
                    current = true;
                    if state.rev == stale_rev {
                        return Err(e);
                    }
                    continue;
                }
            };
            let data = new.stored_json().clone();
            if let Some(old) = &state.obj
                && old.stored_json() == &data
            {
                if !current {
                    state = self.read_state(key, &k, ignore_not_found).await?;
                    current = true;
                    if state.obj.as_ref().is_none_or(|o| o.stored_json() != &data) {
                        continue;
                    }
                }
                if let Some(o) = state.obj.take() {
                    return Ok(o);
                }
                continue;
            }
            // As upstream, the TTL the update returned applies to this write; a Put without a
            // lease detaches the key from the lease it had.
            let (lease, shared) = match ttl {
                Some(ttl) => self.lease_for(ttl).await?,
                None => (0, false),
            };
            let resp = self
                .txn(TxnRequest {
                    compare: vec![mod_revision_is(k.clone(), state.rev)],
                    success: vec![put_op(k.clone(), data, lease)],
                    failure: vec![get_op(k.clone())],
                })
                .await?;
            if !resp.succeeded {
                if lease != 0 && !shared {
                    self.revoke_lease(lease).await;
                }
                tracing::debug!(key = %key, "guaranteed update conflicted, retrying");
                state = self.state_from_failed_txn(key, &resp, ignore_not_found)?;
                current = true;
                continue;
            }
            return Ok(new.with_resource_version(header_rev(&resp)));
        }
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let k = self.object_key(key)?;
        let (mut state, mut current) = self.first_state(key, &k, suggestion, false).await?;
        loop {
            let Some(obj) = state.obj.clone() else {
                return Err(key.not_found());
            };
            let checked = self
                .check_preconditions(key, preconditions, Some(&obj))
                .and_then(|()| validate(&obj));
            if let Err(e) = checked {
                if current {
                    return Err(e);
                }
                let stale_rev = state.rev;
                state = self.read_state(key, &k, false).await?;
                current = true;
                if state.rev == stale_rev {
                    return Err(e);
                }
                continue;
            }
            let resp = self
                .txn(TxnRequest {
                    compare: vec![mod_revision_is(k.clone(), state.rev)],
                    success: vec![RequestOp {
                        request: Some(request_op::Request::RequestDeleteRange(
                            DeleteRangeRequest {
                                key: k.clone(),
                                ..Default::default()
                            },
                        )),
                    }],
                    failure: vec![get_op(k.clone())],
                })
                .await?;
            if !resp.succeeded {
                tracing::debug!(key = %key, "delete conflicted, retrying");
                state = self.state_from_failed_txn(key, &resp, false)?;
                current = true;
                continue;
            }
            return Ok(obj.with_resource_version(header_rev(&resp)));
        }
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        let (k, end) = self.watch_range(key);
        let resp = self
            .range(RangeRequest {
                key: k,
                range_end: end,
                count_only: true,
                ..Default::default()
            })
            .await
            .map_err(|f| f.into_error(0))?;
        Ok(Stats {
            object_count: rev_of(resp.count),
        })
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.progress.request_all();
        Ok(())
    }

    async fn current_resource_version(&self) -> Result<u64> {
        self.current_rev().await
    }

    async fn readiness(&self) -> Result<()> {
        self.client.health().await
    }

    fn compacted_revision(&self) -> u64 {
        self.client.compacted_revision()
    }

    fn max_object_bytes(&self) -> Option<usize> {
        Some(self.max_object_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_cover_exactly_the_prefix() {
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
