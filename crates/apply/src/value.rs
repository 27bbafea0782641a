//! The four walks of structured merge over JSON values, each steered by a [`TypeInfo`]:
//! the field set a value spells ([`to_field_set`]), the difference between two values
//! ([`compare`]; against nothing, a create's, [`added_by_create`]), an apply configuration
//! merged over a live object ([`merge`]), and a value with the paths of a set taken out
//! ([`remove_items`]).
//!
//! The shape of a value decides what it is (object, list, scalar); the types decide how it
//! merges. A list whose items cannot be identified by its type (a map-list item without a
//! key, a set item that is not a scalar) is treated as atomic in a live object, and refused
//! in an apply configuration ([`validate_config`]), so no walk fails half-way.
//!
//! Every walk recurses once per nesting level: callers bound the depth of what they pass
//! (the server decodes bodies and stored objects within its depth limit). Every walk costs
//! O(size of the values and sets it is given): the type is walked alongside the value (a
//! [`TypeAt`] per level, never the path), and field sets are built level by level (a
//! subtree is moved into its parent once, not each path inserted from the root). The
//! comparison passes over a child equal in both values after one equality check (no type
//! lookup, no allocation), so what it builds is proportional to what changed; its equality
//! checks cost at most the values' size per level of the deepest change.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use crate::path::{Path, PathElement};
use crate::set::FieldSet;
use crate::types::{ListType, MapType, TypeAt, TypeInfo};

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
        self.added.remove_recursive(ignored);
        self.modified.remove_recursive(ignored);
        self.removed.remove_recursive(ignored);
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
    at: TypeAt,
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
            None => match types.key_default(at, k) {
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

/// The step of every item of a list of type `at`, or `None` when the list is atomic (by its
/// type, or because an item cannot be identified).
fn elements(types: &dyn TypeInfo, at: TypeAt, items: &[Value]) -> Option<Vec<PathElement>> {
    match types.list_type(at) {
        ListType::Atomic => None,
        ListType::Set => items
            .iter()
            .map(|i| (shape(i) == Shape::Scalar).then(|| PathElement::value(i)))
            .collect(),
        ListType::Map(keys) if keys.is_empty() => None,
        ListType::Map(keys) => items
            .iter()
            .map(|i| item_key(types, at, &keys, i).ok())
            .collect(),
    }
}

/// Refuses an apply configuration whose lists do not fit their types: a map-list item
/// without its keys or a set item that is not a scalar (upstream: "failed to create typed
/// patch object"), or two items with the same key (upstream: "duplicate entries for key").
pub fn validate_config(types: &dyn TypeInfo, config: &Value) -> Result<(), String> {
    validate(types, config, types.root(), &mut Vec::new())
}

/// `path` is the walk's path for error messages; a field step is only spelled out there.
fn validate(
    types: &dyn TypeInfo,
    v: &Value,
    at: TypeAt,
    path: &mut Vec<PathElement>,
) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if types.map_type(at) == MapType::Atomic {
                return Ok(());
            }
            for (k, val) in m {
                path.push(PathElement::Field(k.clone()));
                let r = validate(types, val, types.field(at, k), path);
                path.pop();
                r?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let lt = types.list_type(at);
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
                    ListType::Map(keys) => item_key(types, at, keys, item),
                }
                .map_err(|e| format!("{}: element {i}: {e}", Path(path.clone())))?;
                if !seen.insert(pe.clone()) {
                    return Err(format!(
                        "{}: duplicate entries for key {pe}",
                        Path(path.clone())
                    ));
                }
                path.push(pe);
                let r = validate(types, item, at, path);
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
    field_set(types, v, types.root(), &mut set);
    set
}

/// Adds the paths under `v` to `out` (the set under `v`'s path); true when `v`'s own path
/// is a member (its parent records it).
fn field_set(types: &dyn TypeInfo, v: &Value, at: TypeAt, out: &mut FieldSet) -> bool {
    match v {
        Value::Object(m) => {
            let mt = types.map_type(at);
            if mt == MapType::Atomic {
                return true;
            }
            for (k, val) in m {
                let pe = PathElement::Field(k.clone());
                let mut sub = FieldSet::new();
                let own = field_set(types, val, types.field(at, k), &mut sub);
                if own
                    || val.is_null()
                    || val.as_object().is_some_and(Map::is_empty)
                    || mt == MapType::Granular
                {
                    out.insert_member(pe.clone());
                }
                out.add_child(pe, sub);
            }
            false
        }
        Value::Array(items) => {
            let Some(pes) = elements(types, at, items) else {
                return true;
            };
            let mut count: BTreeMap<&PathElement, usize> = BTreeMap::new();
            for pe in &pes {
                *count.entry(pe).or_default() += 1;
            }
            for (pe, item) in pes.iter().zip(items) {
                let mut sub = FieldSet::new();
                if count.get(pe).copied().unwrap_or(0) < 2 {
                    field_set(types, item, at, &mut sub);
                }
                out.insert_member(pe.clone());
                out.add_child(pe.clone(), sub);
            }
            false
        }
        _ => true,
    }
}

