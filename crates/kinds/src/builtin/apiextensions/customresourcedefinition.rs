//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): upstream's CRD strategy and
//! validation (apiextensions-apiserver `pkg/registry/customresourcedefinition/strategy.go`,
//! `etcd.go` and `pkg/apis/apiextensions/validation`), the parts clients rely on:
//!
//! - cluster-scoped, short names `crd`, `crds`, category `api-extensions`, a `/status`
//!   subresource, the generation bumped on spec changes, printed as NAME, CREATED AT;
//! - v1 defaulting on create and update: `names.singular` (the lower-case kind),
//!   `names.listKind` (kind + `List`), `conversion.strategy: None`; a create starts with an
//!   empty status; the storage version is added to `status.storedVersions` on create and on
//!   every update;
//! - validation (each a 422 cause in upstream's words): `metadata.name` must be
//!   `<plural>.<group>`; `spec.group` a DNS subdomain with at least one dot; `spec.scope`
//!   `Cluster` or `Namespaced`; at least one version, unique DNS-1035 version names, exactly
//!   one storage version; the names DNS-1035 labels (the kinds may have mixed case), kind and
//!   listKind different; printer column types and formats; on update, `spec.group` and
//!   `spec.names.plural` immutable, and `spec.scope` and `spec.names.kind` once the CRD is
//!   `Established`; `status.storedVersions` listing the storage version and only versions
//!   of `spec.versions`;
//! - not supported, refused with a 422 naming the field rather than ignored:
//!   `spec.conversion.strategy: Webhook`, CEL rules (`x-kubernetes-validations` anywhere
//!   in a schema), and a `names.listKind` other than the kind + `List`;
//! - the first DELETE adds the `customresourcecleanup.apiextensions.k8s.io` finalizer and a
//!   `Terminating` condition (upstream's CRD `Delete`): the CRD stays until the CRD controller
//!   has deleted every custom resource and removed the finalizer.
//!
//! The schema's own rules (structural, defaults, pruning) are the structural schema
//! module's ([`crate::custom::schema`]); see [`validate_schema`].
//!
//! Invariant: validation walks each document once (a schema within the structural schema
//! module's depth and step budgets); every violation names its field.

use serde_json::{Value, json};

use crate::FieldError;
use crate::crd::{CLEANUP_FINALIZER, GROUP, KIND, VERSION};
use crate::strategy::{KindStrategy, TableColumn};
use crate::{Generation, KindSpec};

/// `apiextensions.k8s.io/v1` customresourcedefinitions, with `/status`.
pub fn spec() -> KindSpec {
    KindSpec::new(GROUP, VERSION, "customresourcedefinitions", KIND)
        .namespaced(false)
        .short_names(["crd", "crds"])
        .categories(["api-extensions"])
        .status_subresource(true)
        .generation(Generation::Spec)
        .strategy(CrdStrategy)
}

/// The CRD strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct CrdStrategy;

fn set_if_missing(obj: &mut serde_json::Map<String, Value>, key: &str, value: Value) {
    if obj
        .get(key)
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
    {
        obj.insert(key.into(), value);
    }
}

/// v1 defaulting of a CRD's spec (`SetDefaults_CustomResourceDefinitionSpec`).
fn default_spec(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !kind.is_empty() {
            set_if_missing(names, "singular", Value::from(kind.to_ascii_lowercase()));
            set_if_missing(names, "listKind", Value::from(format!("{kind}List")));
        }
    }
    match spec.get_mut("conversion").and_then(Value::as_object_mut) {
        Some(c) => set_if_missing(c, "strategy", Value::from("None")),
        None => {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
    }
}

/// The storage version's name, when exactly one is marked.
fn storage_version(obj: &Value) -> Option<String> {
    let versions = obj.pointer("/spec/versions")?.as_array()?;
    let mut storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true));
    let first = storage.next()?;
    if storage.next().is_some() {
        return None;
    }
    first.get("name")?.as_str().map(str::to_owned)
}

/// Adds the storage version to `status.storedVersions` unless listed.
fn record_stored_version(obj: &mut Value) {
    let Some(v) = storage_version(obj) else {
        return;
    };
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let status = o.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let stored = status
        .entry("storedVersions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !stored.is_array() {
        *stored = Value::Array(Vec::new());
    }
    if let Some(a) = stored.as_array_mut()
        && !a.iter().any(|s| s.as_str() == Some(v.as_str()))
    {
        a.push(Value::from(v));
    }
}

