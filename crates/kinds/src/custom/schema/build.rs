//! Compiling a schema: reading each keyword, upstream's structural invariants
//! (`ValidateStructural`: every specified field has a `type`, junctors only validate values,
//! metadata only restricts `name`/`generateName`, nothing in a nested context reasons about
//! metadata) and completeness (everything a junctor names is specified outside it), the
//! CRD API's refusals of unsupported keywords, and the defaults' own validity.

use serde_json::{Map, Value};

use super::{
    ListType, MAX_DEPTH, MAX_ERRORS, MAX_NODES, Node, Pattern, PatternBudget, Ty, mutate, pattern,
    validate,
};
use crate::field::FieldError;

/// Where a node sits, for upstream's "must not be empty ..." wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// A node of the structural part, or one under a junctor (value validation only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Structural,
    /// Under `allOf`/`anyOf`/`oneOf`/`not`; `type` is allowed only in upstream's two
    /// int-or-string patterns.
    Nested {
        allow_type: bool,
    },
}

struct Builder<'a> {
    errs: Vec<FieldError>,
    nodes: usize,
    /// The patterns already charged, shared by every schema of one CRD.
    budget: &'a mut PatternBudget,
}

/// `path.seg` (`seg` alone at the root).
pub(super) fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_owned()
    } else {
        format!("{path}.{seg}")
    }
}

fn key(path: &str, seg: &str, k: &str) -> String {
    format!("{}[{k}]", join(path, seg))
}

/// Compiles a schema (see [`super::Structural::new`]).
pub(super) fn compile(v: &Value, budget: &mut PatternBudget) -> Result<Node, Vec<FieldError>> {
    let mut b = Builder {
        errs: Vec::new(),
        nodes: 0,
        budget,
    };
    let root = b.node(v, "", Level::Root, Ctx::Structural, 0);
    if b.errs.is_empty() {
        b.complete_tree(&root, "", 0);
    }
    if b.errs.is_empty() {
        b.defaults(&root, "", 0);
    }
    if b.errs.is_empty() {
        return Ok(root);
    }
    let mut errs = b.errs;
    errs.sort_by_cached_key(ToString::to_string);
    errs.dedup();
    errs.truncate(MAX_ERRORS);
    Err(errs)
}

/// Upstream's int-or-string `anyOf` shape: `[{type: integer}, {type: string}]`.
fn is_int_or_string_any_of(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| {
        a.len() == 2
            && a.first() == Some(&serde_json::json!({"type": "integer"}))
            && a.get(1) == Some(&serde_json::json!({"type": "string"}))
    })
}

