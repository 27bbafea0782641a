//! Object validation done by every write: names (upstream's DNS rules), the namespace, and
//! the metadata the server owns (uid, creationTimestamp, generation, generateName).
//!
//! Invariant: an object that reaches storage has a valid name, the namespace of its path
//! (or none for cluster-scoped resources), the `apiVersion`/`kind` of its resource, and no
//! client-chosen uid or creation time on create.

use listwatch_api::labels::{label_value_errors, qualified_name_errors, validate_dns_subdomain};
use rand::Rng;
use serde_json::{Map, Value};

use crate::clock;
use crate::error::{ApiError, ApiResult, FieldError};
use listwatch_kinds::{Generation, KindSpec, NameValidation, StatusUpdate};

const LABEL_MAX: usize = 63;

/// The longest name of a resource whose names are path segments (RBAC kinds, events).
pub const PATH_SEGMENT_MAX: usize = 253;

/// Checks a DNS-1123 label: ≤ 63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn validate_dns_label(v: &str) -> Result<(), String> {
    let b = v.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || b.len() > LABEL_MAX {
        return Err(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !b.first().is_some_and(alnum)
        || !b.last().is_some_and(alnum)
        || !b.iter().all(|c| alnum(c) || *c == b'-')
    {
        return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
                    and must start and end with an alphanumeric character"
            .into());
    }
    Ok(())
}

/// The example-and-pattern tail upstream's `RegexError` adds to a name's character rule
/// (k8s.io/apimachinery `pkg/util/validation/validation.go`): `(e.g. 'a',  or 'b', regex
/// used for validation is '…')` — note the two spaces before each further example.
fn regex_hint(examples: &[&str], pattern: &str) -> String {
    let shown: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        " (e.g. {}regex used for validation is '{pattern}')",
        shown.join(" or ")
    )
}

/// Checks a name by the resource's rule, in upstream's words (`IsDNS1123Subdomain`,
/// `IsDNS1123Label`, `IsDNS1035Label`).
pub fn validate_name(rule: NameValidation, name: &str) -> Result<(), String> {
    const LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
    match rule {
        NameValidation::Subdomain => validate_dns_subdomain(name).map_err(|e| {
            if e.starts_with("must consist") {
                format!(
                    "a lowercase RFC 1123 subdomain {e}{}",
                    regex_hint(
                        &["example.com"],
                        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                    )
                )
            } else {
                format!("a lowercase RFC 1123 subdomain {e}")
            }
        }),
        NameValidation::Label => validate_dns_label(name).map_err(|e| {
            if e.starts_with("a lowercase") {
                format!("{e}{}", regex_hint(&["my-name", "123-abc"], LABEL))
            } else {
                e
            }
        }),
        NameValidation::Label1035 => {
            let starts_alpha = name.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
            match validate_dns_label(name) {
                Err(e) if !e.starts_with("a lowercase") => Err(e),
                Ok(()) if starts_alpha => Ok(()),
                _ => Err(format!(
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
                     start with an alphabetic character, and end with an alphanumeric character{}",
                    regex_hint(&["my-name", "abc-123"], "[a-z]([-a-z0-9]*[a-z0-9])?")
                )),
            }
        }
        NameValidation::PathSegment => {
            // Upstream (`IsValidPathSegmentName`) has no length limit of its own, only its
            // 1 MiB request head; here a name must stay addressable in a request line
            // (64 KiB), so it is held to a DNS subdomain's 253 characters.
            if name.len() > PATH_SEGMENT_MAX {
                Err(format!(
                    "must be no more than {PATH_SEGMENT_MAX} characters"
                ))
            } else if name == "." || name == ".." || name.contains(['/', '%']) {
                Err("may not be '.' or '..' and may not contain '/' or '%'".into())
            } else {
                Ok(())
            }
        }
    }
}

