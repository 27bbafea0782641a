//! The vendored definitions (JSON Schema, as `kubernetes-validate` publishes them) turned
//! back into the OpenAPI v3 form upstream's `/openapi/v3` serves.
//!
//! What changes, and nothing else: `#/$defs/X` references become `#/components/schemas/X`;
//! a reference with siblings (a description, extensions) is wrapped as
//! `{"allOf": [{"$ref": …}], …siblings}` (OpenAPI 3.0 ignores a `$ref`'s siblings, so
//! upstream wraps them the same way); `"type": [T, "null"]` becomes `"type": T`; and the
//! `enum` the converter puts on a kind's `apiVersion` and `kind` is dropped.
//!
//! Invariant: every `$ref` in the output names `#/components/schemas/…`; the walk only
//! follows schema positions (`properties`, `items`, `additionalProperties`, `allOf`,
//! `anyOf`, `oneOf`, `not`), so values such as `default` or `enum` are kept verbatim.

use serde_json::{Map, Value};

/// The JSON Schema prefix of the vendored file's references.
const DEFS_PREFIX: &str = "#/$defs/";
/// The OpenAPI v3 prefix of references in served documents.
pub(crate) const COMPONENTS_PREFIX: &str = "#/components/schemas/";

/// Normalises one top-level definition.
pub(crate) fn definition(mut def: Value) -> Value {
    schema(&mut def);
    if def.get("x-kubernetes-group-version-kind").is_some()
        && let Some(Value::Object(props)) = def.get_mut("properties")
    {
        for field in ["apiVersion", "kind"] {
            if let Some(Value::Object(p)) = props.get_mut(field) {
                p.remove("enum");
            }
        }
    }
    def
}

/// Normalises a schema in place (recursively through its schema positions).
fn schema(v: &mut Value) {
    let Value::Object(m) = v else { return };
    if let Some(Value::Array(types)) = m.get("type") {
        let single = types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .map(|t| Value::String(t.to_owned()));
        match single {
            Some(t) => {
                m.insert("type".into(), t);
            }
            None => {
                m.remove("type");
            }
        }
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(schema);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = m.get_mut(key) {
            schema(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = m.get_mut(key) {
            children.iter_mut().for_each(schema);
        }
    }
    if let Some(Value::String(r)) = m.get("$ref") {
        let target = match r.strip_prefix(DEFS_PREFIX) {
            Some(name) => format!("{COMPONENTS_PREFIX}{name}"),
            None => r.clone(),
        };
        if m.len() == 1 {
            m.insert("$ref".into(), Value::String(target));
        } else {
            m.remove("$ref");
            let mut reference = Map::new();
            reference.insert("$ref".into(), Value::String(target));
            m.insert("allOf".into(), Value::Array(vec![Value::Object(reference)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_types_and_kind_enums_take_the_openapi_v3_form() {
        let def = definition(json!({
            "type": ["object", "null"],
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
            "properties": {
                "kind": {"type": ["string", "null"], "enum": ["Pod"]},
                "spec": {"$ref": "#/$defs/io.k8s.api.core.v1.PodSpec", "description": "d"},
                "items": {"type": ["array", "null"], "items": {"$ref": "#/$defs/X"}},
                "policy": {"type": ["string", "null"], "enum": ["Always", "Never"]},
            }
        }));
        assert_eq!(def["type"], "object");
        assert!(def["properties"]["kind"].get("enum").is_none());
        assert_eq!(
            def["properties"]["policy"]["enum"],
            json!(["Always", "Never"])
        );
        assert_eq!(
            def["properties"]["spec"],
            json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}], "description": "d"})
        );
        assert_eq!(
            def["properties"]["items"]["items"],
            json!({"$ref": "#/components/schemas/X"})
        );
    }
}
