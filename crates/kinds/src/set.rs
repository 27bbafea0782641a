//! [`KindSet`]: the live, versioned table of served kinds.
//!
//! A request takes a [`Snapshot`] (one `Arc` clone under a read lock held for that clone
//! only) and resolves its kind, and everything derived from the table, in that snapshot;
//! kinds are added and removed at run time (custom resource definitions will do it), each
//! change publishing a new immutable snapshot with the next generation number. What is
//! derived from the whole table (discovery, OpenAPI documents, the schema catalogue) is
//! cached per generation by a [`PerGeneration`].
//!
//! The set is generic over what the layer above attaches to a spec (the endpoints attach the
//! storage): `T` only has to show its [`KindSpec`] ([`Kinded`]), so this crate never sees
//! storage.
//!
//! Who must follow the table as it changes (the garbage collector's informers, the namespace
//! controller) subscribes ([`KindSet::subscribe`]): a `tokio::sync::watch` receiver of the
//! current snapshot, which learns of each new generation.
//!
//! Invariants: a snapshot never changes; generations only grow; at most one entry per
//! `(group, version, plural)`; writers are serialised (one change at a time) and never block
//! readers for longer than the swap of one `Arc`; a reader never blocks a writer for longer
//! than an `Arc` clone. Subscribers: the table a subscriber reads and the one
//! [`KindSet::snapshot`] returns are the same value (the channel *is* the current table, not
//! a copy sent after it), so no change is published without its notification; a subscriber
//! that is slower than the changes sees only the newest of several generations (the channel
//! keeps one value), never skips one silently — a snapshot is the whole table and carries its
//! generation, so a gap shows as a jump of the number and nothing of the skipped table is lost
//! — and always ends with the latest; a subscription ends when the set is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::KindSpec;

/// Something that carries a [`KindSpec`] (the endpoints' resource: a spec and its storage).
pub trait Kinded {
    /// The spec.
    fn spec(&self) -> &KindSpec;
}

impl Kinded for KindSpec {
    fn spec(&self) -> &KindSpec {
        self
    }
}

impl Kinded for Arc<KindSpec> {
    fn spec(&self) -> &KindSpec {
        self
    }
}

/// Why a change of a [`KindSet`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindSetError {
    /// `remove` named a kind that is not served.
    #[error("the server does not serve {0}")]
    NotServed(String),
}

/// `(group, version, plural)`.
type Key = (String, String, String);

fn key_of(spec: &KindSpec) -> Key {
    (
        spec.group.clone(),
        spec.version.clone(),
        spec.plural.clone(),
    )
}

/// One immutable version of the served kinds.
#[derive(Debug)]
pub struct Snapshot<T> {
    generation: u64,
    items: Vec<T>,
    index: HashMap<Key, usize>,
}

impl<T: Kinded> Snapshot<T> {
    fn new(generation: u64, items: Vec<T>) -> Self {
        let index = items
            .iter()
            .enumerate()
            .map(|(i, t)| (key_of(t.spec()), i))
            .collect();
        Self {
            generation,
            items,
            index,
        }
    }

    /// The generation: 0 for the first table, +1 per change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every kind, in the order they were added.
    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// The kind served at `group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&T> {
        let i = *self
            .index
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))?;
        self.items.get(i)
    }
}

impl<T> std::ops::Deref for Snapshot<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items
    }
}

/// The live table of served kinds; see the module doc.
#[derive(Debug)]
pub struct KindSet<T> {
    /// The current table; its receivers are the subscriptions.
    current: watch::Sender<Arc<Snapshot<T>>>,
    /// Serialises changes, so that each builds on the one before.
    writer: Mutex<()>,
}

impl<T: Kinded + Clone> KindSet<T> {
    /// A set of `items` at generation 0; a later item with the same group, version and
    /// plural replaces an earlier one.
    pub fn new(items: impl IntoIterator<Item = T>) -> Self {
        let mut out: Vec<T> = Vec::new();
        for item in items {
            let key = key_of(item.spec());
            out.retain(|t| key_of(t.spec()) != key);
            out.push(item);
        }
        Self {
            current: watch::Sender::new(Arc::new(Snapshot::new(0, out))),
            writer: Mutex::new(()),
        }
    }

    /// The current table.
    pub fn snapshot(&self) -> Arc<Snapshot<T>> {
        Arc::clone(&self.current.borrow())
    }

