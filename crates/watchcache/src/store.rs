//! The state of a resource at one resource version: objects ordered by key, plus secondary
//! indexes, all in copy-on-write maps.
//!
//! Invariants:
//! - a [`Store`] value is a version: cloning it costs a few reference-count bumps, and a
//!   clone never sees later changes made to the original (imbl's maps copy the path they
//!   touch, O(log n) nodes, when a node is shared);
//! - `indexes[i]` holds, for every object `o` in `objects`, its key under the value
//!   `config.indexes[i].value_of(o)`, and nothing else; index sets are ordered by key, so an
//!   index lookup pages exactly like a key-range scan (pinned and rebuilt past states keep
//!   their indexes too);
//! - `bytes` is the sum of [`entry_bytes`] over `objects`.

use std::ops::Bound;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use listwatch_api::Object;
use listwatch_storage::SelectionPredicate;

use crate::config::Index;

/// Accounted bytes of one cached object: its serialized bytes plus its key.
pub(crate) fn entry_bytes(key: &str, object: &Object) -> usize {
    key.len() + object.size()
}

/// Objects of one index value, by key.
type Keys = OrdSet<Arc<str>>;

/// One version of the cached state.
#[derive(Clone, Default)]
pub(crate) struct Store {
    /// Every object, by storage key path.
    objects: OrdMap<Arc<str>, Object>,
    /// Parallel to the config's indexes: value → keys.
    indexes: Vec<OrdMap<Arc<str>, Keys>>,
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
                if old_value == new_value {
                    continue;
                }
                remove_key(index, &old_value, &key);
            }
            index
                .entry(new_value.into())
                .or_default()
                .insert(Arc::clone(&key));
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
            remove_key(index, &spec.value_of(&prev), &key);
        }
        self.bytes -= entry_bytes(&key, &prev);
        Some(prev)
    }

    /// Objects under `prefix` (a collection path ending in `/`, or one object's path when
    /// `exact`), matching `predicate`, in key order from `start` (inclusive), at most `limit`.
    /// When the predicate fixes indexed fields, only the keys of the most selective of those
    /// indexes (the fewest keys under the fixed value) are visited; a fixed value no object
    /// has answers at once.
    pub(crate) fn page(
        &self,
        specs: &[Index],
        prefix: &str,
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
        let range = (Bound::Included(lower), Bound::Unbounded);
        // The smallest key set among the indexes whose field the selector fixes (an absent
        // value is an empty set).
        let mut indexed: Option<Option<&Keys>> = None;
        if self.indexes.len() == specs.len() {
            for (spec, index) in specs.iter().zip(&self.indexes) {
                let Some(value) = predicate.field.exact_match(spec.field_path()) else {
                    continue;
                };
                let keys = index.get(value);
                let size = keys.map_or(0, OrdSet::len);
                if indexed.is_none_or(|best| best.map_or(0, OrdSet::len) > size) {
                    indexed = Some(keys);
                }
            }
        }
        match indexed {
            Some(keys) => {
                let Some(keys) = keys else {
                    return Page {
                        items: Vec::new(),
                        more_after: None,
                        visited: 0,
                    };
                };
                let candidates = keys
                    .range::<_, str>(range)
                    .take_while(|k| k.starts_with(prefix))
                    .filter_map(|k| self.objects.get(&**k).map(|o| (k, o)));
                collect(candidates, predicate, limit)
            }
            None => {
                let candidates = self
                    .objects
                    .range::<_, str>(range)
                    .take_while(|(k, _)| k.starts_with(prefix));
                collect(candidates, predicate, limit)
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
            let mut expected: std::collections::BTreeMap<Box<str>, Vec<Arc<str>>> =
                Default::default();
            for (k, o) in &self.objects {
                expected
                    .entry(spec.value_of(o))
                    .or_default()
                    .push(Arc::clone(k));
            }
            let got: std::collections::BTreeMap<Box<str>, Vec<Arc<str>>> = index
                .iter()
                .map(|(v, keys)| (Box::<str>::from(&**v), keys.iter().cloned().collect()))
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

fn remove_key(index: &mut OrdMap<Arc<str>, Keys>, value: &str, key: &str) {
    let now_empty = index.get_mut(value).is_some_and(|keys| {
        keys.remove(key);
        keys.is_empty()
    });
    if now_empty {
        index.remove(value);
    }
}

fn collect<'a>(
    candidates: impl Iterator<Item = (&'a Arc<str>, &'a Object)>,
    predicate: &SelectionPredicate,
    limit: Option<usize>,
) -> Page {
    let mut items = Vec::new();
    let mut last: Option<&Arc<str>> = None;
    let everything = predicate.is_empty();
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

    fn pred(field: &str, label: &str) -> SelectionPredicate {
        SelectionPredicate {
            label: LabelSelector::parse(label).unwrap(),
            field: FieldSelector::parse(field).unwrap(),
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
        let page = st.page(&s, "/pods/", false, &both, None, None);
        assert_eq!(page.items.len(), 10);
        assert_eq!(
            page.visited, 11,
            "read the node index (11 keys), not the namespace's (100)"
        );
        // A value no object has answers without reading anything.
        let none = pred("metadata.namespace=a,spec.nodeName=n99", "");
        let page = st.page(&s, "/pods/", false, &none, None, None);
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
        let p = st.page(
            &s,
            "/pods/",
            false,
            &pred("spec.nodeName=n2", ""),
            None,
            None,
        );
        assert_eq!(names(&p), ["2", "3"]);
        let p = st.page(
            &s,
            "/pods/",
            false,
            &pred("spec.nodeName=n1", ""),
            None,
            None,
        );
        assert!(p.items.is_empty());
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
        let p = st.page(&s, "/pods/a/", false, &everything, None, Some(2));
        assert_eq!(names(&p), ["p0", "p1"]);
        assert_eq!(p.more_after.as_deref(), Some("/pods/a/p1"));
        let p = st.page(
            &s,
            "/pods/a/",
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
