//! Field validation of write bodies: the `fieldValidation` parameter (`Strict`, `Warn`,
//! `Ignore`) of create, update and patch, as upstream's handlers apply it.
//!
//! What it owns:
//! - **The directive** ([`Directive`]): the parameter's value, `Warn` when absent (upstream's
//!   server default since field validation went GA; kubectl sends `Strict` for
//!   `--validate=strict`, its default, and `Ignore` for `--validate=false`).
//! - **Finding unknown fields** ([`prune`]): a walk of the object alongside its kind's schema
//!   ([`listwatch_schema::Node`]); each field a closed struct does not declare is removed and
//!   named as upstream's strict decoder names it (`unknown field "spec.containers[0].foo"`).
//!   A kind without a schema, or a schema that keeps unknown fields
//!   (`x-kubernetes-preserve-unknown-fields`, a custom resource declared without a schema),
//!   reports nothing and keeps everything.
//! - **Answering** ([`Findings::settle_body`] and the others): `Strict` refuses with upstream's message shape (a
//!   create or update: 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: strict
//!   decoding error: ...`; a patch: 422 `patch: Invalid value: ...: strict decoding error:
//!   ...`), `Warn` answers each finding as a `Warning: 299 - "..."` header, `Ignore` drops
//!   them silently. Duplicate fields in a JSON or YAML body are found by the decoder
//!   (the endpoints' `limits`) and reported alongside (`duplicate field "name"`).
//!
//! Server-side apply is not pruned here: as upstream, an apply configuration with a field
//! its type does not declare is refused whatever the directive (the apply crate's typed
//! conversion); only its duplicate fields follow the directive.
//!
//! Invariants: at most [`MAX_FINDINGS`] findings are kept (the walk still removes every
//! unknown field); the walk is recursive over an already decoded value, whose depth the
//! decoder bounds; nothing here reads the network.

use std::fmt::Write as _;

use http::{HeaderMap, HeaderValue};
use listwatch_api::Status;
use listwatch_api::echo;
use listwatch_api::status::reason;
use listwatch_schema::{Node, SchemaView, Shape};
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use listwatch_kinds::KindSpec;

/// How many findings one request keeps (and answers as warnings).
pub const MAX_FINDINGS: usize = 100;

/// The longest finding kept, in [`echo::wire_cost`] units (a longer one, e.g. naming a
/// field with a huge key, is cut with the echo marker): one Warning header or one item of
/// a strict message is at most about this, once quoted.
const MAX_FINDING_BYTES: usize = 1024;

/// The `fieldValidation` directive of a write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Directive {
    /// Unknown and duplicate fields are dropped silently.
    Ignore,
    /// They are dropped, and each is answered as a warning (upstream's default).
    #[default]
    Warn,
    /// They refuse the request.
    Strict,
}

impl Directive {
    /// The directive of a request's `fieldValidation` (already checked by
    /// the endpoints' `Query::validate_write`); absent or empty is `Warn`, as upstream's.
    pub fn from_param(v: Option<&str>) -> Self {
        match v {
            Some("Strict") => Directive::Strict,
            Some("Ignore") => Directive::Ignore,
            _ => Directive::Warn,
        }
    }
}

/// The unknown and duplicate fields of one body, in upstream's wording.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings(Vec<String>);

impl Findings {
    /// The duplicate fields a decoder found (`duplicate field "name"`).
    pub fn duplicates(names: Vec<String>) -> Self {
        let mut f = Findings::default();
        for n in names {
            f.push(format!("duplicate field {}", quote(&n)));
        }
        f
    }

    fn push(&mut self, s: String) {
        if self.0.len() >= MAX_FINDINGS {
            return;
        }
        self.0.push(match echo::echo_within(&s, MAX_FINDING_BYTES) {
            std::borrow::Cow::Owned(cut) => cut,
            std::borrow::Cow::Borrowed(_) => s,
        });
    }