/// Namespaces that may never be deleted, as upstream's `NamespaceLifecycle` admission
/// plugin keeps them.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Refuses deleting what must stay: an immortal namespace is 403 Forbidden,
/// `namespaces "default" is forbidden: this namespace may not be deleted` (dry runs too, as
/// admission runs for them upstream).
pub fn check_delete(info: &KindSpec, name: &str) -> ApiResult<()> {
    if info.group.is_empty() && info.plural == "namespaces" && IMMORTAL_NAMESPACES.contains(&name) {
        return Err(ApiError::forbidden(
            info,
            name,
            "this namespace may not be deleted",
        ));
    }
    Ok(())
}

/// Upstream's `maskTrailingDash`: a `generateName` may end in '-', the name made from it
/// will not; the last character before the dash and the dash become one letter.
fn mask_trailing_dash(prefix: &str) -> String {
    match prefix.strip_suffix('-') {
        Some(rest) if !rest.is_empty() => {
            let mut chars = rest.chars();
            chars.next_back();
            format!("{}a", chars.as_str())
        }
        _ => prefix.to_owned(),
    }
}

/// A random version-4 UUID, as Kubernetes uids are.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `generateName` completed with 5 random characters from upstream's alphabet.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    // Upstream keeps 58 bytes (63 less the 5 random characters); a character is never split.
    let prefix = listwatch_api::text::truncate(prefix, 58);
    let suffix: String = (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{prefix}{suffix}")
}

/// The object's `metadata` map, created when missing.
pub fn metadata_mut(obj: &mut Map<String, Value>) -> ApiResult<&mut Map<String, Value>> {
    match obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("metadata must be an object")),
    }
}

/// Checks `apiVersion`/`kind` in a body against the resource and fills them in when absent.
pub fn check_type(info: &KindSpec, obj: &mut Map<String, Value>) -> ApiResult<()> {
    let api_version = info.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            obj.insert("apiVersion".into(), Value::String(api_version));
        }
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({api_version})",
                listwatch_api::echo::echo(v)
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            obj.insert("kind".into(), Value::String(info.kind.clone()));
        }
        Some(k) if k == info.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({})",
                listwatch_api::echo::echo(k),
                info.kind
            )));
        }
    }
    Ok(())
}

/// Checks and fills the namespace: the path's for namespaced resources, none otherwise.
pub fn check_namespace(
    info: &KindSpec,
    meta: &mut Map<String, Value>,
    path_ns: Option<&str>,
) -> ApiResult<()> {
    let body_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    match (info.namespaced, path_ns) {
        (true, Some(ns)) => {
            if body_ns.is_some_and(|b| b != ns) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta.insert("namespace".into(), Value::String(ns.into()));
        }
        (true, None) => {
            return Err(ApiError::bad_request(
                "a namespace is required for this resource",
            ));
        }
        (false, _) => {
            meta.remove("namespace");
        }
    }
    Ok(())
}

/// Validates the metadata of an object about to be written: name, namespace, labels,
/// annotation keys, owner references and finalizers (`ownership`). Returns every problem at
/// once, as upstream's 422 does.
pub fn validate_meta(info: &KindSpec, meta: &Map<String, Value>) -> ApiResult<()> {
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Err(e) = validate_name(info.name_validation, name) {
        errs.push(FieldError::invalid("metadata.name", name, e));
    }
    if let Some(prefix) = meta
        .get("generateName")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        // As upstream: the prefix must be a valid name once a trailing '-' is allowed.
        && let Err(e) = validate_name(info.name_validation, &mask_trailing_dash(prefix))
    {
        errs.push(FieldError::invalid("metadata.generateName", prefix, e));
    }
    if let Some(ns) = meta.get("namespace").and_then(Value::as_str)
        && let Err(e) = validate_dns_label(ns)
    {
        errs.push(FieldError::invalid("metadata.namespace", ns, e));
    }
    validate_labels(meta.get("labels"), &mut errs);
    validate_annotations(meta.get("annotations"), &mut errs);
    crate::ownership::validate(meta, &mut errs);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, &errs))
    }
}

