//! Typed validation: whether a decoded JSON value would decode into the Go types upstream
//! decodes a built-in kind's body into ([`Node::check_types`]).
//!
//! What it owns: the type rules of upstream's JSON decoding (`sigs.k8s.io/json`, a fork of
//! Go's `encoding/json`) read from the vendored definitions instead of Go structs —
//! objects, lists and maps by shape; `string`, `boolean`, `number` (float64) and `integer`
//! (int32/int64 by `format`, whole and in range); `format: byte` (`[]byte`: standard
//! base64 with padding, as Go's `base64.StdEncoding`; a list of bytes also decodes);
//! and the four apimachinery types with their own decoders: `IntOrString` (a string or an
//! int32), `Quantity` (a string or number in upstream's quantity grammar), `Time` and
//! `MicroTime` (RFC 3339 strings). `null` decodes into anything, as in Go. Untyped
//! positions (`RawExtension`, `FieldsV1`, `x-kubernetes-preserve-unknown-fields`) and
//! fields the schema does not declare (field validation's business) accept anything.
//!
//! The finding ([`TypeError`]) renders in upstream's words: Go's decoder
//! ([`TypeError::go_message`]: `json: cannot unmarshal string into Go struct field
//! ContainerPort.spec.containers.ports.containerPort of type int32`) and
//! structured-merge-diff's typed conversion of an apply ([`TypeError::apply_message`]).
//! Known differences: a named Go string type (`v1.PullPolicy`) is reported as `string`
//! (the OpenAPI definitions do not keep the Go name), a number's literal is serde's
//! rendering of it (`1000.0` for `1e3`), the first mismatch in the value's key order is
//! reported, and `MicroTime` accepts any RFC 3339 time (upstream insists on six
//! fractional digits).
//!
//! Invariants: the walk visits each value of the body once and allocates nothing unless
//! it finds a mismatch (then only the path to it); it recurses as deep as the value,
//! whose depth the decoder bounds.

use serde_json::Value;

use crate::node::{Node, Shape};
use crate::plan::{Plan, Scalar, SchemaView, Special};

/// The kind of a JSON value, in Go's decoder's words.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// One step of the path to a mismatch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A struct's field.
    Field(String),
    /// A list's item.
    Index(usize),
    /// A map's key.
    Key(String),
}

/// What was wrong at the mismatch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    /// A value of the wrong JSON kind (or a number not in the integer type), as Go's
    /// `UnmarshalTypeError`: `value` is `string`, `number`, `number 1.5`, …; `go_type` the
    /// Go type decoded into.
    Unmarshal {
        value: String,
        go_type: String,
        /// Structured-merge-diff's scalar/shape wording for an apply.
        smd: String,
    },
    /// A custom decoder's own error (quantity grammar, base64, time parsing).
    Decoder(String),
}

/// A value that would not decode into its kind's Go type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// Outermost step first (built while unwinding, reversed at the end).
    path: Vec<Step>,
    /// The Go name of the struct whose field holds the mismatch (innermost).
    struct_name: Option<String>,
    problem: Problem,
}

impl TypeError {
    fn new(problem: Problem) -> Box<Self> {
        Box::new(TypeError {
            path: Vec::new(),
            struct_name: None,
            problem,
        })
    }

    fn mismatch(v: &Value, go_type: impl Into<String>, smd: impl Into<String>) -> Box<Self> {
        Self::new(Problem::Unmarshal {
            value: json_kind(v).to_owned(),
            go_type: go_type.into(),
            smd: smd.into(),
        })
    }

