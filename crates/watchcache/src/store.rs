//! The state of a resource at one resource version: objects ordered by key, plus secondary
//! indexes, all in copy-on-write maps.
//!
//! Invariants:
//! - a [`Store`] value is a version: cloning it costs a few reference-count bumps, and a
//!   clone never sees later changes made to the original (imbl's maps copy the path they
//!   touch, O(log n) nodes, when a node is shared);
//! - `indexes[i]` holds, for every object `o` in `objects` at key `k`, the entry `k → o`
//!   under the value `config.indexes[i].value_of(o)`, and nothing else; an index value with
//!   no object has no entry. The members of a value are the objects themselves (shared
//!   `Object` handles, not keys), ordered by key: an indexed list is one lookup of the value
//!   plus a walk of its members, with no second lookup per item in `objects`, and it pages
//!   exactly like a key-range scan (pinned and rebuilt past states keep their indexes too);
//! - `bytes` is the sum of [`entry_bytes`] over `objects`.
//!
//! Memory: an index costs, per object, one member entry (its key handle and object handle,
//! 40 bytes, plus the B-tree's node slack) in the value's map; the objects' bytes are shared,
//! never copied.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use listwatch_api::Object;
use listwatch_api::fields::FieldOperator;
use listwatch_storage::SelectionPredicate;

use crate::config::Index;

/// The field path of an object's namespace.
pub(crate) const NAMESPACE: &str = "metadata.namespace";

/// Accounted bytes of one cached object: its serialized bytes plus its key.
pub(crate) fn entry_bytes(key: &str, object: &Object) -> usize {
    key.len() + object.size()
}

/// The objects of one index value, by key.
type Members = OrdMap<Arc<str>, Object>;

/// One version of the cached state.
#[derive(Clone, Default)]
pub(crate) struct Store {
    /// Every object, by storage key path.
    objects: OrdMap<Arc<str>, Object>,
    /// Parallel to the config's indexes: value → its objects by key.
    indexes: Vec<OrdMap<Arc<str>, Members>>,
    /// Accounted bytes of `objects`.
    bytes: usize,
}

/// A page of a list.
pub(crate) struct Page {
    /// Matching objects in key order.
    pub(crate) items: Vec<Object>,
    /// The key of the last item, when more matching objects follow it.
    pub(crate) more_after: Option<Arc<str>>,
    /// How many objects were looked at to build the page (tests: which path was taken).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests only"))]
    pub(crate) visited: usize,
}

impl Store {
    /// An empty store for `indexes`.
    pub(crate) fn new(indexes: &[Index]) -> Self {
        Self {
            objects: OrdMap::new(),
            indexes: vec![OrdMap::new(); indexes.len()],
            bytes: 0,
        }
    }

