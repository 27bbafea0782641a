//! Pieces shared by the built-in kinds' Table printers (upstream's
//! pkg/printers/internalversion/printers.go helpers): the NAME and AGE columns, the NAME and
//! CREATED AT of upstream's default table convertor, `<none>` for empty values, a pod
//! template's containers and images, label selectors as `metav1.FormatLabelSelector` writes
//! them, lists cut after a few entries (`a,b,c + 2 more...`), and [`Printed`], the strategy of
//! a kind whose only code is its printer (its columns and cells stay in the kind's own file).
//!
//! Invariant: every helper reads only the value it is given, in one pass, and never panics
//! on a value of the wrong JSON type (it prints as absent).

use serde_json::{Map, Value};

use crate::strategy::{KindStrategy, TableColumn};

/// The strategy of a kind whose code is its Table printer (and, for a kind with `/status`,
/// the status reset on create): `columns` and `cells` are the functions of the kind's own
/// file, so every printer stays beside its kind.
///
/// Invariant (the kind file's): `cells` returns one value per column of `columns`.
#[derive(Debug, Clone, Copy)]
pub struct Printed {
    /// The column definitions, NAME first.
    pub columns: fn() -> Vec<TableColumn>,
    /// The cells of one object, given its name and printed age.
    pub cells: fn(&Value, &str, &str) -> Vec<Value>,
    /// The status a create resets to (upstream's `PrepareForCreate` of a kind with
    /// `/status`), or `None` for a kind whose create keeps what it is given.
    pub reset_status: Option<fn() -> Value>,
    /// Upstream's v1 defaulting of the kind ([`crate::builtin::defaults`]), applied on
    /// create and on update (Go defaults every decoded body), or `None`.
    pub defaults: Option<fn(&mut Value)>,
}

impl Printed {
    /// A printer for a kind without a status to reset.
    pub const fn new(
        columns: fn() -> Vec<TableColumn>,
        cells: fn(&Value, &str, &str) -> Vec<Value>,
    ) -> Self {
        Self {
            columns,
            cells,
            reset_status: None,
            defaults: None,
        }
    }

    /// The same printer for a kind whose create resets its status to `status()`.
    #[must_use]
    pub const fn resetting_status(mut self, status: fn() -> Value) -> Self {
        self.reset_status = Some(status);
        self
    }

    /// The same printer for a kind whose bodies upstream defaults with `defaults`.
    #[must_use]
    pub const fn defaulting(mut self, defaults: fn(&mut Value)) -> Self {
        self.defaults = Some(defaults);
        self
    }
}

impl KindStrategy for Printed {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let (Some(status), Some(m)) = (self.reset_status, obj.as_object_mut()) {
            m.insert("status".into(), status());
        }
        if let Some(defaults) = self.defaults {
            defaults(obj);
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        if let Some(defaults) = self.defaults {
            defaults(new);
        }
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some((self.columns)())
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some((self.cells)(obj, name, age))
    }
}

/// NAME and CREATED AT, upstream's default table convertor
/// (`rest.NewDefaultTableConvertor`, used by the kinds printers.go has no handler for:
/// roles, cluster roles, limit ranges).
pub fn created_at_columns() -> Vec<TableColumn> {
    vec![
        name_column(),
        TableColumn::new(
            "Created At",
            "date",
            "CreationTimestamp is the time this object was created.",
            0,
        ),
    ]
}

