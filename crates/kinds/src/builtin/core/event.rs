//! Events (`v1`): upstream's event selectable fields, create on PUT, no part in garbage
//! collection; no strategy code.

use crate::{GcPolicy, Generation, KindSpec, NameValidation, Printer, PrinterColumn};

/// Event fields a field selector may name (upstream's `event.ToSelectableFields` and core/v1's
/// event field label function, whose `source` — declared with how it is read in [`spec`] —
/// is `source.component`, else `reportingComponent`; `source.component` itself is not a
/// label the function accepts).
pub const EVENT_FIELDS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "type",
];

/// `v1` events.
pub fn spec() -> KindSpec {
    let col = PrinterColumn::new;
    KindSpec::new("", "v1", "events", "Event")
        .short_names(["ev"])
        .selectable_fields(EVENT_FIELDS)
        .field_reads("source", &["source.component", "reportingComponent"])
        .generation(Generation::None)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
        // Upstream: events take no part in garbage collection.
        .gc_policy(GcPolicy::Unsupported)
        .printer(Printer::Columns(vec![
            col("Type", "string", ".type"),
            col("Reason", "string", ".reason"),
            col("Object", "string", ".involvedObject.name"),
            col("Message", "string", ".message"),
        ]))
}
