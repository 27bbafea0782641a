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
//!   removed (an item or field carrying `$patch` is dropped, `null`s discarded).
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

use std::collections::{HashMap, HashSet};

use listwatch_schema::Node;
use serde_json::{Map, Number, Value};

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
pub(crate) fn apply(original: &Value, patch: &Value, schema: Option<Node<'_>>) -> Result<Value> {
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
                    Value::Object(patch)
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

/// `$retainKeys`: clears the fields of `original` it does not list, after checking that
/// every field the patch sets is listed.
fn retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<()> {
    let Some(listed) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(listed) = listed else {
        return Err(StrategicError::BadFormat(BAD_RETAIN_KEYS));
    };
    let keep: HashSet<&str> = listed.iter().filter_map(Value::as_str).collect();
    let unlisted = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !keep.contains(k.as_str())
    });
    if unlisted {
        return Err(StrategicError::BadFormat(BAD_RETAIN_KEYS));
    }
    original.retain(|k, _| keep.contains(k.as_str()));
    Ok(())
}

/// `$setElementOrder/<list>`: merges each such list with the patch's and orders the result
/// as the directive says (upstream's `mergePatchIntoOriginal`). The lists handled are
/// removed from `patch`.
fn set_element_orders(original: &mut Obj, patch: &mut Obj, schema: Option<Node<'_>>) -> Result<()> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for directive in directives {
        let Some(order) = patch.remove(&directive) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg_type("[]interface {}", &order));
        };
        let name = directive
            .strip_prefix(SET_ELEMENT_ORDER)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or(StrategicError::BadFormat(BAD_SET_ELEMENT_ORDER))?
            .to_owned();
        let live = match original.get(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l.clone()),
            Some(other) => return Err(bad_arg_type("[]interface {}", other)),
        };
        let patched = match patch.remove(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l),
            Some(other) => return Err(bad_arg_type("[]interface {}", &other)),
        };
        let meta = list_meta(schema, &name);
        check_order(patched.as_deref().unwrap_or(&[]), &order, meta.key)?;
        let live_items = live.clone().unwrap_or_default();
        let kind = element_kind(&[&live_items, patched.as_deref().unwrap_or(&[])]);
        let merged = match (live, patched.clone()) {
            (Some(l), None) => l,
            (None, Some(p)) => p.into_iter().filter_map(new_value).collect(),
            (Some(l), Some(p)) => {
                if meta.merge {
                    merge_list(l, p, &meta, false)?
                } else {
                    p.into_iter().map(strip_keys_value).collect()
                }
            }
            (None, None) => continue,
        };
        // Upstream types the items first (an error when there are none at all).
        kind?;
        let key = meta.key;
        let (in_order, server_only) = partition(merged, &order, key)?;
        let ordered = normalize_order(in_order, server_only, &order, &live_items, key)?;
        original.insert(name, Value::Array(ordered));
    }
    Ok(())
}

