//! Services (`v1`): upstream's service strategy (pkg/registry/core/service/strategy.go):
//! `spec.type` defaults to `ClusterIP` and the status is reset on create; `/status` resets
//! only the spec; a PUT of a missing service creates it; names are DNS-1035 labels.

use serde_json::{Value, json};

use crate::strategy::{KindStrategy, set_default};
use crate::{Generation, KindSpec, NameValidation, Printer, PrinterColumn, StatusUpdate};

/// `v1` services.
pub fn spec() -> KindSpec {
    let col = PrinterColumn::new;
    KindSpec::new("", "v1", "services", "Service")
        .short_names(["svc"])
        .categories(["all"])
        .name_validation(NameValidation::Label1035)
        .selectable_fields(["spec.clusterIP", "spec.type"])
        .field_default("spec.type", "ClusterIP")
        .generation(Generation::None)
        .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
        .status_subresource(true)
        .printer(Printer::Columns(vec![
            col("Type", "string", ".spec.type"),
            col("Cluster-IP", "string", ".spec.clusterIP"),
            col("Selector", "string", ".spec.selector").wide(),
        ]))
        .allow_create_on_update(true)
        .return_deleted_object(true)
        .strategy(ServiceStrategy)
}

/// The service strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceStrategy;

impl KindStrategy for ServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, &["spec", "type"], json!("ClusterIP"));
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_resets_the_status() {
        let mut svc = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
        ServiceStrategy.prepare_for_create(&mut svc);
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
        assert_eq!(svc["spec"]["type"], "ClusterIP");
    }
}
