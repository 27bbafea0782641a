//! Server-side printing: `meta.k8s.io/v1` Tables for lists, gets and watch events.
//!
//! A kind whose strategy prints itself (pods, deployments: `listwatch_kinds::builtin`) gets
//! its strategy's columns and cells; every other resource prints NAME, its printer columns,
//! AGE. Invariant: every row has exactly one cell per column definition, in order.

use bytes::Bytes;
use listwatch_api::Object;
use listwatch_api::watch::EventType;
use serde_json::{Map, Value, json};

use crate::clock;
use crate::query::IncludeObject;
use crate::resource::{KindSpec, Printer, PrinterColumn};

/// Builds the column definitions of a resource.
pub fn column_definitions(info: &KindSpec) -> Vec<Value> {
    let def = |name: &str, type_: &str, format: &str, desc: &str, priority: i32| json!({"name": name, "type": type_, "format": format, "description": desc, "priority": priority});
    if let Some(own) = info.strategy.table_columns() {
        return own
            .iter()
            .map(|c| def(&c.name, &c.type_, &c.format, &c.description, c.priority))
            .collect();
    }
    let mut cols = vec![def(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Cannot be updated.",
        0,
    )];
    match &info.printer {
        Printer::Columns(extra) => {
            for c in extra {
                cols.push(def(
                    &c.name,
                    &c.type_,
                    &c.format,
                    &c.description,
                    c.priority,
                ));
            }
        }
        Printer::Default => {}
    }
    cols.push(def(
        "Age",
        "date",
        "",
        "CreationTimestamp is the time this object was created.",
        0,
    ));
    cols
}

/// The cells of one object.
pub fn cells(info: &KindSpec, obj: &Value, now: i64) -> Vec<Value> {
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("").to_owned();
    let age = clock::age(meta["creationTimestamp"].as_str(), now);
    if let Some(own) = info
        .strategy
        .table_cells_at(obj, &name, &age, &ServerTimes(now))
    {
        return own;
    }
    match &info.printer {
        Printer::Columns(extra) => {
            let mut out = vec![Value::String(name)];
            for c in extra {
                out.push(column_cell(c, obj, now));
            }
            out.push(Value::String(age));
            out
        }
        Printer::Default => vec![Value::String(name), Value::String(age)],
    }
}

/// The server's clock as the kinds' printers read it.
struct ServerTimes(i64);

impl listwatch_kinds::Times for ServerTimes {
    fn since(&self, timestamp: &str) -> String {
        clock::age(Some(timestamp), self.0)
    }

    fn between(&self, from: &str, to: &str) -> Option<String> {
        let (from, to) = (clock::parse_rfc3339(from)?, clock::parse_rfc3339(to)?);
        let secs = u64::try_from(to.saturating_sub(from)).unwrap_or(0);
        Some(clock::human_duration(std::time::Duration::from_secs(secs)))
    }

    fn human(&self, seconds: u64) -> String {
        clock::human_duration(std::time::Duration::from_secs(seconds))
    }
}

/// One cell as upstream's CRD table convertor makes it: a missing or null value is `null`;
/// a `string` column prints whatever it finds (numbers and booleans as text, objects and
/// arrays as JSON); the other types take only a value of their type, else `null`: an
/// `integer` column truncates a fractional number, a `date` column prints the age of an
/// RFC 3339 time, `<unknown>` for `""` and `<invalid>` for any other text.
fn column_cell(c: &PrinterColumn, obj: &Value, now: i64) -> Value {
    let Some(v) = json_path(obj, &c.json_path) else {
        return Value::Null;
    };
    match (c.type_.as_str(), v) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(s)) => Value::String(s.clone()),
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            // Go's int64(float64): towards zero (saturating here, where Go's is undefined).
            (None, None, Some(f)) if f.is_finite() => Value::from(f.trunc() as i64),
            _ => Value::Null,
        },
        ("number", n @ Value::Number(_)) | ("boolean", n @ Value::Bool(_)) => n.clone(),
        ("date", Value::String(s)) if s.is_empty() => Value::String("<unknown>".into()),
        ("date", Value::String(s)) => match clock::parse_rfc3339(s) {
            Some(_) => Value::String(clock::age(Some(s), now)),
            None => Value::String("<invalid>".into()),
        },
        _ => Value::Null,
    }
}