impl Builder<'_> {
    fn err(&mut self, e: FieldError) {
        if self.errs.len() < MAX_ERRORS {
            self.errs.push(e);
        }
    }

    fn forbidden(&mut self, path: &str, seg: &str, detail: &str) {
        self.err(FieldError::forbidden(&join(path, seg), detail));
    }

    fn bool_at(&mut self, v: &Value, path: &str) -> bool {
        match v {
            Value::Bool(b) => *b,
            _ => {
                self.err(FieldError::invalid(path, v, "must be a boolean"));
                false
            }
        }
    }

    fn count_at(&mut self, v: &Value, path: &str) -> Option<u64> {
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.err(FieldError::invalid(
                    path,
                    v,
                    "must be a non-negative integer",
                ));
                None
            }
        }
    }

    fn number_at(&mut self, v: &Value, path: &str) -> Option<f64> {
        match v.as_f64() {
            Some(n) => Some(n),
            None => {
                self.err(FieldError::invalid(path, v, "must be a number"));
                None
            }
        }
    }

    fn strings_at(&mut self, v: &Value, path: &str) -> Vec<String> {
        match v.as_array() {
            Some(a) if a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            _ => {
                self.err(FieldError::invalid(path, v, "must be a list of strings"));
                Vec::new()
            }
        }
    }

    fn pattern_at(&mut self, v: &Value, path: &str) -> Option<Pattern> {
        let Some(src) = v.as_str() else {
            self.err(FieldError::invalid(path, v, "must be a string"));
            return None;
        };
        match pattern::admit(src, self.budget) {
            Ok(p) => Some(p),
            Err(Some(why)) => {
                self.err(FieldError::invalid(
                    path,
                    v,
                    format!("must be a valid regular expression, but isn't: {why}"),
                ));
                None
            }
            Err(None) => None,
        }
    }

    /// One schema node at `path`.
    fn node(&mut self, v: &Value, path: &str, lvl: Level, ctx: Ctx, depth: usize) -> Node {
        let mut n = Node::default();
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            if self.nodes == MAX_NODES + 1 {
                self.err(FieldError::forbidden(
                    path,
                    format!("the schema must not have more than {MAX_NODES} nodes"),
                ));
            }
            return n;
        }
        if depth > MAX_DEPTH {
            self.err(FieldError::forbidden(
                path,
                format!("must not be nested more than {MAX_DEPTH} levels"),
            ));
            return n;
        }
        let Some(m) = v.as_object() else {
            self.err(FieldError::invalid(path, v, "must be a schema object"));
            return n;
        };
        let nested = matches!(ctx, Ctx::Nested { .. });
        let child_ctx = if nested {
            Ctx::Nested { allow_type: false }
        } else {
            Ctx::Structural
        };
        for (k, val) in m {
            let p = join(path, k);
            match k.as_str() {
                "type" => match val.as_str() {
                    Some("") => {}
                    Some("object") => n.ty = Some(Ty::Object),
                    Some("array") => n.ty = Some(Ty::Array),
                    Some("string") => n.ty = Some(Ty::String),
                    Some("integer") => n.ty = Some(Ty::Integer),
                    Some("number") => n.ty = Some(Ty::Number),
                    Some("boolean") => n.ty = Some(Ty::Boolean),
                    _ => {
                        let supported: Vec<String> =
                            ["array", "boolean", "integer", "number", "object", "string"]
                                .iter()
                                .map(|s| (*s).to_owned())
                                .collect();
                        self.err(FieldError::not_supported(&p, val, &supported));
                    }
                },
                "nullable" => n.nullable = self.bool_at(val, &p),
                "x-kubernetes-int-or-string" => n.int_or_string = self.bool_at(val, &p),
                "x-kubernetes-preserve-unknown-fields" => {
                    n.preserve_unknown = self.bool_at(val, &p);
                }
                "x-kubernetes-embedded-resource" => n.embedded = self.bool_at(val, &p),
                "properties" => match val.as_object() {
                    Some(props) => {
                        for (pk, pv) in props {
                            let pp = key(path, "properties", pk);
                            let child = self.node(pv, &pp, Level::Field, child_ctx, depth + 1);
                            n.properties.insert(pk.clone(), child);
                        }
                    }
                    None => self.err(FieldError::invalid(&p, val, "must be an object")),
                },
                "additionalProperties" => match val {
                    // Upstream's `additionalProperties: true` has no schema: any key, its
                    // value pruned as if nothing were declared (scalars stay).
                    Value::Bool(true) => n.additional = Some(Box::default()),
                    Value::Bool(false) => self.err(FieldError::forbidden(
                        &p,
                        "additionalProperties cannot be set to false",
                    )),
                    Value::Object(_) => {
                        let child = self.node(val, &p, Level::Field, child_ctx, depth + 1);
                        n.additional = Some(Box::new(child));
                    }
                    _ => self.err(FieldError::invalid(&p, val, "must be a boolean or a schema")),
                },
                "items" => match val {
                    Value::Object(_) => {
                        let child = self.node(val, &p, Level::Item, child_ctx, depth + 1);
                        n.items = Some(Box::new(child));
                    }
                    Value::Array(_) => self.err(FieldError::forbidden(
                        &p,
                        "items must be a schema object and not an array",
                    )),
                    _ => self.err(FieldError::invalid(&p, val, "must be a schema object")),
                },
                "default" => {
                    if nested {
                        self.forbidden(path, k, "must be undefined to be structural");
                    } else if !val.is_null() {
                        n.default = Some(val.clone());
                    }
                }
                "format" => match val.as_str() {
                    Some(f) => n.format = Some(f.to_owned()),
                    None => self.err(FieldError::invalid(&p, val, "must be a string")),
                },
                "maximum" => n.maximum = self.number_at(val, &p),
                "minimum" => n.minimum = self.number_at(val, &p),
                "exclusiveMaximum" => n.exclusive_maximum = self.bool_at(val, &p),
                "exclusiveMinimum" => n.exclusive_minimum = self.bool_at(val, &p),
                "multipleOf" => {
                    n.multiple_of = self.number_at(val, &p);
                    if n.multiple_of.is_some_and(|f| f <= 0.0) {
                        self.err(FieldError::invalid(&p, val, "must be greater than zero"));
                    }
                }
                "maxLength" => n.max_length = self.count_at(val, &p),
                "minLength" => n.min_length = self.count_at(val, &p),
                "maxItems" => n.max_items = self.count_at(val, &p),
                "minItems" => n.min_items = self.count_at(val, &p),
                "maxProperties" => n.max_properties = self.count_at(val, &p),
                "minProperties" => n.min_properties = self.count_at(val, &p),
                "pattern" => n.pattern = self.pattern_at(val, &p),
                "uniqueItems" if self.bool_at(val, &p) => {
                    self.err(FieldError::forbidden(
                        &p,
                        "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
                    ));
                }
                "enum" => match val.as_array() {
                    Some(a) => n.enumeration = Some(a.clone()),
                    None => self.err(FieldError::invalid(&p, val, "must be a list")),
                },
                "required" => n.required = self.strings_at(val, &p),
                "allOf" | "anyOf" | "oneOf" => {
                    let Some(list) = val.as_array() else {
                        self.err(FieldError::invalid(&p, val, "must be a list of schemas"));
                        continue;
                    };
                    // Upstream's two int-or-string exceptions: `anyOf: [{type: integer},
                    // {type: string}]`, directly or as the first `allOf`'s `anyOf`.
                    let int_or_string = m
                        .get("x-kubernetes-int-or-string")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                        && !nested;
                    let mut out = Vec::with_capacity(list.len().min(64));
                    for (i, item) in list.iter().enumerate() {
                        let allow_type = int_or_string
                            && k == "anyOf"
                            && is_int_or_string_any_of(Some(val));
                        let first_all_of = int_or_string
                            && k == "allOf"
                            && i == 0
                            && is_int_or_string_any_of(item.get("anyOf"));
                        let ip = format!("{p}[{i}]");
                        let child = if first_all_of {
                            self.int_or_string_all_of(item, &ip, lvl, depth + 1)
                        } else {
                            self.node(item, &ip, lvl, Ctx::Nested { allow_type }, depth + 1)
                        };
                        out.push(child);
                    }
                    match k.as_str() {
                        "allOf" => n.all_of = out,
                        "anyOf" => n.any_of = out,
                        _ => n.one_of = out,
                    }
                }
                "not" => {
                    let child = self.node(val, &p, lvl, Ctx::Nested { allow_type: false }, depth + 1);
                    n.not = Some(Box::new(child));
                }
                "x-kubernetes-list-type" => match val.as_str() {
                    Some("atomic") => n.list_type = Some(ListType::Atomic),
                    Some("set") => n.list_type = Some(ListType::Set),
                    Some("map") => n.list_type = Some(ListType::Map(Vec::new())),
                    _ => {
                        let supported: Vec<String> =
                            ["atomic", "set", "map"].iter().map(|s| (*s).to_owned()).collect();
                        self.err(FieldError::not_supported(&p, val, &supported));
                    }
                },
                "x-kubernetes-list-map-keys" => {
                    let _ = self.strings_at(val, &p);
                }
                "x-kubernetes-map-type" => match val.as_str() {
                    Some("granular" | "atomic") => {}
                    _ => {
                        let supported: Vec<String> =
                            ["granular", "atomic"].iter().map(|s| (*s).to_owned()).collect();
                        self.err(FieldError::not_supported(&p, val, &supported));
                    }
                },
                "x-kubernetes-validations" => self.err(FieldError::forbidden(
                    &p,
                    "CEL validation rules (x-kubernetes-validations) are not supported by this server",
                )),
                "$ref" => self.forbidden(path, k, "$ref is not supported"),
                "$schema" => self.forbidden(path, k, "$schema is not supported"),
                "id" => self.forbidden(path, k, "id is not supported"),
                "definitions" => self.forbidden(path, k, "definitions are not supported"),
                "dependencies" => self.forbidden(path, k, "dependencies are not supported"),
                "patternProperties" => {
                    self.forbidden(path, k, "patternProperties is not supported");
                }
                "additionalItems" => self.forbidden(path, k, "additionalItems is not supported"),
                // Documentation and examples; anything else is ignored as upstream's
                // decoder ignores unknown keys of a schema.
                _ => {}
            }
        }
        if let Some(ListType::Map(keys)) = &mut n.list_type {
            *keys = m
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
        }
        match ctx {
            Ctx::Structural => self.structural_invariants(&n, m, path, lvl),
            Ctx::Nested { allow_type } => self.nested_invariants(m, path, allow_type),
        }
        n
    }

    /// The first `allOf` item of an int-or-string node whose `anyOf` is the int-or-string
    /// pattern: nested, with `type` allowed in that `anyOf` only.
    fn int_or_string_all_of(&mut self, v: &Value, path: &str, lvl: Level, depth: usize) -> Node {
        let mut stripped = v.clone();
        let any_of = stripped.as_object_mut().and_then(|m| m.remove("anyOf"));
        let mut n = self.node(
            &stripped,
            path,
            lvl,
            Ctx::Nested { allow_type: false },
            depth,
        );
        if let Some(Value::Array(list)) = any_of {
            for (i, item) in list.iter().enumerate() {
                let ip = format!("{path}.anyOf[{i}]");
                let child = self.node(item, &ip, lvl, Ctx::Nested { allow_type: true }, depth + 1);
                n.any_of.push(child);
            }
        }
        n
    }

    /// Upstream's `validateStructuralInvariants` for one node of the structural part.
    fn structural_invariants(&mut self, n: &Node, m: &Map<String, Value>, path: &str, lvl: Level) {
        if n.ty == Some(Ty::Array) && n.items.is_none() {
            self.err(FieldError::required(
                &join(path, "items"),
                "must be specified",
            ));
        }
        if n.additional.is_some() && m.contains_key("additionalProperties") {
            if lvl == Level::Root {
                self.forbidden(path, "additionalProperties", "must not be used at the root");
            }
            if m.get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty())
            {
                self.forbidden(
                    path,
                    "additionalProperties",
                    "additionalProperties and properties are mutual exclusive",
                );
            }
        }
        if n.int_or_string && n.preserve_unknown {
            self.err(FieldError::invalid(
                &join(path, "x-kubernetes-preserve-unknown-fields"),
                &Value::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
        if n.int_or_string && n.embedded {
            self.err(FieldError::invalid(
                &join(path, "x-kubernetes-embedded-resource"),
                &Value::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
        let type_shown = Value::String(n.ty.map(Ty::name).unwrap_or_default().to_owned());
        if n.embedded && n.ty != Some(Ty::Object) {
            if n.ty.is_none() {
                self.err(FieldError::required(
                    &join(path, "type"),
                    "must be object if x-kubernetes-embedded-resource is true",
                ));
            } else {
                self.err(FieldError::invalid(
                    &join(path, "type"),
                    &type_shown,
                    "must be object if x-kubernetes-embedded-resource is true",
                ));
            }
        } else if n.ty.is_none() && !n.int_or_string && !n.preserve_unknown {
            let detail = match lvl {
                Level::Root => "must not be empty at the root",
                Level::Item => "must not be empty for specified array items",
                Level::Field => "must not be empty for specified object fields",
            };
            self.err(FieldError::required(&join(path, "type"), detail));
        }
        if n.embedded && m.contains_key("additionalProperties") {
            self.forbidden(
                path,
                "additionalProperties",
                "must not be used if x-kubernetes-embedded-resource is set",
            );
        }
        if lvl == Level::Root && n.ty.is_some_and(|t| t != Ty::Object) {
            self.err(FieldError::invalid(
                &join(path, "type"),
                &type_shown,
                "must be object at the root",
            ));
        }
        let check_metadata = lvl == Level::Root || n.embedded;
        for f in ["kind", "apiVersion"] {
            if let Some(p) = n.properties.get(f)
                && check_metadata
                && p.ty != Some(Ty::String)
            {
                self.err(FieldError::invalid(
                    &format!("{}.type", key(path, "properties", f)),
                    &Value::String(p.ty.map(Ty::name).unwrap_or_default().to_owned()),
                    "must be string",
                ));
            }
        }
        if let Some(meta) = n.properties.get("metadata") {
            let mp = key(path, "properties", "metadata");
            if check_metadata && meta.ty != Some(Ty::Object) {
                self.err(FieldError::invalid(
                    &join(&mp, "type"),
                    &Value::String(meta.ty.map(Ty::name).unwrap_or_default().to_owned()),
                    "must be object",
                ));
            }
            let raw = m
                .get("properties")
                .and_then(|p| p.get("metadata"))
                .and_then(Value::as_object);
            if lvl == Level::Root && raw.is_some_and(|raw| !only_name_restrictions(raw)) {
                self.err(FieldError::forbidden(
                    &mp,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
        if n.embedded && !n.preserve_unknown && n.properties.is_empty() {
            self.err(FieldError::required(
                &join(path, "properties"),
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            ));
        }
        match &n.list_type {
            Some(_) if n.ty != Some(Ty::Array) => self.err(FieldError::invalid(
                &join(path, "x-kubernetes-list-type"),
                &m.get("x-kubernetes-list-type").cloned().unwrap_or_default(),
                "must only be used if type is array",
            )),
            Some(ListType::Map(keys)) => {
                if keys.is_empty() {
                    self.err(FieldError::required(
                        &join(path, "x-kubernetes-list-map-keys"),
                        "must not be empty if x-kubernetes-list-type is map",
                    ));
                }
                if let Some(items) = &n.items {
                    if items.ty != Some(Ty::Object) {
                        self.err(FieldError::invalid(
                            &join(path, "items.type"),
                            &Value::String(items.ty.map(Ty::name).unwrap_or_default().to_owned()),
                            "must be object if parent array's x-kubernetes-list-type is map",
                        ));
                    } else if keys.iter().any(|k| !items.properties.contains_key(k)) {
                        self.err(FieldError::invalid(
                            &join(path, "x-kubernetes-list-map-keys"),
                            m.get("x-kubernetes-list-map-keys").unwrap_or(&Value::Null),
                            "entries must all be names of item properties",
                        ));
                    }
                }
            }
            _ => {
                if m.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
                {
                    self.err(FieldError::invalid(
                        &join(path, "x-kubernetes-list-type"),
                        m.get("x-kubernetes-list-type").unwrap_or(&Value::Null),
                        "must be map if x-kubernetes-list-map-keys is non-empty",
                    ));
                }
            }
        }
    }

    /// Upstream's `validateNestedValueValidation` for a node under a junctor.
    fn nested_invariants(&mut self, m: &Map<String, Value>, path: &str, allow_type: bool) {
        let set = |k: &str| match m.get(k) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if set("type") && !allow_type {
            self.forbidden(path, "type", "must be empty to be structural");
        }
        if m.contains_key("additionalProperties") {
            self.forbidden(
                path,
                "additionalProperties",
                "must be undefined to be structural",
            );
        }
        for (k, how) in [
            ("title", "must be empty to be structural"),
            ("description", "must be empty to be structural"),
            ("nullable", "must be false to be structural"),
            ("externalDocs", "must be undefined to be structural"),
            (
                "x-kubernetes-preserve-unknown-fields",
                "must be false to be structural",
            ),
            (
                "x-kubernetes-embedded-resource",
                "must be false to be structural",
            ),
            (
                "x-kubernetes-int-or-string",
                "must be false to be structural",
            ),
            (
                "x-kubernetes-list-map-keys",
                "must be empty to be structural",
            ),
            (
                "x-kubernetes-list-type",
                "must be undefined to be structural",
            ),
            (
                "x-kubernetes-map-type",
                "must be undefined to be structural",
            ),
        ] {
            if set(k) {
                self.forbidden(path, k, how);
            }
        }
        if m.get("properties")
            .and_then(|p| p.get("metadata"))
            .is_some()
        {
            self.err(FieldError::forbidden(
                &key(path, "properties", "metadata"),
                "must not be specified in a nested context",
            ));
        }
    }

    /// Upstream's `validateStructuralCompleteness`: every property and `items` a junctor
    /// of the root names must also be specified in the structural part (upstream checks
    /// the root's junctors only, through their nesting).
    fn complete_tree(&mut self, n: &Node, path: &str, depth: usize) {
        for (kw, list) in [
            ("allOf", &n.all_of),
            ("anyOf", &n.any_of),
            ("oneOf", &n.one_of),
        ] {
            for (i, j) in list.iter().enumerate() {
                self.complete(n, path, j, &format!("{}[{i}]", join(path, kw)), depth + 1);
            }
        }
        if let Some(j) = &n.not {
            self.complete(n, path, j, &join(path, "not"), depth + 1);
        }
    }

    fn complete(&mut self, s: &Node, spath: &str, j: &Node, jpath: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        for (k, jp) in &j.properties {
            let jkp = key(jpath, "properties", k);
            match (s.properties.get(k), &s.additional) {
                (Some(sp), _) => {
                    self.complete(sp, &key(spath, "properties", k), jp, &jkp, depth + 1)
                }
                (None, Some(sa)) => {
                    self.complete(
                        sa,
                        &join(spath, "additionalProperties"),
                        jp,
                        &jkp,
                        depth + 1,
                    );
                }
                (None, None) => self.err(FieldError::required(
                    &key(spath, "properties", k),
                    format!("because it is defined in {jkp}"),
                )),
            }
        }
        if let Some(ji) = &j.items {
            let jip = join(jpath, "items");
            match &s.items {
                Some(si) => self.complete(si, &join(spath, "items"), ji, &jip, depth + 1),
                None => self.err(FieldError::required(
                    &join(spath, "items"),
                    format!("because it is defined in {jip}"),
                )),
            }
        }
        for (kw, list) in [
            ("allOf", &j.all_of),
            ("anyOf", &j.any_of),
            ("oneOf", &j.one_of),
        ] {
            for (i, jj) in list.iter().enumerate() {
                self.complete(
                    s,
                    spath,
                    jj,
                    &format!("{}[{i}]", join(jpath, kw)),
                    depth + 1,
                );
            }
        }
        if let Some(jj) = &j.not {
            self.complete(s, spath, jj, &join(jpath, "not"), depth + 1);
        }
    }

    /// Every default must be pruned already (no unknown fields) and valid against its own
    /// schema, once its own nested defaults are applied (upstream's CRD validation of
    /// defaults).
    fn defaults(&mut self, n: &Node, path: &str, depth: usize) {
        if depth > MAX_DEPTH || self.errs.len() >= MAX_ERRORS {
            return;
        }
        if let Some(d) = &n.default {
            let dp = join(path, "default");
            let mut pruned = d.clone();
            if !mutate::prune_at(n, &mut pruned, false).is_empty() {
                self.err(FieldError::invalid(&dp, d, "must not have unknown fields"));
            } else {
                let mut defaulted = d.clone();
                mutate::prune_nulls(n, &mut defaulted, 0);
                mutate::default(n, &mut defaulted, 0);
                for e in validate::validate(n, &defaulted, &dp) {
                    self.err(e);
                }
            }
        }
        for (k, p) in &n.properties {
            // The root's metadata is the server's (its schema only restricts names).
            if path.is_empty() && k == "metadata" {
                continue;
            }
            self.defaults(p, &key(path, "properties", k), depth + 1);
        }
        if let Some(a) = &n.additional {
            self.defaults(a, &join(path, "additionalProperties"), depth + 1);
        }
        if let Some(i) = &n.items {
            self.defaults(i, &join(path, "items"), depth + 1);
        }
    }
}

/// Whether a root `metadata` schema restricts nothing but `name` and `generateName`
/// (its `type: object` and documentation aside).
fn only_name_restrictions(m: &Map<String, Value>) -> bool {
    m.iter().all(|(k, v)| match k.as_str() {
        "type" | "description" | "title" | "example" | "externalDocs" => true,
        "properties" => v
            .as_object()
            .is_some_and(|p| p.keys().all(|k| k == "name" || k == "generateName")),
        _ => false,
    })
}
