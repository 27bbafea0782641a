//! Sets of field paths (structured-merge-diff's `fieldpath.Set`) and their FieldsV1 form.
//!
//! A set is a tree: `members` are the paths that end here, `children` the subtrees under
//! one more step. A path can be a member and have children at once (FieldsV1 writes the
//! member as `".": {}` beside the children). Invariant: no child subtree is empty — every
//! operation that can empty one drops it, so two equal sets are equal as values.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::path::{Path, PathElement};

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

/// Why a FieldsV1 document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    /// Not an object, or an entry that is not an object.
    #[error("FieldsV1 must be nested JSON objects")]
    Shape,
    /// A key that is not `.`, `f:`, `k:`, `v:` or `i:`.
    #[error("invalid FieldsV1 key {0:?}")]
    Key(String),
    /// Nested deeper than the limit.
    #[error("FieldsV1 nests deeper than {0} levels")]
    TooDeep(usize),
    /// More paths than the limit.
    #[error("FieldsV1 holds more than {0} paths")]
    TooLarge(usize),
}

/// Bounds on a FieldsV1 document read from a request or the store.
#[derive(Debug, Clone, Copy)]
pub struct FieldsLimits {
    /// How deep the nesting may go.
    pub max_depth: usize,
    /// How many entries (members and subtrees) all together.
    pub max_entries: usize,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// How many paths the set holds.
    pub fn len(&self) -> usize {
        self.members.len() + self.children.values().map(FieldSet::len).sum::<usize>()
    }