    /// Number of objects.
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Accounted bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The object at `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Object> {
        self.objects.get(key)
    }

    /// Inserts or replaces; returns the previous object.
    pub(crate) fn upsert(
        &mut self,
        specs: &[Index],
        key: Arc<str>,
        object: Object,
    ) -> Option<Object> {
        let added = entry_bytes(&key, &object);
        let prev = self.objects.insert(Arc::clone(&key), object.clone());
        for (spec, index) in specs.iter().zip(self.indexes.iter_mut()) {
            let new_value = spec.value_of(&object);
            if let Some(p) = &prev {
                let old_value = spec.value_of(p);
                if old_value != new_value {
                    remove_member(index, &old_value, &key);
                }
            }
            // Also when the value stays: the member is the object, which changed.
            match index.get_mut(&*new_value) {
                Some(members) => {
                    members.insert(Arc::clone(&key), object.clone());
                }
                None => {
                    index.insert(
                        new_value.into(),
                        OrdMap::unit(Arc::clone(&key), object.clone()),
                    );
                }
            }
        }
        self.bytes += added;
        if let Some(p) = &prev {
            self.bytes -= entry_bytes(&key, p);
        }
        prev
    }

    /// Removes; returns the object that was there.
    pub(crate) fn remove(&mut self, specs: &[Index], key: &str) -> Option<Object> {
        let (key, prev) = self.objects.remove_with_key(key)?;
        for (spec, index) in specs.iter().zip(self.indexes.iter_mut()) {
            remove_member(index, &spec.value_of(&prev), &key);
        }
        self.bytes -= entry_bytes(&key, &prev);
        Some(prev)
    }

    /// Objects under `prefix` (a collection path ending in `/`, or one object's path when
    /// `exact`), matching `predicate`, in key order from `start` (inclusive), at most `limit`.
    /// When the predicate fixes indexed fields, only the members of the most selective of
    /// those indexes (the fewest objects under the fixed value) are visited, those under
    /// `prefix` only; a fixed value no object has answers at once. `namespace` is the
    /// namespace every object under `prefix` is in, when the caller narrowed the prefix to one
    /// for a selector fixing it. When the index and the prefix answer the whole selector, the
    /// candidates are taken without evaluating it again.
    #[expect(clippy::too_many_arguments, reason = "one list request, taken apart")]
    pub(crate) fn page(
        &self,
        specs: &[Index],
        prefix: &str,
        namespace: Option<&str>,
        exact: bool,
        predicate: &SelectionPredicate,
        start: Option<&str>,
        limit: Option<usize>,
    ) -> Page {
        if exact {
            let items: Vec<Object> = self
                .objects
                .get(prefix)
                .filter(|o| start.is_none_or(|s| prefix >= s) && predicate.matches(o))
                .cloned()
                .into_iter()
                .collect();
            let visited = items.len();
            return Page {
                items,
                more_after: None,
                visited,
            };
        }
        let lower: &str = match start {
            Some(s) if s > prefix => s,
            _ => prefix,
        };
        // The keys under `prefix` end before its successor: the iterators stop there by their
        // position, without reading each key (the key bytes live apart from the map's nodes,
        // one cache miss per item).
        let upper = successor(prefix);
        let range = (
            Bound::Included(lower),
            upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        );
        // The smallest member set among the indexes whose field the selector fixes (an absent
        // value is an empty set).
        let mut indexed: Option<(&Index, &str, Option<&Members>)> = None;
        if self.indexes.len() == specs.len() {
            for (spec, index) in specs.iter().zip(&self.indexes) {
                let Some(value) = predicate.field.exact_match(spec.field_path()) else {
                    continue;
                };
                let members = index.get(value);
                let size = members.map_or(0, OrdMap::len);
                if indexed.is_none_or(|(_, _, best)| best.map_or(0, OrdMap::len) > size) {
                    indexed = Some((spec, value, members));
                }
            }
        }
        match indexed {
            Some((spec, value, members)) => {
                let Some(members) = members else {
                    return Page {
                        items: Vec::new(),
                        more_after: None,
                        visited: 0,
                    };
                };
                // The index agrees with its field (see `IndexFn`).
                let answered = answered(predicate, namespace, Some((spec.field_path(), value)));
                let candidates = members
                    .range::<_, str>(range)
                    .take_while(|(k, _)| upper.is_some() || k.starts_with(prefix));
                collect(candidates, predicate, answered, limit, members.len())
            }
            None => {
                let candidates = self
                    .objects
                    .range::<_, str>(range)
                    .take_while(|(k, _)| upper.is_some() || k.starts_with(prefix));
                let answered = answered(predicate, namespace, None);
                collect(candidates, predicate, answered, limit, 0)
            }
        }
    }

    /// Every object, in key order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Object)> {
        self.objects.iter()
    }

    /// Checks the index invariant (tests only).
    #[cfg(test)]
    pub(crate) fn check_indexes(&self, specs: &[Index]) {
        for (spec, index) in specs.iter().zip(&self.indexes) {
            // The same objects (the same handles, at the same versions) under each value.
            type Listing = std::collections::BTreeMap<Box<str>, Vec<(Arc<str>, u64, Vec<u8>)>>;
            let entry = |k: &Arc<str>, o: &Object| {
                (
                    Arc::clone(k),
                    o.resource_version(),
                    o.stored_json().to_vec(),
                )
            };
            let mut expected = Listing::default();
            for (k, o) in &self.objects {
                expected
                    .entry(spec.value_of(o))
                    .or_default()
                    .push(entry(k, o));
            }
            let got: Listing = index
                .iter()
                .map(|(v, members)| {
                    let list = members.iter().map(|(k, o)| entry(k, o)).collect();
                    (Box::<str>::from(&**v), list)
                })
                .collect();
            assert_eq!(
                got,
                expected,
                "index {} disagrees with objects",
                spec.field_path()
            );
        }
    }
}

/// The least string above every string starting with `prefix`, when its last character is
/// ASCII below DEL (as a collection path's `/` is): every key in `[prefix, successor)` starts
/// with `prefix`.
fn successor(prefix: &str) -> Option<String> {
    let last = *prefix.as_bytes().last()?;
    if last >= 0x7f {
        return None;
    }
    let mut s = prefix.to_owned();
    s.pop();
    s.push(char::from(last + 1));
    Some(s)
}

fn remove_member(index: &mut OrdMap<Arc<str>, Members>, value: &str, key: &str) {
    let now_empty = index.get_mut(value).is_some_and(|members| {
        members.remove(key);
        members.is_empty()
    });
    if now_empty {
        index.remove(value);
    }
}

/// Whether every object under a prefix in `namespace` (when set) whose `field` equals
/// `value` (when set) matches `predicate`: each of its terms is one of those equalities, and
/// it selects no shard.
fn answered(
    predicate: &SelectionPredicate,
    namespace: Option<&str>,
    indexed: Option<(&str, &str)>,
) -> bool {
    predicate.label.is_empty()
        && predicate.shard.is_empty()
        && predicate.field.terms().iter().all(|t| {
            let equality = matches!(
                t.operator,
                FieldOperator::Equals | FieldOperator::DoubleEquals
            );
            let by_index = indexed.is_some_and(|(f, v)| t.field == f && t.value == v);
            let by_prefix = namespace.is_some_and(|ns| t.field == NAMESPACE && t.value == ns);
            equality && (by_index || by_prefix)
        })
}

/// Collects a page from `candidates` (in key order); `everything` says that each candidate
/// matches without evaluating `predicate`; `expected` is how many candidates there may be
/// at most (0 when unknown), to size the page once.
fn collect<'a>(
    candidates: impl Iterator<Item = (&'a Arc<str>, &'a Object)>,
    predicate: &SelectionPredicate,
    everything: bool,
    limit: Option<usize>,
    expected: usize,
) -> Page {
    let mut items = Vec::with_capacity(limit.map_or(expected, |l| expected.min(l)));
    let mut last: Option<&Arc<str>> = None;
    let mut visited = 0;
    for (k, o) in candidates {
        visited += 1;
        if !everything && !predicate.matches(o) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            // One more match exists beyond the page: the caller hands out a continue token.
            return Page {
                items,
                more_after: last.cloned(),
                visited,
            };
        }
        items.push(o.clone());
        last = Some(k);
    }
    Page {
        items,
        more_after: None,
        visited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::labels::Labels;
    use listwatch_api::{FieldSelector, LabelSelector, SelectableFields};

    fn pod(ns: &str, name: &str, node: &str, app: &str) -> (Arc<str>, Object) {
        let json = serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"nodeName": node},
        });
        let o = Object::from_value(json, &SelectableFields::new(["spec.nodeName"])).unwrap();
        (format!("/pods/{ns}/{name}").into(), o)
    }

    fn specs() -> Vec<Index> {
        vec![Index::field("spec.nodeName"), Index::namespace()]
    }

    /// The first page of all pods whose fields match `field`.
    fn by_field(st: &Store, s: &[Index], field: &str) -> Page {
        st.page(s, "/pods/", None, false, &pred(field, ""), None, None)
    }

    fn pred(field: &str, label: &str) -> SelectionPredicate {
        SelectionPredicate {
            label: LabelSelector::parse(label).unwrap(),
            field: FieldSelector::parse(field).unwrap(),
            ..SelectionPredicate::default()
        }
    }

    fn names(p: &Page) -> Vec<&str> {
        p.items.iter().map(Object::name).collect()
    }

    /// Issue 12: with a namespace index declared before the node index, a selector fixing
    /// both read the namespace's keys (the first index that matched); the node's are fewer.
    #[test]
    fn the_most_selective_index_is_read() {
        let s = vec![Index::namespace(), Index::field("spec.nodeName")];
        let mut st = Store::new(&s);
        for i in 0..100 {
            let (k, o) = pod("a", &format!("p{i:03}"), &format!("n{}", i % 10), "x");
            st.upsert(&s, k, o);
        }
        let (k, o) = pod("b", "q", "n1", "x");
        st.upsert(&s, k, o);
        let both = pred("metadata.namespace=a,spec.nodeName=n1", "");
        let page = st.page(&s, "/pods/", None, false, &both, None, None);
        assert_eq!(page.items.len(), 10);
        assert_eq!(
            page.visited, 11,
            "read the node index (11 keys), not the namespace's (100)"
        );
        // A value no object has answers without reading anything.
        let none = pred("metadata.namespace=a,spec.nodeName=n99", "");
        let page = st.page(&s, "/pods/", None, false, &none, None, None);
        assert!(page.items.is_empty());
        assert_eq!(page.visited, 0);
    }

    #[test]
    fn indexes_follow_moves_and_deletes() {
        let s = specs();
        let mut st = Store::new(&s);
        for (k, o) in [
            pod("a", "1", "n1", "x"),
            pod("a", "2", "n1", "y"),
            pod("b", "3", "n2", "x"),
        ] {
            st.upsert(&s, k, o);
        }
        let (k, o) = pod("a", "2", "n2", "y");
        assert!(st.upsert(&s, k, o).is_some());
        assert!(st.remove(&s, "/pods/a/1").is_some());
        assert!(st.remove(&s, "/pods/a/1").is_none());
        st.check_indexes(&s);
        let p = by_field(&st, &s, "spec.nodeName=n2");
        assert_eq!(names(&p), ["2", "3"]);
        let p = by_field(&st, &s, "spec.nodeName=n1");
        assert!(p.items.is_empty());
    }

    fn labels(p: &Page) -> Vec<String> {
        p.items
            .iter()
            .map(|o| o.labels().get_label("app").unwrap_or_default().to_owned())
            .collect()
    }

    /// Issue 12 item 9: an index holds the objects themselves, so an update that keeps the
    /// indexed value must replace the member too; a list through the index otherwise returns
    /// the object as it was when it entered that value.
    #[test]
    fn index_members_are_the_current_objects() {
        let s = specs();
        let mut st = Store::new(&s);
        let (k, o) = pod("a", "1", "n1", "x");
        st.upsert(&s, k, o);
        let (k, o) = pod("a", "1", "n1", "y");
        st.upsert(&s, k, o);
        st.check_indexes(&s);
        let by_node = by_field(&st, &s, "spec.nodeName=n1");
        assert_eq!(labels(&by_node), ["y"]);
        // Moved to another node and changed: gone from n1, current under n2.
        let (k, o) = pod("a", "1", "n2", "z");
        st.upsert(&s, k, o);
        st.check_indexes(&s);
        let n1 = by_field(&st, &s, "spec.nodeName=n1");
        assert!(n1.items.is_empty());
        let n2 = by_field(&st, &s, "spec.nodeName=n2");
        assert_eq!(labels(&n2), ["z"]);
        // Deleted: gone from every index, and an emptied value has no entry left.
        st.remove(&s, "/pods/a/1");
        st.check_indexes(&s);
        assert!(st.indexes.iter().all(OrdMap::is_empty));
    }

    /// A list whose selector the index (and the prefix's namespace) answer takes the members
    /// without evaluating the selector; one with any other term still evaluates it.
    #[test]
    fn only_selectors_the_index_answers_skip_evaluation() {
        let s = specs();
        let mut st = Store::new(&s);
        for (k, o) in [
            pod("a", "1", "n1", "x"),
            pod("a", "2", "n1", "y"),
            pod("b", "3", "n1", "x"),
            pod("b", "4", "n2", "x"),
        ] {
            st.upsert(&s, k, o);
        }
        let list = |prefix: &str, ns: Option<&str>, field: &str, label: &str| {
            names(&st.page(&s, prefix, ns, false, &pred(field, label), None, None))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            list("/pods/", None, "spec.nodeName=n1", ""),
            ["1", "2", "3"]
        );
        assert_eq!(
            list("/pods/", None, "spec.nodeName==n1", "app=x"),
            ["1", "3"]
        );
        assert_eq!(
            list("/pods/", None, "spec.nodeName=n1,spec.nodeName=n2", ""),
            Vec::<String>::new()
        );
        assert_eq!(
            list("/pods/", None, "spec.nodeName=n1,metadata.name!=2", ""),
            ["1", "3"]
        );
        // The namespace term is answered only by a prefix narrowed to that namespace.
        assert_eq!(
            list("/pods/", None, "spec.nodeName=n1,metadata.namespace=b", ""),
            ["3"]
        );
        assert_eq!(
            list(
                "/pods/b/",
                Some("b"),
                "spec.nodeName=n1,metadata.namespace=b",
                ""
            ),
            ["3"]
        );
        assert_eq!(
            list("/pods/b/", Some("b"), "metadata.namespace=b", ""),
            ["3", "4"]
        );
        assert_eq!(
            list("/pods/b/", Some("b"), "metadata.namespace=a", ""),
            Vec::<String>::new()
        );
    }

    /// The namespace's key range bounds an index walk: node ∩ namespace visits only the
    /// node's members in that namespace.
    #[test]
    fn an_index_walk_stays_in_the_prefix() {
        let s = specs();
        let mut st = Store::new(&s);
        for i in 0..50 {
            let ns = if i < 40 { "a" } else { "b" };
            let (k, o) = pod(ns, &format!("p{i:02}"), "n1", "x");
            st.upsert(&s, k, o);
        }
        let p = st.page(
            &s,
            "/pods/b/",
            Some("b"),
            false,
            &pred("metadata.namespace=b,spec.nodeName=n1", ""),
            None,
            None,
        );
        assert_eq!(p.items.len(), 10);
        assert_eq!(
            p.visited, 10,
            "walked from the prefix, not the node's 50 members"
        );
    }

    #[test]
    fn byte_accounting_follows_changes() {
        let s = specs();
        let mut st = Store::new(&s);
        let (k, o) = pod("a", "1", "n1", "x");
        let want = entry_bytes(&k, &o);
        st.upsert(&s, Arc::clone(&k), o.clone());
        st.upsert(&s, Arc::clone(&k), o);
        assert_eq!(st.bytes(), want);
        st.remove(&s, &k);
        assert_eq!(st.bytes(), 0);
    }

    #[test]
    fn pages_stop_at_the_limit_and_report_the_last_key() {
        let s = specs();
        let mut st = Store::new(&s);
        for i in 0..5 {
            let (k, o) = pod(
                "a",
                &format!("p{i}"),
                "n1",
                if i % 2 == 0 { "x" } else { "y" },
            );
            st.upsert(&s, k, o);
        }
        let (k, o) = pod("ab", "z", "n1", "x");
        st.upsert(&s, k, o);
        let everything = SelectionPredicate::everything();
        let p = st.page(&s, "/pods/a/", None, false, &everything, None, Some(2));
        assert_eq!(names(&p), ["p0", "p1"]);
        assert_eq!(p.more_after.as_deref(), Some("/pods/a/p1"));
        let p = st.page(
            &s,
            "/pods/a/",
            None,
            false,
            &everything,
            Some("/pods/a/p3\0"),
            Some(2),
        );
        assert_eq!(names(&p), ["p4"]);
        assert!(
            p.more_after.is_none(),
            "the neighbouring namespace must not count"
        );
        // A filtered page that ends exactly at the last match has no continuation.
        let p = st.page(
            &s,
            "/pods/a/",
            None,
            false,
            &pred("", "app=x"),
            Some("/pods/a/p1\0"),
            Some(2),
        );
        assert_eq!(names(&p), ["p2", "p4"]);
        assert!(p.more_after.is_none());
        // Through an index, the same.
        let p = st.page(
            &s,
            "/pods/",
            None,
            false,
            &pred("spec.nodeName=n1", "app=x"),
            None,
            Some(3),
        );
        assert_eq!(names(&p), ["p0", "p2", "p4"]);
        assert_eq!(p.more_after.as_deref(), Some("/pods/a/p4"));
    }

    #[test]
    fn clones_do_not_see_later_changes() {
        let s = specs();
        let mut st = Store::new(&s);
        let (k, o) = pod("a", "1", "n1", "x");
        st.upsert(&s, k, o);
        let before = st.clone();
        st.remove(&s, "/pods/a/1");
        assert_eq!(before.len(), 1);
        assert_eq!(before.iter().count(), 1);
        assert_eq!(st.len(), 0);
        before.check_indexes(&s);
    }
}
