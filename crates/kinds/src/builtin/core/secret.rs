//! Secrets (`v1`): upstream's v1 defaults set `type` to `Opaque` (a field selector reads an
//! object without one as `Opaque` too).

use serde_json::{Value, json};

use crate::strategy::{KindStrategy, set_default};
use crate::{Generation, KindSpec, Printer, PrinterColumn};

/// `v1` secrets.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "secrets", "Secret")
        .selectable_fields(["type"])
        .field_default("type", "Opaque")
        .generation(Generation::None)
        .printer(Printer::Columns(vec![PrinterColumn::new(
            "Type", "string", ".type",
        )]))
        .strategy(SecretStrategy)
}

/// The secret strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretStrategy;

impl KindStrategy for SecretStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, &["type"], json!("Opaque"));
    }
}
