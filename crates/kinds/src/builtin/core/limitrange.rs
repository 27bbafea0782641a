//! Limit ranges (`v1`): stored only (no admission enforces them); a PUT of a missing one
//! creates it (upstream's strategy allows create on update); printed as upstream's default
//! table convertor prints them (NAME CREATED AT).

use crate::KindSpec;
use crate::builtin::print::{self, Printed};

/// `v1` limit ranges, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.allow_create_on_update(true).strategy(Printed::new(
        print::created_at_columns,
        print::created_at_cells,
    ))
}