/// What changed from `old` to `new` (upstream's `Compare`).
pub fn compare(types: &dyn TypeInfo, old: &Value, new: &Value) -> Comparison {
    let mut c = Comparison::default();
    // The root path is never a member.
    let _ = compare_at(types, Some(old), Some(new), types.root(), &mut c);
    c
}

/// What a create adds: the paths [`compare`] of an empty object with `new` reports added
/// (every path of `new`, containers included, as the [`to_field_set`] of an object nobody
/// had would not say), walked over `new` alone. Nothing is compared and no type is looked
/// up for a scalar or an empty container (their type changes nothing): the walk costs one
/// set entry per path and one type lookup per non-empty container.
///
/// Equal to `compare(types, &json!({}), new).added` (the other two sets are then empty);
/// `tests/robust.rs` checks it on arbitrary objects of built-in kinds.
pub fn added_by_create(types: &dyn TypeInfo, new: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    let root = types.root();
    // The root is never a member; an atomic root is one leaf, the root itself.
    if let Value::Object(m) = new
        && !m.is_empty()
        && types.map_type(root) != MapType::Atomic
    {
        added_fields(types, m, root, &mut set);
    }
    set
}

/// Adds every field of an object of type `at` to `out` (the set under its path), each a
/// member with what is under it.
fn added_fields(types: &dyn TypeInfo, m: &Map<String, Value>, at: TypeAt, out: &mut FieldSet) {
    for (k, val) in m {
        let sub = added_under(types, val, Step::Field(at, k));
        let pe = PathElement::Field(k.clone());
        out.insert_member(pe.clone());
        out.add_child(pe, sub);
    }
}

/// How to find a value's type, when it matters: a field of an object of a type, or the type
/// of a list's items (the list's own).
#[derive(Clone, Copy)]
enum Step<'a> {
    Field(TypeAt, &'a str),
    Item(TypeAt),
}

impl Step<'_> {
    fn at(self, types: &dyn TypeInfo) -> TypeAt {
        match self {
            Step::Field(at, name) => types.field(at, name),
            Step::Item(at) => at,
        }
    }
}

