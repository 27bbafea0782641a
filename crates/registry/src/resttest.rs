//! The per-kind conformance suite of a [`Store`], as upstream's `resttest`
//! (`k8s.io/apiserver/pkg/registry/rest/resttest`): the behaviour every kind's store shares,
//! checked for one kind at a time over whatever storage the caller gives. Behind the
//! `resttest` feature: only tests use it.
//!
//! What [`run`] checks, in order: a create stores the object with a uid, a creation
//! timestamp, a resourceVersion and a managedFields entry of its manager; a get returns it;
//! a second create of the name is `AlreadyExists`; `generateName` makes a name of the prefix
//! and five characters; a dry-run create writes nothing, and one of an existing name is
//! `AlreadyExists`; then the writes of [`updates_and_patches`]; a delete whose uid
//! precondition names another object is a conflict and
//! deletes nothing; a dry-run delete deletes nothing; a delete removes the object or leaves
//! it marked with a `deletionTimestamp`; a delete of a missing name is `NotFound`.
//!
//! Then the collection verbs, on objects labelled `resttest-list`: a list by label selector,
//! by field selector (`metadata.name`) and in every namespace; a list in pages (`limit`,
//! then `continue`); a watch of the collection from the list's resourceVersion sees a
//! create inside its selector and not one outside; a watch of one object sees its own delete
//! and not another's; a dry-run deletecollection answers what it would delete and changes
//! nothing; a deletecollection removes (or marks) what its selector selects and nothing
//! else; namespaces have no deletecollection (405).
//!
//! Invariant: the suite only creates names beginning with `resttest-` in the case's
//! namespace, and expects a store with no other object labelled `resttest-list` there.

use futures::StreamExt;
use listwatch_api::{FieldSelector, LabelSelector, Object};
use listwatch_storage::{ListOptions, ObjectList, Preconditions, WatchEvent, WatchStream};
use serde_json::{Map, Value};

use crate::lifecycle::Deletion;
use crate::options::DeleteRequest;
use crate::patch::Patch;
use crate::store::{CreateOptions, Store, StoreError};
use crate::store_patch::PatchOptions;
use crate::store_update::UpdateOptions;
use crate::write::Subresource;

/// The manager the suite's creates are recorded under.
pub const MANAGER: &str = "resttest";

/// One kind to check: its store, the namespace to write in (ignored for a cluster-scoped
/// kind) and a valid object of the kind without a name.
#[derive(Debug, Clone)]
pub struct Case {
    /// The kind's store.
    pub store: Store,
    /// Where namespaced objects are written.
    pub namespace: Option<String>,
    /// A valid object of the kind (`apiVersion`, `kind`, any spec the kind requires); its
    /// `metadata.name` is set by the suite.
    pub object: Map<String, Value>,
}

/// A check that did not hold.
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {step}: {detail}")]
pub struct Failure {
    /// The kind checked.
    pub kind: String,
    /// What was being checked.
    pub step: &'static str,
    /// What happened instead.
    pub detail: String,
}

impl Case {
    fn fail(&self, step: &'static str, detail: impl Into<String>) -> Failure {
        Failure {
            kind: self.store.info().kind.clone(),
            step,
            detail: detail.into(),
        }
    }

    fn ns(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .filter(|_| self.store.info().namespaced)
    }

    fn named(&self, name: &str) -> Map<String, Value> {
        let mut obj = self.object.clone();
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = meta {
            m.insert("name".into(), Value::String(name.into()));
        }
        obj
    }

    fn generated(&self, prefix: &str) -> Map<String, Value> {
        let mut obj = self.object.clone();
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = meta {
            m.remove("name");
            m.insert("generateName".into(), Value::String(prefix.into()));
        }
        obj
    }
}