    /// Go's decoder's message: `json: cannot unmarshal X into Go struct field S.a.b of type
    /// T` (the field path names struct fields only, as Go's error context does), or a
    /// custom decoder's own error (`quantities must match the regular expression …`,
    /// `illegal base64 data at input byte 4`).
    pub fn go_message(&self) -> String {
        match &self.problem {
            Problem::Decoder(m) => m.clone(),
            Problem::Unmarshal { value, go_type, .. } => {
                let fields: Vec<&str> = self
                    .path
                    .iter()
                    .filter_map(|s| match s {
                        Step::Field(f) => Some(f.as_str()),
                        _ => None,
                    })
                    .collect();
                match (&self.struct_name, fields.is_empty()) {
                    (Some(s), false) => format!(
                        "json: cannot unmarshal {value} into Go struct field {s}.{} of type {go_type}",
                        fields.join(".")
                    ),
                    _ => format!("json: cannot unmarshal {value} into Go value of type {go_type}"),
                }
            }
        }
    }

    /// The path in structured-merge-diff's form (`.spec.containers[0].image`, a map key as
    /// `[key]`).
    pub fn path(&self) -> String {
        let mut out = String::new();
        for s in &self.path {
            match s {
                Step::Field(f) => {
                    out.push('.');
                    out.push_str(f);
                }
                Step::Index(i) => out.push_str(&format!("[{i}]")),
                Step::Key(k) => out.push_str(&format!(".{k}")),
            }
        }
        out
    }

    /// An apply's typed conversion's message: `.spec.replicas: expected numeric (int or
    /// float), got string` for a scalar or shape mismatch, the decoder's message for the
    /// rest (a value of the right JSON kind the Go type still refuses).
    pub fn apply_message(&self) -> String {
        let reason = match &self.problem {
            Problem::Unmarshal { smd, .. } if !smd.is_empty() => smd.clone(),
            _ => self.go_message(),
        };
        format!("{}: {reason}", self.path())
    }
}

impl std::fmt::Display for TypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.go_message())
    }
}

impl std::error::Error for TypeError {}

/// The Go type name of a definition (`io.k8s.api.core.v1.PodSpec` → `v1.PodSpec`), and its
/// bare name (`PodSpec`).
fn go_names(def: &str) -> (String, &str) {
    let mut parts = def.rsplit('.');
    let name = parts.next().unwrap_or(def);
    match parts.next() {
        Some(pkg) => (format!("{pkg}.{name}"), name),
        None => (name.to_owned(), name),
    }
}

/// The apimachinery types with their own JSON decoders.
pub(crate) const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
pub(crate) const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
pub(crate) const TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Time";
pub(crate) const MICRO_TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime";

impl Node<'_> {
    /// Checks that `v` would decode into this node's Go type (see the module doc); the
    /// root is a kind's definition named `def_name` (`io.k8s.api.core.v1.Pod`).
    pub fn check_types(&self, def_name: &str, v: &Value) -> Result<(), Box<TypeError>> {
        check_types(*self, def_name, v)
    }
}

impl Plan {
    /// [`Node::check_types`] of the kind's body `v`, read from the plan.
    pub fn check_types(&self, v: &Value) -> Result<(), Box<TypeError>> {
        check_types(self.root(), self.def_name(), v)
    }
}

fn check_types<S: SchemaView>(root: S, def_name: &str, v: &Value) -> Result<(), Box<TypeError>> {
    let mut e = match check(root, Some(def_name), v) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    e.path.reverse();
    Err(e)
}

/// The Go type of a value at `node` (for messages only).
fn go_type<S: SchemaView>(node: S) -> String {
    if let Some(name) = node.ref_name() {
        match name {
            INT_OR_STRING => return "intstr.IntOrString".into(),
            QUANTITY => return "resource.Quantity".into(),
            _ if node.shape() == Shape::Struct => return go_names(name).0,
            _ => {}
        }
    }
    match node.shape() {
        Shape::List => match node.items() {
            Some(i) => format!("[]{}", go_type(i)),
            None => "[]interface {}".into(),
        },
        Shape::Map => match node.field("") {
            Some(val) => format!("map[string]{}", go_type(val)),
            None => "map[string]interface {}".into(),
        },
        _ => scalar_go_type(node.scalar()).into(),
    }
}

fn scalar_go_type(ty: Scalar) -> &'static str {
    match ty {
        Scalar::Int32 => "int32",
        Scalar::Int64 => "int64",
        Scalar::Number => "float64",
        Scalar::Boolean => "bool",
        Scalar::Bytes => "[]uint8",
        Scalar::String => "string",
        Scalar::Object => "map[string]interface {}",
        Scalar::Array => "[]interface {}",
        Scalar::Other => "interface {}",
    }
}

