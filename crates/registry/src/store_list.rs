//! The read verbs of [`Store`]: list and watch, as upstream's generic store's `List` and
//! `Watch` (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`).
//!
//! What they own: the scope of a read (a namespace of a namespaced kind, every namespace, or
//! one object for a watch) turned into the storage key, and nothing else. Label and field
//! selectors, `limit`/`continue` and the `resourceVersion` semantics (unset: a consistent
//! read; `0`: any version; `resourceVersionMatch` `NotOlderThan`/`Exact`; a watch's start,
//! bookmarks and initial events) are the storage's, passed through as it gives them — the
//! same storage (a backend, or a cacher over one) serves the HTTP reads, so an in-process
//! reader and a client see the same answers and the same errors (`Expired` for a compacted
//! version, `TooLargeResourceVersion`, an invalid continue token).
//!
//! Invariants: a list or a collection watch is always recursive over its collection (the
//! caller's `recursive` is ignored); a namespace given for a cluster-scoped kind is ignored,
//! as in [`Store::get`]; options arrive validated (the crate's rule), so nothing here parses.

use listwatch_storage::{Key, ListOptions, ObjectList, WatchStream};

use crate::store::{Store, StoreError};

impl Store {
    /// The kind's objects in `namespace` (`None`: in every namespace, or a cluster-scoped
    /// kind's), as `opts` selects them: selectors, a page of `limit` from `continue`, at the
    /// `resourceVersion` asked for.
    pub async fn list(
        &self,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let key = self.collection(namespace)?;
        let mut opts = opts.clone();
        opts.recursive = true;
        Ok(self.storage().list(&key, &opts).await?)
    }

    /// The changes to the kind's objects in `namespace` (`None`: every namespace), or to the
    /// one object `name` when given, from the `resourceVersion` in `opts` (with its
    /// selectors, bookmarks and initial events), until the stream is dropped.
    pub async fn watch(
        &self,
        namespace: Option<&str>,
        name: Option<&str>,
        opts: &ListOptions,
    ) -> Result<WatchStream, StoreError> {
        let mut opts = opts.clone();
        let key = match name {
            Some(name) => {
                opts.recursive = false;
                self.key(namespace, name)?
            }
            None => {
                opts.recursive = true;
                self.collection(namespace)?
            }
        };
        Ok(self.storage().watch(&key, &opts).await?)
    }

    /// The key of the kind's collection in `namespace` (every namespace for `None` or a
    /// cluster-scoped kind).
    pub(crate) fn collection(&self, namespace: Option<&str>) -> Result<Key, StoreError> {
        let ns = namespace.filter(|_| self.info().namespaced);
        Ok(Key::collection(&self.info().storage_resource, ns)?)
    }
}