/// Reads a simple JSONPath: `.a.b`, `{.a.b}`, `.a[0].b`, `.a[-1]`, `.a[*].b` (the first),
/// `.a[?(@.type=="Ready")].status`.
pub fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p);
    let mut cur = v;
    let mut rest = p.strip_prefix('$').unwrap_or(p);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let (seg, after) = r.split_at(end);
            if !seg.is_empty() {
                cur = cur.get(seg)?;
            }
            rest = after;
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let (inner, after) = (&r[..end], &r[end + 1..]);
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (key, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|e| e.get(key.trim()).and_then(Value::as_str) == Some(want))?;
            } else if inner.trim() == "*" {
                // Upstream's convertor prints the first of the results.
                cur = cur.as_array()?.first()?;
            } else {
                let items = cur.as_array()?;
                let i = inner.trim().parse::<i64>().ok()?;
                let i = if i < 0 {
                    items
                        .len()
                        .checked_sub(usize::try_from(i.unsigned_abs()).ok()?)?
                } else {
                    usize::try_from(i).ok()?
                };
                cur = items.get(i)?;
            }
            rest = after;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// An object's `meta.k8s.io/v1` `PartialObjectMetadata` (Table rows' default object, and
/// the answer to metadata-only requests).
pub fn partial_metadata(value: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": value.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// `PartialObjectMetadata` of a decoded object as JSON bytes, members in upstream's struct
/// order (`kind`, `apiVersion`, `metadata`: k8s.io/apimachinery `pkg/apis/meta/v1/types.go`),
/// at `meta.k8s.io/v1` or, when `beta`, `v1beta1` (as upstream's `asPartialObjectMetadata`
/// sets the version asked for).
pub fn partial_metadata_json(value: &Value, beta: bool) -> Vec<u8> {
    let empty = Value::Object(Map::new());
    typed(
        "PartialObjectMetadata",
        meta_version(beta),
        &[("metadata", value.get("metadata").unwrap_or(&empty))],
    )
}

fn meta_version(beta: bool) -> &'static str {
    if beta {
        "meta.k8s.io/v1beta1"
    } else {
        "meta.k8s.io/v1"
    }
}

/// `{"kind":…,"apiVersion":…,<members in the given order>}`: a typed object's member order,
/// which a `serde_json::Value` (whose maps are sorted) cannot keep.
fn typed(kind: &str, api_version: &str, members: &[(&str, &Value)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"kind\":");
    // Writing strings and values into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, kind);
    out.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut out, api_version);
    for (k, v) in members {
        out.push(b',');
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, v);
    }
    out.push(b'}');
    out
}

/// One row: cells and the object (per `includeObject`).
pub fn row(
    info: &KindSpec,
    obj: &Object,
    include: IncludeObject,
    now: i64,
) -> Result<Value, serde_json::Error> {
    let value = obj.to_value()?;
    let cells = cells(info, &value, now);
    let object = match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => Some(partial_metadata(&value)),
        IncludeObject::Object => Some(value),
    };
    let mut r = Map::new();
    r.insert("cells".into(), Value::Array(cells));
    if let Some(o) = object {
        r.insert("object".into(), o);
    }
    Ok(Value::Object(r))
}

