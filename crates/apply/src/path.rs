//! Field paths: the steps from an object's root to one of its fields, list items or set
//! values, in structured-merge-diff's four kinds, with both of upstream's spellings (the
//! `f:`/`k:`/`v:`/`i:` keys of FieldsV1 and the `.a[k="v"].b` form of conflict messages).

use std::fmt;

use serde_json::{Map, Value};

/// One step of a path.
///
/// The derived order (field names, then keys, then values, then indices) is upstream's
/// `PathElement.Compare` order between kinds; within a kind, keys and values compare by
/// their canonical JSON text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:name`, `.name`).
    Field(String),
    /// An item of a list of type `map`, by its key fields: the canonical JSON of an object
    /// holding just those fields, names sorted (`k:{"name":"a"}`, `[name="a"]`).
    Key(String),
    /// An item of a list of type `set`, by its value: canonical JSON (`v:"a"`, `[="a"]`).
    Value(String),
    /// An item of a list by position (`i:3`, `[3]`); only read from managedFields.
    Index(usize),
}

impl PathElement {
    /// The key of a map-list item: its key fields, sorted by name (a `Map` is sorted).
    pub fn key(fields: Map<String, Value>) -> Self {
        PathElement::Key(Value::Object(fields).to_string())
    }

    /// The element of a set-list value.
    pub fn value(v: &Value) -> Self {
        PathElement::Value(canonical(v))
    }

    /// Whether this step leads into a list item rather than a field.
    pub fn is_item(&self) -> bool {
        !matches!(self, PathElement::Field(_))
    }

    /// The FieldsV1 key of this step (`f:name`, `k:{...}`, `v:...`, `i:N`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(n) => format!("f:{n}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a FieldsV1 key; `None` for anything upstream would refuse.
    pub fn from_fields_v1_key(s: &str) -> Option<Self> {
        let (kind, rest) = s.split_at_checked(2)?;
        match kind {
            "f:" => Some(PathElement::Field(rest.to_owned())),
            "k:" => match serde_json::from_str::<Value>(rest).ok()? {
                Value::Object(m) => Some(PathElement::key(m)),
                _ => None,
            },
            "v:" => serde_json::from_str::<Value>(rest)
                .ok()
                .map(|v| PathElement::value(&v)),
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

/// The canonical JSON text of a value (object members sorted: serde_json's `Map` is a
/// sorted map in this workspace).
fn canonical(v: &Value) -> String {
    v.to_string()
}

impl fmt::Display for PathElement {
    /// Upstream's `PathElement.String`: `.name`, `[k1="v",k2=2]`, `[="v"]`, `[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(n) => write!(f, ".{n}"),
            PathElement::Key(k) => {
                let fields = match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(m)) => m,
                    _ => return write!(f, "[{k}]"),
                };
                let parts: Vec<String> = fields.iter().map(|(n, v)| format!("{n}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of field names.
    pub fn fields(names: &[&str]) -> Self {
        Path(
            names
                .iter()
                .map(|n| PathElement::Field((*n).to_owned()))
                .collect(),
        )
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_spellings_follow_upstream() {
        let Value::Object(key) = json!({"protocol": "TCP", "containerPort": 80}) else {
            unreachable!()
        };
        let p = Path(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("ports".into()),
            PathElement::key(key),
            PathElement::Field("name".into()),
        ]);
        assert_eq!(
            p.to_string(),
            r#".spec.ports[containerPort=80,protocol="TCP"].name"#
        );
        assert_eq!(
            p.0[2].to_fields_v1_key(),
            r#"k:{"containerPort":80,"protocol":"TCP"}"#
        );
        for s in [
            r#"k:{"protocol":"TCP","containerPort":80}"#,
            r#"v:"x""#,
            "i:3",
            "f:a:b",
        ] {
            let pe = PathElement::from_fields_v1_key(s).unwrap();
            assert_eq!(
                PathElement::from_fields_v1_key(&pe.to_fields_v1_key()),
                Some(pe)
            );
        }
        assert_eq!(PathElement::value(&json!("x")).to_string(), r#"[="x"]"#);
        for bad in ["", "f", "x:a", "k:[1]", "k:{", "i:-1", "v:", "é"] {
            assert_eq!(PathElement::from_fields_v1_key(bad), None, "{bad}");
        }
    }
}
