//! The ownership rules (structured-merge-diff's `merge.Updater`), on decoded managers.
//!
//! - An **update** takes every field it adds or changes from whoever owned it, and nobody
//!   owns a field once it is gone.
//! - An **apply** merges the configuration over the live object; the applier then owns
//!   exactly the configuration's fields. Changing a field another manager owns is a
//!   conflict unless forced (forcing takes it from them). A field the applier owned before
//!   and no longer applies is removed from the object unless another manager owns it.

use serde_json::Value;

use crate::managed::{Conflicts, ManagerId, Managers, VersionedSet};

/// The fields of each other manager an apply would change (as sets: listing them as paths
/// is [`Conflicts::from_sets`]'s, within its bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictSets(pub Vec<(ManagerId, FieldSet)>);

impl ConflictSets {
    /// The conflicts as an apply answers them.
    pub fn report(&self) -> Conflicts {
        Conflicts::from_sets(&self.0)
    }
}
use crate::set::FieldSet;
use crate::types::TypeInfo;
use crate::value::{self, Comparison};

/// Ownership rules for one resource.
pub struct Updater<'t> {
    /// List and map semantics.
    pub types: &'t dyn TypeInfo,
    /// Fields nobody owns through this endpoint (upstream's reset fields: `status` on the
    /// main resource, `spec` on `/status`), with everything under them.
    pub ignored: FieldSet,
}

impl Updater<'_> {
    /// Takes the fields `old → new` adds or changes from every manager but `workflow`
    /// (a conflict unless `force`), and the fields it removes from all of them.
    fn take(
        &self,
        old: &Value,
        new: &Value,
        managers: &mut Managers,
        workflow: &ManagerId,
        force: bool,
    ) -> Result<Comparison, ConflictSets> {
        let mut c = value::compare(self.types, old, new);
        self.take_changes(&mut c, managers, workflow, force)?;
        Ok(c)
    }

    /// [`Updater::take`] of a comparison already made; leaves the ignored fields out of it.
    fn take_changes(
        &self,
        c: &mut Comparison,
        managers: &mut Managers,
        workflow: &ManagerId,
        force: bool,
    ) -> Result<(), ConflictSets> {
        c.exclude(&self.ignored);
        // What changed is only looked at in other managers' sets (a create's usually has
        // none): the union is built only when there is one.
        if managers.keys().any(|id| id != workflow) {
            let changed = c.modified.union(&c.added);
            let mut conflicts = Vec::new();
            for (id, vs) in managers.iter() {
                if id == workflow {
                    continue;
                }
                let taken = vs.set.intersection(&changed);
                if !taken.is_empty() {
                    conflicts.push((id.clone(), taken));
                }
            }
            if !force && !conflicts.is_empty() {
                return Err(ConflictSets(conflicts));
            }
            for (id, taken) in &conflicts {
                if let Some(vs) = managers.get_mut(id) {
                    vs.set.remove_all(taken);
                }
            }
        }
        if !c.removed.is_empty() {
            for (id, vs) in managers.iter_mut() {
                if id != workflow {
                    vs.set.remove_all(&c.removed);
                }
            }
        }
        managers.retain(|_, vs| !vs.set.is_empty());
        Ok(())
    }

    /// An update from `live` to `new` by `manager` at `version`: it owns what it added or
    /// changed (beside what it owned and is still there).
    pub fn update(
        &self,
        live: &Value,
        new: &Value,
        version: &str,
        managers: &mut Managers,
        manager: &ManagerId,
    ) {
        let c = value::compare(self.types, live, new);
        self.record(c, version, managers, manager);
    }

    /// The update that creates `new` by `manager` at `version`: [`Updater::update`] from
    /// an empty object, with the comparison read off `new` alone
    /// ([`value::added_by_create`]: every path of `new` is added, nothing is compared).
    pub fn create(&self, new: &Value, version: &str, managers: &mut Managers, manager: &ManagerId) {
        let c = Comparison {
            added: value::added_by_create(self.types, new),
            ..Comparison::default()
        };
        self.record(c, version, managers, manager);
    }

    /// The ownership an update's comparison `c` gives: `manager` owns what it added or
    /// changed, beside what it owned and is still there. Sets are moved and changed in
    /// place, never copied whole.
    fn record(
        &self,
        mut c: Comparison,
        version: &str,
        managers: &mut Managers,
        manager: &ManagerId,
    ) {
        // A forced take reports no conflict.
        if self.take_changes(&mut c, managers, manager, true).is_err() {
            return;
        }
        let mut set = managers
            .remove(manager)
            .map(|vs| vs.set)
            .unwrap_or_default();
        set.remove_all(&c.removed);
        set.union_owned(c.modified);
        set.union_owned(c.added);
        set.remove_recursive(&self.ignored);
        if !set.is_empty() {
            managers.insert(
                manager.clone(),
                VersionedSet {
                    set,
                    api_version: version.to_owned(),
                    applied: false,
                },
            );
        }
    }

    /// An apply of `config` by `manager` over `live`: the new object, or the conflicts.
    /// `managers` is only changed on success. The configuration must have passed
    /// [`value::validate_config`].
    pub fn apply(
        &self,
        live: &Value,
        config: &Value,
        version: &str,
        managers: &mut Managers,
        manager: &ManagerId,
        force: bool,
    ) -> Result<Value, ConflictSets> {
        let mut next = managers.clone();
        let merged = value::merge(self.types, live, config);
        let last = next.get(manager).map(|vs| vs.set.clone());
        let set = value::to_field_set(self.types, config).recursive_difference(&self.ignored);
        next.insert(
            manager.clone(),
            VersionedSet {
                set,
                api_version: version.to_owned(),
                applied: true,
            },
        );
        let new = match last {
            Some(last) if !last.is_empty() => self.prune(&merged, &next, &last),
            _ => merged,
        };
        self.take(live, &new, &mut next, manager, force)?;
        *managers = next;
        Ok(new)
    }

    /// Removes from `merged` what the applier owned before (`last`) and owns no more,
    /// unless some manager owns it now (upstream's `prune`, `addBackOwnedItems`,
    /// `addBackDanglingItems`).
    fn prune(&self, merged: &Value, managers: &Managers, last: &FieldSet) -> Value {
        let t = self.types;
        let named = |s: FieldSet| value::ensure_named_fields_are_members(t, s);
        let last = named(last.clone());
        let pruned = value::remove_items(t, merged, &last);
        // Add back what any manager (the applier's new set included) owns.
        let mut owned = FieldSet::new();
        for vs in managers.values() {
            owned.union_with(&vs.set);
        }
        let merged_set = named(value::to_field_set(t, merged));
        let pruned_set = named(value::to_field_set(t, &pruned));
        let keep = pruned_set.union(&named(owned));
        let pruned = value::remove_items(t, merged, &merged_set.difference(&keep));
        // Add back what the applier never owned (fields nobody owns stay).
        let pruned_set = named(value::to_field_set(t, &pruned));
        let gone = merged_set.difference(&pruned_set).intersection(&last);
        value::remove_items(t, merged, &gone)
    }
}
