//! Namespaces (`v1`, cluster-scoped): upstream's namespace strategy
//! (pkg/registry/core/namespace/strategy.go): `spec.finalizers` holds `kubernetes` and the
//! status is `Active` on create; `/status` resets only the spec; `/finalize` is the only write
//! of `spec.finalizers`. The lifecycle rules (termination, the finalizers' validation) are the
//! registry's namespace module's.

use serde_json::{Value, json};

use crate::strategy::{KindStrategy, set_default};
use crate::{
    FieldLabels, Generation, KindSpec, NameValidation, Printer, PrinterColumn, StatusUpdate,
};

/// `v1` namespaces.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "namespaces", "Namespace")
        .namespaced(false)
        .short_names(["ns"])
        .name_validation(NameValidation::Label)
        .selectable_fields(["status.phase"])
        .field_default("status.phase", "Active")
        // core/v1's field label function for namespaces lists `metadata.name` only.
        .field_labels(FieldLabels::NOT_SUPPORTED_NO_NAMESPACE)
        .generation(Generation::None)
        .return_deleted_object(true)
        .status_subresource(true)
        // namespaceStatusStrategy.PrepareForUpdate resets only the spec.
        .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
        .finalize_subresource(true)
        .printer(Printer::Columns(vec![PrinterColumn::new(
            "Status",
            "string",
            ".status.phase",
        )]))
        .strategy(NamespaceStrategy)
}

/// The namespace strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NamespaceStrategy;

impl KindStrategy for NamespaceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, &["spec", "finalizers"], json!(["kubernetes"]));
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Active"}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_is_active_with_the_kubernetes_finalizer() {
        let mut ns = json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}});
        NamespaceStrategy.prepare_for_create(&mut ns);
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }
}
