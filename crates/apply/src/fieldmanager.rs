//! The field manager of one write (upstream's `FieldManager` and its chain of wrappers):
//! managedFields read from the objects, the [`Updater`] run, server-owned metadata left
//! unowned, times stamped, old update managers capped, managedFields written back; and the
//! client-side-apply upgrade rules for the `kubectl` manager.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::managed::{Conflicts, Managed, ManagerId, Operation};
use crate::path::{Path, PathElement};
use crate::set::{FieldSet, FieldsLimits};
use crate::types::TypeInfo;
use crate::update::Updater;
use crate::value;

/// The annotation client-side apply keeps its last configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager whose applies upgrade from client-side apply (upstream's
/// `lastAppliedManager`/`lastAppliedUpdater` act for this name only).
pub const KUBECTL: &str = "kubectl";

/// The manager that takes the fields of an object nobody owns before its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Stand-in manager for the fields one update changes, merged into its manager after.
const CURRENT_OPERATION: &str = "current-operation";

/// What one write is.
pub struct Scope<'t> {
    /// List and map semantics of the resource's kind.
    pub types: &'t dyn TypeInfo,
    /// The resource's group/version (`v1`, `apps/v1`).
    pub api_version: &'t str,
    /// The resource's kind (`ConfigMap`): an apply's configuration must name it.
    pub kind: &'t str,
    /// `""` for the resource itself, `status`, `scale`.
    pub subresource: &'t str,
    /// The reset fields of this endpoint (see [`Updater::ignored`]).
    pub ignored: FieldSet,
    /// The time to stamp (RFC 3339).
    pub now: &'t str,
    /// Bounds on the managedFields read.
    pub limits: FieldsLimits,
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Another manager owns fields the apply changes (409).
    #[error("{}", .0.message())]
    Conflicts(Conflicts),
    /// The configuration does not fit its types (400; upstream answers 500 today).
    #[error("failed to create typed patch object: {0}")]
    Invalid(String),
    /// The configuration sets managedFields (400).
    #[error("metadata.managedFields must be nil")]
    ManagedFieldsSet,
    /// The configuration's apiVersion or kind is not the endpoint's (400, upstream's
    /// `versionCheckManager`: `invalid object type: apps/v1, Kind=Deployment`, the
    /// configuration's group/version and kind as upstream reads them).
    #[error("invalid object type: {0}")]
    ObjectType(String),
    /// The live object's managedFields do not decode (500, upstream's `FieldManager.Apply`;
    /// this server's own writes keep them valid).
    #[error("failed to decode managed fields: {0}")]
    Decode(String),
}

/// A configuration's group, version and kind as upstream's `Unstructured.GroupVersionKind`
/// reads them, written as `GroupVersionKind.String` does (`/v1, Kind=ConfigMap`): an
/// apiVersion that is not a string or has more than one `/` reads as nothing at all (the
/// kind included); `None` when they are the endpoint's.
fn object_type_mismatch(config: &Value, api_version: &str, kind: &str) -> Option<String> {
    let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or("");
    let (got_gv, got_kind) = (text("apiVersion"), text("kind"));
    let (group, version, got_kind) = match got_gv {
        "" | "/" => ("", "", got_kind),
        gv => match gv.split_once('/') {
            None => ("", gv, got_kind),
            Some((_, v)) if v.contains('/') => ("", "", ""),
            Some((g, v)) => (g, v, got_kind),
        },
    };
    let (want_group, want_version) = api_version.split_once('/').unwrap_or(("", api_version));
    if (group, version, got_kind) == (want_group, want_version, kind) {
        return None;
    }
    // The request's text, cut as every echo is (a kind may be megabytes).
    let echo = |s: &str| listwatch_api::echo::echo(s).into_owned();
    Some(format!(
        "{}/{}, Kind={}",
        echo(group),
        echo(version),
        echo(got_kind)
    ))
}

/// Paths never owned (upstream's `stripMetaManager`): type and server-set metadata.
fn strip_set() -> &'static FieldSet {
    static STRIP: LazyLock<FieldSet> = LazyLock::new(build_strip_set);
    &STRIP
}

fn build_strip_set() -> FieldSet {
    let mut s = FieldSet::new();
    for p in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ] {
        s.insert(&Path::fields(p).0);
    }
    s
}

fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    remove_managed_fields(&mut v);
    v
}

fn remove_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

