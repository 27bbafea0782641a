//! Merging lists: by merge key for lists of objects, as a union for lists of scalars, and
//! ordered as upstream's `normalizeElementOrder` orders them.
//!
//! Invariants: items are found by key through hash maps, never by scanning, so every step
//! is linear or `n log n` in the lists' sizes; items are compared as Go compares
//! `interface{}` values ([`Scalar`]: integers and floats differ, `-0.0 == 0.0`).

use std::collections::{HashMap, HashSet};

use listwatch_schema::Node;
use serde_json::{Number, Value};

use super::directives::special_items;
use super::{
    ListMeta, Result, added_item, bad_arg_type, merge_map, no_merge_key, show, unprocessable,
};

/// Merges the patch's list into the live one (upstream's `mergeSlice`): `meta` says how.
pub(super) fn merge_list(
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
                live.push(added_item(pm));
            }
        }
    }
    Ok(live)
}

/// Splits `merged` into the items present in `by` and the others (by merge key for lists
/// of objects, by value otherwise); every item of a keyed list must carry the key.
pub(super) fn partition(
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
pub(super) fn normalize_order(
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
pub(super) fn merge_key_of<'v>(item: &'v Value, key: &str) -> Result<Scalar<'v>> {
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
pub(super) enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Map,
}

/// Upstream's `sliceElementType`: the one type of every item of `lists`.
pub(super) fn element_kind(lists: &[&[Value]]) -> Result<Kind> {
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
pub(super) enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(std::borrow::Cow<'a, str>),
    Other(String),
}

impl Scalar<'_> {
    pub(super) fn owned(self) -> Scalar<'static> {
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

pub(super) fn scalar_key(v: &Value) -> Scalar<'_> {
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
