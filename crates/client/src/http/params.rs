//! Options of creates and deletes: [`PostParams`] (`dryRun`, `fieldManager`) and
//! [`DeleteParams`] (`dryRun`, `propagationPolicy`, `gracePeriodSeconds`, `preconditions`),
//! as kube-apiserver reads them (`metav1.CreateOptions`, `metav1.DeleteOptions`).
//!
//! Invariants: a create's options go in the query (as client-go sends them); a delete's go in
//! a `DeleteOptions` body (client-go's `Body(&opts)`), except `dryRun`, which is also put in
//! the query so that a server that reads only the query still does not persist. Nothing here
//! allocates from server input.

use serde_json::{Map, Value, json};

/// Options of a create (`metav1.CreateOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostParams {
    /// `dryRun=All`: validated and admitted, not persisted.
    pub dry_run: bool,
    /// `fieldManager`: the manager recorded for the fields the create sets.
    pub field_manager: Option<String>,
}

impl PostParams {
    /// Validates and admits without persisting.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Records `manager` as the fields' manager.
    #[must_use]
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// The query string.
    pub(crate) fn query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        q.finish()
    }
}

/// What happens to a deleted object's dependents (`metav1.DeletionPropagation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropagationPolicy {
    /// Dependents are left, their owner reference removed.
    Orphan,
    /// The object goes at once; the garbage collector deletes the dependents after.
    Background,
    /// The object stays (with `deletionTimestamp` and the `foregroundDeletion` finalizer)
    /// until its blocking dependents are gone.
    Foreground,
}

impl PropagationPolicy {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            PropagationPolicy::Orphan => "Orphan",
            PropagationPolicy::Background => "Background",
            PropagationPolicy::Foreground => "Foreground",
        }
    }
}

/// Conditions the object must meet for a delete to happen (`metav1.Preconditions`); a
/// mismatch is a 409 Conflict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's `metadata.uid` (not a successor of the same name).
    pub uid: Option<String>,
    /// The object's `metadata.resourceVersion` (unchanged since read).
    pub resource_version: Option<String>,
}

/// Options of a delete (`metav1.DeleteOptions`).
///
/// ```
/// use listwatch_client::{DeleteParams, PropagationPolicy};
///
/// let params = DeleteParams::default()
///     .propagation(PropagationPolicy::Foreground)
///     .precondition_uid("6b1c…")
///     .dry_run();
/// assert!(params.dry_run);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy` (the server's default for the kind when `None`).
    pub propagation_policy: Option<PropagationPolicy>,
    /// `gracePeriodSeconds` (pods: 0 deletes at once).
    pub grace_period_seconds: Option<u32>,
    /// `preconditions`.
    pub preconditions: Option<Preconditions>,
}

impl DeleteParams {
    /// Validates without deleting.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Sets the propagation policy.
    #[must_use]
    pub fn propagation(mut self, policy: PropagationPolicy) -> Self {
        self.propagation_policy = Some(policy);
        self
    }

    /// Sets the grace period.
    #[must_use]
    pub fn grace_period(mut self, seconds: u32) -> Self {
        self.grace_period_seconds = Some(seconds);
        self
    }

    /// Deletes only the object with this uid.
    #[must_use]
    pub fn precondition_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions
            .get_or_insert_with(Preconditions::default)
            .uid = Some(uid.into());
        self
    }

    /// Deletes only the object at this resource version.
    #[must_use]
    pub fn precondition_resource_version(mut self, rv: impl Into<String>) -> Self {
        self.preconditions
            .get_or_insert_with(Preconditions::default)
            .resource_version = Some(rv.into());
        self
    }

    /// The query string (`dryRun` only).
    pub(crate) fn query(&self) -> String {
        if self.dry_run {
            "dryRun=All".to_owned()
        } else {
            String::new()
        }
    }

    /// The `DeleteOptions` body; `None` when there is nothing to say.
    pub(crate) fn body(&self) -> Option<Value> {
        if *self == Self::default() {
            return None;
        }
        let mut o = Map::new();
        o.insert("kind".into(), json!("DeleteOptions"));
        o.insert("apiVersion".into(), json!("v1"));
        if self.dry_run {
            o.insert("dryRun".into(), json!(["All"]));
        }
        if let Some(p) = self.propagation_policy {
            o.insert("propagationPolicy".into(), json!(p.as_str()));
        }
        if let Some(g) = self.grace_period_seconds {
            o.insert("gracePeriodSeconds".into(), json!(g));
        }
        if let Some(p) = &self.preconditions {
            let mut pre = Map::new();
            if let Some(uid) = &p.uid {
                pre.insert("uid".into(), json!(uid));
            }
            if let Some(rv) = &p.resource_version {
                pre.insert("resourceVersion".into(), json!(rv));
            }
            o.insert("preconditions".into(), Value::Object(pre));
        }
        Some(Value::Object(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_wire_names() {
        assert_eq!(PostParams::default().query(), "");
        assert_eq!(
            PostParams::default().dry_run().field_manager("op").query(),
            "dryRun=All&fieldManager=op"
        );
        assert_eq!(DeleteParams::default().body(), None);
        let d = DeleteParams::default()
            .propagation(PropagationPolicy::Foreground)
            .grace_period(0)
            .precondition_uid("u")
            .precondition_resource_version("7")
            .dry_run();
        assert_eq!(d.query(), "dryRun=All");
        assert_eq!(
            d.body(),
            Some(
                json!({"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"],
                "propagationPolicy":"Foreground","gracePeriodSeconds":0,
                "preconditions":{"uid":"u","resourceVersion":"7"}})
            )
        );
    }
}