/// Whether the CRD's `condition` is `True`.
pub fn condition_true(obj: &Value, condition: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(condition)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Sets `condition` in `obj`'s `status.conditions` (upstream's `SetCRDCondition`): the
/// transition time moves only when the status changes. Returns whether anything changed.
pub fn set_condition(
    obj: &mut Value,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    let Some(o) = obj.as_object_mut() else {
        return false;
    };
    let st = o.entry("status").or_insert_with(|| json!({}));
    if !st.is_object() {
        *st = json!({});
    }
    let Some(st) = st.as_object_mut() else {
        return false;
    };
    let conds = st
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conds.is_array() {
        *conds = Value::Array(Vec::new());
    }
    let Some(conds) = conds.as_array_mut() else {
        return false;
    };
    let new = |time: &str| {
        json!({"type": type_, "status": status, "lastTransitionTime": time,
               "reason": reason, "message": message})
    };
    match conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    {
        Some(c) => {
            let same_status = c.get("status").and_then(Value::as_str) == Some(status);
            let same = same_status
                && c.get("reason").and_then(Value::as_str) == Some(reason)
                && c.get("message").and_then(Value::as_str) == Some(message);
            if same {
                return false;
            }
            let time = if same_status {
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .unwrap_or(now)
                    .to_owned()
            } else {
                now.to_owned()
            };
            *c = new(&time);
            true
        }
        None => {
            conds.push(new(now));
            true
        }
    }
}

