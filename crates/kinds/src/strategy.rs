//! [`KindStrategy`]: the code that differs per kind (upstream's per-kind `strategy.go` and
//! table printer), as opposed to the data of a [`KindSpec`](crate::KindSpec).
//!
//! A kind whose rules are all data uses [`DefaultStrategy`]; a built-in kind with its own
//! defaulting or printing has a strategy in its file under `builtin/` (e.g.
//! `builtin/core/pod.rs`); custom resources use [`crate::custom::CustomResourceStrategy`].
//!
//! Invariants: a strategy holds no I/O and no storage and only looks at the object it is
//! given (its cost is bounded by the object's size, which the request limits bound);
//! [`KindStrategy::table_columns`] and [`KindStrategy::table_cells`] are both `Some` or both
//! `None`, and when `Some` every row has exactly one cell per column, in order.

use serde_json::Value;

/// One column definition of a server-side Table (`meta.k8s.io/v1`
/// `TableColumnDefinition`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// The header, e.g. `Ready`.
    pub name: String,
    /// The OpenAPI type: `string`, `integer`, ...
    pub type_: String,
    /// The OpenAPI format, e.g. `name`; usually empty.
    pub format: String,
    /// A description for clients.
    pub description: String,
    /// 0 for the default view, 1 and up for `-o wide`.
    pub priority: i32,
}

impl TableColumn {
    /// A column of `type_` without a format.
    pub fn new(name: &str, type_: &str, description: &str, priority: i32) -> Self {
        Self {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: description.into(),
            priority,
        }
    }
}

/// What a kind does differently from the generic registry (upstream's
/// `RESTCreateStrategy`/`RESTUpdateStrategy` and table convertor, the parts that are code).
///
/// Every method has a default that does nothing, so a strategy states only what its kind
/// changes. The data of a kind (generation rules, `/status` rules, graceful deletion, garbage
/// collection policy) stays on the [`KindSpec`](crate::KindSpec).
pub trait KindStrategy: std::fmt::Debug + Send + Sync + 'static {
    /// Defaulting and status reset on create (upstream's `PrepareForCreate` plus the v1
    /// defaults this server applies), on the object's JSON after the generic metadata rules.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Defaulting on update (upstream's `PrepareForUpdate` plus decode-time defaulting), on
    /// the new object's JSON after the generic update rules; `old` is the stored object.
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// Removes the fields the kind's own schema does not declare and returns their paths
    /// (`spec.foo`), for `fieldValidation`; `None` when the kind has no schema of its own
    /// (the registry then prunes by the kind's OpenAPI schema). A custom resource with a
    /// structural schema prunes as upstream's apiextensions does (its root `metadata` is
    /// left to the registry).
    fn prune_unknown(&self, _obj: &mut Value) -> Option<Vec<String>> {
        None
    }

    /// The kind's own validation of a create (upstream's `Validate`), after
    /// [`prepare_for_create`](Self::prepare_for_create): each error is a cause of a 422.
    fn validate_create(&self, _obj: &Value) -> Vec<crate::FieldError> {
        Vec::new()
    }

    /// The kind's own validation of an update of `old` to `new` (upstream's
    /// `ValidateUpdate`), after [`prepare_for_update`](Self::prepare_for_update).
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        Vec::new()
    }

    /// The kind's own Table columns (NAME first, AGE among them), or `None` to print NAME,
    /// the spec's [`Printer`](crate::Printer) columns and AGE.
    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        None
    }

    /// The kind's own cells of one object, given its name and printed age; `None` exactly
    /// when [`table_columns`](Self::table_columns) is `None`.
    fn table_cells(&self, _obj: &Value, _name: &str, _age: &str) -> Option<Vec<Value>> {
        None
    }

    /// As [`table_cells`](Self::table_cells), for printers that show other times than the
    /// age (a job's DURATION, a cron job's LAST SCHEDULE): `times` reads them against the
    /// server's clock. Defaults to `table_cells`.
    fn table_cells_at(
        &self,
        obj: &Value,
        name: &str,
        age: &str,
        _times: &dyn Times,
    ) -> Option<Vec<Value>> {
        self.table_cells(obj, name, age)
    }

    /// What the first DELETE of an object does besides marking it (upstream: a kind's own
    /// `Delete`, e.g. a CustomResourceDefinition's, which adds its cleanup finalizer and
    /// the `Terminating` condition): called on the stored object before the deletion
    /// lifecycle decides, only when it is not being deleted yet.
    fn prepare_for_delete(&self, _obj: &mut Value) {}

    /// Why a DELETE of the object `name` is refused before anything is read (upstream: a
    /// kind's own `REST.Delete` that answers 403 without calling the store, e.g. for a
    /// system priority class); `None` lets the deletion lifecycle decide. A collection
    /// delete does not ask: upstream's `DeleteCollection` deletes each object through the
    /// generic store, not the kind's `Delete`.
    fn delete_forbidden(&self, _name: &str) -> Option<String> {
        None
    }

    /// An update through `/ephemeralcontainers` (served for pods only, see
    /// [`KindSpec::ephemeral_containers_subresource`](crate::KindSpec)): the object to store,
    /// made from the stored `old` and the request's `new`, or the causes of a 422. The
    /// default changes nothing.
    fn ephemeral_containers_update(
        &self,
        _new: &Value,
        old: &Value,
    ) -> Result<Value, Vec<crate::FieldError>> {
        Ok(old.clone())
    }
}