/// Writes `managed` into `obj` (no managers: no managedFields).
fn write_managed(obj: &mut Value, managed: &Managed) {
    let entries = managed.encode();
    let Value::Object(o) = obj else { return };
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(m) = m {
        if entries.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// Upstream's `isResetManagedFields`: `[]` or `[{}]` in a request clears managedFields.
fn is_reset(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(a)) => match a.as_slice() {
            [] => true,
            [Value::Object(e)] => e.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

impl Scope<'_> {
    fn updater(&self) -> Updater<'_> {
        Updater {
            types: self.types,
            ignored: self.ignored.clone(),
        }
    }

    fn strip(&self, managed: &mut Managed, id: &ManagerId) {
        if let Some(vs) = managed.fields.get_mut(id) {
            vs.set.remove_all(strip_set());
            if vs.set.is_empty() {
                managed.fields.remove(id);
            }
        }
    }

    /// Records an update (create, update, non-apply patch) by `manager` from `live`
    /// (`None` for a create) to `new`, writing `new`'s managedFields. As upstream's
    /// `UpdateNoErrors`, this never fails the write: managedFields that cannot be read
    /// are dropped rather than kept as garbage.
    ///
    /// The managedFields to start from are the request's when it sets some (that is how
    /// clients edit or migrate them; `[]` or `[{}]` clears them), else the live object's;
    /// a subresource always starts from the live object's. An update of an existing object
    /// that starts from no managers records none (upstream's `skipNonAppliedManager`: after
    /// a reset, updates are not tracked again until an apply).
    pub fn update(&self, live: Option<&Value>, new: &mut Value, manager: &str) {
        let live_fields = live.and_then(meta).and_then(|m| m.get("managedFields"));
        let stripped = live.map(without_managed_fields);
        self.update_stripped(stripped.as_ref(), live_fields, new, manager);
    }

    /// [`Scope::update`] of an existing object, without copying it: `live`'s managedFields
    /// are taken out for the walk and put back after, so `live` ends as it began.
    pub fn update_live(&self, live: &mut Value, new: &mut Value, manager: &str) {
        let fields = live
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove("managedFields"));
        self.update_stripped(Some(live), fields.as_ref(), new, manager);
        if let (Some(f), Some(m)) = (
            fields,
            live.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            m.insert("managedFields".into(), f);
        }
    }

    /// [`Scope::update`] from `live` without its managedFields, which are `live_fields`.
    fn update_stripped(
        &self,
        live: Option<&Value>,
        live_fields: Option<&Value>,
        new: &mut Value,
        manager: &str,
    ) {
        let new_fields = meta(new).and_then(|m| m.get("managedFields"));
        let decoded = if !self.subresource.is_empty() {
            Managed::decode(live_fields, self.limits)
        } else if is_reset(new_fields) {
            Ok(Managed::default())
        } else {
            match Managed::decode(new_fields, self.limits) {
                Ok(m) if !m.fields.is_empty() => Ok(m),
                _ => Managed::decode(live_fields, self.limits),
            }
        };
        remove_managed_fields(new);
        let Ok(mut managed) = decoded else {
            return;
        };
        if managed.fields.is_empty() && live.is_some() {
            // An existing object nobody owns (its managedFields reset, or never kept)
            // stays untracked until an apply (upstream's `skipNonAppliedManager`); a
            // create is always tracked.
            return;
        }
        let current = ManagerId::new(
            CURRENT_OPERATION,
            Operation::Update,
            self.api_version,
            self.subresource,
        );
        let updater = self.updater();
        match live {
            Some(live) => {
                updater.update(live, new, self.api_version, &mut managed.fields, &current);
            }
            // A create: the update from `{}`, read off the new object alone.
            None => updater.create(new, self.api_version, &mut managed.fields, &current),
        }
        self.strip(&mut managed, &current);
        if let Some(mut vs) = managed.fields.remove(&current) {
            let id = ManagerId::new(
                manager,
                Operation::Update,
                self.api_version,
                self.subresource,
            );
            if let Some(previous) = managed.fields.get(&id) {
                vs.set.union_with(&previous.set);
            }
            managed.fields.insert(id.clone(), vs);
            managed.times.insert(id, self.now.to_owned());
        }
        managed.cap_update_managers();
        managed
            .times
            .retain(|id, _| managed.fields.contains_key(id));
        write_managed(new, &managed);
    }

    /// Applies `config` by `manager` over `live` (`None`: the object does not exist and
    /// the apply creates it). Returns the new object with its managedFields.
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApplyError> {
        // In upstream's order: the live managedFields decoded (`FieldManager.Apply`), the
        // configuration's type checked (`versionCheckManager`), then its managedFields and
        // its fields (`structuredMergeManager`).
        let mut managed = Managed::decode(
            live.and_then(meta).and_then(|m| m.get("managedFields")),
            self.limits,
        )
        .map_err(|e| ApplyError::Decode(e.to_string()))?;
        if let Some(got) = object_type_mismatch(config, self.api_version, self.kind) {
            return Err(ApplyError::ObjectType(got));
        }
        if meta(config)
            .and_then(|m| m.get("managedFields"))
            .is_some_and(|v| !v.is_null())
        {
            return Err(ApplyError::ManagedFieldsSet);
        }
        value::validate_config(self.types, config).map_err(ApplyError::Invalid)?;
        let live_v = live.map_or_else(|| Value::Object(Map::new()), without_managed_fields);
        let updater = self.updater();
        if managed.fields.is_empty() && live.is_some() {
            // The fields of an object nobody owns go to a manager of their own first
            // (upstream's `skipNonAppliedManager`), so an apply conflicts with them.
            let before = ManagerId::new(
                BEFORE_FIRST_APPLY,
                Operation::Update,
                self.api_version,
                self.subresource,
            );
            updater.create(&live_v, self.api_version, &mut managed.fields, &before);
            self.strip(&mut managed, &before);
            // Stamped like any update (upstream runs it through `managedFieldsUpdater`).
            if managed.fields.contains_key(&before) {
                managed.times.insert(before, self.now.to_owned());
            }
        }
        let id = ManagerId::new(
            manager,
            Operation::Apply,
            self.api_version,
            self.subresource,
        );
        let previous = managed.fields.get(&id).map(|vs| vs.set.clone());
        let mut fields = managed.fields.clone();
        let mut new =
            match updater.apply(&live_v, config, self.api_version, &mut fields, &id, force) {
                Ok(v) => v,
                Err(conflicts) if manager == KUBECTL => {
                    // Upgrading from client-side apply: conflicts on fields the last-applied
                    // annotation set, and the live object still has, are forced.
                    let allowed = self.last_applied_fields(&live_v);
                    let remaining: Vec<(ManagerId, FieldSet)> = conflicts
                        .0
                        .into_iter()
                        .map(|(m, s)| match &allowed {
                            Some(a) => (m, s.difference(a)),
                            None => (m, s),
                        })
                        .filter(|(_, s)| !s.is_empty())
                        .collect();
                    if !remaining.is_empty() {
                        return Err(ApplyError::Conflicts(Conflicts::from_sets(&remaining)));
                    }
                    fields = managed.fields.clone();
                    updater
                        .apply(&live_v, config, self.api_version, &mut fields, &id, true)
                        .map_err(|c| ApplyError::Conflicts(c.report()))?
                }
                Err(conflicts) => return Err(ApplyError::Conflicts(conflicts.report())),
            };
        managed.fields = fields;
        if manager == KUBECTL {
            sync_last_applied(config, &mut new);
        }
        self.strip(&mut managed, &id);
        let changed =
            new != live_v || managed.fields.get(&id).map(|vs| &vs.set) != previous.as_ref();
        if changed {
            managed.times.insert(id, self.now.to_owned());
        }
        managed.cap_update_managers();
        managed
            .times
            .retain(|id, _| managed.fields.contains_key(id));
        write_managed(&mut new, &managed);
        Ok(new)
    }

    /// The fields the live object's last-applied annotation set that the live object
    /// still holds unchanged (upstream's `allowedConflictsFromLastApplied`).
    fn last_applied_fields(&self, live: &Value) -> Option<FieldSet> {
        let text = meta(live)?
            .get("annotations")?
            .get(LAST_APPLIED)?
            .as_str()
            .filter(|s| !s.is_empty())?;
        let last: Value = serde_json::from_str(text).ok()?;
        if last.get("apiVersion").and_then(Value::as_str) != Some(self.api_version) {
            return None;
        }
        let set = value::to_field_set(self.types, &last);
        let c = value::compare(self.types, &last, live);
        Some(
            set.difference(&c.modified)
                .difference(&c.added)
                .difference(&c.removed),
        )
    }
}

/// Keeps the last-applied annotation of an object kubectl used to apply client-side in
/// step with what `kubectl` now applies server-side (upstream's `lastAppliedUpdater`): if
/// the new object still has the annotation, it becomes the configuration (without that
/// annotation) as JSON, as kubectl writes it — unless that would pass
/// [`MAX_ANNOTATIONS_BYTES`], when it is removed (upstream's `SetLastApplied`).
fn sync_last_applied(config: &Value, new: &mut Value) {
    let Some(annotations) = new
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
        .filter(|a| {
            a.get(LAST_APPLIED)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        })
    else {
        return;
    };
    let mut last = config.clone();
    if let Some(a) = last
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    annotations.insert(LAST_APPLIED.into(), Value::String(format!("{last}\n")));
    // Upstream's `SetLastApplied`: an annotation that would take the object's annotations
    // past their size limit is dropped rather than failing the apply.
    let size: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATIONS_BYTES {
        annotations.remove(LAST_APPLIED);
    }
}

/// Upstream's `TotalAnnotationSizeLimitB`: the annotations' keys and values together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The path of a field given by names (for callers building reset-field sets).
pub fn field_path(names: &[&str]) -> Vec<PathElement> {
    Path::fields(names).0
}