    /// A subscription to the table: its first `changed()` resolves at once (the current
    /// table, marked unseen), each later one when a newer generation is published; read it
    /// with `borrow_and_update()`, holding the borrow only to clone the `Arc` (it holds the
    /// lock a change takes). `changed()` fails once the set is dropped. Several changes
    /// between two reads are seen as the newest of them (see the module's invariants).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot<T>>> {
        let mut rx = self.current.subscribe();
        rx.mark_changed();
        rx
    }

    /// Serves `item` from the next generation on, replacing the kind with the same group,
    /// version and plural (returned). Returns the new generation too.
    pub fn add(&self, item: T) -> (u64, Option<T>) {
        let _w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.snapshot();
        let key = key_of(item.spec());
        let mut items = Vec::with_capacity(cur.items.len().saturating_add(1));
        let mut replaced = None;
        for t in &cur.items {
            if key_of(t.spec()) == key {
                replaced = Some(t.clone());
            } else {
                items.push(t.clone());
            }
        }
        items.push(item);
        let generation = self.publish(&cur, items);
        (generation, replaced)
    }

    /// Stops serving `group/version/plural` from the next generation on; returns what was
    /// served there and the new generation.
    pub fn remove(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<(u64, T), KindSetError> {
        let _w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.snapshot();
        let Some(removed) = cur.get(group, version, plural).cloned() else {
            let name = if group.is_empty() {
                format!("{version}/{plural}")
            } else {
                format!("{group}/{version}/{plural}")
            };
            return Err(KindSetError::NotServed(name));
        };
        let key = key_of(removed.spec());
        let items = cur
            .items
            .iter()
            .filter(|t| key_of(t.spec()) != key)
            .cloned()
            .collect();
        Ok((self.publish(&cur, items), removed))
    }

    /// Publishes the table after `cur` (the caller holds the writer lock).
    fn publish(&self, cur: &Snapshot<T>, items: Vec<T>) -> u64 {
        let generation = cur.generation.saturating_add(1);
        let next = Arc::new(Snapshot::new(generation, items));
        // `send_replace` stores the value even when nobody subscribes.
        self.current.send_replace(next);
        generation
    }
}

/// Something derived from a whole [`Snapshot`] (a discovery document, the OpenAPI
/// documents), built once per generation and shared.
///
/// Invariant: the cached value is the newest generation asked for; a request holding an
/// older snapshot gets a value built for its own snapshot (not cached), so nobody sees a
/// document of a table it did not resolve its kind in.
#[derive(Debug)]
pub struct PerGeneration<D> {
    cached: Mutex<Option<(u64, Arc<D>)>>,
}

impl<D> Default for PerGeneration<D> {
    fn default() -> Self {
        Self {
            cached: Mutex::new(None),
        }
    }
}

impl<D> PerGeneration<D> {
    /// The value for `snapshot`'s generation, built by `build` if not cached.
    ///
    /// Builds run under the cache's lock, so concurrent requests of a new generation build
    /// it once.
    pub fn get<T>(&self, snapshot: &Snapshot<T>, build: impl FnOnce(&Snapshot<T>) -> D) -> Arc<D> {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        match &*cached {
            Some((g, d)) if *g == snapshot.generation => return Arc::clone(d),
            Some((g, _)) if *g > snapshot.generation => return Arc::new(build(snapshot)),
            _ => {}
        }
        let d = Arc::new(build(snapshot));
        *cached = Some((snapshot.generation, Arc::clone(&d)));
        d
    }