    /// Adds a path (the empty path names the root, which is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            // Cloning the step only when the subtree is new (inserts are the hot path).
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(c) => c.insert(rest),
                None => {
                    let mut c = FieldSet::new();
                    c.insert(rest);
                    self.children.insert(first.clone(), c);
                }
            },
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether `pe` is a member at this level.
    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The subtree under one step, if any.
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// Makes `pe` a member at this level.
    pub(crate) fn insert_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    /// Adds the paths of `child` under one step (nothing if it is empty): a walk that builds
    /// a set level by level moves each subtree in once instead of inserting every path
    /// from the root (which costs the path's depth per path).
    pub(crate) fn add_child(&mut self, pe: PathElement, child: FieldSet) {
        if child.is_empty() {
            return;
        }
        match self.children.get_mut(&pe) {
            Some(mine) => mine.union_with(&child),
            None => {
                self.children.insert(pe, child);
            }
        }
    }

    /// Takes the subtrees out (the members stay).
    pub(crate) fn take_children(&mut self) -> BTreeMap<PathElement, FieldSet> {
        std::mem::take(&mut self.children)
    }

    /// Every path in the set, in order (a member before the paths under it).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    /// Calls `f` with every path in the order of [`FieldSet::paths`] until it returns
    /// `false`; only the path being visited is built (no path is cloned unless `f` does).
    pub fn visit_paths(&self, f: &mut dyn FnMut(&[PathElement]) -> bool) {
        self.visit(&mut Vec::new(), f);
    }

    fn visit(
        &self,
        prefix: &mut Vec<PathElement>,
        f: &mut dyn FnMut(&[PathElement]) -> bool,
    ) -> bool {
        let steps: BTreeSet<&PathElement> =
            self.members.iter().chain(self.children.keys()).collect();
        for pe in steps {
            prefix.push(pe.clone());
            let go_on = (!self.members.contains(pe) || f(prefix))
                && self.children.get(pe).is_none_or(|c| c.visit(prefix, f));
            prefix.pop();
            if !go_on {
                return false;
            }
        }
        true
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        let steps: BTreeSet<&PathElement> =
            self.members.iter().chain(self.children.keys()).collect();
        for pe in steps {
            prefix.push(pe.clone());
            if self.members.contains(pe) {
                out.push(Path(prefix.clone()));
            }
            if let Some(c) = self.children.get(pe) {
                c.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    /// Adds every path of `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        self.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(c),
                None => {
                    self.children.insert(pe.clone(), c.clone());
                }
            }
        }
    }

    /// Adds every path of `other`, taking it: [`FieldSet::union_with`] without copying
    /// what `other` holds (into an empty set, the whole of it is moved in).
    pub fn union_owned(&mut self, other: FieldSet) {
        if self.is_empty() {
            *self = other;
            return;
        }
        self.members.extend(other.members);
        for (pe, c) in other.children {
            match self.children.entry(pe) {
                Entry::Occupied(mine) => mine.into_mut().union_owned(c),
                Entry::Vacant(slot) => {
                    slot.insert(c);
                }
            }
        }
    }

    /// Takes out the paths of `other` in place: the set becomes
    /// [`FieldSet::difference`]`(other)`, at a cost in `other`'s size (the sets removed are
    /// small: reset and server-owned fields, one write's removals), nothing copied.
    pub fn remove_all(&mut self, other: &FieldSet) {
        for m in &other.members {
            self.members.remove(m);
        }
        for (pe, o) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.remove_all(o);
                if mine.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// Takes out the paths of `other` and everything under its members in place: the set
    /// becomes [`FieldSet::recursive_difference`]`(other)`, at a cost in `other`'s size.
    pub fn remove_recursive(&mut self, other: &FieldSet) {
        for m in &other.members {
            self.members.remove(m);
            self.children.remove(m);
        }
        for (pe, o) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.remove_recursive(o);
                if mine.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, c)| {
                let i = c.intersection(other.children.get(pe)?);
                (!i.is_empty()).then(|| (pe.clone(), i))
            })
            .collect();
        FieldSet { members, children }
    }

    /// Paths of this set not in `other` (path by path: removing a member leaves the
    /// paths under it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, c)| match other.children.get(pe) {
                None => Some((pe.clone(), c.clone())),
                Some(o) => {
                    let d = c.difference(o);
                    (!d.is_empty()).then(|| (pe.clone(), d))
                }
            })
            .collect();
        FieldSet { members, children }
    }

    /// Paths of this set neither in `other` nor under one of its members (upstream's
    /// `RecursiveDifference`, used to leave out ignored fields and everything under them).
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(pe, _)| !other.members.contains(*pe))
            .filter_map(|(pe, c)| match other.children.get(pe) {
                None => Some((pe.clone(), c.clone())),
                Some(o) => {
                    let d = c.recursive_difference(o);
                    (!d.is_empty()).then(|| (pe.clone(), d))
                }
            })
            .collect();
        FieldSet { members, children }
    }

    /// The FieldsV1 document of this set (`{"f:a":{".":{},"f:b":{}}}`).
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_map(false))
    }

    fn fields_v1_map(&self, include_self: bool) -> Map<String, Value> {
        let mut m = Map::new();
        if include_self && !self.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for pe in &self.members {
            if !self.children.contains_key(pe) {
                m.insert(pe.to_fields_v1_key(), Value::Object(Map::new()));
            }
        }
        for (pe, c) in &self.children {
            let own = self.members.contains(pe);
            m.insert(pe.to_fields_v1_key(), Value::Object(c.fields_v1_map(own)));
        }
        m
    }

    /// Reads a FieldsV1 document within `limits`.
    pub fn from_fields_v1(v: &Value, limits: FieldsLimits) -> Result<FieldSet, FieldsError> {
        let Value::Object(m) = v else {
            return Err(FieldsError::Shape);
        };
        let mut budget = limits.max_entries;
        Self::read(m, 1, limits, &mut budget).map(|(s, _)| s)
    }

    /// Reads one level; also says whether it held `"."` (its parent is then a member).
    fn read(
        m: &Map<String, Value>,
        depth: usize,
        limits: FieldsLimits,
        budget: &mut usize,
    ) -> Result<(FieldSet, bool), FieldsError> {
        if depth > limits.max_depth {
            return Err(FieldsError::TooDeep(limits.max_depth));
        }
        let mut out = FieldSet::new();
        let mut own = false;
        for (k, v) in m {
            let Value::Object(inner) = v else {
                return Err(FieldsError::Shape);
            };
            if k == "." {
                own = true;
                continue;
            }
            *budget = budget
                .checked_sub(1)
                .ok_or(FieldsError::TooLarge(limits.max_entries))?;
            let pe = PathElement::from_fields_v1_key(k)
                .ok_or_else(|| FieldsError::Key(k.chars().take(64).collect()))?;
            if inner.is_empty() {
                out.members.insert(pe);
                continue;
            }
            let (child, child_own) = Self::read(inner, depth + 1, limits, budget)?;
            if child_own {
                out.members.insert(pe.clone());
            }
            if !child.is_empty() {
                out.children.insert(pe, child);
            } else if !child_own {
                // `{"f:a": {"f:b"...}}` can only be empty if it held nothing but `.`:
                // an entry without content is a member, as upstream reads it.
                out.members.insert(pe);
            }
        }
        Ok((out, own))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: FieldsLimits = FieldsLimits {
        max_depth: 100,
        max_entries: 10_000,
    };

    fn set(v: Value) -> FieldSet {
        FieldSet::from_fields_v1(&v, LIMITS).unwrap()
    }

    #[test]
    fn fields_v1_round_trips_with_dot_for_members_that_have_children() {
        let doc = json!({"f:data":{".":{},"f:a":{}},"f:metadata":{"f:labels":{"f:app":{}}},
            "f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}},
            "f:finalizers":{"v:\"x\"":{}}}});
        let s = set(doc.clone());
        assert!(s.has(&Path::fields(&["data"]).0));
        assert!(s.has(&Path::fields(&["data", "a"]).0));
        assert!(!s.has(&Path::fields(&["metadata"]).0));
        assert_eq!(s.to_fields_v1(), doc);
        assert_eq!(s.len(), 6);
        let paths: Vec<String> = s.paths().iter().map(ToString::to_string).collect();
        assert_eq!(
            paths,
            [
                ".data",
                ".data.a",
                ".metadata.labels.app",
                r#".spec.containers[name="c"]"#,
                r#".spec.containers[name="c"].image"#,
                r#".spec.finalizers[="x"]"#
            ]
        );
    }

    /// Small random sets: paths of up to 3 steps over 3 names.
    fn arb_set() -> impl proptest::strategy::Strategy<Value = FieldSet> {
        use proptest::prelude::*;
        prop::collection::vec(prop::collection::vec(0u8..3, 1..4), 0..12).prop_map(|paths| {
            let mut s = FieldSet::new();
            for p in paths {
                let names: Vec<String> = p.iter().map(|i| format!("n{i}")).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                s.insert(&Path::fields(&names).0);
            }
            s
        })
    }

    proptest::proptest! {
        /// The in-place operations give what the copying ones give (the copying ones are
        /// the reference: upstream's algebra, path by path).
        #[test]
        fn in_place_operations_equal_the_copying_ones(a in arb_set(), b in arb_set()) {
            let mut u = a.clone();
            u.union_owned(b.clone());
            proptest::prop_assert_eq!(&u, &a.union(&b));
            let mut d = a.clone();
            d.remove_all(&b);
            proptest::prop_assert_eq!(&d, &a.difference(&b));
            let mut r = a.clone();
            r.remove_recursive(&b);
            proptest::prop_assert_eq!(&r, &a.recursive_difference(&b));
        }
    }

    #[test]
    fn hostile_fields_v1_is_refused() {
        let mut deep = json!({});
        for _ in 0..200 {
            deep = json!({ "f:a": deep });
        }
        assert_eq!(
            FieldSet::from_fields_v1(&deep, LIMITS),
            Err(FieldsError::TooDeep(100))
        );
        let wide: Map<String, Value> = (0..10_001).map(|i| (format!("f:{i}"), json!({}))).collect();
        assert_eq!(
            FieldSet::from_fields_v1(&Value::Object(wide), LIMITS),
            Err(FieldsError::TooLarge(10_000))
        );
        assert!(FieldSet::from_fields_v1(&json!({"x:1": {}}), LIMITS).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1}), LIMITS).is_err());
        assert!(FieldSet::from_fields_v1(&json!([]), LIMITS).is_err());
    }

    #[test]
    fn algebra_is_path_by_path_and_drops_empty_subtrees() {
        let a = set(json!({"f:a":{".":{},"f:b":{},"f:c":{}},"f:d":{}}));
        let b = set(json!({"f:a":{"f:b":{},"f:c":{}}}));
        let d = a.difference(&b);
        assert_eq!(d.to_fields_v1(), json!({"f:a":{},"f:d":{}}));
        assert_eq!(a.intersection(&b), b);
        assert_eq!(a.difference(&a), FieldSet::new());
        assert_eq!(d.union(&b), a);
        let ignored = set(json!({"f:a":{}}));
        assert_eq!(
            a.recursive_difference(&ignored).to_fields_v1(),
            json!({"f:d":{}})
        );
    }
}
