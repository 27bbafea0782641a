//! Real CustomResourceDefinition manifests (`apiextensions.k8s.io/v1`) in a `--resources`
//! file: checked by the CRD kind's own validation (the one a create through the API passes,
//! `listwatch_kinds::builtin::apiextensions::customresourcedefinition`), then read by the
//! shared conversion (`listwatch_kinds::crd`): one kind per served version, the storage
//! version first, all over the storage version's storage.
//!
//! Invariant: a document that is not a valid CRD of `apiextensions.k8s.io/v1` is refused
//! with a message naming each field at fault; nothing is guessed except the defaults a CRD
//! itself has (`singular` from `kind`, `listKind`, and a missing `metadata.name` taken as
//! `<plural>.<group>`).

use listwatch_kinds::KindStrategy;
use listwatch_kinds::builtin::apiextensions::customresourcedefinition::CrdStrategy;
use listwatch_kinds::crd::Definition;
use serde_json::Value;

use listwatch_endpoints::KindSpec;

/// The API version and kind of a CRD manifest.
pub(super) const API_VERSION: &str = listwatch_kinds::crd::API_VERSION;
pub(super) const KIND: &str = listwatch_kinds::crd::KIND;

/// Whether `doc` is a CRD manifest (by its `kind`), or names the CRD API in another version
/// (refused by [`specs`]).
pub(super) fn is_crd(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
}

/// The kinds a CRD manifest defines (one per served version, the storage version first);
/// `Err` names what is missing or wrong.
pub(super) fn specs(doc: &Value) -> Result<Vec<KindSpec>, String> {
    let def = Definition::read(doc)?;
    // Checked as a create through the API would be (its defaults first).
    let mut checked = doc.clone();
    if checked.pointer("/metadata/name").is_none()
        && let Some(o) = checked.as_object_mut()
    {
        // A manifest without a name is taken as named as it must be.
        o.insert(
            "metadata".into(),
            serde_json::json!({"name": format!("{}.{}", def.names.plural, def.group)}),
        );
    }
    CrdStrategy.prepare_for_create(&mut checked);
    let errs = CrdStrategy.validate_create(&checked);
    if !errs.is_empty() {
        // Each as upstream's `field.Error` prints: `<field>: <type>: <value>: <detail>`.
        let causes: Vec<String> = errs.iter().map(ToString::to_string).collect();
        // Named as upstream names an invalid object, with the kind it would have served.
        let name = checked
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(format!(
            "CustomResourceDefinition {:?} (kind {}) is invalid: {}",
            listwatch_api::echo::echo(name),
            listwatch_api::echo::echo(&def.names.kind),
            causes.join("; ")
        ));
    }
    let specs = def.kind_specs(&def.names);
    if specs.is_empty() {
        return Err("spec.versions: no version is served".into());
    }
    Ok(specs)
}