/// Upstream's `TotalAnnotationSizeLimitB`: keys and values of all annotations together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Upstream's `ValidateLabels`: keys are qualified names, values label values; every
/// problem is a cause on `metadata.labels`.
fn validate_labels(labels: Option<&Value>, errs: &mut Vec<FieldError>) {
    let field = "metadata.labels";
    match labels {
        None | Some(Value::Null) => {}
        Some(Value::Object(labels)) => {
            for (k, v) in labels {
                for m in qualified_name_errors(k) {
                    errs.push(FieldError::invalid(field, k, m));
                }
                match v.as_str() {
                    Some(s) => {
                        for m in label_value_errors(s) {
                            errs.push(FieldError::invalid(field, s, m));
                        }
                    }
                    None => errs.push(FieldError::invalid(
                        &format!("{field}.{k}"),
                        &v.to_string(),
                        "must be a string",
                    )),
                }
            }
        }
        Some(other) => errs.push(FieldError::invalid(
            field,
            &other.to_string(),
            "must be a map",
        )),
    }
}

/// Upstream's `ValidateAnnotations`: keys are qualified names (case aside), and keys and
/// values together are at most [`MAX_ANNOTATIONS_BYTES`].
fn validate_annotations(annotations: Option<&Value>, errs: &mut Vec<FieldError>) {
    let field = "metadata.annotations";
    match annotations {
        None | Some(Value::Null) => {}
        Some(Value::Object(ann)) => {
            let mut total = 0usize;
            for (k, v) in ann {
                for m in qualified_name_errors(&k.to_lowercase()) {
                    errs.push(FieldError::invalid(field, k, m));
                }
                match v.as_str() {
                    Some(s) => total = total.saturating_add(k.len() + s.len()),
                    None => errs.push(FieldError::invalid(
                        &format!("{field}.{k}"),
                        &v.to_string(),
                        "must be a string",
                    )),
                }
            }
            if total > MAX_ANNOTATIONS_BYTES {
                errs.push(FieldError::too_long(field, MAX_ANNOTATIONS_BYTES));
            }
        }
        Some(other) => errs.push(FieldError::invalid(
            field,
            &other.to_string(),
            "must be a map",
        )),
    }
}

/// Prepares a new object: type, namespace, generateName, validation, server-set fields.
pub fn prepare_create(
    info: &KindSpec,
    obj: &mut Map<String, Value>,
    path_ns: Option<&str>,
) -> ApiResult<()> {
    prepare_create_in(info, None, obj, path_ns)
}

/// [`prepare_create`], with the kind's schemas in `catalog` also validating what they type
/// (the label selectors: [`crate::label_selectors`]).
pub fn prepare_create_in(
    info: &KindSpec,
    catalog: Option<&listwatch_schema::Catalog>,
    obj: &mut Map<String, Value>,
    path_ns: Option<&str>,
) -> ApiResult<()> {
    check_type(info, obj)?;
    let meta = metadata_mut(obj)?;
    check_namespace(info, meta, path_ns)?;
    match meta.get("resourceVersion").and_then(Value::as_str) {
        None | Some("") => {
            meta.remove("resourceVersion");
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
    }
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty()
        && let Some(prefix) = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
    {
        let generated = generate_name(prefix);
        meta.insert("name".into(), Value::String(generated));
    }
    validate_meta(info, meta)?;
    meta.insert("uid".into(), Value::String(new_uid()));
    meta.insert(
        "creationTimestamp".into(),
        Value::String(clock::format_rfc3339(clock::now_unix())),
    );
    // Upstream: only kinds whose strategy sets it have a generation.
    if info.generation == Generation::None {
        meta.remove("generation");
    } else {
        meta.insert("generation".into(), Value::from(1));
    }
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    crate::lifecycle::prepare_create(info, obj)?;
    let mut v = Value::Object(std::mem::take(obj));
    info.strategy.prepare_for_create(&mut v);
    let mut errs = info.strategy.validate_create(&v);
    if let Some(catalog) = catalog {
        errs.extend(crate::label_selectors::errors(info, catalog, &v, true));
    }
    let checked = check_strategy(info, &v, errs);
    if let Value::Object(m) = v {
        *obj = m;
    }
    checked
}

/// The kind's own checks ([`listwatch_kinds::KindStrategy::validate_create`] and
/// `validate_update`: a custom resource's schema, a CRD's rules) of an object about to be
/// written: 422 Invalid with one cause per error.
pub(crate) fn check_strategy(
    info: &KindSpec,
    obj: &Value,
    errs: Vec<listwatch_kinds::FieldError>,
) -> ApiResult<()> {
    if errs.is_empty() {
        return Ok(());
    }
    let causes: Vec<FieldError> = errs.iter().map(FieldError::from).collect();
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid(info, name, &causes))
}

