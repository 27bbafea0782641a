//! FieldsV1 documents (`metadata.managedFields[*].fieldsV1`) written in the order upstream's
//! `fieldpath.Set` writes them (structured-merge-diff's `serialize.go`): `"."` first, then
//! the keys by `PathElement.Compare` — field names (`f:`) before list keys (`k:`) before
//! set values (`v:`) before indices (`i:`), names by their bytes, keys by their fields
//! (sorted by name) compared name then value, values by `value.Compare` (numbers
//! numerically, then strings, booleans, lists, maps, null), indices numerically.
//!
//! A JSON map here is sorted by its keys' text (serde_json without `preserve_order`), which
//! orders `k:{"port":8080}` before `k:{"port":80}` and `i:10` before `i:2`; the object
//! encoder writes managedFields through [`write_managed_fields`] instead.
//!
//! Invariants: the order is total and agrees with key equality (keys upstream compares
//! equal, such as `1` and `1.0`, fall back to their text); what is not a FieldsV1 key
//! (a malformed one, which the server never writes) sorts after every valid key, by text;
//! only the order of members changes, never the document. Cost: each map's keys are parsed
//! once and sorted (`n log n` comparisons of parsed keys); recursion follows the nesting of
//! the document, which the decode depth limit bounds.

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// One FieldsV1 key, parsed for comparison.
#[derive(Debug)]
enum Step<'a> {
    /// `.` (the parent itself): first.
    Dot,
    /// `f:name`.
    Field(&'a str),
    /// `k:{...}`: the key's fields, sorted by name.
    Key(Vec<(String, Value)>),
    /// `v:...`.
    Value(Value),
    /// `i:N`.
    Index(u64),
    /// Anything else: last.
    Other,
}

impl<'a> Step<'a> {
    fn parse(s: &'a str) -> Self {
        if s == "." {
            return Step::Dot;
        }
        let Some((kind, rest)) = s.split_at_checked(2) else {
            return Step::Other;
        };
        match kind {
            "f:" => Step::Field(rest),
            "k:" => match serde_json::from_str::<Value>(rest) {
                // A `Map` is sorted by name: the fields come out in upstream's order.
                Ok(Value::Object(m)) => Step::Key(m.into_iter().collect()),
                _ => Step::Other,
            },
            "v:" => serde_json::from_str(rest).map_or(Step::Other, Step::Value),
            "i:" => rest.parse().map_or(Step::Other, Step::Index),
            _ => Step::Other,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Step::Dot => 0,
            Step::Field(_) => 1,
            Step::Key(_) => 2,
            Step::Value(_) => 3,
            Step::Index(_) => 4,
            Step::Other => 5,
        }
    }