impl KindStrategy for CrdStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        default_spec(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
        record_stored_version(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        default_spec(new);
        record_stored_version(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_name(obj);
        errs.extend(validate_spec(obj));
        errs.extend(validate_preserve_unknown_fields(obj, None));
        errs.extend(super::api_approval::validate(obj, None));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_spec(new);
        let at = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let mut immutable = |path: &str, field: &str| {
            let (n, o) = (at(new, path), at(old, path));
            if n != o {
                errs.push(FieldError::invalid_str(field, &n, "field is immutable"));
            }
        };
        immutable("/spec/group", "spec.group");
        immutable("/spec/names/plural", "spec.names.plural");
        if condition_true(old, "Established") {
            immutable("/spec/scope", "spec.scope");
            immutable("/spec/names/kind", "spec.names.kind");
        }
        errs.extend(validate_names_of(
            new.pointer("/status/acceptedNames").unwrap_or(&Value::Null),
            "status.acceptedNames",
        ));
        errs.extend(validate_stored_versions(new));
        errs.extend(validate_preserve_unknown_fields(new, Some(old)));
        errs.extend(super::api_approval::validate(new, Some(old)));
        errs
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let f = meta
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !f.is_array() {
                *f = Value::Array(Vec::new());
            }
            if let Some(a) = f.as_array_mut()
                && !a.iter().any(|x| x.as_str() == Some(CLEANUP_FINALIZER))
            {
                a.push(Value::from(CLEANUP_FINALIZER));
            }
        }
        let now = now_rfc3339();
        set_condition(
            obj,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            &now,
        );
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut name = TableColumn::new(
            "Name",
            "string",
            "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            0,
        );
        name.format = "name".into();
        Some(vec![
            name,
            TableColumn::new(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
                0,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, _age: &str) -> Option<Vec<Value>> {
        let created = obj
            .pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null);
        Some(vec![Value::from(name), created])
    }
}

/// Now as RFC 3339 (UTC, seconds).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days).
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

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
fn validate_name(obj: &Value) -> Vec<FieldError> {
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

fn validate_spec(obj: &Value) -> Vec<FieldError> {
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
fn validate_preserve_unknown_fields(new: &Value, old: Option<&Value>) -> Vec<FieldError> {
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
fn validate_names_of(names: &Value, at: &str) -> Vec<FieldError> {
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
fn validate_stored_versions(obj: &Value) -> Vec<FieldError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        })
    }

    fn created(mut c: Value) -> Value {
        CrdStrategy.prepare_for_create(&mut c);
        c
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    /// Red team rt9 item 7: both were accepted (and the first ignored).
    #[test]
    fn preserve_unknown_fields_false_or_at_the_spec_is_refused_as_upstream() {
        let mut c = crd();
        c["spec"]["preserveUnknownFields"] = json!(true);
        let c = created(c);
        let errs = CrdStrategy.validate_create(&c);
        assert_eq!(fields(&errs), ["spec.preserveUnknownFields"]);
        assert!(errs[0].to_string().contains("cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"), "{}", errs[0]);
        // An update of a CRD that already had it may keep it (upstream ratchets).
        assert!(
            !fields(&CrdStrategy.validate_update(&c, &c)).contains(&"spec.preserveUnknownFields")
        );

        let mut c = crd();
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object",
            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": false}}});
        let errs = CrdStrategy.validate_create(&created(c));
        assert_eq!(
            fields(&errs),
            [
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-preserve-unknown-fields"
            ]
        );
        assert!(
            errs[0].to_string().contains("must be true or undefined"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn a_create_is_defaulted_and_records_the_storage_version() {
        let c = created(crd());
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"]["strategy"], "None");
        assert_eq!(c["status"], json!({"storedVersions": ["v1"]}));
        assert!(CrdStrategy.validate_create(&c).is_empty());
    }

    #[test]
    fn what_clients_rely_on_is_validated_in_upstreams_words() {
        type Case = (fn(&mut Value), &'static str, &'static str);
        let cases: Vec<Case> = vec![
            (
                |c| c["metadata"]["name"] = json!("other.example.com"),
                "metadata.name",
                "must be spec.names.plural+\".\"+spec.group",
            ),
            (
                |c| {
                    c["spec"]["group"] = json!("example");
                    c["metadata"]["name"] = json!("widgets.example");
                },
                "spec.group",
                "should be a domain with at least one dot",
            ),
            (
                |c| c["spec"]["scope"] = json!("Galaxy"),
                "spec.scope",
                "supported values: \"Cluster\", \"Namespaced\"",
            ),
            (
                |c| c["spec"]["versions"][0]["storage"] = json!(false),
                "spec.versions",
                "must have exactly one version marked as storage version",
            ),
            (
                |c| c["spec"]["versions"] = json!([]),
                "spec.versions",
                "must have at least one version",
            ),
            (
                |c| c["spec"]["names"]["plural"] = json!("Widgets"),
                "spec.names.plural",
                "a DNS-1035 label",
            ),
            (
                |c| c["spec"]["names"]["listKind"] = json!("Many"),
                "spec.names.listKind",
                "supported values: \"WidgetList\"",
            ),
            (
                |c| c["spec"]["conversion"] = json!({"strategy": "Webhook"}),
                "spec.conversion.strategy",
                "supported values: \"None\"",
            ),
            (
                |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = json!({"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "true"}]}}),
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations",
                "not supported",
            ),
        ];
        for (edit, field, detail) in cases {
            let mut c = crd();
            edit(&mut c);
            let c = created(c);
            let errs = CrdStrategy.validate_create(&c);
            assert!(
                errs.iter()
                    .any(|e| e.field == field && e.detail.contains(detail)),
                "{field}: {errs:?}"
            );
        }
    }

    #[test]
    fn updates_keep_group_plural_and_once_established_scope_and_kind() {
        let old = created(crd());
        let mut new = old.clone();
        new["spec"]["group"] = json!("other.com");
        new["spec"]["names"]["plural"] = json!("gadgets");
        new["spec"]["scope"] = json!("Cluster");
        CrdStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(
            fields(&CrdStrategy.validate_update(&new, &old)),
            ["spec.group", "spec.names.plural"]
        );
        let mut established = old.clone();
        set_condition(&mut established, "Established", "True", "r", "m", "t");
        assert_eq!(
            fields(&CrdStrategy.validate_update(&new, &established)),
            ["spec.group", "spec.names.plural", "spec.scope"]
        );
    }

    #[test]
    fn stored_versions_must_hold_the_storage_version_and_only_known_ones() {
        let old = created(crd());
        let mut new = old.clone();
        new["status"]["storedVersions"] = json!(["v0"]);
        let errs = CrdStrategy.validate_update(&new, &old);
        assert_eq!(
            fields(&errs),
            ["status.storedVersions", "status.storedVersions[0]"]
        );
        // An update of the spec adds a new storage version to the stored ones.
        let mut new = old.clone();
        new["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": false},
                                         {"name": "v2", "served": true, "storage": true}]);
        CrdStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["status"]["storedVersions"], json!(["v1", "v2"]));
        assert!(CrdStrategy.validate_update(&new, &old).is_empty());
    }

    #[test]
    fn the_first_delete_adds_the_cleanup_finalizer_and_terminating() {
        let mut c = created(crd());
        CrdStrategy.prepare_for_delete(&mut c);
        assert_eq!(c["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
        assert!(condition_true(&c, "Terminating"));
        CrdStrategy.prepare_for_delete(&mut c);
        assert_eq!(c["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
    }

    #[test]
    fn conditions_keep_their_transition_time_unless_the_status_changes() {
        let mut c = json!({});
        assert!(set_condition(
            &mut c,
            "Established",
            "False",
            "a",
            "b",
            "t1"
        ));
        assert!(!set_condition(
            &mut c,
            "Established",
            "False",
            "a",
            "b",
            "t2"
        ));
        assert!(set_condition(
            &mut c,
            "Established",
            "False",
            "c",
            "d",
            "t3"
        ));
        assert_eq!(c["status"]["conditions"][0]["lastTransitionTime"], "t1");
        assert!(set_condition(&mut c, "Established", "True", "c", "d", "t4"));
        assert_eq!(c["status"]["conditions"][0]["lastTransitionTime"], "t4");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