/// Checks `v` against `node`; `root` names the kind's definition at the root (whose own
/// schema is not reached through a `$ref`).
fn check<S: SchemaView>(node: S, root: Option<&str>, v: &Value) -> Result<(), Box<TypeError>> {
    if v.is_null() {
        return Ok(());
    }
    match node.special() {
        Special::IntOrString => return int_or_string(v),
        Special::Quantity => return quantity(v),
        Special::Time => return time(v),
        Special::LabelSelector | Special::None => {}
    }
    match node.shape() {
        Shape::Untyped => Ok(()),
        Shape::Struct => {
            let Value::Object(m) = v else {
                return Err(TypeError::mismatch(v, go_type(node), expected_map(v)));
            };
            for (k, child) in m {
                let Some(field) = node.field(k) else { continue };
                if let Err(mut e) = check(field, None, child) {
                    e.path.push(Step::Field(k.clone()));
                    if e.struct_name.is_none() {
                        let def = root.or_else(|| node.ref_name());
                        e.struct_name = Some(def.map(|d| go_names(d).1).unwrap_or("").to_owned());
                    }
                    return Err(e);
                }
            }
            Ok(())
        }
        Shape::Map => {
            let Value::Object(m) = v else {
                return Err(TypeError::mismatch(v, go_type(node), expected_map(v)));
            };
            let Some(val) = node.field("") else {
                return Ok(());
            };
            for (k, child) in m {
                if let Err(mut e) = check(val, None, child) {
                    e.path.push(Step::Key(k.clone()));
                    return Err(e);
                }
            }
            Ok(())
        }
        Shape::List => {
            let Value::Array(items) = v else {
                return Err(TypeError::mismatch(
                    v,
                    go_type(node),
                    format!("expected list, got {}", smd_value(v)),
                ));
            };
            let Some(item) = node.items() else {
                return Ok(());
            };
            for (i, child) in items.iter().enumerate() {
                if let Err(mut e) = check(item, None, child) {
                    e.path.push(Step::Index(i));
                    return Err(e);
                }
            }
            Ok(())
        }
        Shape::Scalar => scalar(node.scalar(), v),
    }
}

fn expected_map(v: &Value) -> String {
    format!("expected map, got {}", smd_value(v))
}

/// A value as structured-merge-diff's messages print it (Go's `%v` of the decoded value,
/// close enough: the JSON text, cut).
fn smd_value(v: &Value) -> String {
    match v {
        Value::Array(_) => "[...]".into(),
        Value::Object(_) => "map[...]".into(),
        Value::String(s) if s.len() > 64 => format!("{:?}...", s.get(..64).unwrap_or("")),
        other => other.to_string(),
    }
}

/// What structured-merge-diff says of a scalar of the wrong kind.
fn smd_scalar(expected: &str, v: &Value) -> String {
    let got = match v {
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "<nil>",
    };
    format!("expected {expected}, got {got}")
}

fn scalar(ty: Scalar, v: &Value) -> Result<(), Box<TypeError>> {
    match ty {
        Scalar::Bytes => bytes(v),
        Scalar::String => match v {
            Value::String(_) => Ok(()),
            _ => Err(TypeError::mismatch(v, "string", smd_scalar("string", v))),
        },
        Scalar::Boolean => match v {
            Value::Bool(_) => Ok(()),
            _ => Err(TypeError::mismatch(v, "bool", smd_scalar("boolean", v))),
        },
        Scalar::Number => match v {
            Value::Number(_) => Ok(()),
            _ => Err(TypeError::mismatch(
                v,
                "float64",
                smd_scalar("numeric (int or float)", v),
            )),
        },
        Scalar::Int32 => integer(v, "int32", true),
        Scalar::Int64 => integer(v, "int64", false),
        // `oneOf`/`anyOf` scalars other than the known ones: not checked.
        Scalar::Object | Scalar::Array | Scalar::Other => Ok(()),
    }
}