    fn cmp(&self, other: &Step<'_>) -> Ordering {
        match (self, other) {
            (Step::Field(a), Step::Field(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Step::Key(a), Step::Key(b)) => compare_fields(a, b),
            (Step::Value(a), Step::Value(b)) => compare_values(a, b),
            (Step::Index(a), Step::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// Upstream's `FieldList.Compare`: lexically, by name then value, shorter first.
fn compare_fields(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c =
            x.0.as_bytes()
                .cmp(y.0.as_bytes())
                .then_with(|| compare_values(&x.1, &y.1));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// Upstream's `value.Compare` order between kinds: numbers, strings, booleans, lists,
/// maps, null.
fn value_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// Upstream's `value.Compare`: numbers numerically (integers exactly, a float against an
/// integer as floats), strings by bytes, `false` before `true`, lists lexically, maps by
/// their keys in order (a key only one side has makes that side the smaller).
fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => {
                let (f, g) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                f.partial_cmp(&g).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = compare_values(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => compare_maps(x, y),
        _ => value_rank(a).cmp(&value_rank(b)),
    }
}

/// Upstream's `MapCompare`: the keys of both in lexical order; at the first key only one
/// side has, that side is the smaller; else the first values that differ decide.
fn compare_maps(x: &Map<String, Value>, y: &Map<String, Value>) -> Ordering {
    let (mut i, mut j) = (x.iter().peekable(), y.iter().peekable());
    loop {
        match (i.peek(), j.peek()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => match ka.as_bytes().cmp(kb.as_bytes()) {
                Ordering::Less => return Ordering::Less,
                Ordering::Greater => return Ordering::Greater,
                Ordering::Equal => {
                    let c = compare_values(va, vb);
                    if c != Ordering::Equal {
                        return c;
                    }
                    i.next();
                    j.next();
                }
            },
        }
    }
}

/// Compares two FieldsV1 keys in upstream's order (ties broken by text, so the order is
/// total).
pub fn compare_keys(a: &str, b: &str) -> Ordering {
    Step::parse(a).cmp(&Step::parse(b)).then_with(|| a.cmp(b))
}

/// Writes a FieldsV1 document with every map's keys in upstream's order.
pub fn write_fields_v1(out: &mut Vec<u8>, v: &Value) -> serde_json::Result<()> {
    let Value::Object(m) = v else {
        return serde_json::to_writer(out, v);
    };
    // `.` and `f:` keys only (most maps): their text order is upstream's already.
    if !m
        .keys()
        .any(|k| matches!(k.get(..2), Some("k:" | "v:" | "i:")))
    {
        out.push(b'{');
        for (n, (k, v)) in m.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k)?;
            out.push(b':');
            write_fields_v1(out, v)?;
        }
        out.push(b'}');
        return Ok(());
    }
    let mut keys: Vec<(Step<'_>, &String, &Value)> =
        m.iter().map(|(k, v)| (Step::parse(k), k, v)).collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    out.push(b'{');
    for (n, (_, k, v)) in keys.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, k)?;
        out.push(b':');
        write_fields_v1(out, v)?;
    }
    out.push(b'}');
    Ok(())
}

/// Writes `metadata.managedFields` with each entry's `fieldsV1` in upstream's order (any
/// other shape as it is).
pub fn write_managed_fields(out: &mut Vec<u8>, v: &Value) -> serde_json::Result<()> {
    let Value::Array(entries) = v else {
        return serde_json::to_writer(out, v);
    };
    out.push(b'[');
    for (n, e) in entries.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let Value::Object(e) = e else {
            serde_json::to_writer(&mut *out, e)?;
            continue;
        };
        out.push(b'{');
        for (i, (k, v)) in e.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k)?;
            out.push(b':');
            if k == "fieldsV1" {
                write_fields_v1(out, v)?;
            } else {
                serde_json::to_writer(&mut *out, v)?;
            }
        }
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(v: &Value) -> String {
        let mut out = Vec::new();
        write_fields_v1(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn keys_are_written_in_upstreams_order_not_as_text() {
        let doc = json!({
            "i:10": {}, "i:2": {},
            r#"k:{"containerPort":8080,"protocol":"TCP"}"#: {},
            r#"k:{"containerPort":80,"protocol":"UDP"}"#: {},
            r#"k:{"containerPort":80,"protocol":"TCP"}"#: {},
            "v:true": {}, "v:\"b\"": {}, "v:10": {}, "v:9": {}, "v:null": {},
            "f:b": {".": {}, "f:z": {}, "f:a": {}},
            "f:B": {},
        });
        assert_eq!(
            written(&doc),
            concat!(
                r#"{"f:B":{},"f:b":{".":{},"f:a":{},"f:z":{}},"#,
                r#""k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{},"#,
                r#""k:{\"containerPort\":80,\"protocol\":\"UDP\"}":{},"#,
                r#""k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{},"#,
                r#""v:9":{},"v:10":{},"v:\"b\"":{},"v:true":{},"v:null":{},"#,
                r#""i:2":{},"i:10":{}}"#
            )
        );
    }

    #[test]
    fn keys_compare_by_fields_then_values_as_upstream() {
        use Ordering::*;
        for (a, b, want) in [
            // Fewer fields first when the shared ones are equal.
            (r#"k:{"a":1}"#, r#"k:{"a":1,"b":1}"#, Less),
            // Field names before values.
            (r#"k:{"a":9}"#, r#"k:{"b":1}"#, Less),
            (r#"k:{"name":"b"}"#, r#"k:{"name":"a"}"#, Greater),
            // Floats against integers numerically; equal ones by text.
            (r#"v:1.5"#, r#"v:2"#, Less),
            (r#"v:1.0"#, r#"v:1"#, Greater),
            (r#"v:[1,2]"#, r#"v:[1]"#, Greater),
            (r#"v:{"a":1}"#, r#"v:{"b":1}"#, Less),
            ("f:z", "k:{}", Less),
            ("i:0", "bogus", Less),
            (".", "f:a", Less),
        ] {
            assert_eq!(compare_keys(a, b), want, "{a} vs {b}");
            assert_eq!(compare_keys(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn managed_fields_keep_their_entries_and_order_only_fields_v1() {
        let mf = json!([{"manager":"m","operation":"Apply","fieldsV1":{"i:10":{},"i:9":{}}}, 3]);
        let mut out = Vec::new();
        write_managed_fields(&mut out, &mf).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            r#"[{"fieldsV1":{"i:9":{},"i:10":{}},"manager":"m","operation":"Apply"},3]"#
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), mf);
    }
}