/// Runs the suite for `case`; the first check that fails.
pub async fn run(case: &Case) -> Result<(), Failure> {
    let store = &case.store;
    let ns = case.ns();
    let by = CreateOptions::by(MANAGER);
    let err = |e: StoreError| e.to_string();

    // Create.
    let created = store
        .create(ns, case.named("resttest-a"), &by)
        .await
        .map_err(|e| case.fail("create", err(e)))?;
    let v = created
        .to_value()
        .map_err(|e| case.fail("create", e.to_string()))?;
    let meta = &v["metadata"];
    for field in ["uid", "creationTimestamp", "resourceVersion"] {
        if meta[field].as_str().is_none_or(str::is_empty) {
            return Err(case.fail("create", format!("no metadata.{field}: {meta}")));
        }
    }
    let managers: Vec<&str> = meta["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    if managers != [MANAGER] {
        return Err(case.fail("create", format!("managers {managers:?}")));
    }
    let uid = meta["uid"].as_str().unwrap_or_default().to_owned();

    // Get.
    match store.get(ns, "resttest-a").await {
        Ok(Some(o)) if o.uid() == Some(uid.as_str()) => {}
        other => return Err(case.fail("get", format!("{other:?}"))),
    }

    // Create of an existing name.
    match store.create(ns, case.named("resttest-a"), &by).await {
        Err(e) if e.is_already_exists() => {}
        other => return Err(case.fail("create existing", format!("{other:?}"))),
    }

    updates_and_patches(case, &created).await?;

    // generateName.
    let generated = store
        .create(ns, case.generated("resttest-g-"), &by)
        .await
        .map_err(|e| case.fail("generateName", err(e)))?;
    let name = generated.name();
    if !(name.starts_with("resttest-g-") && name.len() == "resttest-g-".len() + 5) {
        return Err(case.fail("generateName", format!("name {name:?}")));
    }

    // Dry-run creates.
    let dry = CreateOptions {
        dry_run: true,
        ..CreateOptions::by(MANAGER)
    };
    store
        .create(ns, case.named("resttest-dry"), &dry)
        .await
        .map_err(|e| case.fail("dry-run create", err(e)))?;
    match store.get(ns, "resttest-dry").await {
        Ok(None) => {}
        other => return Err(case.fail("dry-run create wrote", format!("{other:?}"))),
    }
    match store.create(ns, case.named("resttest-a"), &dry).await {
        Err(e) if e.is_already_exists() => {}
        other => return Err(case.fail("dry-run create existing", format!("{other:?}"))),
    }

    // A delete whose precondition names another object.
    let stale = DeleteRequest {
        preconditions: Some(Preconditions {
            uid: Some("another-uid".into()),
            resource_version: None,
        }),
        ..DeleteRequest::default()
    };
    match store.delete(ns, "resttest-a", &stale).await {
        Err(StoreError::Storage(listwatch_storage::Error::Conflict { .. })) => {}
        other => return Err(case.fail("delete precondition", format!("{other:?}"))),
    }

    // Dry-run delete.
    let dry_delete = DeleteRequest {
        dry_run: true,
        ..DeleteRequest::default()
    };
    store
        .delete(ns, "resttest-a", &dry_delete)
        .await
        .map_err(|e| case.fail("dry-run delete", err(e)))?;
    match store.get(ns, "resttest-a").await {
        Ok(Some(o))
            if o.to_value()
                .is_ok_and(|v| v["metadata"]["deletionTimestamp"].is_null()) => {}
        other => return Err(case.fail("dry-run delete changed", format!("{other:?}"))),
    }

    // Delete.
    let done = store
        .delete(ns, "resttest-a", &DeleteRequest::default())
        .await
        .map_err(|e| case.fail("delete", err(e)))?;
    let left = store
        .get(ns, "resttest-a")
        .await
        .map_err(|e| case.fail("delete", err(e)))?;
    match (done, left) {
        (Deletion::Gone(_), None) => {}
        (Deletion::Pending(_), Some(o))
            if o.to_value()
                .is_ok_and(|v| v["metadata"]["deletionTimestamp"].is_string()) => {}
        (d, l) => return Err(case.fail("delete", format!("{d:?}, then {l:?}"))),
    }

    // Delete of a missing name.
    match store
        .delete(ns, "resttest-missing", &DeleteRequest::default())
        .await
    {
        Err(StoreError::Storage(e)) if e.is_not_found() => {}
        other => return Err(case.fail("delete missing", format!("{other:?}"))),
    }
    collections(case).await
}

/// The label the collection checks select on.
const LIST_LABEL: &str = "resttest-list";

/// How long a watch check waits for its event (only a hang reaches it).
const WATCH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

