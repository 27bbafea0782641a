//! Strategic merge patch (`application/strategic-merge-patch+json`), applied as upstream's
//! `strategicpatch.StrategicMergeMapPatch` does, with the list semantics read from the
//! kind's schema rather than from field names.
//!
//! The object and the patch are walked together with a [`Node`] of the kind's schema
//! (`listwatch-schema`): a field's `x-kubernetes-patch-strategy` (`merge`, `retainKeys`,
//! `replace`) and `x-kubernetes-patch-merge-key` decide how it merges. Where the schema
//! says nothing (no schema at all, a field it does not declare, or a preserve-unknown
//! subtree) objects merge key by key and lists are replaced, as upstream does for lists
//! without a strategy.
//!
//! What upstream does, and so does this:
//! - objects merge recursively; `null` deletes a key; a value of another type replaces;
//!   a field with the `replace` strategy is replaced whole;
//! - lists with the `merge` strategy: of objects, merged by the merge key (a patch item
//!   without it, or a merge list without a declared key, is an error); of scalars, a
//!   union without duplicates; any other list is replaced by the patch's;
//! - merged lists are ordered as upstream orders them: the patch's items in the patch's
//!   order, the live object's other items in their order, interleaved by their live
//!   positions;
//! - directives: `$patch: replace` (an object or list replaced by the patch's), `$patch:
//!   delete` (an object emptied; a list item removed by its key), `$patch: merge` in a
//!   list (refused, as upstream), `$retainKeys` (fields not listed are cleared; every
//!   field the patch sets must be listed), `$setElementOrder/<list>` (the order of a
//!   merged list; the patch's items must follow it), `$deleteFromPrimitiveList/<list>`
//!   (scalars removed from a list);
//! - values the patch adds where the object has none are taken with the directives
//!   removed (an item or field carrying `$patch` is dropped, `null`s discarded); so are
//!   the items it appends to a merged list (`null` fields discarded: upstream's typed
//!   decoding drops them).
//!
//! Where this differs: keys starting with `$` that are not directives are dropped rather
//! than stored (upstream stores them and the typed decoding then drops them, so the result
//! is the same for built-in kinds); errors upstream answers 500 for (an error that is not a
//! Status: a missing merge key, an unknown `$patch`, mixed item types) are 422 here, with
//! upstream's messages; the ones upstream answers 400 or 422 are answered the same.
//!
//! Bounds: every step is linear or `n log n` in the sizes of the lists involved (items are
//! found by key through hash maps, never by scanning), and recursion follows the nesting
//! of the object and the patch, which the decode limits bound (`limits::MAX_DEPTH`).
//!
//! Layout: this module walks objects (`merge_map`, `merge_field`) and owns the error
//! type and messages; `directives` handles the `$` directives (`$retainKeys`,
//! `$setElementOrder`, `$patch` in list items); `list` merges and orders lists (by merge
//! key or by value) and compares items as Go does.

mod directives;
mod list;
#[cfg(test)]
mod tests;

use listwatch_api::echo;
use listwatch_schema::Node;
use serde_json::{Map, Value};

use self::directives::{retain_keys, set_element_orders};
use self::list::merge_list;

type Obj = Map<String, Value>;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Upstream's `mergepatch.ErrBadPatchFormatForPrimitiveList`.
const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
/// Upstream's `mergepatch.ErrBadPatchFormatForRetainKeys`.
const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
/// Upstream's `mergepatch.ErrBadPatchFormatForSetElementOrderList`.
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

/// Why a strategic merge patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicError {
    /// A malformed directive upstream answers 400 BadRequest for (its `mergepatch` sentinel
    /// errors: retainKeys, setElementOrder and primitive-list formats).
    #[error("{0}")]
    BadFormat(&'static str),
    /// Anything else that cannot be applied (upstream: 422 for lists of lists, 500 for the
    /// rest; here 422 with upstream's message).
    #[error("{0}")]
    Unprocessable(String),
}

type Result<T> = std::result::Result<T, StrategicError>;

fn unprocessable(message: impl Into<String>) -> StrategicError {
    StrategicError::Unprocessable(message.into())
}

/// Applies `patch` to `original` (both objects) with `schema` the kind's schema (`None`:
/// untyped, every list replaced).
pub fn apply(original: &Value, patch: &Value, schema: Option<Node<'_>>) -> Result<Value> {
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        return Err(unprocessable(
            "a strategic merge patch and its object must be JSON objects",
        ));
    };
    merge_map(o.clone(), p.clone(), schema).map(Value::Object)
}

/// The schema of field `key` of an object at `schema`.
fn field<'a>(schema: Option<Node<'a>>, key: &str) -> Option<Node<'a>> {
    schema.and_then(|s| s.field(key))
}

/// How a list field merges: whether it merges (else it is replaced), its merge key, and
/// the schema of its items.
struct ListMeta<'a> {
    merge: bool,
    key: Option<&'a str>,
    items: Option<Node<'a>>,
}

fn list_meta<'a>(schema: Option<Node<'a>>, key: &str) -> ListMeta<'a> {
    let node = field(schema, key);
    ListMeta {
        merge: node.is_some_and(|n| n.patch_strategy().merge),
        key: node.and_then(|n| n.patch_merge_key()),
        items: node.and_then(|n| n.items()),
    }
}