/// Prepares an update of `current` (the stored object as JSON) into `new`:
/// - name and namespace must match the path's;
/// - a resourceVersion in `new` must equal the current one (optimistic concurrency);
/// - uid, creationTimestamp and deletion fields are kept from `current`;
/// - with a status subresource, a main-resource write keeps the current status and a
///   `/status` write changes only the status (and, for pods, deployments and services,
///   most of the metadata: [`StatusUpdate`]);
/// - generation, where the kind has one ([`Generation`]), increases when anything but
///   metadata and status changed (for deployments, also when the annotations changed).
pub fn prepare_update(
    info: &KindSpec,
    current: &Value,
    new: Value,
    subresource_status: bool,
) -> Result<Value, UpdateError> {
    prepare_update_in(info, None, current, new, subresource_status)
}

/// [`prepare_update`], with the kind's schemas in `catalog` also validating what they type
/// (the label selectors: [`crate::label_selectors`]).
pub fn prepare_update_in(
    info: &KindSpec,
    catalog: Option<&listwatch_schema::Catalog>,
    current: &Value,
    new: Value,
    subresource_status: bool,
) -> Result<Value, UpdateError> {
    let Value::Object(mut new) = new else {
        return Err(UpdateError::Api(ApiError::bad_request(
            "the object must be a JSON object",
        )));
    };
    let Value::Object(cur) = current else {
        return Err(UpdateError::Api(ApiError::internal(
            "stored object is not a JSON object",
        )));
    };
    check_type(info, &mut new).map_err(UpdateError::Api)?;
    let no_meta = Map::new();
    let cur_meta = cur
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&no_meta);
    {
        let meta = metadata_mut(&mut new).map_err(UpdateError::Api)?;
        let cur_name = cur_meta.get("name").and_then(Value::as_str).unwrap_or("");
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), Value::String(cur_name.into()));
            }
            Some(n) if n == cur_name => {}
            Some(n) => {
                return Err(UpdateError::Api(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({cur_name})"
                ))));
            }
        }
        let cur_ns = cur_meta.get("namespace").and_then(Value::as_str);
        check_namespace(info, meta, cur_ns).map_err(UpdateError::Api)?;
        let cur_rv = cur_meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        match meta.remove("resourceVersion") {
            None | Some(Value::Null) => {}
            Some(Value::String(rv)) if rv.is_empty() || rv == cur_rv => {}
            Some(_) => return Err(UpdateError::Conflict),
        }
        // A uid in the body must be the stored one (upstream's `BeforeUpdate` keeps a
        // non-empty uid and `ValidateObjectMetaAccessorUpdate` refuses a change): a write
        // meant for an earlier object of this name (a kubelet's status patch carries the
        // pod's uid for exactly this) must not land on its successor. A PUT meets the uid as
        // a precondition first (409, `handlers::write`).
        let cur_uid = cur_meta.get("uid").and_then(Value::as_str).unwrap_or("");
        match meta.get("uid") {
            None | Some(Value::Null) => {}
            Some(Value::String(u)) if u.is_empty() || u == cur_uid => {}
            Some(other) => {
                let shown = other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned);
                return Err(UpdateError::Api(ApiError::invalid(
                    info,
                    cur_name,
                    &[FieldError::invalid(
                        "metadata.uid",
                        &shown,
                        "field is immutable",
                    )],
                )));
            }
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match cur_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        validate_meta(info, meta).map_err(UpdateError::Api)?;
    }
    if info.status_subresource {
        if subresource_status {
            // Only the status may change: everything else comes from the stored object.
            // The metadata too, unless the kind's status strategy keeps it (pods).
            let status = new.remove("status");
            let meta = match info.status_update {
                StatusUpdate::StatusOnly => None,
                StatusUpdate::StatusAndMetadataExcept(stored) => {
                    new.remove("metadata").map(|mut m| {
                        if let Value::Object(m) = &mut m {
                            for k in stored {
                                match cur_meta.get(*k) {
                                    Some(v) => m.insert((*k).into(), v.clone()),
                                    None => m.remove(*k),
                                };
                            }
                        }
                        m
                    })
                }
            };
            new = cur.clone();
            if let Some(m) = meta {
                new.insert("metadata".into(), m);
            }
            match status {
                Some(s) => new.insert("status".into(), s),
                None => new.remove("status"),
            };
        } else {
            match cur.get("status") {
                Some(s) => new.insert("status".into(), s.clone()),
                None => new.remove("status"),
            };
        }
    }
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    // The kind's own update preparation (a custom resource's pruning and defaulting), before
    // the generation compares the spec, as upstream's decoder defaults first.
    let mut prepared = Value::Object(new);
    info.strategy.prepare_for_update(&mut prepared, current);
    let Value::Object(mut new) = prepared else {
        return Err(UpdateError::Api(ApiError::internal(
            "an update's preparation left no object",
        )));
    };
    // Upstream's custom resource strategy compares everything but metadata (the status is
    // the stored one when `/status` is a subresource); built-in strategies compare the spec.
    let not_spec = |k: &String| k == "metadata" || (k == "status" && info.status_subresource);
    let spec_changed = new
        .iter()
        .filter(|(k, _)| !not_spec(k))
        .ne(cur.iter().filter(|(k, _)| !not_spec(k)));
    let annotations = |m: &Map<String, Value>| {
        m.get("metadata")
            .and_then(|m| m.get("annotations"))
            .filter(|a| a.as_object().is_some_and(|a| !a.is_empty()))
            .cloned()
    };
    let bump = match info.generation {
        Generation::None => false,
        Generation::Spec => spec_changed,
        Generation::SpecAndAnnotations => spec_changed || annotations(&new) != annotations(cur),
    };
    if bump {
        let generation = cur_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        if let Ok(meta) = metadata_mut(&mut new) {
            meta.insert("generation".into(), Value::from(generation));
        }
    }
    let new = Value::Object(new);
    let mut errs = info.strategy.validate_update(&new, current);
    if let Some(catalog) = catalog {
        errs.extend(crate::label_selectors::errors(info, catalog, &new, false));
    }
    check_strategy(info, &new, errs).map_err(UpdateError::Api)?;
    Ok(new)
}