impl Case {
    /// An object `name` labelled `resttest-list=<list>`.
    fn labelled(&self, name: &str, list: &str) -> Map<String, Value> {
        let mut obj = self.named(name);
        if let Some(Value::Object(m)) = obj.get_mut("metadata") {
            let labels = m
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(l) = labels {
                l.insert(LIST_LABEL.into(), Value::String(list.into()));
            }
        }
        obj
    }
}

fn selecting(label: &str, field: &str) -> Result<ListOptions, String> {
    let mut opts = ListOptions::recursive();
    if !label.is_empty() {
        opts.predicate.label = LabelSelector::parse(label).map_err(|e| e.to_string())?;
    }
    if !field.is_empty() {
        opts.predicate.field = FieldSelector::parse(field).map_err(|e| e.to_string())?;
    }
    Ok(opts)
}

fn names(list: &ObjectList) -> Vec<&str> {
    list.items.iter().map(Object::name).collect()
}

/// The next event of `stream` that is not a bookmark, within [`WATCH_DEADLINE`].
async fn next_event(stream: &mut WatchStream) -> Result<WatchEvent, String> {
    let deadline = tokio::time::Instant::now() + WATCH_DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err("no event in time".into()),
            Ok(None) => return Err("the watch ended".into()),
            Ok(Some(WatchEvent::Bookmark(_))) => {}
            Ok(Some(e)) => return Ok(e),
        }
    }
}

/// The object of an event about an object.
fn event_object(e: &WatchEvent) -> Option<&Object> {
    match e {
        WatchEvent::Added(o) | WatchEvent::Deleted(o) | WatchEvent::Modified { object: o, .. } => {
            Some(o)
        }
        _ => None,
    }
}

