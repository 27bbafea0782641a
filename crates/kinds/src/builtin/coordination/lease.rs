//! Leases (`coordination.k8s.io/v1`): create on PUT; no strategy code.

use crate::{Generation, KindSpec, Printer, PrinterColumn};

/// `coordination.k8s.io/v1` leases.
pub fn spec() -> KindSpec {
    KindSpec::new("coordination.k8s.io", "v1", "leases", "Lease")
        .generation(Generation::None)
        .allow_create_on_update(true)
        .printer(Printer::Columns(vec![PrinterColumn::new(
            "Holder",
            "string",
            ".spec.holderIdentity",
        )]))
}