/// A Go integer of the given width: a whole JSON number in range.
fn integer(v: &Value, go_type: &str, int32: bool) -> Result<(), Box<TypeError>> {
    let Value::Number(n) = v else {
        return Err(TypeError::mismatch(
            v,
            go_type,
            smd_scalar("numeric (int or float)", v),
        ));
    };
    let fits = match n.as_i64() {
        Some(i) => !int32 || i32::try_from(i).is_ok(),
        None => false,
    };
    if fits {
        return Ok(());
    }
    Err(TypeError::new(Problem::Unmarshal {
        value: format!("number {n}"),
        go_type: go_type.to_owned(),
        smd: String::new(),
    }))
}

/// `IntOrString`: a string, else decoded as an int32 (`null` is a no-op).
fn int_or_string(v: &Value) -> Result<(), Box<TypeError>> {
    match v {
        Value::String(_) => Ok(()),
        _ => integer(v, "int32", true).map_err(|mut e| {
            if let Problem::Unmarshal { smd, .. } = &mut e.problem {
                smd.clear();
            }
            e
        }),
    }
}

/// `Quantity`: a string or a number, in upstream's quantity grammar.
fn quantity(v: &Value) -> Result<(), Box<TypeError>> {
    match v {
        Value::String(s) => {
            parse_quantity(s.trim()).map_err(|m| TypeError::new(Problem::Decoder(m.into())))
        }
        Value::Number(_) => Ok(()),
        _ => Err(TypeError::new(Problem::Decoder(QUANTITY_FORMAT.into()))),
    }
}

/// Upstream's `ErrFormatWrong`.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Upstream's `ParseQuantity` grammar: `[+-]?[0-9.]+` then a suffix (binary `Ki`…`Ei`,
/// decimal `n u m k M G T P E` or none, or a decimal exponent `e3`/`E-3`).
fn parse_quantity(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err(QUANTITY_FORMAT);
    }
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let num_start = i;
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    let numeric_ok = digits > 0 && i > num_start;
    let suffix_start = i;
    while i < b.len() && b"eEinumkKMGTP".contains(&b[i]) {
        i += 1;
    }
    if i < b.len() && matches!(b[i], b'+' | b'-') {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i < b.len() {
        return Err(QUANTITY_FORMAT);
    }
    let suffix = s.get(suffix_start..).unwrap_or("");
    let known = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    );
    // An exponent is read as Go's `ParseInt(…, 10, 64)` reads it: past int64 it fails.
    let exponent = suffix
        .strip_prefix(['e', 'E'])
        .and_then(crate::quantity::parse_i64)
        .is_some();
    if !(known || exponent) {
        return Err("unable to parse quantity's suffix");
    }
    // Upstream's fast path reads a number without digits (`.`, `+`, `Ki`) as zero; its
    // exact path (`.e-20`) cannot read it.
    if !numeric_ok && crate::quantity::canonical(s).is_none() {
        return Err("unable to parse numeric part of quantity");
    }
    Ok(())
}

/// `Time`/`MicroTime`: an RFC 3339 string.
fn time(v: &Value) -> Result<(), Box<TypeError>> {
    let Value::String(s) = v else {
        return Err(TypeError::mismatch(v, "string", smd_scalar("string", v)));
    };
    if rfc3339(s) {
        return Ok(());
    }
    Err(TypeError::new(Problem::Decoder(format!(
        "parsing time {:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse {:?} as RFC 3339",
        cut(s),
        cut(s),
    ))))
}