    /// Adds `other`'s findings after these.
    pub fn extend(&mut self, other: Findings) {
        for s in other.0 {
            self.push(s);
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `s` is one of the findings.
    pub fn contains(&self, s: &String) -> bool {
        self.0.contains(s)
    }

    /// Keeps only the findings `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&String) -> bool) {
        self.0.retain(keep);
    }

    /// `strict decoding error: a, b`.
    fn strict_message(&self) -> String {
        format!("strict decoding error: {}", self.0.join(", "))
    }

    /// Applies the directive to a create's or update's body: `Strict` refuses (400) with
    /// upstream's decode-error wording, otherwise the findings are returned for
    /// [`Findings::warn`].
    pub fn settle_body(self, directive: Directive, info: &KindSpec) -> ApiResult<Findings> {
        match directive {
            _ if self.is_empty() => Ok(self),
            Directive::Strict => Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: {}",
                self.strict_message(),
                kind = info.kind,
                version = info.version,
            ))),
            Directive::Warn => Ok(self),
            Directive::Ignore => Ok(Findings::default()),
        }
    }

    /// Applies the directive to a patched object: `Strict` refuses (422) as upstream's
    /// patcher does, naming the `patch` field and the patched object (its JSON cut by
    /// [`echo::echo_json`]: upstream quotes it whole, so a 10-byte patch of a 1.5 MB object
    /// answered megabytes).
    pub fn settle_patch(self, directive: Directive, patched: &Value) -> ApiResult<Findings> {
        match directive {
            _ if self.is_empty() => Ok(self),
            Directive::Strict => Err(ApiError::from_status(Status::failure(
                422,
                reason::INVALID,
                format!(
                    " \"\" is invalid: patch: Invalid value: {}: {}",
                    quote(&echo::echo_json(patched)),
                    self.strict_message()
                ),
            ))),
            Directive::Warn => Ok(self),
            Directive::Ignore => Ok(Findings::default()),
        }
    }

    /// Applies the directive to an apply patch's duplicate fields: `Strict` refuses (400)
    /// with upstream's `error strict decoding patch` wording.
    pub fn settle_apply(self, directive: Directive) -> ApiResult<Findings> {
        match directive {
            _ if self.is_empty() => Ok(self),
            Directive::Strict => Err(ApiError::bad_request(format!(
                "error strict decoding patch: {}",
                self.strict_message()
            ))),
            Directive::Warn => Ok(self),
            Directive::Ignore => Ok(Findings::default()),
        }
    }

    /// Adds each finding to a response's `headers` as a `Warning: 299 - "..."` header
    /// (upstream's warning form: code 299, agent `-`, the text quoted with `"` and `\`
    /// escaped).
    pub fn warn(&self, headers: &mut HeaderMap) {
        for s in &self.0 {
            if let Some(v) = warning_header(s) {
                headers.append("warning", v);
            }
        }
    }
}

/// `text` as a `Warning` header value in upstream's form (`299 - "text"`); `None` when the
/// quoted text is not a valid header value.
pub fn warning_header(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("299 - {}", quote(text))).ok()
}

/// Go's `%q` for the text this module quotes: `"` and `\` escaped, control characters
/// written as escapes.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Refuses (400) an apply configuration with fields its kind does not declare, whatever the
/// directive, as upstream's typed conversion of an apply does (`failed to create typed patch
/// object (/v1, Kind=ConfigMap): .dat: field not declared in schema`).
pub fn refuse_undeclared(kind: Option<Node<'_>>, info: &KindSpec, config: &Value) -> ApiResult<()> {
    let mut copy = config.clone();
    let mut fields = Vec::new();
    let mut path = String::new();
    let mut found = Findings::default();
    if let Some(node) = kind {
        walk_paths(node, &mut copy, &mut path, &mut found, &mut fields);
    }
    let listed: Vec<String> = fields
        .iter()
        .map(|f| format!(".{f}: field not declared in schema"))
        .collect();
    let detail = match listed.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    Err(ApiError::bad_request(format!(
        "failed to create typed patch object ({}/{}, Kind={}): {detail}",
        info.group, info.version, info.kind
    )))
}

/// Removes from `obj` every field its kind's schema does not declare, and names each
/// (`unknown field "spec.foo"`). `kind` is `None` for a kind without a schema: nothing is
/// removed.
pub fn prune<S: SchemaView>(kind: Option<S>, obj: &mut Value) -> Findings {
    let mut out = Findings::default();
    if let Some(node) = kind {
        let mut path = String::new();
        walk_paths(node, obj, &mut path, &mut out, &mut Vec::new());
    }
    out
}

/// [`prune`] for a kind: a kind whose strategy prunes by its own schema (a custom resource
/// with a structural schema: [`listwatch_kinds::KindStrategy::prune_unknown`]) is pruned by
/// it, and only its root `metadata` by `kind` (ObjectMeta's schema, as upstream's
/// `objectmeta.Coerce`); any other kind by `kind` alone.
pub fn prune_kind<S: SchemaView>(info: &KindSpec, kind: Option<S>, obj: &mut Value) -> Findings {
    let Some(paths) = info.strategy.prune_unknown(obj) else {
        return prune(kind, obj);
    };
    let mut out = Findings::default();
    if let Some(meta) = obj.get_mut("metadata") {
        let mut only_meta = Value::Object(Map::from_iter([("metadata".to_owned(), meta.take())]));
        out.extend(prune(kind, &mut only_meta));
        if let Some(m) = only_meta.get_mut("metadata") {
            *meta = m.take();
        }
    }
    for p in paths {
        out.push(format!("unknown field {}", quote(&p)));
    }
    out
}

/// [`prune`]'s walk; `paths` also receives each unknown field's path (at most
/// [`MAX_FINDINGS`]).
fn walk_paths<S: SchemaView>(
    node: S,
    v: &mut Value,
    path: &mut String,
    out: &mut Findings,
    paths: &mut Vec<String>,
) {
    let mut st = Walk { out, paths };
    st.walk(node, v, path);
}

struct Walk<'w> {
    out: &'w mut Findings,
    paths: &'w mut Vec<String>,
}

