//! The per-kind conformance suite of a [`Store`], as upstream's `resttest`
//! (`k8s.io/apiserver/pkg/registry/rest/resttest`): the behaviour every kind's store shares,
//! checked for one kind at a time over whatever storage the caller gives. Behind the
//! `resttest` feature: only tests use it.
//!
//! What [`run`] checks, in order: a create stores the object with a uid, a creation
//! timestamp, a resourceVersion and a managedFields entry of its manager; a get returns it;
//! a second create of the name is `AlreadyExists`; `generateName` makes a name of the prefix
//! and five characters; a dry-run create writes nothing, and one of an existing name is
//! `AlreadyExists`; a delete whose uid precondition names another object is a conflict and
//! deletes nothing; a dry-run delete deletes nothing; a delete removes the object or leaves
//! it marked with a `deletionTimestamp`; a delete of a missing name is `NotFound`.
//!
//! Invariant: the suite only creates names beginning with `resttest-` in the case's namespace.

use serde_json::{Map, Value};

use crate::lifecycle::Deletion;
use crate::options::DeleteRequest;
use crate::store::{CreateOptions, Store, StoreError};
use listwatch_storage::Preconditions;

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
        field_manager: MANAGER.into(),
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
        Err(StoreError::Storage(e)) if e.is_not_found() => Ok(()),
        other => Err(case.fail("delete missing", format!("{other:?}"))),
    }
}
