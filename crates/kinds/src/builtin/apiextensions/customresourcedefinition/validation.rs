//! The validation of a CustomResourceDefinition written (upstream's
//! `pkg/apis/apiextensions/validation`, the parts listed in the parent module's doc): its
//! name, spec (group, scope, versions, names, printer columns, schemas), accepted names,
//! stored versions and `preserveUnknownFields`, each violation a [`FieldError`] in
//! upstream's words.
//!
//! Invariant: each document is walked once; a schema's walk is bounded by the structural
//! schema module's depth and step budgets (and [`preserve_unknown_false`]'s depth bound).

use serde_json::Value;

use crate::FieldError;

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// Upstream's `IsDNS1035Label` messages, joined by `,`; `None` when valid.
fn dns1035(v: &str) -> Option<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let b = v.as_bytes();
    let ok = b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !ok {
        errs.push(DNS1035_MSG.to_owned());
    }
    (!errs.is_empty()).then(|| errs.join(","))
}

/// Upstream's `IsDNS1123Subdomain` messages, joined by `,`; `None` when valid.
fn dns1123_subdomain(v: &str) -> Option<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let an = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(an)
            && b.last().is_some_and(an)
            && b.iter().all(|c| an(c) || *c == b'-')
    };
    if !v.split('.').all(label_ok) {
        errs.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
    }
    (!errs.is_empty()).then(|| errs.join(","))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `metadata.name` must be `<plural>.<group>`.
pub(super) fn validate_name(obj: &Value) -> Vec<FieldError> {
    let name = str_at(obj, "/metadata/name");
    let required = format!(
        "{}.{}",
        str_at(obj, "/spec/names/plural"),
        str_at(obj, "/spec/group")
    );
    if name.is_empty() || name == required {
        // An empty name is the generic metadata validation's to refuse.
        return Vec::new();
    }
    vec![FieldError::invalid_str(
        "metadata.name",
        name,
        "must be spec.names.plural+\".\"+spec.group",
    )]
}

/// The versions as upstream shows them in a cause (their names).
fn shown_versions(versions: &[Value]) -> String {
    let names: Vec<String> = versions
        .iter()
        .map(|v| format!("{:?}", v.get("name").and_then(Value::as_str).unwrap_or("")))
        .collect();
    format!("[{}]", names.join(", "))
}

const COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
const COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];