/// The cells of [`created_at_columns`]: the name and the creation timestamp as RFC 3339 in
/// UTC (as stored: the server writes creation timestamps in UTC with second precision).
pub fn created_at_cells(obj: &Value, name: &str, _age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        Value::String(
            obj["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        ),
    ]
}

/// A string field, or `default` when absent or not a string.
pub fn str_or(v: &Value, default: &str) -> Value {
    Value::String(v.as_str().unwrap_or(default).to_owned())
}

/// The number of entries of an array or object (0 when absent or of another type), as
/// upstream's `int64(len(x))`.
pub fn len_of(v: &Value) -> Value {
    let n = match v {
        Value::Array(a) => a.len(),
        Value::Object(m) => m.len(),
        _ => 0,
    };
    Value::from(n as u64)
}

/// Upstream's "three then `+ N more...`" lists (`formatEndpoints`, `listWithMoreString`):
/// the first `max` of `items` joined by `,`, then ` + N more...` for the `count - max` not
/// shown, where `count` is the number of items in all; `empty` when there are none.
pub fn list_with_more(shown: &[String], count: usize, max: usize, empty: &str) -> String {
    let joined = shown.join(",");
    if count > max {
        return format!("{joined} + {} more...", count - max);
    }
    if joined.is_empty() {
        return empty.to_owned();
    }
    joined
}

/// The NAME column (format `name`).
pub fn name_column() -> TableColumn {
    let mut name = TableColumn::new(
        "Name",
        "string",
        "Name must be unique within a namespace. Cannot be updated.",
        0,
    );
    name.format = "name".into();
    name
}

/// The AGE column.
pub fn age_column() -> TableColumn {
    TableColumn::new(
        "Age",
        "string",
        "CreationTimestamp is the time this object was created.",
        0,
    )
}

/// A priority-0 column.
pub fn col(name: &str, type_: &str, description: &str) -> TableColumn {
    TableColumn::new(name, type_, description, 0)
}

/// A column shown with `-o wide` only.
pub fn wide(name: &str, type_: &str, description: &str) -> TableColumn {
    TableColumn::new(name, type_, description, 1)
}

/// The CONTAINERS, IMAGES (and SELECTOR) wide columns of the workload printers.
pub fn containers_images_selector(selector: bool) -> Vec<TableColumn> {
    let mut v = vec![
        wide(
            "Containers",
            "string",
            "Names of each container in the template.",
        ),
        wide(
            "Images",
            "string",
            "Images referenced by each container in the template.",
        ),
    ];
    if selector {
        v.push(wide(
            "Selector",
            "string",
            "Label selector of the pods this object manages.",
        ));
    }
    v
}

/// A string, or `<none>` when absent or empty.
pub fn or_none(v: &Value) -> Value {
    Value::String(
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("<none>")
            .to_owned(),
    )
}

/// An integer count (0 when absent).
pub fn count(v: &Value) -> Value {
    Value::from(v.as_i64().unwrap_or(0))
}

/// A pod template's container names and images, comma-separated.
pub fn containers_and_images(template: &Value) -> [Value; 2] {
    let containers = template["spec"]["containers"].as_array();
    let join = |field: &str| {
        Value::String(
            containers
                .into_iter()
                .flatten()
                .map(|c| c[field].as_str().unwrap_or(""))
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    [join("name"), join("image")]
}

/// Labels as `k=v,k2=v2` (sorted by key, as Go's `labels.Set.String`), `<none>` when empty.
pub fn format_labels(m: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = m
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs.sort();
    pairs.join(",")
}

/// A `LabelSelector` as `metav1.FormatLabelSelector` prints it: `matchLabels` as `k=v`,
/// `matchExpressions` as `k in (a,b)`, `k notin (a)`, `k`, `!k`; `<none>` for an empty or
/// absent selector.
pub fn format_label_selector(sel: &Value) -> String {
    // (key, requirement) pairs, sorted by key as `labels.Selector.String` sorts them.
    let mut parts: Vec<(String, String)> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values = || {
            let mut v: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            v.sort_unstable();
            v.join(",")
        };
        let text = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values()),
            "NotIn" => format!("{key} notin ({})", values()),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        };
        parts.push((key.to_owned(), text));
    }
    if parts.is_empty() {
        return "<none>".into();
    }
    parts.sort();
    parts
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

/// `True`/`False` as upstream's `printBoolPtr` (absent: `False`).
pub fn bool_text(v: &Value) -> Value {
    Value::String(
        if v.as_bool() == Some(true) {
            "True"
        } else {
            "False"
        }
        .into(),
    )
}

/// An `IntOrString` as text, or `N/A` when absent.
pub fn int_or_string(v: &Value) -> Value {
    Value::String(match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "N/A".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_print_as_upstream() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["y", "x"]},
                                 {"key": "u", "operator": "DoesNotExist"}]});
        assert_eq!(format_label_selector(&sel), "a=1,b=2,t in (x,y),!u");
        assert_eq!(format_label_selector(&json!({})), "<none>");
        assert_eq!(format_label_selector(&json!("weird")), "<none>");
        assert_eq!(format_labels(None), "<none>");
    }
}