/// Why an update was refused.
#[derive(Debug)]
pub enum UpdateError {
    /// A request error (400, 422).
    Api(ApiError),
    /// The body's resourceVersion is not the stored one.
    Conflict,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> KindSpec {
        KindSpec::new("", "v1", "pods", "Pod").status_subresource(true)
    }

    /// Issue 11: 57 ASCII bytes then 'é' panicked in `generate_name` (byte slicing inside
    /// the character). Now the prefix is refused by validation, as upstream does.
    #[test]
    fn generate_name_with_a_multibyte_character_at_the_cut_is_invalid_not_a_panic() {
        let prefix = format!("{}é", "a".repeat(57));
        assert_eq!(generate_name(&prefix).len(), 57 + 5);
        let mut o = json!({"metadata":{"generateName": prefix}})
            .as_object()
            .cloned()
            .unwrap();
        let e = prepare_create(&pods(), &mut o, Some("ns")).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(e.0.message.contains("metadata.generateName"), "{e}");
        for p in ["web-", "a-", "-", "é-", "x"] {
            let _ = generate_name(p);
            let _ = mask_trailing_dash(p);
        }
        assert_eq!(mask_trailing_dash("web-"), "wea");
    }

    proptest::proptest! {
        #[test]
        fn generate_name_never_panics_and_keeps_whole_characters(p in "\\PC{0,80}") {
            let n = generate_name(&p);
            proptest::prop_assert!(n.len() <= 58 + 5);
            proptest::prop_assert!(p.starts_with(n.get(..n.len() - 5).unwrap_or("")));
        }
    }