/// Upstream's `validatePatchWithSetOrderList`: the patch's items (less deletions and other
/// directives) must appear in the order list, in its order.
fn check_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut items = Vec::with_capacity(patch.len());
    for p in patch {
        if key.is_some() {
            let Value::Object(m) = p else {
                return Err(bad_arg_type("map[string]interface {}", p));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                continue;
            }
        }
        items.push(p);
    }
    let (mut i, mut j) = (0, 0);
    while i < items.len() && j < order.len() {
        if items[i].get(DIRECTIVE).is_some() {
            i += 1;
            continue;
        }
        let equal = match key {
            None => scalar_key(items[i]) == scalar_key(&order[j]),
            Some(k) => merge_key_of(items[i], k)? == merge_key_of(&order[j], k)?,
        };
        if equal {
            i += 1;
        }
        j += 1;
    }
    if i < items.len() {
        return Err(unprocessable(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            show(&Value::Array(patch.to_vec())),
            show(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

/// Merges the patch's list into the live one (upstream's `mergeSlice`): `meta` says how.
fn merge_list(
    live: Vec<Value>,
    patch: Vec<Value>,
    meta: &ListMeta<'_>,
    delete_list: bool,
) -> Result<Vec<Value>> {
    if live.is_empty() && patch.is_empty() {
        return Ok(live);
    }
    let kind = element_kind(&[&live, &patch])?;
    if kind != Kind::Map {
        if delete_list {
            let gone: HashSet<Scalar<'_>> = patch.iter().map(scalar_key).collect();
            return Ok(live
                .into_iter()
                .filter(|v| !gone.contains(&scalar_key(v)))
                .collect());
        }
        let order = patch.clone();
        let mut seen = HashSet::new();
        let merged: Vec<Value> = live
            .iter()
            .chain(patch.iter())
            .filter(|v| seen.insert(scalar_key(v)))
            .cloned()
            .collect();
        let (in_patch, server_only) = partition(merged, &order, None)?;
        return normalize_order(in_patch, server_only, &order, &live, None);
    }
    let Some(key) = meta.key else {
        return Err(unprocessable(
            "cannot merge lists without merge key for the list's items",
        ));
    };
    let (live, patch) = special_items(live, patch, key)?;
    let server_order = live.clone();
    let merged = merge_items(live, patch.clone(), key, meta.items)?;
    let (in_patch, server_only) = partition(merged, &patch, Some(key))?;
    normalize_order(in_patch, server_only, &patch, &server_order, Some(key))
}

/// Items with `$patch` (upstream's `mergeSliceWithSpecialElements`): `delete` removes every
/// live item with that key, `replace` makes the patch's other items the whole list,
/// `merge` is refused. Returns the live list and the patch's ordinary items.
fn special_items(
    live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut ordinary = Vec::with_capacity(patch.len());
    let mut deleted: HashSet<Scalar<'static>> = HashSet::new();
    let mut replace = false;
    for p in patch {
        let Value::Object(m) = &p else {
            return Err(bad_arg_type("map[string]interface {}", &p));
        };
        match m.get(DIRECTIVE) {
            None => ordinary.push(p),
            Some(d) => match d.as_str() {
                Some("delete") => match m.get(key) {
                    Some(v) => {
                        deleted.insert(scalar_key(v).owned());
                    }
                    None => return Err(no_merge_key(m, key)),
                },
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(unprocessable(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => {
                    return Err(unprocessable(format!(
                        "unknown patch type: {} in map: {}",
                        show(d),
                        show(&p)
                    )));
                }
            },
        }
    }
    if replace {
        let replacement = ordinary.into_iter().map(strip_keys_value).collect();
        return Ok((replacement, Vec::new()));
    }
    let live = if deleted.is_empty() {
        live
    } else {
        live.into_iter()
            .filter(|item| {
                item.get(key)
                    .is_none_or(|v| !deleted.contains(&scalar_key(v).owned()))
            })
            .collect()
    };
    Ok((live, ordinary))
}

/// Merges each patch item into the live item with the same key, or appends it (upstream's
/// `mergeSliceWithoutSpecialElements`; a later patch item with the key of an appended one
/// merges into it).
fn merge_items(
    mut live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    items: Option<Node<'_>>,
) -> Result<Vec<Value>> {
    let mut index: HashMap<Scalar<'static>, usize> = HashMap::with_capacity(live.len());
    for (i, item) in live.iter().enumerate() {
        if let Some(v) = item.get(key) {
            index.entry(scalar_key(v).owned()).or_insert(i);
        }
    }
    for p in patch {
        let Value::Object(pm) = p else {
            return Err(bad_arg_type("map[string]interface {}", &p));
        };
        let Some(kv) = pm.get(key) else {
            return Err(no_merge_key(&pm, key));
        };
        let k = scalar_key(kv).owned();
        match index.get(&k).and_then(|i| live.get_mut(*i)) {
            Some(Value::Object(cur)) => *cur = merge_map(std::mem::take(cur), pm, items)?,
            Some(_) => return Err(unprocessable(format!("value for key {key} is not a map"))),
            None => {
                index.insert(k, live.len());
                live.push(strip_keys(pm).into());
            }
        }
    }
    Ok(live)
}

/// Splits `merged` into the items present in `by` and the others (by merge key for lists
/// of objects, by value otherwise); every item of a keyed list must carry the key.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let present: HashSet<Scalar<'static>> = by
        .iter()
        .filter_map(|v| match key {
            None => Some(scalar_key(v).owned()),
            Some(k) => v.get(k).map(|kv| scalar_key(kv).owned()),
        })
        .collect();
    let mut listed = Vec::with_capacity(merged.len());
    let mut others = Vec::with_capacity(merged.len());
    for item in merged {
        let k = match key {
            None => scalar_key(&item).owned(),
            Some(k) => merge_key_of(&item, k)?.owned(),
        };
        if present.contains(&k) {
            listed.push(item);
        } else {
            others.push(item);
        }
    }
    Ok((listed, others))
}

/// Upstream's `normalizeElementOrder`: the patch's items sorted by `patch_order`, the
/// others by `server_order`, then interleaved: each other item goes before the first
/// patch item that comes after it in `server_order`.
fn normalize_order(
    mut listed: Vec<Value>,
    mut others: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    if let Some(k) = key {
        for item in listed
            .iter()
            .chain(others.iter())
            .chain(patch_order)
            .chain(server_order)
        {
            merge_key_of(item, k)?;
        }
    }
    let position = |list: &[Value]| -> HashMap<Scalar<'static>, usize> {
        let mut m = HashMap::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            if let Some(k) = item_key(v, key) {
                m.entry(k).or_insert(i);
            }
        }
        m
    };
    let in_patch = position(patch_order);
    let in_server = position(server_order);
    let rank = |v: &Value, by: &HashMap<Scalar<'static>, usize>| {
        item_key(v, key)
            .and_then(|k| by.get(&k).copied())
            .unwrap_or(usize::MAX)
    };
    listed.sort_by_key(|v| rank(v, &in_patch));
    others.sort_by_key(|v| rank(v, &in_server));
    let mut out = Vec::with_capacity(listed.len() + others.len());
    let mut left = others.into_iter().peekable();
    let mut right = listed.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                let (li, ri) = (rank(l, &in_server), rank(r, &in_server));
                li != usize::MAX && ri != usize::MAX && li < ri
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    Ok(out)
}

/// What identifies an item for ordering: its merge key's value, or itself.
fn item_key(v: &Value, key: Option<&str>) -> Option<Scalar<'static>> {
    match key {
        None => Some(scalar_key(v).owned()),
        Some(k) => v.get(k).map(|kv| scalar_key(kv).owned()),
    }
}

/// The value of the merge key of a list item (which must be an object carrying it).
fn merge_key_of<'v>(item: &'v Value, key: &str) -> Result<Scalar<'v>> {
    let Value::Object(m) = item else {
        return Err(bad_arg_type("map[string]interface {}", item));
    };
    m.get(key)
        .map(scalar_key)
        .ok_or_else(|| no_merge_key(m, key))
}

