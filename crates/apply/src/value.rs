//! The four walks of structured merge over JSON values, each steered by a [`TypeInfo`]:
//! the field set a value spells ([`to_field_set`]), the difference between two values
//! ([`compare`]), an apply configuration merged over a live object ([`merge`]), and a
//! value with the paths of a set taken out ([`remove_items`]).
//!
//! The shape of a value decides what it is (object, list, scalar); the types decide how it
//! merges. A list whose items cannot be identified by its type (a map-list item without a
//! key, a set item that is not a scalar) is treated as atomic in a live object, and refused
//! in an apply configuration ([`validate_config`]), so no walk fails half-way.
//!
//! Every walk recurses once per nesting level: callers bound the depth of what they pass
//! (the server decodes bodies and stored objects within its depth limit).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use crate::path::{Path, PathElement};
use crate::set::FieldSet;
use crate::types::{ListType, MapType, TypeInfo};

/// What changed from one value to another (upstream's `typed.Comparison`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Paths present only in the new value (containers included).
    pub added: FieldSet,
    /// Leaves present in both with different values.
    pub modified: FieldSet,
    /// Paths present only in the old value (containers included).
    pub removed: FieldSet,
}

impl Comparison {
    /// Leaves out `ignored` and everything under its members.
    pub fn exclude(&mut self, ignored: &FieldSet) {
        if ignored.is_empty() {
            return;
        }
        self.added = self.added.recursive_difference(ignored);
        self.modified = self.modified.recursive_difference(ignored);
        self.removed = self.removed.recursive_difference(ignored);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Object,
    List,
    Scalar,
}

fn shape(v: &Value) -> Shape {
    match v {
        Value::Object(_) => Shape::Object,
        Value::Array(_) => Shape::List,
        _ => Shape::Scalar,
    }
}

/// The key step of a map-list item, or why it has none.
fn item_key(
    types: &dyn TypeInfo,
    sp: &[&str],
    keys: &[String],
    item: &Value,
) -> Result<PathElement, String> {
    let Value::Object(m) = item else {
        return Err("associative list with keys may only have map elements".into());
    };
    let mut fields = Map::new();
    for k in keys {
        match m.get(k).filter(|v| !v.is_null()) {
            Some(v) => {
                fields.insert(k.clone(), v.clone());
            }
            None => match types.key_default(sp, k) {
                Some(d) => {
                    fields.insert(k.clone(), d);
                }
                None => {
                    return Err(format!(
                        "associative list with keys has an element that omits key field {k:?}"
                    ));
                }
            },
        }
    }
    Ok(PathElement::key(fields))
}

/// The step of every item of the list at `sp`, or `None` when the list is atomic (by its
/// type, or because an item cannot be identified).
fn elements(types: &dyn TypeInfo, sp: &[&str], items: &[Value]) -> Option<Vec<PathElement>> {
    match types.list_type(sp) {
        ListType::Atomic => None,
        ListType::Set => items
            .iter()
            .map(|i| (shape(i) == Shape::Scalar).then(|| PathElement::value(i)))
            .collect(),
        ListType::Map(keys) if keys.is_empty() => None,
        ListType::Map(keys) => items
            .iter()
            .map(|i| item_key(types, sp, &keys, i).ok())
            .collect(),
    }
}

/// Refuses an apply configuration whose lists do not fit their types: a map-list item
/// without its keys or a set item that is not a scalar (upstream: "failed to create typed
/// patch object"), or two items with the same key (upstream: "duplicate entries for key").
pub fn validate_config(types: &dyn TypeInfo, config: &Value) -> Result<(), String> {
    validate(types, config, &mut Vec::new(), &mut Vec::new())
}

fn validate<'a>(
    types: &dyn TypeInfo,
    v: &'a Value,
    sp: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if types.map_type(sp) == MapType::Atomic {
                return Ok(());
            }
            for (k, val) in m {
                sp.push(k);
                path.push(PathElement::Field(k.clone()));
                let r = validate(types, val, sp, path);
                sp.pop();
                path.pop();
                r?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let lt = types.list_type(sp);
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = match &lt {
                    ListType::Atomic => return Ok(()),
                    ListType::Map(keys) if keys.is_empty() => return Ok(()),
                    ListType::Set if shape(item) != Shape::Scalar => Err(
                        "associative list without keys has an element that is not a scalar"
                            .to_owned(),
                    ),
                    ListType::Set => Ok(PathElement::value(item)),
                    ListType::Map(keys) => item_key(types, sp, keys, item),
                }
                .map_err(|e| format!("{}: element {i}: {e}", Path(path.clone())))?;
                if !seen.insert(pe.clone()) {
                    return Err(format!(
                        "{}: duplicate entries for key {pe}",
                        Path(path.clone())
                    ));
                }
                path.push(pe);
                let r = validate(types, item, sp, path);
                path.pop();
                r?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The paths a value sets (upstream's `ToFieldSet`): its leaves; the fields of a map (not
/// of a struct); fields that are null or empty objects; the items of map- and set-lists;
/// atomic lists and maps as one leaf. Items that appear twice are owned whole.
pub fn to_field_set(types: &dyn TypeInfo, v: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    field_set(types, v, &mut Vec::new(), &mut Vec::new(), &mut set);
    set
}

fn field_set<'a>(
    types: &dyn TypeInfo,
    v: &'a Value,
    sp: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
    set: &mut FieldSet,
) {
    match v {
        Value::Object(m) => {
            let mt = types.map_type(sp);
            if mt == MapType::Atomic {
                set.insert(path);
                return;
            }
            for (k, val) in m {
                sp.push(k);
                path.push(PathElement::Field(k.clone()));
                field_set(types, val, sp, path, set);
                if val.is_null()
                    || val.as_object().is_some_and(Map::is_empty)
                    || mt == MapType::Granular
                {
                    set.insert(path);
                }
                sp.pop();
                path.pop();
            }
        }
        Value::Array(items) => {
            let Some(pes) = elements(types, sp, items) else {
                set.insert(path);
                return;
            };
            let mut count: BTreeMap<&PathElement, usize> = BTreeMap::new();
            for pe in &pes {
                *count.entry(pe).or_default() += 1;
            }
            for (pe, item) in pes.iter().zip(items) {
                path.push(pe.clone());
                if count.get(pe).copied().unwrap_or(0) < 2 {
                    field_set(types, item, sp, path, set);
                }
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// What changed from `old` to `new` (upstream's `Compare`).
pub fn compare(types: &dyn TypeInfo, old: &Value, new: &Value) -> Comparison {
    let mut c = Comparison::default();
    compare_at(
        types,
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut c,
    );
    c
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn compare_at<'a>(
    types: &dyn TypeInfo,
    l: Option<&'a Value>,
    r: Option<&'a Value>,
    sp: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) {
    let node = match (l, r) {
        (None, None) => return,
        (Some(a), Some(b)) if shape(a) != shape(b) => Shape::Scalar,
        (Some(a), _) | (None, Some(a)) => shape(a),
    };
    let both_empty = l.is_none_or(is_empty_container) && r.is_none_or(is_empty_container);
    let mut lists = None;
    let leaf = match node {
        Shape::Scalar => true,
        Shape::Object => both_empty || types.map_type(sp) == MapType::Atomic,
        Shape::List => {
            let items = |v: Option<&'a Value>| -> Option<Vec<PathElement>> {
                match v {
                    None => Some(Vec::new()),
                    Some(v) => elements(types, sp, v.as_array().map_or(&[], Vec::as_slice)),
                }
            };
            if both_empty {
                true
            } else {
                match (items(l), items(r)) {
                    (Some(lp), Some(rp)) => {
                        lists = Some((lp, rp));
                        false
                    }
                    _ => true,
                }
            }
        }
    };
    if leaf {
        match (l, r) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(a), Some(b)) if a != b => c.modified.insert(path),
            _ => {}
        }
        return;
    }
    match (node, lists) {
        (Shape::Object, _) => {
            let lm = l.and_then(Value::as_object);
            let rm = r.and_then(Value::as_object);
            let keys: BTreeSet<&'a String> = lm.into_iter().chain(rm).flat_map(Map::keys).collect();
            for k in keys {
                sp.push(k);
                path.push(PathElement::Field(k.clone()));
                let (lv, rv) = (lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)));
                compare_at(types, lv, rv, sp, path, c);
                sp.pop();
                path.pop();
            }
        }
        (Shape::List, Some((lp, rp))) => {
            let li = l.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let ri = r.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            compare_items(types, (&lp, li), (&rp, ri), sp, path, c);
        }
        _ => {}
    }
    if l.is_none() {
        c.added.insert(path);
    } else if r.is_none() {
        c.removed.insert(path);
    }
}

/// Items grouped by step.
fn group<'a, 'p>(
    pes: &'p [PathElement],
    items: &'a [Value],
) -> BTreeMap<&'p PathElement, Vec<&'a Value>> {
    let mut m: BTreeMap<&PathElement, Vec<&Value>> = BTreeMap::new();
    for (pe, item) in pes.iter().zip(items) {
        m.entry(pe).or_default().push(item);
    }
    m
}

fn compare_items<'a>(
    types: &dyn TypeInfo,
    (lp, li): (&[PathElement], &'a [Value]),
    (rp, ri): (&[PathElement], &'a [Value]),
    sp: &mut Vec<&'a str>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) {
    let lg = group(lp, li);
    let rg = group(rp, ri);
    // Every step once, in order of first appearance (the live list's, then new ones).
    let mut seen: BTreeSet<&PathElement> = BTreeSet::new();
    let order: Vec<&PathElement> = lp.iter().chain(rp).filter(|pe| seen.insert(pe)).collect();
    for pe in order {
        let ll = lg.get(pe).map_or(&[][..], Vec::as_slice);
        let rl = rg.get(pe).map_or(&[][..], Vec::as_slice);
        path.push(pe.clone());
        match (ll.len(), rl.len()) {
            (0, 0) => {}
            (0 | 1, 0 | 1) => {
                compare_at(types, ll.first().copied(), rl.first().copied(), sp, path, c)
            }
            (2.., 2..) => {
                if ll != rl {
                    c.modified.insert(path);
                }
            }
            (2.., _) => {
                if let Some(r) = rl.first() {
                    compare_at(types, None, Some(r), sp, path, c);
                }
                c.removed.insert(path);
            }
            (_, 2..) => {
                if let Some(l) = ll.first() {
                    compare_at(types, Some(l), None, sp, path, c);
                }
                c.added.insert(path);
            }
        }
        path.pop();
    }
}

/// `config` merged over `live` (upstream's `Merge`): objects field by field, map- and
/// set-lists item by item (the configuration's order for the items it names, the live
/// items it does not name kept in place), atomic lists and scalars replaced. A null in the
/// configuration removes the field (it is still owned: [`to_field_set`] counts it).
pub fn merge(types: &dyn TypeInfo, live: &Value, config: &Value) -> Value {
    merge_at(types, Some(live), Some(config), &mut Vec::new())
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// A configuration subtree without its nulls.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn merge_at<'a>(
    types: &dyn TypeInfo,
    l: Option<&'a Value>,
    r: Option<&'a Value>,
    sp: &mut Vec<&'a str>,
) -> Option<Value> {
    let (l, r) = match (l, r) {
        (_, Some(Value::Null)) | (None, None) => return None,
        (Some(a), None) => return Some(a.clone()),
        (None, Some(b)) => return Some(without_nulls(b)),
        (Some(a), Some(b)) => (a, b),
    };
    match (l, r) {
        (Value::Object(lm), Value::Object(rm))
            if !(lm.is_empty() && rm.is_empty()) && types.map_type(sp) != MapType::Atomic =>
        {
            let keys: BTreeSet<&'a String> = lm.keys().chain(rm.keys()).collect();
            let mut out = Map::new();
            for k in keys {
                sp.push(k);
                if let Some(v) = merge_at(types, lm.get(k), rm.get(k), sp) {
                    out.insert(k.clone(), v);
                }
                sp.pop();
            }
            Some(Value::Object(out))
        }
        (Value::Array(li), Value::Array(ri)) if !(li.is_empty() && ri.is_empty()) => {
            match (elements(types, sp, li), elements(types, sp, ri)) {
                (Some(lp), Some(rp)) => {
                    Some(Value::Array(merge_items(types, (&lp, li), (&rp, ri), sp)))
                }
                _ => Some(without_nulls(r)),
            }
        }
        _ => Some(without_nulls(r)),
    }
}

/// Merges two identified lists as upstream orders them: walking both, an item of both is
/// merged where the configuration puts it, live-only items stay where they were.
fn merge_items<'a>(
    types: &dyn TypeInfo,
    (lp, li): (&[PathElement], &'a [Value]),
    (rp, ri): (&[PathElement], &'a [Value]),
    sp: &mut Vec<&'a str>,
) -> Vec<Value> {
    // A live item whose key appears twice is not merged into (upstream keeps `nil`).
    let mut live: BTreeMap<&PathElement, Option<&'a Value>> = BTreeMap::new();
    for (pe, item) in lp.iter().zip(li) {
        live.entry(pe)
            .and_modify(|slot| *slot = None)
            .or_insert(Some(item));
    }
    let mut applied: BTreeMap<&PathElement, &'a Value> = BTreeMap::new();
    for (pe, item) in rp.iter().zip(ri) {
        applied.entry(pe).or_insert(item);
    }
    let mut shared: VecDeque<&PathElement> = rp.iter().filter(|pe| live.contains_key(pe)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(lp.len().max(rp.len()));
    let (mut i, mut j) = (0, 0);
    while i < lp.len() || j < rp.len() {
        if let (Some(pe), Some(rpe)) = (lp.get(i), rp.get(j)) {
            if pe == rpe {
                merged.insert(pe);
                let l = live.get(pe).copied().flatten();
                out.extend(merge_at(types, l, applied.get(pe).copied(), sp));
                i += 1;
                j += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if applied.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                i += 1;
                continue;
            }
        }
        if let Some(pe) = lp.get(i) {
            if !applied.contains_key(pe) {
                out.extend(merge_at(types, li.get(i), None, sp));
                i += 1;
                continue;
            } else if merged.contains(pe) {
                i += 1;
            }
        }
        if let Some(pe) = rp.get(j) {
            merged.insert(pe);
            let l = live.get(pe).copied().flatten();
            out.extend(merge_at(types, l, applied.get(pe).copied(), sp));
            j += 1;
            if next_shared == Some(pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    out
}

/// `v` without the paths of `set` (upstream's `RemoveItems`): a member goes with all under
/// it; an object or list emptied by the removal goes too (the root stays, maybe empty).
pub fn remove_items(types: &dyn TypeInfo, v: &Value, set: &FieldSet) -> Value {
    if set.is_empty() {
        return v.clone();
    }
    remove_at(types, v, set, &mut Vec::new()).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove_at<'a>(
    types: &dyn TypeInfo,
    v: &'a Value,
    set: &FieldSet,
    sp: &mut Vec<&'a str>,
) -> Option<Value> {
    match v {
        Value::Object(m) if !m.is_empty() && types.map_type(sp) != MapType::Atomic => {
            let mut out = Map::new();
            for (k, val) in m {
                let pe = PathElement::Field(k.clone());
                if set.has_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => {
                        sp.push(k);
                        if let Some(x) = remove_at(types, val, sub, sp) {
                            out.insert(k.clone(), x);
                        }
                        sp.pop();
                    }
                    None => {
                        out.insert(k.clone(), val.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) if !items.is_empty() => {
            let Some(pes) = elements(types, sp, items) else {
                return Some(v.clone());
            };
            let mut out = Vec::with_capacity(items.len());
            for (pe, item) in pes.iter().zip(items) {
                if set.has_member(pe) {
                    continue;
                }
                match set.child(pe) {
                    Some(sub) => out.extend(remove_at(types, item, sub, sp)),
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

/// `set` with every struct field that has paths under it made a member too (upstream's
/// `EnsureNamedFieldsAreMembers`), so that removing it removes the field.
pub fn ensure_named_fields_are_members(types: &dyn TypeInfo, set: &FieldSet) -> FieldSet {
    ensure_at(types, set, &mut Vec::new())
}

fn ensure_at<'a>(types: &dyn TypeInfo, set: &'a FieldSet, sp: &mut Vec<&'a str>) -> FieldSet {
    let mut out = set.clone();
    let is_struct = types.map_type(sp) == MapType::Struct;
    let mut rebuilt = Vec::new();
    for (pe, child) in set.children() {
        let named = match pe {
            PathElement::Field(n) => Some(n.as_str()),
            _ => None,
        };
        if let Some(n) = named {
            if is_struct {
                out.insert_member(pe.clone());
            }
            sp.push(n);
        }
        rebuilt.push((pe.clone(), ensure_at(types, child, sp)));
        if named.is_some() {
            sp.pop();
        }
    }
    for (pe, child) in rebuilt {
        out.replace_child(pe, child);
    }
    out
}