impl Walk<'_> {
    fn walk<S: SchemaView>(&mut self, node: S, v: &mut Value, path: &mut String) {
        match (node.shape(), v) {
            (Shape::Struct, Value::Object(m)) => self.struct_fields(node, m, path),
            (Shape::Map, Value::Object(m)) => {
                for (k, child) in m.iter_mut() {
                    if let Some(n) = node.field(k) {
                        let len = path.len();
                        push_field(path, k);
                        self.walk(n, child, path);
                        path.truncate(len);
                    }
                }
            }
            (Shape::List, Value::Array(items)) => {
                if let Some(n) = node.items() {
                    for (i, child) in items.iter_mut().enumerate() {
                        let len = path.len();
                        // Written in place: no string per item.
                        let _ = write!(path, "[{i}]");
                        self.walk(n, child, path);
                        path.truncate(len);
                    }
                }
            }
            // Untyped, scalars, and values of the wrong type (other checks refuse those).
            _ => {}
        }
    }

    fn struct_fields<S: SchemaView>(
        &mut self,
        node: S,
        m: &mut Map<String, Value>,
        path: &mut String,
    ) {
        let mut unknown = Vec::new();
        for (k, child) in m.iter_mut() {
            let len = path.len();
            push_field(path, k);
            match node.field(k) {
                Some(n) => self.walk(n, child, path),
                None => {
                    self.out.push(format!("unknown field {}", quote(path)));
                    if self.paths.len() < MAX_FINDINGS {
                        self.paths.push(path.clone());
                    }
                    unknown.push(k.clone());
                }
            }
            path.truncate(len);
        }
        for k in unknown {
            m.remove(&k);
        }
    }
}

fn push_field(path: &mut String, k: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(k);
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_schema::Catalog;
    use serde_json::json;

    #[test]
    fn names_and_removes_unknown_fields_of_a_pod() {
        let catalog = Catalog::builtin();
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x"}]}
        });
        let f = prune(catalog.kind("", "v1", "Pod"), &mut pod);
        assert_eq!(
            f.0,
            vec![
                "unknown field \"metadata.bogus\"",
                "unknown field \"spec.containers[0].imagePullPolicyy\"",
                "unknown field \"spec.foo\"",
            ]
        );
        assert_eq!(pod["metadata"], json!({"name": "p", "labels": {"a": "b"}}));
        assert_eq!(
            pod["spec"],
            json!({"containers": [{"name": "c", "image": "i"}]})
        );
    }

    #[test]
    fn findings_are_bounded() {
        let catalog = Catalog::builtin();
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        cm["ü".repeat(100_000)] = json!(1);
        for i in 0..500 {
            cm[format!("u{i}")] = json!(i);
        }
        let f = prune(catalog.kind("", "v1", "ConfigMap"), &mut cm);
        assert_eq!(f.0.len(), MAX_FINDINGS);
        assert!(f.0.iter().all(|s| s.len() <= MAX_FINDING_BYTES + 3));
        assert_eq!(
            cm.as_object().unwrap().len(),
            3,
            "every unknown field is dropped"
        );
    }

    fn arb_body() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        const NAMES: &[&str] = &[
            "metadata",
            "labels",
            "name",
            "bogus",
            "spec",
            "containers",
            "image",
            "ports",
            "containerPort",
            "resources",
            "limits",
            "cpu",
            "volumes",
            "emptyDir",
            "selector",
            "matchLabels",
            "template",
            "replicas",
            "data",
            "foo",
            "",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(|n| json!(n)),
            Just(json!("x")),
        ];
        leaf.prop_recursive(6, 64, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(NAMES), inner), 0..5).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        /// Pruning by a kind's plan removes and names what pruning by its nodes does.
        #[test]
        fn pruning_by_the_plan_equals_pruning_by_the_nodes(
            kind in proptest::sample::select(vec!["Pod", "ConfigMap", "Service"]),
            spec in arb_body(),
            meta in arb_body(),
        ) {
            let catalog = Catalog::builtin();
            let plan = catalog.plan("", "v1", kind).unwrap();
            let body = json!({"metadata": meta, "spec": spec, "data": {"a": 1}, "x": 1});
            let (mut a, mut b) = (body.clone(), body);
            let fa = prune(catalog.kind("", "v1", kind), &mut a);
            let fb = prune(Some(plan.root()), &mut b);
            proptest::prop_assert_eq!(fa, fb);
            proptest::prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn a_kind_without_a_schema_keeps_everything() {
        let mut v = json!({"spec": {"foo": 1}});
        assert!(prune(None::<Node<'_>>, &mut v).is_empty());
        assert_eq!(v, json!({"spec": {"foo": 1}}));
    }

    #[test]
    fn strict_wording_matches_upstream() {
        let info = KindSpec::new("", "v1", "pods", "Pod");
        let f = Findings(vec!["unknown field \"spec.foo\"".into()]);
        let e = f.settle_body(Directive::Strict, &info).unwrap_err();
        assert_eq!(e.0.code, 400);
        assert_eq!(
            e.0.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.foo\""
        );
        assert_eq!(quote("unknown field \"a\""), "\"unknown field \\\"a\\\"\"");
    }
}
