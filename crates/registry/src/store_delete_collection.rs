//! [`Store::delete_collection`]: upstream's generic store's `DeleteCollection` — list, then
//! delete each object listed with the kind's deletion lifecycle.
//!
//! What it owns: the order of the steps and which failures end it. The list is
//! [`Store::list`]'s (selectors, `limit`/`continue`, `resourceVersion` as the storage gives
//! them); every object listed is checked for deletion ([`check_delete`](crate::validation::check_delete))
//! before any is deleted; each delete is [`Store::delete`]'s lifecycle with the same options
//! (grace periods, finalizers, propagation, preconditions, dry run), so an object held by a
//! finalizer or a grace period is only marked, and a pod is acknowledged as the store's
//! kubelet says. The kind's own refusals of a DELETE
//! ([`KindStrategy::delete_forbidden`](listwatch_kinds::KindStrategy::delete_forbidden)) are
//! not asked: upstream's `DeleteCollection` deletes through the generic store, not the
//! kind's `Delete`, so a collection delete of priority classes removes the system ones too
//! (they come back at the next start).
//!
//! Namespaces have no collection delete (upstream's namespace registry does not offer one):
//! it is refused with 405 before anything is listed.
//!
//! Invariants: an object deleted by someone else between the list and its delete is skipped
//! (upstream ignores `NotFound` there), any other failure ends the call (objects deleted
//! before it stay deleted: there is no transaction across objects, upstream neither); the
//! answer lists what each delete left — the object removed, or as marked — with no
//! `continue` and no remaining count. The deletes run one after the other (upstream runs
//! `DeleteCollectionWorkers` of them at once; the result is the same).

use listwatch_storage::{ListOptions, ObjectList};

use crate::lifecycle::Deletion;
use crate::options::DeleteRequest;
use crate::store::{Store, StoreError};

impl Store {
    /// Deletes every object of the kind in `namespace` (`None`: every namespace) that `list`
    /// selects, each as [`Store::delete`] with `opts`; what each delete left.
    pub async fn delete_collection(
        &self,
        namespace: Option<&str>,
        list: &ListOptions,
        opts: &DeleteRequest,
    ) -> Result<ObjectList, StoreError> {
        if crate::lifecycle::is_namespaces(self.info()) {
            return Err(crate::error::ApiError::method_not_allowed().into());
        }
        let mut listed = self.list(namespace, list).await?;
        for o in &listed.items {
            crate::validation::check_delete(self.info(), o.name())?;
        }
        let mut deleted = Vec::with_capacity(listed.items.len());
        for o in std::mem::take(&mut listed.items) {
            match self.delete_listed(o.namespace(), o.name(), opts).await {
                Ok(Deletion::Gone(d) | Deletion::Pending(d)) => deleted.push(d),
                Err(StoreError::Storage(e)) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        listed.items = deleted;
        listed.continue_token = None;
        listed.remaining_item_count = None;
        Ok(listed)
    }
}