/// list (selectors, pages), watch (a collection's, one object's) and deletecollection
/// (selectors, dry run), on objects labelled for it.
async fn collections(case: &Case) -> Result<(), Failure> {
    let store = &case.store;
    let ns = case.ns();
    let by = CreateOptions::by(MANAGER);
    let err = |e: StoreError| e.to_string();
    let sel = |l: &str, f: &str| selecting(l, f).map_err(|e| case.fail("selector", e));
    let yes = format!("{LIST_LABEL}=yes");

    for (name, list) in [
        ("resttest-l1", "yes"),
        ("resttest-l2", "yes"),
        ("resttest-l3", "yes"),
        ("resttest-o1", "no"),
    ] {
        store
            .create(ns, case.labelled(name, list), &by)
            .await
            .map_err(|e| case.fail("create for list", err(e)))?;
    }

    // List: a label selector, a field selector, every namespace.
    let listed = store
        .list(ns, &sel(&yes, "")?)
        .await
        .map_err(|e| case.fail("list", err(e)))?;
    if names(&listed) != ["resttest-l1", "resttest-l2", "resttest-l3"]
        || listed.resource_version == 0
    {
        return Err(case.fail(
            "list by label",
            format!("{:?} at {}", names(&listed), listed.resource_version),
        ));
    }
    let one = store
        .list(ns, &sel("", "metadata.name=resttest-l2")?)
        .await
        .map_err(|e| case.fail("list by field", err(e)))?;
    if names(&one) != ["resttest-l2"] {
        return Err(case.fail("list by field", format!("{:?}", names(&one))));
    }
    let everywhere = store
        .list(None, &sel(&yes, "")?)
        .await
        .map_err(|e| case.fail("list every namespace", err(e)))?;
    if everywhere.items.len() != 3 {
        return Err(case.fail("list every namespace", format!("{:?}", names(&everywhere))));
    }

    // Pages: limit, then continue.
    let mut paged = sel(&yes, "")?;
    paged.limit = Some(2);
    let first = store
        .list(ns, &paged)
        .await
        .map_err(|e| case.fail("list page", err(e)))?;
    let Some(token) = first
        .continue_token
        .clone()
        .filter(|_| first.items.len() == 2)
    else {
        return Err(case.fail(
            "list page",
            format!("{:?}, continue {:?}", names(&first), first.continue_token),
        ));
    };
    paged.continue_token = Some(token);
    let second = store
        .list(ns, &paged)
        .await
        .map_err(|e| case.fail("list next page", err(e)))?;
    if names(&second) != ["resttest-l3"] || second.continue_token.is_some() {
        return Err(case.fail(
            "list next page",
            format!("{:?}, continue {:?}", names(&second), second.continue_token),
        ));
    }

    // Watch a collection from the list's version: a create outside the selection is not
    // seen, one inside is.
    let mut from = sel(&yes, "")?;
    from.resource_version = Some(listed.resource_version);
    let mut stream = store
        .watch(ns, None, &from)
        .await
        .map_err(|e| case.fail("watch", err(e)))?;
    for (name, list) in [("resttest-o2", "no"), ("resttest-l4", "yes")] {
        store
            .create(ns, case.labelled(name, list), &by)
            .await
            .map_err(|e| case.fail("create for watch", err(e)))?;
    }
    match next_event(&mut stream).await {
        Ok(WatchEvent::Added(o)) if o.name() == "resttest-l4" => {}
        other => return Err(case.fail("watch", format!("{other:?}"))),
    }
    drop(stream);

    // Watch one object: a delete of another is not seen, its own is.
    let now = store
        .list(ns, &sel(&yes, "")?)
        .await
        .map_err(|e| case.fail("list", err(e)))?;
    let at = ListOptions {
        resource_version: Some(now.resource_version),
        ..ListOptions::default()
    };
    let mut single = store
        .watch(ns, Some("resttest-l1"), &at)
        .await
        .map_err(|e| case.fail("watch one", err(e)))?;
    for name in ["resttest-o1", "resttest-l1"] {
        store
            .delete(ns, name, &DeleteRequest::default())
            .await
            .map_err(|e| case.fail("delete for watch", err(e)))?;
    }
    match next_event(&mut single).await {
        Ok(e) if event_object(&e).is_some_and(|o| o.name() == "resttest-l1") => {}
        other => return Err(case.fail("watch one", format!("{other:?}"))),
    }
    drop(single);

    // Deletecollection: namespaces have none; a dry run deletes nothing; otherwise what
    // the selector selects goes (or is marked), nothing else.
    let dry = DeleteRequest {
        dry_run: true,
        ..DeleteRequest::default()
    };
    let everything = ListOptions::recursive();
    if crate::lifecycle::is_namespaces(store.info()) {
        return match store.delete_collection(ns, &everything, &dry).await {
            Err(StoreError::Rejected(e)) if e.code() == 405 => Ok(()),
            other => Err(case.fail("namespaces deletecollection", format!("{other:?}"))),
        };
    }
    let before = store
        .list(ns, &everything)
        .await
        .map_err(|e| case.fail("list", err(e)))?;
    // What the selector selects now (resttest-l1 is gone, or marked by its delete).
    let selected = store
        .list(ns, &sel(&yes, "")?)
        .await
        .map_err(|e| case.fail("list", err(e)))?;
    let would = store
        .delete_collection(ns, &sel(&yes, "")?, &dry)
        .await
        .map_err(|e| case.fail("dry-run deletecollection", err(e)))?;
    let after = store
        .list(ns, &everything)
        .await
        .map_err(|e| case.fail("list", err(e)))?;
    let versions =
        |l: &ObjectList| -> Vec<u64> { l.items.iter().map(Object::resource_version).collect() };
    if names(&would) != names(&selected) || versions(&before) != versions(&after) {
        return Err(case.fail(
            "dry-run deletecollection",
            format!(
                "{:?}; before {:?}, after {:?}",
                names(&would),
                names(&before),
                names(&after)
            ),
        ));
    }
    let done = store
        .delete_collection(ns, &sel(&yes, "")?, &DeleteRequest::default())
        .await
        .map_err(|e| case.fail("deletecollection", err(e)))?;
    if names(&done) != names(&selected)
        || !names(&done).contains(&"resttest-l4")
        || done.continue_token.is_some()
    {
        return Err(case.fail("deletecollection", format!("{:?}", names(&done))));
    }
    let left = store
        .list(ns, &sel(&yes, "")?)
        .await
        .map_err(|e| case.fail("deletecollection", err(e)))?;
    let marked = |o: &Object| {
        o.to_value()
            .is_ok_and(|v| v["metadata"]["deletionTimestamp"].is_string())
    };
    if !left.items.iter().all(marked) {
        return Err(case.fail("deletecollection left", format!("{:?}", names(&left))));
    }
    match store.get(ns, "resttest-o2").await {
        Ok(Some(_)) => Ok(()),
        other => Err(case.fail("deletecollection beyond its selector", format!("{other:?}"))),
    }
}