    #[test]
    fn names_follow_upstream_dns_rules() {
        assert!(validate_name(NameValidation::Subdomain, "web-1.example").is_ok());
        assert!(validate_name(NameValidation::Subdomain, "Web").is_err());
        assert!(validate_name(NameValidation::Label, "a.b").is_err());
        assert!(validate_name(NameValidation::Label, &"a".repeat(64)).is_err());
        assert!(validate_name(NameValidation::Label1035, "1abc").is_err());
        assert!(validate_name(NameValidation::Label1035, "abc1").is_ok());
        assert_eq!(
            validate_name(NameValidation::Label, "Bad_x").unwrap_err(),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert!(
            validate_name(NameValidation::Subdomain, "A_b")
                .unwrap_err()
                .ends_with(r"(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
        );
    }

    #[test]
    fn create_sets_server_fields_and_completes_generate_name() {
        let mut o = json!({"metadata":{"generateName":"web-"}})
            .as_object()
            .cloned()
            .unwrap();
        prepare_create(&pods(), &mut o, Some("ns")).unwrap();
        let m = &o["metadata"];
        assert!(m["name"].as_str().unwrap().starts_with("web-"));
        assert_eq!(m["name"].as_str().unwrap().len(), 9);
        assert_eq!(m["namespace"], "ns");
        assert_eq!(m["uid"].as_str().unwrap().len(), 36);
        assert_eq!(m["generation"], 1);
        assert!(clock::parse_rfc3339(m["creationTimestamp"].as_str().unwrap()).is_some());
        assert_eq!(o["kind"], "Pod");
        assert_eq!(o["apiVersion"], "v1");
    }

    #[test]
    fn create_rejects_bad_names_namespaces_and_versions() {
        let bad = [
            json!({"metadata":{"name":"Bad_Name"}}),
            json!({"metadata":{}}),
            json!({"metadata":{"name":"a","namespace":"other"}}),
            json!({"metadata":{"name":"a","resourceVersion":"5"}}),
            json!({"kind":"Service","metadata":{"name":"a"}}),
            json!({"metadata":{"name":"a","labels":{"k":"not ok"}}}),
        ];
        for b in bad {
            let mut o = b.as_object().cloned().unwrap();
            let e = prepare_create(&pods(), &mut o, Some("ns")).unwrap_err();
            assert!(matches!(e.code(), 400 | 422), "{b}: {e}");
        }
    }

    #[test]
    fn update_keeps_server_fields_and_status_and_bumps_generation() {
        let cur = json!({"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","generation":1,
            "creationTimestamp":"2026-01-01T00:00:00Z","resourceVersion":"5"},"spec":{"x":1},"status":{"phase":"Running"}});
        let forged = json!({"metadata":{"name":"a","uid":"forged"},"spec":{"x":2}});
        match prepare_update(&pods(), &cur, forged, false) {
            Err(UpdateError::Api(e)) => {
                assert_eq!(e.code(), 422);
                assert!(e.to_string().contains("metadata.uid"), "{e}");
            }
            other => panic!("a uid of another object must be refused: {other:?}"),
        }
        let new = json!({"metadata":{"name":"a","uid":"u","resourceVersion":"5"},"spec":{"x":2},"status":{"phase":"Failed"}});
        let out = prepare_update(&pods(), &cur, new, false).unwrap();
        assert_eq!(out["metadata"]["uid"], "u");
        assert_eq!(out["metadata"]["generation"], 2);
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["spec"]["x"], 2);
        assert!(out["metadata"].get("resourceVersion").is_none());

        let stale = json!({"metadata":{"name":"a","resourceVersion":"4"},"spec":{"x":2}});
        assert!(matches!(
            prepare_update(&pods(), &cur, stale, false),
            Err(UpdateError::Conflict)
        ));

        let status = json!({"metadata":{"name":"a"},"spec":{"x":9},"status":{"phase":"Succeeded"}});
        let out = prepare_update(&pods(), &cur, status, true).unwrap();
        assert_eq!(out["status"]["phase"], "Succeeded");
        assert_eq!(out["spec"]["x"], 1);
        assert_eq!(out["metadata"]["generation"], 1);
    }
}
