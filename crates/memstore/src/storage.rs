//! The [`Storage`] implementation of [`MemStore`]: create, get, list, watch, guaranteed
//! update, delete, stats and progress, over the partitions and the core's commit protocol.
//!
//! Invariants: an update or delete reads the newest applied version, which may not be
//! durable yet, so an answer derived from it is returned only once it is (`settled`); a
//! list reads at one revision under its partition's lock, so compaction cannot pass that
//! revision while the list reads; a revision above the current one is
//! `TooLargeResourceVersion`, an exact one below the compaction is `Expired`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::Object;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, Updated, ValidateDeleteFn, WatchStream, decode_continue,
    encode_continue,
};
use tokio::sync::mpsc;

use crate::part::{PartState, resource_of};
use crate::watch::WatchSpec;
use crate::{MemStore, poisoned, watch};

impl MemStore {
    /// Where a list starts and at which revision it reads (under the partition's lock, so
    /// that compaction cannot pass the revision while the list reads it).
    fn list_plan(&self, st: &PartState, key: &Key, opts: &ListOptions) -> Result<(String, u64)> {
        let _ = st;
        let core = self.core();
        let current = core.visible();
        let compacted = core.compacted();
        if let Some(token) = &opts.continue_token {
            let (start, rev) = decode_continue(token, key.path())?;
            if rev < compacted {
                // Upstream lets the client carry on inconsistently, at the latest revision.
                let fresh = encode_continue(&start, key.path(), current)?;
                return Err(Error::Expired {
                    message: "the provided continue parameter is too old to display a consistent \
                              list result; start a new list without the continue parameter, or use \
                              the continue token in this response to retrieve the remainder of the \
                              results (an inconsistent list)"
                        .into(),
                    continue_token: Some(fresh),
                });
            }
            if rev > current {
                return Err(too_large(rev, current));
            }
            return Ok((start, rev));
        }
        // Upstream's "legacy exact match": a version without a match but with a limit reads
        // exactly at that version, as etcd3 does (so that the pages of a walk line up).
        let exact = match opts.resource_version_match {
            Some(ResourceVersionMatch::Exact) => true,
            None => opts.page_limit().is_some(),
            Some(_) => false,
        };
        let rev = match opts.resource_version {
            None | Some(0) => current,
            Some(n) if exact => {
                if n > current {
                    return Err(too_large(n, current));
                }
                if n < compacted {
                    return Err(Error::too_old(n, compacted));
                }
                n
            }
            Some(n) => {
                if n > current {
                    return Err(too_large(n, current));
                }
                current
            }
        };
        Ok((key.path().to_owned(), rev))
    }
}

fn too_large(requested: u64, current: u64) -> Error {
    Error::TooLargeResourceVersion { requested, current }
}