/// The type of a list's items, as Go's `reflect.TypeOf` tells them apart (integers and
/// floats are different types, as upstream decodes patches preserving integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Map,
}

/// Upstream's `sliceElementType`: the one type of every item of `lists`.
fn element_kind(lists: &[&[Value]]) -> Result<Kind> {
    let mut kind = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = match v {
            Value::Array(_) => return Err(unprocessable("lists of lists are not supported")),
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(n) if n.as_i64().is_some() => Kind::Int,
            Value::Number(_) => Kind::Float,
            Value::String(_) => Kind::String,
            Value::Object(_) => Kind::Map,
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                return Err(unprocessable(format!(
                    "list element types are not identical: {}",
                    show(&Value::Array(
                        lists
                            .iter()
                            .flat_map(|l| l.iter())
                            .take(16)
                            .cloned()
                            .collect()
                    ))
                )));
            }
            Some(_) => {}
        }
    }
    kind.ok_or_else(|| unprocessable("no elements in any of the given slices"))
}

/// A value compared as Go compares `interface{}` scalars (numbers by type and value;
/// objects and lists, which Go cannot compare, by their JSON).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(std::borrow::Cow<'a, str>),
    Other(String),
}

impl Scalar<'_> {
    fn owned(self) -> Scalar<'static> {
        match self {
            Scalar::Str(s) => Scalar::Str(std::borrow::Cow::Owned(s.into_owned())),
            Scalar::Null => Scalar::Null,
            Scalar::Bool(b) => Scalar::Bool(b),
            Scalar::Int(i) => Scalar::Int(i),
            Scalar::Float(f) => Scalar::Float(f),
            Scalar::Other(o) => Scalar::Other(o),
        }
    }
}