/// At most 64 bytes of `s` (on a character boundary), for messages.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` with fields in range, as Go's `time.Parse` with
/// `time.RFC3339` accepts.
fn rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let date = (|| {
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
            return None;
        }
        if !matches!(b[10], b'T' | b't') {
            return None;
        }
        let (_y, mo, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        let (h, mi, se) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 59 {
            return None;
        }
        let mut i = 19;
        if b.get(i) == Some(&b'.') || b.get(i) == Some(&b',') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return None;
            }
        }
        match b.get(i..) {
            Some(b"Z") | Some(b"z") => Some(()),
            Some(rest) if rest.len() == 6 && matches!(rest[0], b'+' | b'-') && rest[3] == b':' => {
                let (oh, om) = (digits(i + 1..i + 3)?, digits(i + 4..i + 6)?);
                (oh <= 23 && om <= 59).then_some(())
            }
            _ => None,
        }
    })();
    date.is_some()
}

/// `[]byte`: a standard base64 string (as Go's `base64.StdEncoding`, which skips `\r` and
/// `\n`), or a list of bytes.
fn bytes(v: &Value) -> Result<(), Box<TypeError>> {
    match v {
        Value::String(s) => base64_check(s.as_bytes()).map_err(|at| {
            TypeError::new(Problem::Decoder(format!(
                "illegal base64 data at input byte {at}"
            )))
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let ok = item.is_null() || item.as_u64().is_some_and(|n| n <= 255);
                if !ok {
                    let mut e = match item {
                        Value::Number(n) => TypeError::new(Problem::Unmarshal {
                            value: format!("number {n}"),
                            go_type: "uint8".into(),
                            smd: String::new(),
                        }),
                        _ => TypeError::mismatch(item, "uint8", String::new()),
                    };
                    e.path.push(Step::Index(i));
                    return Err(e);
                }
            }
            Ok(())
        }
        _ => Err(TypeError::mismatch(v, "[]uint8", smd_scalar("string", v))),
    }
}

fn b64_value(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'+' || c == b'/'
}

/// Go's `base64.StdEncoding.Decode` error position (`CorruptInputError`), `Ok` when it
/// decodes.
fn base64_check(src: &[u8]) -> Result<(), usize> {
    let mut si = 0;
    while si < src.len() {
        si = quantum(src, si)?;
    }
    Ok(())
}