#[async_trait]
impl Storage for MemStore {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        if key.is_collection() {
            return Err(Error::bad_request(
                "create needs an object key, not a collection",
            ));
        }
        if obj.resource_version() != 0 {
            return Err(Error::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let Ok(rev) = self
            .core()
            .commit(key.path(), 0, Some(obj.clone()), ttl)
            .await?
        else {
            return Err(key.already_exists());
        };
        if let Some(ttl) = ttl {
            self.schedule_ttl(key, rev, ttl);
        }
        Ok(obj.with_resource_version(rev))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let current = self.core().visible();
        if let Some(n) = opts.resource_version.filter(|n| *n > current) {
            return Err(too_large(n, current));
        }
        let found = match self.core().existing_partition(resource_of(key.path()))? {
            Some(part) => part
                .state
                .read()
                .map_err(|_| poisoned())?
                .value_at(key.path(), current)
                .cloned(),
            None => None,
        };
        match found {
            Some(o) => Ok(Some(o)),
            None if opts.ignore_not_found => Ok(None),
            None => Err(key.not_found()),
        }
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let part = self.partition(key)?;
        let st = part.state.read().map_err(|_| poisoned())?;
        let (start, rev) = self.list_plan(&st, key, opts)?;
        let pred = &opts.predicate;
        if !key.is_collection() {
            let items = st
                .value_at(key.path(), rev)
                .filter(|o| pred.matches(o))
                .cloned();
            return Ok(ObjectList {
                items: items.into_iter().collect(),
                resource_version: rev,
                ..Default::default()
            });
        }
        let limit = opts.page_limit().and_then(|l| usize::try_from(l).ok());
        let prefix = key.path();
        // Without a selector a paginated list reports how many objects remain. That count is
        // remembered per walk, so each page costs its own objects (see `CountMemo`).
        let counted = match (limit, pred.is_empty()) {
            (Some(_), true) => {
                let memo = part
                    .memo
                    .lock()
                    .ok()
                    .and_then(|mut m| m.take(prefix, rev, &start));
                Some(memo.unwrap_or_else(|| st.live_from(prefix, &start, rev).count() as u64))
            }
            _ => None,
        };
        let mut items = Vec::new();
        let mut range = st.live_from(prefix, &start, rev);
        let mut last_key = None;
        for (k, o) in range.by_ref() {
            if pred.matches(o) {
                items.push(o.clone());
            }
            last_key = Some(k);
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let mut list = ObjectList {
            items,
            resource_version: rev,
            ..Default::default()
        };
        if limit.is_some() {
            let remaining = match counted {
                Some(total) => total.saturating_sub(list.items.len() as u64),
                // With a selector: whether anything at all follows (the next page reads the
                // same keys again, so a walk still reads each key at most twice).
                None => u64::from(range.next().is_some()),
            };
            if remaining > 0 {
                if let Some(k) = last_key {
                    let next = format!("{k}\0");
                    list.continue_token = Some(encode_continue(&next, prefix, rev)?);
                    if counted.is_some() {
                        list.remaining_item_count = i64::try_from(remaining).ok();
                        if let Ok(mut m) = part.memo.lock() {
                            m.put(prefix, rev, &next, remaining);
                        }
                    }
                }
            }
        }
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let core = Arc::clone(&self.life.core);
        let part = self.partition(key)?;
        // Subscribe before reading, so that no write between the read and the wait is missed.
        let ticks = part.subscribe(key.path(), key.is_collection());
        let progress = core.progress.subscribe();
        let spec = {
            let st = part.state.read().map_err(|_| poisoned())?;
            let current = core.visible();
            let wants_state = match opts.send_initial_events {
                Some(send) => send,
                None => matches!(opts.resource_version, None | Some(0)),
            };
            let (cursor, initial) = if wants_state {
                if let Some(n) = opts.resource_version.filter(|n| *n > current) {
                    return Err(too_large(n, current));
                }
                let objects: Vec<Object> = if key.is_collection() {
                    st.live_from(key.path(), key.path(), current)
                        .map(|(_, o)| o)
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .collect()
                } else {
                    st.value_at(key.path(), current)
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .into_iter()
                        .collect()
                };
                let end = opts.send_initial_events == Some(true) && opts.allow_watch_bookmarks;
                (current, Some((objects, end)))
            } else {
                let from = opts.resource_version.filter(|n| *n > 0).unwrap_or(current);
                let compacted = core.compacted();
                if from < compacted {
                    return Err(Error::too_old(from, compacted));
                }
                (from, None)
            };
            WatchSpec {
                key: key.clone(),
                predicate: opts.predicate.clone(),
                cursor,
                initial,
                bookmarks: opts.allow_watch_bookmarks && opts.progress_notify,
                progress_interval: core.config.progress_notify_interval,
            }
        };
        let (tx, mut rx) = mpsc::channel(core.config.watch_channel_capacity.max(1));
        tokio::spawn(watch::run(core, part, ticks, progress, spec, tx));
        Ok(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        self.ensure_reaper();
        let mut suggestion = suggestion;
        loop {
            // A suggestion is a cached copy that may be stale; anything it makes us decide
            // is re-checked against fresh data before it becomes an answer. Fresh data may
            // not be durable yet: answers derived from it wait until it is (`settled`).
            let (current, from_suggestion) = match suggestion.take() {
                Some(s) => (Some(s), true),
                None => (self.newest(key)?, false),
            };
            let fresh = || -> Result<bool> {
                let latest = self.newest(key)?.map(|o| o.resource_version());
                Ok(latest == current.as_ref().map(Object::resource_version))
            };
            let Some(cur) = current.as_ref() else {
                if !ignore_not_found {
                    return self.settled(key, Err(key.not_found())).await;
                }
                let Updated { object: new, ttl } = match update(None) {
                    Ok(n) => n,
                    Err(e) => return self.settled(key, Err(e)).await,
                };
                match self
                    .core()
                    .commit(key.path(), 0, Some(new.clone()), ttl)
                    .await?
                {
                    Ok(rev) => {
                        if let Some(ttl) = ttl {
                            self.schedule_ttl(key, rev, ttl);
                        }
                        return Ok(new.with_resource_version(rev));
                    }
                    Err(_) => continue,
                }
            };
            if let Some(p) = preconditions {
                if let Err(e) = p.check(key, cur) {
                    if from_suggestion && !fresh()? {
                        continue;
                    }
                    return self.settled(key, Err(e)).await;
                }
            }
            let Updated { object: new, ttl } = match update(Some(cur)) {
                Ok(n) => n,
                Err(e) if from_suggestion && !fresh()? => {
                    tracing::trace!(error = %e, "update failed on a stale suggestion; retrying");
                    continue;
                }
                Err(e) => return self.settled(key, Err(e)).await,
            };
            if new.same_content(cur) {
                if from_suggestion && !fresh()? {
                    continue;
                }
                return self.settled(key, Ok(cur.clone())).await;
            }
            let expected = cur.resource_version();
            if let Ok(rev) = self
                .core()
                .commit(key.path(), expected, Some(new.clone()), ttl)
                .await?
            {
                // A TTL set earlier ends with this write (the reaper checks the revision).
                if let Some(ttl) = ttl {
                    self.schedule_ttl(key, rev, ttl);
                }
                return Ok(new.with_resource_version(rev));
            }
        }
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let mut suggestion = suggestion;
        loop {
            let (current, from_suggestion) = match suggestion.take() {
                Some(s) => (Some(s), true),
                None => (self.newest(key)?, false),
            };
            let Some(cur) = current else {
                return self.settled(key, Err(key.not_found())).await;
            };
            let checked = preconditions
                .map_or(Ok(()), |p| p.check(key, &cur))
                .and_then(|()| validate(&cur));
            if let Err(e) = checked {
                let latest = self.newest(key)?.map(|o| o.resource_version());
                if from_suggestion && latest != Some(cur.resource_version()) {
                    continue;
                }
                return self.settled(key, Err(e)).await;
            }
            if let Ok(rev) = self
                .core()
                .commit(key.path(), cur.resource_version(), None, None)
                .await?
            {
                return Ok(cur.with_resource_version(rev));
            }
        }
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        let Some(part) = self.core().existing_partition(resource_of(key.path()))? else {
            return Ok(Stats::default());
        };
        let st = part.state.read().map_err(|_| poisoned())?;
        let current = self.core().visible();
        let count = if key.is_collection() {
            st.live_from(key.path(), key.path(), current).count()
        } else {
            usize::from(st.value_at(key.path(), current).is_some())
        };
        Ok(Stats {
            object_count: count as u64,
        })
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.core().progress.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn current_resource_version(&self) -> Result<u64> {
        Ok(self.core().visible())
    }

    async fn readiness(&self) -> Result<()> {
        match self.core().failure().or_else(|| self.core().nospace()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn compacted_revision(&self) -> u64 {
        MemStore::compacted_revision(self)
    }

    fn max_object_bytes(&self) -> Option<usize> {
        self.core().config.max_object_bytes
    }
}