/// The paths under `v` (not `v`'s own), whose type `step` finds when it matters:
/// [`compare_at`] with nothing on the left.
fn added_under(types: &dyn TypeInfo, v: &Value, step: Step<'_>) -> FieldSet {
    let mut sub = FieldSet::new();
    match v {
        Value::Object(m) if !m.is_empty() => {
            let at = step.at(types);
            if types.map_type(at) != MapType::Atomic {
                added_fields(types, m, at, &mut sub);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let at = step.at(types);
            // A list whose items cannot be identified is one leaf.
            if let Some(pes) = elements(types, at, items) {
                let mut count: BTreeMap<&PathElement, usize> = BTreeMap::new();
                for pe in &pes {
                    *count.entry(pe).or_default() += 1;
                }
                for (pe, item) in pes.iter().zip(items) {
                    // An item whose step repeats is added whole, nothing under it (as the
                    // comparison of a list with two items of one key against none).
                    if count.get(pe).copied().unwrap_or(0) > 1 {
                        sub.insert_member(pe.clone());
                        continue;
                    }
                    let under = added_under(types, item, Step::Item(at));
                    sub.insert_member(pe.clone());
                    sub.add_child(pe.clone(), under);
                }
            }
        }
        _ => {}
    }
    sub
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Which set of a comparison a path itself is a member of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    None,
    Added,
    Modified,
    Removed,
}

impl Comparison {
    /// Makes a child step a member of the set `own` names.
    fn mark(&mut self, pe: &PathElement, own: Own) {
        match own {
            Own::None => {}
            Own::Added => self.added.insert_member(pe.clone()),
            Own::Modified => self.modified.insert_member(pe.clone()),
            Own::Removed => self.removed.insert_member(pe.clone()),
        }
    }

    /// Records a child step: its own membership and the paths under it.
    fn add_child(&mut self, pe: PathElement, own: Own, sub: Comparison) {
        self.mark(&pe, own);
        self.added.add_child(pe.clone(), sub.added);
        self.modified.add_child(pe.clone(), sub.modified);
        self.removed.add_child(pe, sub.removed);
    }
}

/// Adds to `c` (the comparison under this path) what changed under it; returns what
/// this path itself is.
fn compare_at(
    types: &dyn TypeInfo,
    l: Option<&Value>,
    r: Option<&Value>,
    at: TypeAt,
    c: &mut Comparison,
) -> Own {
    let node = match (l, r) {
        (None, None) => return Own::None,
        (Some(a), Some(b)) if shape(a) != shape(b) => Shape::Scalar,
        (Some(a), _) | (None, Some(a)) => shape(a),
    };
    let both_empty = l.is_none_or(is_empty_container) && r.is_none_or(is_empty_container);
    let mut lists = None;
    let leaf = match node {
        Shape::Scalar => true,
        Shape::Object => both_empty || types.map_type(at) == MapType::Atomic,
        Shape::List => {
            let items = |v: Option<&Value>| -> Option<Vec<PathElement>> {
                match v {
                    None => Some(Vec::new()),
                    Some(v) => elements(types, at, v.as_array().map_or(&[], Vec::as_slice)),
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
        return match (l, r) {
            (None, Some(_)) => Own::Added,
            (Some(_), None) => Own::Removed,
            (Some(a), Some(b)) if a != b => Own::Modified,
            _ => Own::None,
        };
    }
    match (node, lists) {
        (Shape::Object, _) => {
            let lm = l.and_then(Value::as_object);
            let rm = r.and_then(Value::as_object);
            let keys: BTreeSet<&String> = lm.into_iter().chain(rm).flat_map(Map::keys).collect();
            for k in keys {
                let (lv, rv) = (lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)));
                if unchanged(lv, rv) {
                    continue;
                }
                let mut sub = Comparison::default();
                let own = compare_at(types, lv, rv, types.field(at, k), &mut sub);
                c.add_child(PathElement::Field(k.clone()), own, sub);
            }
        }
        (Shape::List, Some((lp, rp))) => {
            let li = l.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let ri = r.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            compare_items(types, (&lp, li), (&rp, ri), at, c);
        }
        _ => {}
    }
    if l.is_none() {
        Own::Added
    } else if r.is_none() {
        Own::Removed
    } else {
        Own::None
    }
}

/// Whether a child is in both values and equal there: then nothing under it is added,
/// modified or removed, and the walk passes over it without building anything (a write
/// that changes one label compares the rest of the object once, allocating nothing).
fn unchanged(l: Option<&Value>, r: Option<&Value>) -> bool {
    matches!((l, r), (Some(a), Some(b)) if a == b)
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

fn compare_items(
    types: &dyn TypeInfo,
    (lp, li): (&[PathElement], &[Value]),
    (rp, ri): (&[PathElement], &[Value]),
    at: TypeAt,
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
        if let ([l], [r]) = (ll, rl)
            && unchanged(Some(*l), Some(*r))
        {
            continue;
        }
        let mut sub = Comparison::default();
        let own = match (ll.len(), rl.len()) {
            (0, 0) => Own::None,
            (0 | 1, 0 | 1) => compare_at(
                types,
                ll.first().copied(),
                rl.first().copied(),
                at,
                &mut sub,
            ),
            (2.., 2..) => {
                if ll != rl {
                    Own::Modified
                } else {
                    Own::None
                }
            }
            (2.., _) => {
                if let Some(r) = rl.first() {
                    let inner = compare_at(types, None, Some(r), at, &mut sub);
                    c.mark(pe, inner);
                }
                Own::Removed
            }
            (_, 2..) => {
                if let Some(l) = ll.first() {
                    let inner = compare_at(types, Some(l), None, at, &mut sub);
                    c.mark(pe, inner);
                }
                Own::Added
            }
        };
        c.add_child(pe.clone(), own, sub);
    }
}

/// `config` merged over `live` (upstream's `Merge`): objects field by field, map- and
/// set-lists item by item (the configuration's order for the items it names, the live
/// items it does not name kept in place), atomic lists and scalars replaced. A null in the
/// configuration removes the field (it is still owned: [`to_field_set`] counts it).
pub fn merge(types: &dyn TypeInfo, live: &Value, config: &Value) -> Value {
    merge_at(types, Some(live), Some(config), types.root())
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

fn merge_at(
    types: &dyn TypeInfo,
    l: Option<&Value>,
    r: Option<&Value>,
    at: TypeAt,
) -> Option<Value> {
    let (l, r) = match (l, r) {
        (_, Some(Value::Null)) | (None, None) => return None,
        (Some(a), None) => return Some(a.clone()),
        (None, Some(b)) => return Some(without_nulls(b)),
        (Some(a), Some(b)) => (a, b),
    };
    match (l, r) {
        (Value::Object(lm), Value::Object(rm))
            if !(lm.is_empty() && rm.is_empty()) && types.map_type(at) != MapType::Atomic =>
        {
            let keys: BTreeSet<&String> = lm.keys().chain(rm.keys()).collect();
            let mut out = Map::new();
            for k in keys {
                if let Some(v) = merge_at(types, lm.get(k), rm.get(k), types.field(at, k)) {
                    out.insert(k.clone(), v);
                }
            }
            Some(Value::Object(out))
        }
        (Value::Array(li), Value::Array(ri)) if !(li.is_empty() && ri.is_empty()) => {
            match (elements(types, at, li), elements(types, at, ri)) {
                (Some(lp), Some(rp)) => {
                    Some(Value::Array(merge_items(types, (&lp, li), (&rp, ri), at)))
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
    at: TypeAt,
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
                out.extend(merge_at(types, l, applied.get(pe).copied(), at));
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
                out.extend(merge_at(types, li.get(i), None, at));
                i += 1;
                continue;
            } else if merged.contains(pe) {
                i += 1;
            }
        }
        if let Some(pe) = rp.get(j) {
            merged.insert(pe);
            let l = live.get(pe).copied().flatten();
            out.extend(merge_at(types, l, applied.get(pe).copied(), at));
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
    remove_at(types, v, set, types.root()).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove_at(types: &dyn TypeInfo, v: &Value, set: &FieldSet, at: TypeAt) -> Option<Value> {
    match v {
        Value::Object(m) if !m.is_empty() && types.map_type(at) != MapType::Atomic => {
            let mut out = Map::new();
            for (k, val) in m {
                let pe = PathElement::Field(k.clone());
                if set.has_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => {
                        if let Some(x) = remove_at(types, val, sub, types.field(at, k)) {
                            out.insert(k.clone(), x);
                        }
                    }
                    None => {
                        out.insert(k.clone(), val.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) if !items.is_empty() => {
            let Some(pes) = elements(types, at, items) else {
                return Some(v.clone());
            };
            let mut out = Vec::with_capacity(items.len());
            for (pe, item) in pes.iter().zip(items) {
                if set.has_member(pe) {
                    continue;
                }
                match set.child(pe) {
                    Some(sub) => out.extend(remove_at(types, item, sub, at)),
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

/// `set` with every struct field that has paths under it made a member too (upstream's
/// `EnsureNamedFieldsAreMembers`), so that removing it removes the field. Takes the set
/// and changes it in place (each level visited once, nothing copied).
pub fn ensure_named_fields_are_members(types: &dyn TypeInfo, set: FieldSet) -> FieldSet {
    ensure_at(types, set, types.root())
}

fn ensure_at(types: &dyn TypeInfo, mut set: FieldSet, at: TypeAt) -> FieldSet {
    let is_struct = types.map_type(at) == MapType::Struct;
    for (pe, child) in set.take_children() {
        let child_at = match &pe {
            PathElement::Field(n) => {
                if is_struct {
                    set.insert_member(pe.clone());
                }
                types.field(at, n)
            }
            _ => at,
        };
        let child = ensure_at(types, child, child_at);
        set.add_child(pe, child);
    }
    set
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;
    use crate::path::Path;
    use crate::types::Untyped;

    /// [`Untyped`], counting the type lookups a walk makes: one per child it descends into.
    #[derive(Default)]
    struct Counting(Cell<usize>);

    impl TypeInfo for Counting {
        fn field(&self, at: TypeAt, name: &str) -> TypeAt {
            self.0.set(self.0.get() + 1);
            Untyped.field(at, name)
        }

        fn list_type(&self, at: TypeAt) -> ListType {
            Untyped.list_type(at)
        }

        fn map_type(&self, at: TypeAt) -> MapType {
            Untyped.map_type(at)
        }
    }

    #[test]
    fn a_comparison_passes_over_what_did_not_change() {
        let annotations: Map<String, Value> = (0..200)
            .map(|i| (format!("note-{i}"), json!(format!("value {i}"))))
            .collect();
        let containers: Vec<Value> = (0..20)
            .map(|i| json!({"name": format!("c{i}"), "image": "x", "args": ["a", "b"], "env": [{"name": "K", "value": "V"}]}))
            .collect();
        let old = json!({
            "metadata": {"name": "p", "labels": {"app": "web"}, "annotations": annotations},
            "spec": {"containers": containers, "nodeName": "n1"},
        });
        let mut new = old.clone();
        new["metadata"]["labels"]["bench"] = json!("w1");
        new["spec"]["nodeName"] = json!("n2");
        let types = Counting::default();
        let c = compare(&types, &old, &new);
        let path = |p: &[&str]| Path::fields(p).0;
        assert!(c.added.has(&path(&["metadata", "labels", "bench"])));
        assert!(c.modified.has(&path(&["spec", "nodeName"])));
        assert_eq!(c.added.len() + c.modified.len() + c.removed.len(), 2);
        // metadata, labels, bench, spec, nodeName: the unchanged annotations and containers
        // (over 300 fields) are never descended into.
        assert_eq!(types.0.get(), 5);
        // Equal values compare as nothing at all.
        let same = Counting::default();
        assert_eq!(compare(&same, &old, &old.clone()), Comparison::default());
        assert_eq!(same.0.get(), 0);
    }
}