/// The manager the suite's updates are recorded under.
pub const UPDATE_MANAGER: &str = "resttest-update";
/// The manager the suite's merge patches are recorded under.
pub const PATCH_MANAGER: &str = "resttest-patch";
/// The manager the suite's applies are recorded under.
pub const APPLY_MANAGER: &str = "resttest-apply";

fn value(case: &Case, step: &'static str, o: &Object) -> Result<Value, Failure> {
    o.to_value().map_err(|e| case.fail(step, e.to_string()))
}

/// The managedFields entries of `v` as (manager, operation, subresource).
fn managers(v: &Value) -> Vec<(String, String, String)> {
    let field = |e: &Value, f: &str| e[f].as_str().unwrap_or_default().to_owned();
    v["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        field(e, "manager"),
                        field(e, "operation"),
                        field(e, "subresource"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_conflict(r: &Result<crate::write::Written, StoreError>) -> bool {
    match r {
        Err(StoreError::Storage(e)) => e.is_conflict(),
        Err(StoreError::Rejected(e)) => e.code() == 409,
        Ok(_) => false,
    }
}

fn is_not_found(r: &Result<crate::write::Written, StoreError>) -> bool {
    match r {
        Err(StoreError::Storage(e)) => e.is_not_found(),
        Err(StoreError::Rejected(e)) => e.code() == 404,
        Ok(_) => false,
    }
}

fn with_label(v: &Value, key: &str, val: &str) -> Map<String, Value> {
    let mut v = v.clone();
    v["metadata"]["labels"][key] = Value::String(val.into());
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The update and patch checks, on the object `created` (`resttest-a`), as upstream's
/// resttest `TestUpdate`: an update is stored with a new resourceVersion and a managedFields
/// entry of its manager; a body with a stale resourceVersion, or a uid precondition naming
/// another object, is a conflict; an update of a missing object is `NotFound` (or creates
/// it, where the kind allows create-on-update); a dry-run update returns the result and
/// writes nothing; a `/status` update leaves the spec as it was; a merge patch and an apply
/// are stored and recorded under their managers (the apply as an `Apply`); a patch of a
/// missing object is `NotFound`; a patch with a stale resourceVersion precondition is a
/// conflict.
pub async fn updates_and_patches(case: &Case, created: &Object) -> Result<(), Failure> {
    let store = &case.store;
    let ns = case.ns();
    let err = |e: StoreError| e.to_string();
    let first = value(case, "update", created)?;
    let first_rv = created.resource_version();

    // Update.
    let by = UpdateOptions::by(UPDATE_MANAGER);
    let updated = store
        .update(ns, "resttest-a", with_label(&first, "updated", "yes"), &by)
        .await
        .map_err(|e| case.fail("update", err(e)))?;
    let v = value(case, "update", &updated.object)?;
    if updated.created || v["metadata"]["labels"]["updated"] != "yes" {
        return Err(case.fail("update", format!("stored {v}")));
    }
    if updated.object.resource_version() <= first_rv {
        return Err(case.fail("update", "the resourceVersion did not advance"));
    }
    let entry = (
        UPDATE_MANAGER.to_owned(),
        "Update".to_owned(),
        String::new(),
    );
    if !managers(&v).contains(&entry) {
        return Err(case.fail("update managedFields", format!("{:?}", managers(&v))));
    }

    // A stale resourceVersion in the body.
    let r = store
        .update(ns, "resttest-a", with_label(&first, "stale", "yes"), &by)
        .await;
    if !is_conflict(&r) {
        return Err(case.fail("update stale resourceVersion", format!("{r:?}")));
    }

    // A uid precondition naming another object.
    let other = UpdateOptions {
        preconditions: Some(Preconditions {
            uid: Some("another-uid".into()),
            resource_version: None,
        }),
        ..UpdateOptions::by(UPDATE_MANAGER)
    };
    let r = store
        .update(
            ns,
            "resttest-a",
            with_label(&v, "precondition", "yes"),
            &other,
        )
        .await;
    if !is_conflict(&r) {
        return Err(case.fail("update uid precondition", format!("{r:?}")));
    }

    // An update of a missing object.
    let mut missing = case.named("resttest-u-missing");
    missing.insert("metadata".into(), {
        let mut m = Map::new();
        m.insert("name".into(), Value::String("resttest-u-missing".into()));
        if let Some(ns) = ns {
            m.insert("namespace".into(), Value::String(ns.into()));
        }
        Value::Object(m)
    });
    let r = store.update(ns, "resttest-u-missing", missing, &by).await;
    match (&r, store.info().allow_create_on_update) {
        (Ok(w), true) if w.created => {}
        (_, false) if is_not_found(&r) => {}
        _ => return Err(case.fail("update missing", format!("{r:?}"))),
    }

    // Dry-run update.
    let dry = UpdateOptions {
        dry_run: true,
        ..UpdateOptions::by(UPDATE_MANAGER)
    };
    let r = store
        .update(ns, "resttest-a", with_label(&v, "dry", "yes"), &dry)
        .await
        .map_err(|e| case.fail("dry-run update", err(e)))?;
    let shown = value(case, "dry-run update", &r.object)?;
    if shown["metadata"]["labels"]["dry"] != "yes" {
        return Err(case.fail("dry-run update", format!("answered {shown}")));
    }
    match store.get(ns, "resttest-a").await {
        Ok(Some(o))
            if o.resource_version() == updated.object.resource_version()
                && o.to_value()
                    .is_ok_and(|s| s["metadata"]["labels"]["dry"].is_null()) => {}
        other => return Err(case.fail("dry-run update wrote", format!("{other:?}"))),
    }

    // `/status` ignores the spec.
    if store.info().status_subresource {
        let mut body = with_label(&v, "ignored", "no");
        body.insert("spec".into(), Value::Object(Map::new()));
        body.entry("metadata").and_modify(|m| {
            if let Value::Object(m) = m {
                m.remove("resourceVersion");
            }
        });
        let status = UpdateOptions {
            subresource: Subresource::Status,
            ..UpdateOptions::by(UPDATE_MANAGER)
        };
        let r = store
            .update(ns, "resttest-a", body, &status)
            .await
            .map_err(|e| case.fail("status update", err(e)))?;
        let current = value(case, "status update", &r.object)?;
        if current["spec"] != v["spec"] {
            return Err(case.fail(
                "status update changed the spec",
                format!("{} became {}", v["spec"], current["spec"]),
            ));
        }
    }

    // Merge patch.
    let merge = Patch::Merge(serde_json::json!({"metadata": {"labels": {"patched": "yes"}}}));
    let r = store
        .patch(ns, "resttest-a", &merge, &PatchOptions::by(PATCH_MANAGER))
        .await
        .map_err(|e| case.fail("merge patch", err(e)))?;
    let p = value(case, "merge patch", &r.object)?;
    let entry = (PATCH_MANAGER.to_owned(), "Update".to_owned(), String::new());
    if p["metadata"]["labels"]["patched"] != "yes" || !managers(&p).contains(&entry) {
        return Err(case.fail("merge patch", format!("stored {p}")));
    }

    // Apply.
    let api_version = p["apiVersion"].clone();
    let config = serde_json::json!({
        "apiVersion": api_version, "kind": store.info().kind,
        "metadata": {"name": "resttest-a", "labels": {"applied": "yes"}},
    });
    let r = store
        .patch(
            ns,
            "resttest-a",
            &Patch::Apply(config),
            &PatchOptions::by(APPLY_MANAGER),
        )
        .await
        .map_err(|e| case.fail("apply", err(e)))?;
    let a = value(case, "apply", &r.object)?;
    let entry = (APPLY_MANAGER.to_owned(), "Apply".to_owned(), String::new());
    if a["metadata"]["labels"]["applied"] != "yes" || !managers(&a).contains(&entry) {
        return Err(case.fail("apply", format!("stored {a}")));
    }

    // A patch of a missing object.
    let r = store
        .patch(
            ns,
            "resttest-p-missing",
            &merge,
            &PatchOptions::by(PATCH_MANAGER),
        )
        .await;
    if !is_not_found(&r) {
        return Err(case.fail("patch missing", format!("{r:?}")));
    }

    // A patch with a stale resourceVersion precondition.
    let stale = PatchOptions {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some(first_rv),
        }),
        ..PatchOptions::by(PATCH_MANAGER)
    };
    let r = store.patch(ns, "resttest-a", &merge, &stale).await;
    if !is_conflict(&r) {
        return Err(case.fail("patch stale precondition", format!("{r:?}")));
    }
    Ok(())
}