fn float_bits(n: &Number) -> u64 {
    let f = n.as_f64().unwrap_or(0.0);
    // -0.0 == 0.0 in Go.
    if f == 0.0 { 0 } else { f.to_bits() }
}

fn scalar_key(v: &Value) -> Scalar<'_> {
    match v {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Scalar::Int(i),
            None => Scalar::Float(float_bits(n)),
        },
        Value::String(s) => Scalar::Str(std::borrow::Cow::Borrowed(s)),
        other => Scalar::Other(other.to_string()),
    }
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

/// How many bytes of a value an error message shows (upstream prints it whole; a patch
/// may be megabytes).
const MAX_SHOWN: usize = 512;

/// A value for an error message: strings as they are, anything else as JSON, cut at
/// [`MAX_SHOWN`] bytes on a character boundary.
fn show(v: &Value) -> String {
    let mut s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.len() > MAX_SHOWN {
        let mut end = MAX_SHOWN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use listwatch_schema::Catalog;
    use serde_json::json;

    use super::*;

    static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
        let mut c = Catalog::new();
        // A kind with a `conditions` list that declares no patch strategy, and one with.
        c.add_custom(
            "example.com",
            "v1",
            "Widget",
            Some(&json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "conditions": {"type": "array", "items": {"type": "object",
                    "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}},
                "addresses": {"type": "array", "items": {"type": "object",
                    "properties": {"type": {"type": "string"}, "address": {"type": "string"}}}}}}}})),
        )
        .unwrap();
        c
    });

    fn smp(group: &str, kind: &str, doc: Value, patch: Value) -> Result<Value> {
        apply(&doc, &patch, CATALOG.kind(group, "v1", kind))
    }

    fn pod(doc: Value, patch: Value) -> Value {
        smp("", "Pod", doc, patch).unwrap()
    }

    fn names(v: &Value) -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].to_string())
            .collect()
    }

    #[test]
    fn node_taints_are_atomic_and_replaced() {
        // The old table merged taints by `key`; upstream's NodeSpec declares no strategy.
        let node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}});
        let out = smp(
            "",
            "Node",
            node,
            json!({"spec": {"taints": [{"key": "a", "effect": "NoExecute"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key": "a", "effect": "NoExecute"}])
        );
    }

    #[test]
    fn readiness_gates_are_atomic_and_spread_constraints_and_scheduling_gates_merge() {
        let doc = json!({"spec": {
            "readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1}, {"topologyKey": "host", "maxSkew": 1}],
            "schedulingGates": [{"name": "g1"}, {"name": "g2"}]}});
        let out = pod(
            doc,
            json!({"spec": {
            "readinessGates": [{"conditionType": "b"}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}],
            "schedulingGates": [{"name": "g1", "$patch": "delete"}]}}),
        );
        // The old table merged readinessGates by conditionType and replaced the other two.
        assert_eq!(
            out["spec"]["readinessGates"],
            json!([{"conditionType": "b"}])
        );
        assert_eq!(
            out["spec"]["topologySpreadConstraints"],
            json!([{"topologyKey": "zone", "maxSkew": 2}, {"topologyKey": "host", "maxSkew": 1}])
        );
        assert_eq!(out["spec"]["schedulingGates"], json!([{"name": "g2"}]));
    }

    #[test]
    fn conditions_and_addresses_merge_only_where_the_schema_says_so() {
        // A pod's status conditions merge by type (declared)...
        let out = pod(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
        // ...a node's addresses too...
        let out = smp(
            "",
            "Node",
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}]}}),
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        )
        .unwrap();
        assert_eq!(out["status"]["addresses"].as_array().unwrap().len(), 2);
        // ...but lists of those names that declare no strategy are replaced (the old table
        // merged `conditions` and `addresses` by type at any path).
        let out = smp(
            "example.com",
            "Widget",
            json!({"spec": {"conditions": [{"type": "A"}, {"type": "B"}], "addresses": [{"type": "x"}, {"type": "y"}]}}),
            json!({"spec": {"conditions": [{"type": "A", "status": "True"}], "addresses": [{"type": "y"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["conditions"],
            json!([{"type": "A", "status": "True"}])
        );
        assert_eq!(out["spec"]["addresses"], json!([{"type": "y"}]));
    }

    #[test]
    fn retain_keys_clears_unlisted_fields_and_must_list_every_patched_one() {
        let deploy = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let out = smp(
            "apps",
            "Deployment",
            deploy.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(out["spec"]["replicas"], 2);
        let e = smp(
            "apps",
            "Deployment",
            deploy.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": {"maxSurge": 2}}}}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            StrategicError::BadFormat("invalid patch format of retainKeys")
        );
        let e = smp(
            "apps",
            "Deployment",
            deploy,
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            StrategicError::BadFormat("invalid patch format of retainKeys")
        );
        // In a merged list's item (volumes: `merge,retainKeys`): switching a volume's source.
        let out = pod(
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "c"}}]}}),
        );
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v", "configMap": {"name": "c"}}, {"name": "w", "emptyDir": {}}])
        );
    }

    #[test]
    fn set_element_order_places_server_only_items_by_their_live_neighbours() {
        let cs = |ns: &[u8]| -> Value {
            ns.iter()
                .map(|n| json!({"name": format!("c{n}"), "image": "i"}))
                .collect()
        };
        let order = |ns: &[u8]| -> Value {
            ns.iter()
                .map(|n| json!({"name": format!("c{n}")}))
                .collect()
        };
        // Live 1 2 7 9 8 3 4; the patch orders 2 1 4 3: the server-only 7 9 8 follow 1.
        let out = pod(
            json!({"spec": {"containers": cs(&[1, 2, 7, 9, 8, 3, 4])}}),
            json!({"spec": {"$setElementOrder/containers": order(&[2, 1, 4, 3])}}),
        );
        assert_eq!(
            names(&out["spec"]["containers"]),
            [
                "\"c2\"", "\"c1\"", "\"c7\"", "\"c9\"", "\"c8\"", "\"c4\"", "\"c3\""
            ]
        );
        // A new item the order puts first; live 1 2, order 3 1 2.
        let out = pod(
            json!({"spec": {"containers": cs(&[1, 2])}}),
            json!({"spec": {"$setElementOrder/containers": order(&[3, 1, 2]), "containers": cs(&[3])}}),
        );
        assert_eq!(
            names(&out["spec"]["containers"]),
            ["\"c3\"", "\"c1\"", "\"c2\""]
        );
        // Without an order, a new item goes before the live ones (upstream's interleaving).
        let out = pod(
            json!({"spec": {"containers": cs(&[1, 2])}}),
            json!({"spec": {"containers": cs(&[3])}}),
        );
        assert_eq!(
            names(&out["spec"]["containers"]),
            ["\"c3\"", "\"c1\"", "\"c2\""]
        );
        // The patch's items must follow the order list.
        let e = pod_err(
            json!({"spec": {"containers": cs(&[1, 2])}}),
            json!({"spec": {"$setElementOrder/containers": order(&[1, 2]), "containers": cs(&[2, 1])}}),
        );
        assert!(e.to_string().starts_with("The order in patch list"), "{e}");
        // Scalars: the order of a primitive merge list.
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        assert_eq!(
            pod_err(
                json!({"metadata": {}}),
                json!({"metadata": {"$setElementOrder": []}})
            ),
            StrategicError::BadFormat("invalid patch format of setElementOrder list")
        );
    }

    fn pod_err(doc: Value, patch: Value) -> StrategicError {
        smp("", "Pod", doc, patch).unwrap_err()
    }

    #[test]
    fn directives_behave_as_upstream() {
        // `$patch: delete` on an object empties it; on an absent one adds nothing.
        let out = pod(
            json!({"spec": {"affinity": {"nodeAffinity": {}}}}),
            json!({"spec": {"affinity": {"$patch": "delete"}, "dnsConfig": {"$patch": "delete"}}}),
        );
        assert_eq!(out["spec"], json!({"affinity": {}}));
        // `$patch: replace` on an object and on a list.
        let out = pod(
            json!({"spec": {"nodeSelector": {"a": "1"}, "containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"nodeSelector": {"$patch": "replace", "b": "2"},
                "containers": [{"name": "c"}, {"$patch": "replace"}]}}),
        );
        assert_eq!(out["spec"]["nodeSelector"], json!({"b": "2"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "c"}]));
        // `$patch: merge` in a list and unknown `$patch` values are refused.
        let e = pod_err(
            json!({"spec": {"containers": []}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}),
        );
        assert_eq!(
            e.to_string(),
            "merging lists cannot yet be specified in the patch"
        );
        let e = pod_err(json!({"spec": {}}), json!({"spec": {"$patch": "merge"}}));
        assert!(
            e.to_string()
                .starts_with("unknown patch type: merge in map"),
            "{e}"
        );
        // A merged item without its key, a merge list of objects without a declared key.
        let e = pod_err(
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"image": "x"}]}}),
        );
        assert!(
            e.to_string()
                .ends_with("does not contain declared merge key: name"),
            "{e}"
        );
        let e = pod_err(
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [{"x": 1}]}}),
        );
        assert!(
            e.to_string()
                .starts_with("list element types are not identical"),
            "{e}"
        );
        let e = pod_err(
            json!({"metadata": {"finalizers": [["a"]]}}),
            json!({"metadata": {"finalizers": ["b"]}}),
        );
        assert_eq!(e.to_string(), "lists of lists are not supported");
        // `$deleteFromPrimitiveList`: removes values, needs its `/list`.
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "a"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "z"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let out = pod(
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(out["metadata"], json!({}));
        assert_eq!(
            pod_err(
                json!({"metadata": {}}),
                json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}})
            ),
            StrategicError::BadFormat("invalid patch format of primitive list")
        );
        // Values added where the object has none lose their directives and nulls.
        let out = pod(
            json!({"spec": {}}),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}, {"name": "Y", "value": null}]}],
                "$unknown": 1}}),
        );
        assert_eq!(
            out["spec"],
            json!({"containers": [{"name": "a", "env": [{"name": "Y"}]}]})
        );
        // A field with the `replace` strategy is replaced whole.
        let out = smp(
            "policy",
            "PodDisruptionBudget",
            json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "maxUnavailable": 1}}),
            json!({"spec": {"selector": {"matchExpressions": []}}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"],
            json!({"selector": {"matchExpressions": []}, "maxUnavailable": 1})
        );
    }

    #[test]
    fn scalar_merge_lists_are_unions_without_duplicates() {
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "a"]}}),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        // Integers and floats are different values, as upstream decodes them.
        let node = smp(
            "",
            "Node",
            json!({"spec": {"podCIDRs": ["10.0.0.0/24"]}}),
            json!({"spec": {"podCIDRs": ["10.0.1.0/24"]}}),
        )
        .unwrap();
        assert_eq!(
            node["spec"]["podCIDRs"],
            json!(["10.0.1.0/24", "10.0.0.0/24"])
        );
        assert_ne!(
            scalar_key(&json!(1)),
            scalar_key(&json!(1.0)),
            "1 and 1.0 are an int64 and a float64 in Go"
        );
        assert_eq!(scalar_key(&json!(0.0)), scalar_key(&json!(-0.0)));
    }

    #[test]
    fn untyped_objects_merge_and_lists_are_replaced() {
        let out = apply(
            &json!({"a": {"b": 1, "l": [1, 2]}, "keep": true}),
            &json!({"a": {"c": 2, "l": [3]}, "keep": null}),
            None,
        )
        .unwrap();
        assert_eq!(out, json!({"a": {"b": 1, "c": 2, "l": [3]}}));
    }

    /// JSON made of the names strategic merge cares about, directives included.
    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        const KEYS: &[&str] = &[
            "spec",
            "metadata",
            "containers",
            "name",
            "image",
            "env",
            "value",
            "ports",
            "containerPort",
            "protocol",
            "finalizers",
            "volumes",
            "emptyDir",
            "configMap",
            "tolerations",
            "key",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$setElementOrder/finalizers",
            "$deleteFromPrimitiveList/finalizers",
            "$setElementOrder",
            "$deleteFromPrimitiveList",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(Value::from),
            prop::sample::select(vec!["a", "b", "delete", "replace", "merge", "name", "c0"])
                .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), inner, 0..6)
                    .prop_map(|m| Value::Object(
                        m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                    )),
            ]
        })
    }

    fn len(v: &Value) -> usize {
        serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0)
    }

    proptest::proptest! {
        /// Hostile shapes (directives anywhere, wrong types, keyless items) on the Pod
        /// schema: no panic, and the result never carries more than the object and the
        /// patch together.
        #[test]
        fn arbitrary_strategic_patches_never_panic_nor_amplify(
            doc in arb_value(),
            patch in arb_value(),
        ) {
            let doc = json!({"spec": doc.clone(), "metadata": doc});
            let patch = json!({"spec": patch.clone(), "metadata": patch});
            if let Ok(out) = apply(&doc, &patch, CATALOG.kind("", "v1", "Pod")) {
                proptest::prop_assert!(len(&out) <= len(&doc) + len(&patch), "{out}");
            }
            if let Ok(out) = apply(&doc, &patch, None) {
                proptest::prop_assert!(len(&out) <= len(&doc) + len(&patch), "{out}");
            }
        }
    }

    #[test]
    fn huge_lists_merge_in_linear_time() {
        // Items are found through hash maps: quadratic lookups would make this run for
        // minutes (10^9 comparisons per lookup pass).
        let n = 30_000;
        let live: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("c{i}"), "image": "a"}))
            .collect();
        let mut patch: Vec<Value> = (n / 2..n)
            .rev()
            .map(|i| json!({"name": format!("c{i}"), "image": "b"}))
            .collect();
        patch.extend((0..n / 2).map(|i| json!({"name": format!("c{i}"), "$patch": "delete"})));
        let order: Vec<Value> = (0..n)
            .rev()
            .map(|i| json!({"name": format!("c{i}")}))
            .collect();
        let out = pod(
            json!({"spec": {"containers": live}}),
            json!({"spec": {"containers": patch, "$setElementOrder/containers": order}}),
        );
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), n / 2);
        assert_eq!(cs[0], json!({"name": format!("c{}", n - 1), "image": "b"}));
        // Errors name what is wrong without echoing a huge patch.
        let live: Vec<Value> = (0..n).map(|i| json!({"name": format!("c{i}")})).collect();
        let bad: Vec<Value> = (0..n).map(|i| json!({"image": format!("c{i}")})).collect();
        let e = pod_err(
            json!({"spec": {"containers": live}}),
            json!({"spec": {"containers": bad}}),
        );
        assert!(
            e.to_string().len() < 2 * MAX_SHOWN,
            "{}",
            e.to_string().len()
        );
    }
}
