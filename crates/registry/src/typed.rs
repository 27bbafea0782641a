//! Typed validation of built-in kinds' write bodies: a body that would not decode into the
//! kind's Go type upstream is refused, as upstream's decoder refuses it, before anything
//! else looks at it (field validation, the kind's rules, storage).
//!
//! What it owns: where the check runs and how it is answered —
//! - a create's or update's body (also through `/status` and other subresources that take
//!   the whole object): 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: json:
//!   cannot unmarshal …` (upstream's decode error, whatever `fieldValidation` says);
//! - a patched object (JSON patch, merge patch, strategic merge): 422 `patch: Invalid
//!   value: "<patched object>": json: cannot unmarshal …`, as upstream's patcher answers a
//!   patched object it cannot decode;
//! - an apply configuration: 400 `failed to create typed patch object (<g>/<v>,
//!   Kind=<K>): .spec.replicas: expected numeric (int or float), got string`, as the typed
//!   conversion of server-side apply answers.
//!
//! A body that passes is then written back as upstream would store it ([`canonicalize`]:
//! quantities as canonical strings, `null` items of typed lists and values of typed maps as
//! their zero values), on every path that decodes one: a create's or update's body (and
//! through `/status`), a patched object, an applied one (create or update), dry run or not.
//!
//! The rules themselves (which JSON fits which Go type, and the wording) are the schema
//! crate's [`listwatch_schema::Node::check_types`], read from upstream's vendored
//! definitions. Custom resources are not checked here (their structural schema validation
//! refuses mistyped values with 422, as upstream's), nor kinds without a definition, nor
//! `/scale` bodies.
//!
//! Invariant: the check walks the body once without allocating unless it refuses, so its
//! cost is linear in the body and bounded by what the decoder already accepted.

use listwatch_api::Status;
use listwatch_api::echo;
use listwatch_api::status::reason;
use listwatch_kinds::KindSpec;
use listwatch_schema::{Catalog, TypeError};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// The mismatch of `v` against `info`'s definition in `catalog`, if `info` is a built-in
/// kind with a definition.
fn find(info: &KindSpec, catalog: &Catalog, v: &Value) -> Option<Box<TypeError>> {
    if info.custom_resource {
        return None;
    }
    let plan = catalog.plan(&info.group, &info.version, &info.kind)?;
    plan.check_types(v).err()
}

/// Writes `v` (a body [`check_body`], [`check_patched`] or an apply accepted) back as
/// upstream's decoding leaves it: [`listwatch_schema::Node::canonicalize`]. Nothing for
/// custom resources or kinds without a definition.
pub fn canonicalize(info: &KindSpec, catalog: &Catalog, v: &mut Value) {
    if info.custom_resource {
        return;
    }
    if let Some(plan) = catalog.plan(&info.group, &info.version, &info.kind) {
        plan.canonicalize(v, listwatch_schema::rounds_resource_lists(&info.group));
    }
}

/// A create's or update's body: 400 with upstream's decode-error wording.
pub fn check_body(info: &KindSpec, catalog: &Catalog, body: &Value) -> ApiResult<()> {
    match find(info, catalog, body) {
        None => Ok(()),
        Some(e) => Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {}",
            e.go_message(),
            kind = info.kind,
            version = info.version,
        ))),
    }
}

/// A patched object: 422 naming the `patch` field and the patched object (cut by
/// [`echo::echo_json`]).
pub fn check_patched(info: &KindSpec, catalog: &Catalog, patched: &Value) -> ApiResult<()> {
    match find(info, catalog, patched) {
        None => Ok(()),
        Some(e) => Err(ApiError::from_status(Status::failure(
            422,
            reason::INVALID,
            format!(
                " \"\" is invalid: patch: Invalid value: {}: {}",
                crate::field_validation::quote(&echo::echo_json(patched)),
                e.go_message()
            ),
        ))),
    }
}

/// An apply configuration: 400 as the typed conversion of an apply answers.
pub fn check_apply(info: &KindSpec, catalog: &Catalog, config: &Value) -> ApiResult<()> {
    match find(info, catalog, config) {
        None => Ok(()),
        Some(e) => Err(ApiError::bad_request(format!(
            "failed to create typed patch object ({}/{}, Kind={}): {}",
            info.group,
            info.version,
            info.kind,
            // The path names map keys, which the caller chose: cut like any echoed value.
            echo::echo_within(&e.apply_message(), echo::MAX_ECHO_BYTES)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_in_upstreams_shapes() {
        let cat = Catalog::builtin();
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": 1}});
        let e = check_body(&info, &cat, &bad).unwrap_err();
        assert_eq!(e.0.code, 400);
        assert_eq!(
            e.0.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
        let e = check_patched(&info, &cat, &bad).unwrap_err();
        assert_eq!(e.0.code, 422);
        assert!(
            e.0.message
                .starts_with(" \"\" is invalid: patch: Invalid value: \"{"),
            "{}",
            e.0.message
        );
        let e = check_apply(&info, &cat, &bad).unwrap_err();
        assert_eq!(
            e.0.message,
            "failed to create typed patch object (/v1, Kind=ConfigMap): .data.k: expected string, got float64"
        );
        check_body(&info, &cat, &json!({"data": {"k": "v"}})).unwrap();
        let long = json!({"data": {"k".repeat(100_000): 1}});
        let e = check_apply(&info, &cat, &long).unwrap_err();
        assert!(
            e.0.message.len() < 2 * echo::MAX_ECHO_BYTES,
            "{}",
            e.0.message.len()
        );
        let custom = KindSpec::new("example.com", "v1", "widgets", "Widget").custom_resource(None);
        check_body(&custom, &cat, &json!({"spec": 1})).unwrap();
    }
}