/// A whole Table document.
pub fn table(
    info: &KindSpec,
    objects: &[Object],
    resource_version: Option<u64>,
    continue_token: Option<&str>,
    include: IncludeObject,
    beta: bool,
) -> Result<Vec<u8>, serde_json::Error> {
    let now = clock::now_unix();
    let rows = objects
        .iter()
        .map(|o| row(info, o, include, now))
        .collect::<Result<Vec<_>, _>>()?;
    let mut meta = Map::new();
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    if let Some(c) = continue_token {
        meta.insert("continue".into(), Value::String(c.into()));
    }
    Ok(typed(
        "Table",
        meta_version(beta),
        &[
            ("metadata", &Value::Object(meta)),
            ("columnDefinitions", &Value::Array(column_definitions(info))),
            ("rows", &Value::Array(rows)),
        ],
    ))
}

/// A watch frame whose object is a one-row Table (a row-less one for bookmarks).
pub fn watch_frame(
    info: &KindSpec,
    event_type: EventType,
    obj: Option<&Object>,
    rv: u64,
    include: IncludeObject,
    beta: bool,
) -> Result<Bytes, serde_json::Error> {
    let t = watch_object(info, obj, rv, include, beta)?;
    let mut out = Vec::with_capacity(t.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_str().as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(&t);
    out.extend_from_slice(b"}\n");
    Ok(Bytes::from(out))
}

/// The object of a Table watch frame: a one-row Table at `rv` (a row-less one for bookmarks).
pub fn watch_object(
    info: &KindSpec,
    obj: Option<&Object>,
    rv: u64,
    include: IncludeObject,
    beta: bool,
) -> Result<Vec<u8>, serde_json::Error> {
    let objects: Vec<Object> = obj.into_iter().cloned().collect();
    table(info, &objects, Some(rv), None, include, beta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    fn pods() -> KindSpec {
        listwatch_kinds::builtin::core::pod::spec()
    }

    #[test]
    fn pods_print_ready_status_and_restarts_like_kubectl() {
        let pod = json!({"metadata":{"name":"web","creationTimestamp":"2026-01-01T00:00:00Z"},
            "spec":{"containers":[{"name":"a"},{"name":"b"}],"nodeName":"n1"},
            "status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[
                {"name":"a","ready":true,"restartCount":2,"state":{"running":{}}},
                {"name":"b","ready":false,"restartCount":1,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}});
        let now = clock::parse_rfc3339("2026-01-01T00:05:00Z").unwrap();
        let c = cells(&pods(), &pod, now);
        assert_eq!(c.len(), column_definitions(&pods()).len());
        assert_eq!(
            c[..5],
            [
                json!("web"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!(3),
                json!("5m")
            ]
        );
        assert_eq!(c[5..7], [json!("10.0.0.1"), json!("n1")]);
    }

    #[test]
    fn deployments_print_ready_over_desired() {
        let info = listwatch_kinds::builtin::apps::deployment::spec();
        let d = json!({"metadata":{"name":"web"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},
            "template":{"spec":{"containers":[{"name":"a","image":"nginx"},{"name":"b","image":"busybox"}]}}},
            "status":{"readyReplicas":2,"updatedReplicas":3,"availableReplicas":2}});
        let c = cells(&info, &d, 0);
        assert_eq!(c.len(), column_definitions(&info).len());
        assert_eq!(c[..4], [json!("web"), json!("2/3"), json!(3), json!(2)]);
        assert_eq!(
            c[5..],
            [json!("a,b"), json!("nginx,busybox"), json!("app=web")]
        );
    }

    #[test]
    fn printer_columns_read_json_paths() {
        let info = KindSpec::new("apps", "v1", "deployments", "Deployment").printer(
            Printer::Columns(vec![
                PrinterColumn::new("Ready", "string", ".status.readyReplicas"),
                PrinterColumn::new(
                    "Cond",
                    "string",
                    ".status.conditions[?(@.type==\"Available\")].status",
                ),
                PrinterColumn::new("First", "integer", "{.spec.ports[0].port}"),
            ]),
        );
        let d = json!({"metadata":{"name":"d"},"status":{"readyReplicas":"2/2","conditions":[
            {"type":"Progressing","status":"False"},{"type":"Available","status":"True"}]},
            "spec":{"ports":[{"port":80}]}});
        let c = cells(&info, &d, 0);
        assert_eq!(
            c,
            vec![
                json!("d"),
                json!("2/2"),
                json!("True"),
                json!(80),
                json!("<unknown>")
            ]
        );
        assert_eq!(column_definitions(&info).len(), c.len());
    }

    /// Upstream's CRD table convertor (`cellForJSONValue`): each type takes only its values.
    #[test]
    fn printer_columns_keep_only_values_of_their_type() {
        let col = |t: &str, p: &str| PrinterColumn::new("C", t, p);
        let obj = json!({"metadata":{"name":"o"},"spec":{
            "s":"text","i":7,"f":2.75,"neg":-2.5,"b":true,"o":{"k":[1,"x"]},"n":null,
            "when":"2026-01-01T00:00:00Z","bad":"yesterday","empty":"",
            "list":[{"name":"first"},{"name":"second"}]}});
        let now = 1_767_225_600 + 3 * 86_400; // three days after `when`
        let cell = |t: &str, p: &str| column_cell(&col(t, p), &obj, now);
        assert_eq!(cell("string", ".spec.s"), json!("text"));
        assert_eq!(cell("string", ".spec.i"), json!("7"));
        assert_eq!(cell("string", ".spec.b"), json!("true"));
        assert_eq!(cell("string", ".spec.o"), json!(r#"{"k":[1,"x"]}"#));
        assert_eq!(cell("string", ".spec.n"), Value::Null);
        assert_eq!(cell("string", ".spec.missing"), Value::Null);
        assert_eq!(cell("integer", ".spec.i"), json!(7));
        assert_eq!(cell("integer", ".spec.f"), json!(2));
        assert_eq!(cell("integer", ".spec.neg"), json!(-2));
        assert_eq!(cell("integer", ".spec.s"), Value::Null);
        assert_eq!(cell("number", ".spec.f"), json!(2.75));
        assert_eq!(cell("number", ".spec.b"), Value::Null);
        assert_eq!(cell("boolean", ".spec.b"), json!(true));
        assert_eq!(cell("boolean", ".spec.s"), Value::Null);
        assert_eq!(cell("date", ".spec.when"), json!("3d"));
        assert_eq!(cell("date", ".spec.bad"), json!("<invalid>"));
        assert_eq!(cell("date", ".spec.empty"), json!("<unknown>"));
        assert_eq!(cell("date", ".spec.i"), Value::Null);
        assert_eq!(cell("string", ".spec.list[*].name"), json!("first"));
        assert_eq!(cell("string", ".spec.list[-1].name"), json!("second"));
        assert_eq!(cell("string", ".spec.list[-3].name"), Value::Null);
        let info = KindSpec::new("x.io", "v1", "things", "Thing").printer(Printer::Columns(vec![
            PrinterColumn {
                format: "int32".into(),
                ..col("integer", ".spec.i")
            },
            col("date", ".spec.when"),
        ]));
        let defs = column_definitions(&info);
        assert_eq!(defs[1]["type"], "integer");
        assert_eq!(defs[1]["format"], "int32");
        assert_eq!(defs[2]["type"], "date");
    }

    #[test]
    fn watch_frames_wrap_a_one_row_table() {
        let o = Object::from_json(
            br#"{"metadata":{"name":"a","namespace":"ns"}}"#,
            &SelectableFields::none(),
        )
        .unwrap()
        .with_resource_version(4);
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        let f = watch_frame(
            &info,
            EventType::Added,
            Some(&o),
            4,
            IncludeObject::Metadata,
            false,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&f).unwrap();
        assert_eq!(v["type"], "ADDED");
        assert_eq!(v["object"]["kind"], "Table");
        assert_eq!(v["object"]["rows"][0]["cells"][0], "a");
        assert_eq!(
            v["object"]["rows"][0]["object"]["metadata"]["namespace"],
            "ns"
        );
        assert!(f.ends_with(b"\n"));
    }
}