/// Go's `decodeQuantum`: one group of four characters from `si`; the next position.
fn quantum(src: &[u8], mut si: usize) -> Result<usize, usize> {
    let skip_newlines = |mut si: usize| {
        while si < src.len() && matches!(src[si], b'\n' | b'\r') {
            si += 1;
        }
        si
    };
    let mut j = 0;
    while j < 4 {
        let Some(&c) = src.get(si) else {
            return match j {
                0 => Ok(si),
                _ => Err(si - j),
            };
        };
        si += 1;
        if b64_value(c) {
            j += 1;
            continue;
        }
        if c == b'\n' || c == b'\r' {
            continue;
        }
        if c != b'=' {
            return Err(si - 1);
        }
        match j {
            0 | 1 => return Err(si - 1),
            2 => {
                si = skip_newlines(si);
                if si == src.len() {
                    return Err(src.len());
                }
                if src[si] != b'=' {
                    return Err(si - 1);
                }
                si += 1;
            }
            _ => {}
        }
        si = skip_newlines(si);
        if si < src.len() {
            return Err(si);
        }
        return Ok(si);
    }
    Ok(si)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;
    use serde_json::json;

    fn check_kind(group: &str, kind: &str, v: Value) -> Result<(), Box<TypeError>> {
        let cat = Catalog::builtin();
        let version = "v1";
        let def = cat
            .definition_name(group, version, kind)
            .unwrap()
            .to_owned();
        cat.kind(group, version, kind)
            .unwrap()
            .check_types(&def, &v)
    }

    fn go(group: &str, kind: &str, v: Value) -> String {
        check_kind(group, kind, v).unwrap_err().go_message()
    }

    #[test]
    fn well_typed_bodies_pass() {
        check_kind(
            "",
            "Pod",
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": null,
                "managedFields": [{"fieldsV1": {"f:x": {}}, "time": "2024-01-01T00:00:00Z"}]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "500m", "memory": 1e9}},
                "livenessProbe": {"httpGet": {"port": "http"}}}],
                "terminationGracePeriodSeconds": 30, "hostNetwork": false}}),
        )
        .unwrap();
        check_kind(
            "",
            "Secret",
            json!({"data": {"a": "YWJj", "b": "YQ==", "c": "", "d": "YW\nJj"}}),
        )
        .unwrap();
        check_kind(
            "",
            "Event",
            json!({"count": 1, "eventTime": "2024-01-01T00:00:00.000001Z",
            "involvedObject": {"kind": "Pod"}, "firstTimestamp": "2024-01-01T00:00:00+01:00"}),
        )
        .unwrap();
    }

    #[test]
    fn mismatches_name_the_go_struct_field() {
        assert_eq!(
            go(
                "",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]}})
            ),
            "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
        );
        assert_eq!(
            go("", "Pod", json!({"metadata": {"labels": {"a": 1}}})),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
        );
        assert_eq!(
            go("", "Pod", json!({"spec": {"containers": {"name": "c"}}})),
            "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container"
        );
        assert_eq!(
            go("", "Pod", json!({"spec": "x"})),
            "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec"
        );
        assert_eq!(
            go("", "ConfigMap", json!({"data": {"k": 1}})),
            "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
        assert_eq!(
            go("", "Event", json!({"count": 1.5})),
            "json: cannot unmarshal number 1.5 into Go struct field Event.count of type int32"
        );
        assert_eq!(
            go(
                "",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 3_000_000_000_i64}]}]}})
            ),
            "json: cannot unmarshal number 3000000000 into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
        );
        assert_eq!(
            go(
                "",
                "Service",
                json!({"spec": {"ports": [{"port": 80, "targetPort": true}]}})
            ),
            "json: cannot unmarshal bool into Go struct field ServicePort.spec.ports.targetPort of type int32"
        );
        let e = check_kind("apps", "Deployment", json!({"spec": {"replicas": "3"}})).unwrap_err();
        assert_eq!(
            e.apply_message(),
            ".spec.replicas: expected numeric (int or float), got string"
        );
    }

    #[test]
    fn custom_decoders_answer_their_own_errors() {
        assert_eq!(
            go(
                "",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "lots"}}}]}})
            ),
            QUANTITY_FORMAT
        );
        assert_eq!(
            go(
                "",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1Zi"}}}]}})
            ),
            QUANTITY_FORMAT
        );
        assert_eq!(
            go(
                "",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1ii"}}}]}})
            ),
            "unable to parse quantity's suffix"
        );
        for ok in [
            "1",
            "+1.5",
            "-0.5Gi",
            "100m",
            "1e3",
            "1E-3",
            ".5",
            "5.",
            "2k",
            "1e+3",
            "1e9223372036854775807",
            "1e-9223372036854775808",
        ] {
            assert_eq!(parse_quantity(ok), Ok(()), "{ok}");
        }
        // Past int64, upstream's `ParseInt` of the exponent fails.
        for bad in ["1e9223372036854775808", "1e-9223372036854775809"] {
            assert_eq!(
                parse_quantity(bad),
                Err("unable to parse quantity's suffix"),
                "{bad}"
            );
        }
        assert_eq!(
            go("", "Secret", json!({"data": {"a": "not base64!"}})),
            "illegal base64 data at input byte 3"
        );
        assert_eq!(
            go("", "Secret", json!({"data": {"a": "YQ"}})),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            go("", "Secret", json!({"data": {"a": "YQ="}})),
            "illegal base64 data at input byte 3"
        );
        assert_eq!(
            go("", "Secret", json!({"data": {"a": "YQ==YQ=="}})),
            "illegal base64 data at input byte 4"
        );
        assert_eq!(
            go("", "Secret", json!({"data": {"a": 5}})),
            "json: cannot unmarshal number into Go struct field Secret.data of type []uint8"
        );
        assert!(
            go("", "Event", json!({"lastTimestamp": "yesterday"}))
                .starts_with("parsing time \"yesterday\"")
        );
        assert_eq!(
            go("", "Event", json!({"lastTimestamp": 5})),
            "json: cannot unmarshal number into Go struct field Event.lastTimestamp of type string"
        );
    }
}