pub(super) fn validate_spec(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
        errs.push(FieldError::required("spec", ""));
        return errs;
    };
    let group = str_at(spec, "/group");
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else if let Some(e) = dns1123_subdomain(group) {
        errs.push(FieldError::invalid_str("spec.group", group, e));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid_str(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    match str_at(spec, "/scope") {
        "" => errs.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(FieldError::not_supported_str(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::required(
            "spec.versions",
            "must have at least one version",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut unique = true;
    let mut storage = 0usize;
    // One pattern budget for every version: the CRD's compiled patterns are bounded together.
    let mut budget = crate::custom::schema::PatternBudget::admission();
    for (i, v) in versions.iter().enumerate() {
        let name = str_at(v, "/name");
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        if !seen.insert(name) {
            unique = false;
        }
        if let Some(e) = dns1035(name) {
            errs.push(FieldError::invalid_str(
                &format!("spec.versions[{i}].name"),
                name,
                e,
            ));
        }
        errs.extend(validate_version(v, i, &mut budget));
    }
    if !unique {
        errs.push(FieldError::invalid_str(
            "spec.versions",
            &shown_versions(versions),
            "must contain unique version names",
        ));
    }
    if !versions.is_empty() && storage != 1 {
        errs.push(FieldError::invalid_str(
            "spec.versions",
            &shown_versions(versions),
            "must have exactly one version marked as storage version",
        ));
    }
    let names = spec.get("names").unwrap_or(&Value::Null);
    for k in ["plural", "singular", "kind", "listKind"] {
        if str_at(names, &format!("/{k}")).is_empty() {
            errs.push(FieldError::required(&format!("spec.names.{k}"), ""));
        }
    }
    errs.extend(validate_names_of(names, "spec.names"));
    // Lists are served as `<kind>List` (the kind's list in the schema catalog).
    let (kind, list_kind) = (str_at(names, "/kind"), str_at(names, "/listKind"));
    if !kind.is_empty() && !list_kind.is_empty() && list_kind != format!("{kind}List") {
        errs.push(FieldError::not_supported_str(
            "spec.names.listKind",
            list_kind,
            &[&format!("{kind}List")],
        ));
    }
    match str_at(spec, "/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => errs.push(FieldError::not_supported_str(
            "spec.conversion.strategy",
            "Webhook",
            &["None"],
        )),
        other => errs.push(FieldError::not_supported_str(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    errs
}

fn validate_version(
    v: &Value,
    i: usize,
    budget: &mut crate::custom::schema::PatternBudget,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let base = format!("spec.versions[{i}]");
    if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
        for (j, c) in cols.iter().enumerate() {
            let at = format!("{base}.additionalPrinterColumns[{j}]");
            if str_at(c, "/name").is_empty() {
                errs.push(FieldError::required(&format!("{at}.name"), ""));
            }
            let must = format!("must be one of {}", COLUMN_TYPES.join(","));
            match str_at(c, "/type") {
                "" => errs.push(FieldError::required(&format!("{at}.type"), must)),
                t if !COLUMN_TYPES.contains(&t) => {
                    errs.push(FieldError::invalid_str(&format!("{at}.type"), t, must));
                }
                _ => {}
            }
            let f = str_at(c, "/format");
            if !f.is_empty() && !COLUMN_FORMATS.contains(&f) {
                errs.push(FieldError::invalid_str(
                    &format!("{at}.format"),
                    f,
                    format!("must be one of {}", COLUMN_FORMATS.join(",")),
                ));
            }
            if str_at(c, "/jsonPath").is_empty() {
                errs.push(FieldError::required(&format!("{at}.jsonPath"), ""));
            }
        }
    }
    if let Some(fields) = v.get("selectableFields").and_then(Value::as_array) {
        let mut seen = std::collections::HashSet::new();
        for (j, f) in fields.iter().enumerate() {
            let at = format!("{base}.selectableFields[{j}].jsonPath");
            let p = str_at(f, "/jsonPath");
            if p.is_empty() {
                errs.push(FieldError::required(&at, ""));
            } else if !seen.insert(p) {
                errs.push(FieldError::duplicate(&at, p));
            }
        }
    }
    if let Some(scale) = v.pointer("/subresources/scale") {
        for k in ["specReplicasPath", "statusReplicasPath"] {
            if str_at(scale, &format!("/{k}")).is_empty() {
                errs.push(FieldError::required(
                    &format!("{base}.subresources.scale.{k}"),
                    "",
                ));
            }
        }
    }
    if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
        let at = format!("{base}.schema.openAPIV3Schema");
        errs.extend(validate_schema_within(schema, &at, budget));
        preserve_unknown_false(schema, &at, 0, &mut errs);
    }
    errs
}

/// Upstream's v1 rule: `x-kubernetes-preserve-unknown-fields` is true or absent, in every
/// schema of the tree (properties, items, additionalProperties, the junctors and `not`).
/// Checked on writes of the CRD only, so a CRD stored before the rule is still served.
fn preserve_unknown_false(schema: &Value, at: &str, depth: usize, errs: &mut Vec<FieldError>) {
    // The structural check refuses deeper schemas; this walk only needs to end.
    if depth > 128 {
        return;
    }
    let Some(m) = schema.as_object() else {
        return;
    };
    let key = "x-kubernetes-preserve-unknown-fields";
    if let Some(v @ Value::Bool(false)) = m.get(key) {
        errs.push(FieldError::invalid(
            &format!("{at}.{key}"),
            v,
            "must be true or undefined",
        ));
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            preserve_unknown_false(v, &format!("{at}.properties[{k}]"), depth + 1, errs);
        }
    }
    for k in ["items", "additionalProperties", "not"] {
        if let Some(v) = m.get(k) {
            preserve_unknown_false(v, &format!("{at}.{k}"), depth + 1, errs);
        }
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for (i, v) in m
            .get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            preserve_unknown_false(v, &format!("{at}.{k}[{i}]"), depth + 1, errs);
        }
    }
}

/// Upstream's v1 rule: `spec.preserveUnknownFields` cannot be set to true (an update of a
/// CRD that already had it may keep it, as upstream ratchets it).
pub(super) fn validate_preserve_unknown_fields(
    new: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let set = |v: &Value| v.pointer("/spec/preserveUnknownFields") == Some(&Value::Bool(true));
    if set(new) && !old.is_some_and(set) {
        return vec![FieldError::invalid(
            "spec.preserveUnknownFields",
            &Value::Bool(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        )];
    }
    Vec::new()
}

/// The checks of one version's `openAPIV3Schema`: it must be a structural schema, without
/// what this server does not support (CEL rules, `x-kubernetes-validations`), as
/// [`Structural::new`](crate::custom::schema::Structural::new) decides; each of its errors is
/// a cause under `at`.
pub fn validate_schema(schema: &Value, at: &str) -> Vec<FieldError> {
    validate_schema_within(schema, at, &mut Default::default())
}

/// [`validate_schema`] with the schema's patterns charged to `budget`, shared by every
/// version of one CRD.
fn validate_schema_within(
    schema: &Value,
    at: &str,
    budget: &mut crate::custom::schema::PatternBudget,
) -> Vec<FieldError> {
    match crate::custom::schema::Structural::new_within(schema, budget) {
        Ok(_) => Vec::new(),
        Err(errs) => errs.into_iter().map(|e| e.prefixed(at)).collect(),
    }
}

/// `ValidateCustomResourceDefinitionNames` of `names` at `at`.
pub(super) fn validate_names_of(names: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let get = |k: &str| names.get(k).and_then(Value::as_str).unwrap_or("");
    for k in ["plural", "singular"] {
        let v = get(k);
        if !v.is_empty()
            && let Some(e) = dns1035(v)
        {
            errs.push(FieldError::invalid_str(&format!("{at}.{k}"), v, e));
        }
    }
    for k in ["kind", "listKind"] {
        let v = get(k);
        if !v.is_empty()
            && let Some(e) = dns1035(&v.to_ascii_lowercase())
        {
            errs.push(FieldError::invalid_str(
                &format!("{at}.{k}"),
                v,
                format!("may have mixed case, but should otherwise match: {e}"),
            ));
        }
    }
    for k in ["shortNames", "categories"] {
        if let Some(a) = names.get(k).and_then(Value::as_array) {
            for (i, s) in a.iter().enumerate() {
                let s = s.as_str().unwrap_or("");
                if let Some(e) = dns1035(s) {
                    errs.push(FieldError::invalid_str(&format!("{at}.{k}[{i}]"), s, e));
                }
            }
        }
    }
    let (kind, list_kind) = (get("kind"), get("listKind"));
    if !kind.is_empty() && kind == list_kind {
        errs.push(FieldError::invalid_str(
            &format!("{at}.listKind"),
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    errs
}

/// `ValidateCustomResourceDefinitionStoredVersions`.
pub(super) fn validate_stored_versions(obj: &Value) -> Vec<FieldError> {
    const AT: &str = "status.storedVersions";
    let stored: Vec<&str> = obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if stored.is_empty() {
        return vec![FieldError::invalid_str(
            AT,
            "[]",
            "must have at least one stored version",
        )];
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut errs = Vec::new();
    for v in versions {
        let name = str_at(v, "/name");
        if v.get("storage").and_then(Value::as_bool) == Some(true) && !stored.contains(&name) {
            errs.push(FieldError::invalid_str(
                AT,
                name,
                format!("must have the storage version {name}"),
            ));
        }
    }
    for (i, s) in stored.iter().enumerate() {
        if !versions.iter().any(|v| str_at(v, "/name") == *s) {
            errs.push(FieldError::invalid_str(
                &format!("{AT}[{i}]"),
                s,
                "must appear in spec.versions",
            ));
        }
    }
    errs
}