    /// Drops the cached value if it was built for a generation before `generation` (a kind
    /// was removed or replaced: what the value holds of the old snapshot — its kinds'
    /// strategies and schemas — is freed now rather than at the next build).
    pub fn forget_before(&self, generation: u64) {
        let old = {
            let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            match &*cached {
                Some((g, _)) if *g < generation => cached.take(),
                _ => None,
            }
        };
        // Dropped outside the lock.
        drop(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> KindSpec {
        KindSpec::new("", "v1", "configmaps", "ConfigMap")
    }

    fn widgets() -> KindSpec {
        KindSpec::new("example.com", "v1", "widgets", "Widget")
    }

    #[test]
    fn changes_publish_new_generations_and_old_snapshots_stay() {
        let set = KindSet::new([cm()]);
        let first = set.snapshot();
        assert_eq!(first.generation(), 0);
        let (g, replaced) = set.add(widgets());
        assert_eq!((g, replaced.is_none()), (1, true));
        let second = set.snapshot();
        assert!(second.get("example.com", "v1", "widgets").is_some());
        assert!(first.get("example.com", "v1", "widgets").is_none());
        let (g, removed) = set.remove("example.com", "v1", "widgets").unwrap();
        assert_eq!((g, removed.kind.as_str()), (2, "Widget"));
        assert!(set.snapshot().get("example.com", "v1", "widgets").is_none());
        assert!(second.get("example.com", "v1", "widgets").is_some());
        assert_eq!(
            set.remove("example.com", "v1", "widgets").unwrap_err(),
            KindSetError::NotServed("example.com/v1/widgets".into())
        );
    }

    #[test]
    fn a_kind_added_twice_is_served_once() {
        let set = KindSet::new([cm(), cm().short_names(["cm"])]);
        assert_eq!(set.snapshot().len(), 1);
        let (_, replaced) = set.add(cm());
        assert_eq!(replaced.map(|r| r.short_names), Some(vec!["cm".to_owned()]));
        assert_eq!(set.snapshot().len(), 1);
    }

    #[test]
    fn readers_see_whole_tables_with_growing_generations_while_writers_change_them() {
        let set = Arc::new(KindSet::new([cm()]));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (set, done) = (Arc::clone(&set), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut last = 0;
                    let mut reads = 0u64;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                        let s = set.snapshot();
                        assert!(s.generation() >= last, "generations only grow");
                        last = s.generation();
                        // The built-in kind is always there; the widget is there exactly
                        // when the table has two kinds, and its index agrees.
                        assert!(s.get("", "v1", "configmaps").is_some());
                        let w = s.get("example.com", "v1", "widgets");
                        assert_eq!(w.is_some(), s.len() == 2);
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for _ in 0..500 {
            set.add(widgets());
            set.remove("example.com", "v1", "widgets").unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert_eq!(set.snapshot().generation(), 1000);
    }

    /// Issue 27 step 4: a subscriber learns of every change; one slower than the changes
    /// ends with the latest table (and sees the generations it skipped as a jump); the
    /// subscription ends with the set.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn subscribers_learn_of_each_generation_and_end_with_the_latest() {
        let set = Arc::new(KindSet::new([cm()]));
        let mut rx = set.subscribe();
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().generation(), 0);
        set.add(widgets());
        rx.changed().await.unwrap();
        let s = Arc::clone(&rx.borrow_and_update());
        assert_eq!(s.generation(), 1);
        assert!(s.get("example.com", "v1", "widgets").is_some());

        // A writer on another thread makes 1000 changes while this subscriber reads.
        let writer = {
            let set = Arc::clone(&set);
            std::thread::spawn(move || {
                for _ in 0..500 {
                    set.remove("example.com", "v1", "widgets").unwrap();
                    set.add(widgets());
                }
            })
        };
        let mut last = 1;
        while last < 1001 {
            let deadline = std::time::Duration::from_secs(60);
            tokio::time::timeout(deadline, rx.changed())
                .await
                .expect("a change was published without its notification")
                .unwrap();
            let s = Arc::clone(&rx.borrow_and_update());
            assert!(
                s.generation() > last,
                "a notification without a new generation"
            );
            // Whole tables: the widget is served exactly at odd generations.
            assert_eq!(
                s.get("example.com", "v1", "widgets").is_some(),
                s.generation() % 2 == 1
            );
            last = s.generation();
        }
        writer.join().unwrap();
        assert_eq!(last, set.snapshot().generation());
        // A late subscriber starts from the latest.
        let mut late = set.subscribe();
        late.changed().await.unwrap();
        assert_eq!(late.borrow_and_update().generation(), 1001);
        drop(set);
        assert!(
            rx.changed().await.is_err(),
            "the subscription ends with the set"
        );
    }

    #[test]
    fn derived_values_are_built_once_per_generation() {
        let set = KindSet::new([cm()]);
        let docs: PerGeneration<usize> = PerGeneration::default();
        let builds = std::cell::Cell::new(0);
        let count = |s: &Snapshot<KindSpec>| {
            builds.set(builds.get() + 1);
            s.len()
        };
        let old = set.snapshot();
        assert_eq!(*docs.get(&old, count), 1);
        assert_eq!(*docs.get(&old, count), 1);
        assert_eq!(builds.get(), 1);
        set.add(widgets());
        assert_eq!(*docs.get(&set.snapshot(), count), 2);
        // An older snapshot gets its own value, and does not evict the newer one.
        assert_eq!(*docs.get(&old, count), 1);
        assert_eq!(*docs.get(&set.snapshot(), count), 2);
        assert_eq!(builds.get(), 3);
    }
}