fn merge_map(mut original: Obj, mut patch: Obj, schema: Option<Node<'_>>) -> Result<Obj> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => Ok(strip_keys(patch)),
            Some("delete") => Ok(Map::new()),
            _ => {
                patch.insert(DIRECTIVE.into(), directive.clone());
                Err(unprocessable(format!(
                    "unknown patch type: {} in map: {}",
                    show(&directive),
                    show(&Value::Object(patch))
                )))
            }
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(&mut original, &mut patch, schema)?;
    let mut deletions = Vec::new();
    for (key, value) in patch {
        if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let list = key
                .strip_prefix(DELETE_FROM_PRIMITIVE_LIST)
                .and_then(|rest| rest.strip_prefix('/'))
                .ok_or(StrategicError::BadFormat(BAD_PRIMITIVE_LIST))?;
            deletions.push((list.to_owned(), value));
            continue;
        }
        if key.starts_with('$') {
            // Not a directive: upstream stores it and typed decoding drops it.
            continue;
        }
        merge_field(&mut original, key, value, schema, false)?;
    }
    // After the lists they apply to (upstream: Go's map order; kubectl never sends a value
    // both added and deleted).
    for (list, value) in deletions {
        merge_field(&mut original, list, value, schema, true)?;
    }
    Ok(original)
}

/// Merges the patch's `value` for `key` into `original` (`delete_list`: the value lists
/// scalars to remove from the list `key`).
fn merge_field(
    original: &mut Obj,
    key: String,
    value: Value,
    schema: Option<Node<'_>>,
    delete_list: bool,
) -> Result<()> {
    if value.is_null() {
        original.remove(&key);
        return Ok(());
    }
    let Some(current) = original.get_mut(&key) else {
        if !delete_list && let Some(v) = new_value(value) {
            original.insert(key, v);
        }
        return Ok(());
    };
    let same_shape = matches!(
        (&*current, &value),
        (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_))
    );
    if !same_shape {
        // Another type (or a scalar): the patch's value, unless it is a deletion list.
        if !delete_list {
            match new_value(value) {
                Some(v) => *current = v,
                None => {
                    original.remove(&key);
                }
            }
        }
        return Ok(());
    }
    match (current, value) {
        (Value::Object(cur), Value::Object(p)) => {
            let node = field(schema, &key);
            *cur = if node.is_some_and(|n| n.patch_strategy().replace) {
                strip_keys(p)
            } else {
                merge_map(std::mem::take(cur), p, node)?
            };
        }
        (Value::Array(cur), Value::Array(p)) => {
            let meta = list_meta(schema, &key);
            *cur = if meta.merge || delete_list {
                merge_list(std::mem::take(cur), p, &meta, delete_list)?
            } else {
                p.into_iter().map(strip_keys_value).collect()
            };
        }
        _ => {}
    }
    Ok(())
}

/// A value the patch adds where the object has none (upstream's `discardNullValuesFromPatch`
/// then `removeDirectives`): `null` fields dropped, objects carrying `$patch` dropped
/// (`None` when the value itself is one), other `$` keys removed.
fn new_value(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                    .filter_map(|(k, v)| new_value(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(new_value).collect(),
        )),
        other => Some(other),
    }
}

/// A merged list's item the patch adds (no live item has its key): its `$` keys removed
/// and its `null` fields discarded at every level. Upstream appends the item as the patch
/// has it and its typed decoding then drops the nulls; objects here are stored as merged,
/// so they are dropped here (a stored `"image": null` is not what upstream returns).
fn added_item(m: Obj) -> Value {
    new_value(Value::Object(strip_keys(m))).unwrap_or_else(|| Value::Object(Map::new()))
}

/// A value taken as the patch has it (a replaced object or list): keys starting with `$`
/// removed at every level.
fn strip_keys(m: Obj) -> Obj {
    m.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k, strip_keys_value(v)))
        .collect()
}

fn strip_keys_value(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_keys(m)),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_keys_value).collect()),
        other => other,
    }
}

/// Upstream's `mergepatch.ErrNoMergeKey`.
fn no_merge_key(m: &Obj, key: &str) -> StrategicError {
    unprocessable(format!(
        "map: {} does not contain declared merge key: {key}",
        show(&Value::Object(m.clone()))
    ))
}

/// Upstream's `mergepatch.ErrBadArgType`, with Go's type names.
fn bad_arg_type(expected: &str, got: &Value) -> StrategicError {
    let actual = match got {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.as_i64().is_some() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    };
    unprocessable(format!("expected a {expected}, but received a {actual}"))
}

/// How much of a value an error message shows, in [`echo::wire_cost`] units (upstream
/// prints it whole; a patch may be megabytes).
const MAX_SHOWN: usize = echo::MAX_ECHO_BYTES;

/// A value for an error message: strings as they are, anything else as JSON, cut by
/// [`echo`] (at most [`MAX_SHOWN`], with its marker).
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => echo::echo_within(s, MAX_SHOWN).into_owned(),
        other => echo::echo_json(other),
    }
}
