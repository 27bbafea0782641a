//! [`Patch`] and [`PatchParams`]: the four patch types kube-apiserver accepts, and the query
//! parameters that go with them.
//!
//! Invariants: server-side apply always carries a field manager and `force` is only ever sent
//! with apply (kube-apiserver refuses both otherwise; here they are [`Error::Request`] before
//! anything is sent).

use crate::{Error, Result};

/// A patch of one object, by content type (what `kubectl patch --type` chooses).
#[derive(Debug, Clone, PartialEq)]
pub enum Patch<P> {
    /// RFC 7386 JSON merge patch (`application/merge-patch+json`): fields set replace, `null`
    /// removes, lists are replaced whole.
    Merge(P),
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`): lists
    /// merged by their keys (built-in kinds only; custom resources refuse it).
    Strategic(P),
    /// RFC 6902 JSON patch (`application/json-patch+json`): `P` serializes to an array of
    /// operations (`{"op": "replace", "path": "/spec/replicas", "value": 3}`).
    Json(P),
    /// Server-side apply (`application/apply-patch+yaml`; JSON is YAML): `P` is the whole
    /// intent of one field manager, with `apiVersion`, `kind` and `metadata.name`. Needs
    /// [`PatchParams::apply`].
    Apply(P),
}

impl<P> Patch<P> {
    /// The patch document.
    pub fn body(&self) -> &P {
        match self {
            Patch::Merge(p) | Patch::Strategic(p) | Patch::Json(p) | Patch::Apply(p) => p,
        }
    }

    /// The `Content-Type` it is sent with.
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }
}

/// Query parameters of a patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchParams {
    /// `fieldManager`: who owns the fields set (required for apply).
    pub field_manager: Option<String>,
    /// `force`: apply takes over fields other managers own (apply only).
    pub force: bool,
    /// `dryRun=All`: validated and admitted, not persisted.
    pub dry_run: bool,
}

impl PatchParams {
    /// Parameters of a server-side apply by `field_manager`.
    pub fn apply(field_manager: impl Into<String>) -> Self {
        Self {
            field_manager: Some(field_manager.into()),
            ..Self::default()
        }
    }

    /// Takes over conflicting fields (apply only).
    #[must_use]
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// Validates and admits without persisting.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The query string for `patch`.
    pub(crate) fn query<P>(&self, patch: &Patch<P>) -> Result<String> {
        let apply = matches!(patch, Patch::Apply(_));
        if apply && self.field_manager.as_deref().is_none_or(str::is_empty) {
            return Err(Error::Request(
                "server-side apply needs a field manager (PatchParams::apply)".into(),
            ));
        }
        if self.force && !apply {
            return Err(Error::Request("force is only for server-side apply".into()));
        }
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        if self.force {
            q.append_pair("force", "true");
        }
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        Ok(q.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_needs_a_manager_and_force_needs_apply() {
        let apply = Patch::Apply(());
        assert!(matches!(
            PatchParams::default().query(&apply),
            Err(Error::Request(_))
        ));
        assert_eq!(
            PatchParams::apply("me").force().query(&apply).unwrap(),
            "fieldManager=me&force=true"
        );
        assert!(matches!(
            PatchParams::default().force().query(&Patch::Merge(())),
            Err(Error::Request(_))
        ));
        assert_eq!(
            PatchParams::default()
                .dry_run()
                .query(&Patch::Merge(()))
                .unwrap(),
            "dryRun=All"
        );
        assert_eq!(
            Patch::Json(()).content_type(),
            "application/json-patch+json"
        );
    }
}