/// One rule of a kind an object breaks (upstream's `field.Error` kinds a client sees), as the
/// built-in kinds' simple rules write it; it becomes a [`FieldError`](crate::FieldError), a
/// cause of a 422 `Invalid` Status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// A required field is missing or empty (`Required value`).
    Required {
        /// The field's path, e.g. `spec.schedule`.
        field: String,
    },
    /// A value not among the supported ones (`Unsupported value`).
    NotSupported {
        /// The field's path.
        field: String,
        /// The value found.
        value: String,
        /// The values allowed.
        supported: &'static [&'static str],
    },
    /// A value breaking a rule (`Invalid value`).
    Value {
        /// The field's path.
        field: String,
        /// The value found, as shown.
        value: String,
        /// The rule.
        detail: String,
    },
}

impl From<Invalid> for crate::FieldError {
    fn from(i: Invalid) -> Self {
        match i {
            Invalid::Required { field } => crate::FieldError::required(&field, ""),
            Invalid::NotSupported {
                field,
                value,
                supported,
            } => crate::FieldError::not_supported_str(&field, &value, supported),
            Invalid::Value {
                field,
                value,
                detail,
            } => crate::FieldError::invalid_str(&field, &value, detail),
        }
    }
}

/// A kind's simple rules as the strategy's create and update validation (the same rules on
/// both, as upstream's strategies whose `ValidateUpdate` re-runs `Validate`).
pub(crate) fn rules(broken: Vec<Invalid>) -> Vec<crate::FieldError> {
    broken.into_iter().map(crate::FieldError::from).collect()
}

/// The server's clock as the Table printers read it (the endpoints implement it over the
/// registry's clock, which this crate cannot depend on).
pub trait Times {
    /// The human-readable time since an RFC 3339 timestamp, as the AGE column prints it
    /// (`<unknown>` for one that does not parse).
    fn since(&self, timestamp: &str) -> String;
    /// The human-readable time from `from` to `to` (both RFC 3339), or `None` when either
    /// does not parse.
    fn between(&self, from: &str, to: &str) -> Option<String>;
    /// A number of seconds, human-readable (`5m`, `2d3h`).
    fn human(&self, seconds: u64) -> String;
}

/// The strategy of a kind without code of its own: every rule is the spec's data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultStrategy;

impl KindStrategy for DefaultStrategy {}

/// Sets `path` in `obj` to `value` unless it is set (not null) already, creating the parent
/// objects on the way.
pub(crate) fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        if !cur.is_object() {
            return;
        }
        if !cur.get(*seg).is_some_and(Value::is_object) {
            cur[*seg] = Value::Object(serde_json::Map::new());
        }
        cur = &mut cur[*seg];
    }
    if !cur.is_object() {
        return;
    }
    if cur.get(*last).is_none_or(Value::is_null) {
        cur[*last] = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_only_what_is_missing() {
        let mut v = json!({"spec": {"a": 1, "b": null}});
        set_default(&mut v, &["spec", "a"], json!(2));
        set_default(&mut v, &["spec", "b"], json!(3));
        set_default(&mut v, &["x", "y"], json!(4));
        assert_eq!(v, json!({"spec": {"a": 1, "b": 3}, "x": {"y": 4}}));
        // A non-object at the top is left alone (no panic from indexing).
        let mut s = json!("text");
        set_default(&mut s, &["a"], json!(1));
        assert_eq!(s, json!("text"));
    }
}
