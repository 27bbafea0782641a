//! Nodes (`v1`, cluster-scoped). Upstream's node strategy lets a create set every field,
//! the status included ("Nodes allow *all* fields, including status, to be set on create"),
//! so nodes need no strategy code; `/status` resets only the spec.

use crate::{Generation, KindSpec, Printer, PrinterColumn, StatusUpdate};

/// `v1` nodes.
pub fn spec() -> KindSpec {
    let col = PrinterColumn::new;
    KindSpec::new("", "v1", "nodes", "Node")
        .namespaced(false)
        .short_names(["no"])
        .selectable_fields(["spec.unschedulable"])
        .field_default("spec.unschedulable", "false")
        .generation(Generation::None)
        .status_subresource(true)
        // nodeStatusStrategy.PrepareForUpdate resets only the spec.
        .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
        .printer(Printer::Columns(vec![
            col(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            col("Version", "string", ".status.nodeInfo.kubeletVersion"),
            col(
                "Internal-IP",
                "string",
                ".status.addresses[?(@.type==\"InternalIP\")].address",
            )
            .wide(),
        ]))
}
