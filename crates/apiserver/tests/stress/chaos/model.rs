//! The chaos test's model: which ConfigMaps a watcher selects, the writes that landed, and
//! what a watcher must have received for them — from its start, or from a relist at a
//! version (the truth's state at that version, then every later write).
//!
//! Written independently of the server's and the client's selector and watch code.

use std::collections::BTreeMap;

use listwatch_api::{FieldSelector, LabelSelector};
use listwatch_client::Config;
use rand::Rng;
use rand::rngs::StdRng;

pub(crate) const NAMESPACES: usize = 4;
pub(crate) const NAMES: usize = 10;
pub(crate) const APPS: u8 = 4;

/// A key: namespace index, name index.
pub(crate) type Key = (usize, usize);

/// An object's state: its `app` label and its `data.seq`.
pub(crate) type Obj = (u8, u64);

/// Which objects a watcher selects.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    namespace: Option<usize>,
    label: Label,
    /// `metadata.name=cm-N`.
    name: Option<usize>,
}

#[derive(Debug, Clone)]
enum Label {
    Any,
    Eq(u8),
    Neq(u8),
    In(u8, u8),
}

impl Selection {
    pub(crate) fn random(rng: &mut StdRng) -> Self {
        let namespace = rng
            .random_bool(0.5)
            .then(|| rng.random_range(0..NAMESPACES));
        let app = |rng: &mut StdRng| rng.random_range(0..APPS);
        let label = match rng.random_range(0..4) {
            0 => Label::Any,
            1 => Label::Eq(app(rng)),
            2 => Label::Neq(app(rng)),
            _ => Label::In(app(rng), app(rng)),
        };
        let name = rng.random_bool(0.25).then(|| rng.random_range(0..NAMES));
        Self {
            namespace,
            label,
            name,
        }
    }

    pub(crate) fn matches(&self, (ns, name): Key, app: u8) -> bool {
        self.namespace.is_none_or(|n| n == ns)
            && self.name.is_none_or(|n| n == name)
            && match self.label {
                Label::Any => true,
                Label::Eq(a) => app == a,
                Label::Neq(a) => app != a,
                Label::In(a, b) => app == a || app == b,
            }
    }

    pub(crate) fn path(&self) -> String {
        match self.namespace {
            Some(ns) => format!("/api/v1/namespaces/ns-{ns}/configmaps"),
            None => "/api/v1/configmaps".to_owned(),
        }
    }

    pub(crate) fn config(&self) -> Config {
        let label = match self.label {
            Label::Any => String::new(),
            Label::Eq(a) => format!("app=a{a}"),
            Label::Neq(a) => format!("app!=a{a}"),
            Label::In(a, b) => format!("app in (a{a},a{b})"),
        };
        let field = self
            .name
            .map(|n| format!("metadata.name=cm-{n}"))
            .unwrap_or_default();
        Config::default()
            .labels(LabelSelector::parse(&label).unwrap())
            .fields(FieldSelector::parse(&field).unwrap())
    }

    /// The selected part of a whole state, as seqs.
    pub(crate) fn select(&self, state: &BTreeMap<Key, Obj>) -> BTreeMap<Key, u64> {
        state
            .iter()
            .filter(|(k, (app, _))| self.matches(**k, *app))
            .map(|(k, (_, seq))| (*k, *seq))
            .collect()
    }
}

/// One write that landed: the object's state after it (`None`: deleted) and, when the
/// server said, the resource version it got (a delete's is not returned).
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub(crate) key: Key,
    pub(crate) after: Option<Obj>,
    pub(crate) rv: Option<u64>,
}

/// An event as a watcher received it (or as the truth predicts it, `rv` then being the
/// write's when known, 0 when not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ev {
    pub(crate) delete: bool,
    pub(crate) key: Key,
    pub(crate) seq: u64,
    pub(crate) rv: u64,
}

/// The whole state after `writes`.
pub(crate) fn state_after(writes: &[Write]) -> BTreeMap<Key, Obj> {
    let mut state = BTreeMap::new();
    for w in writes {
        match w.after {
            Some(s) => state.insert(w.key, s),
            None => state.remove(&w.key),
        };
    }
    state
}

/// The events `sel` must receive for `writes` from the whole state `state`, and its final
/// selected state.
pub(crate) fn expected(
    sel: &Selection,
    writes: &[Write],
    mut state: BTreeMap<Key, Obj>,
) -> (Vec<Ev>, BTreeMap<Key, u64>) {
    let mut out = Vec::new();
    for w in writes {
        let before = state
            .get(&w.key)
            .copied()
            .filter(|(app, _)| sel.matches(w.key, *app));
        let after = w.after.filter(|(app, _)| sel.matches(w.key, *app));
        let rv = w.rv.unwrap_or(0);
        match (before, after) {
            (_, Some((_, seq))) => out.push(Ev {
                delete: false,
                key: w.key,
                seq,
                rv,
            }),
            (Some((_, seq)), None) => out.push(Ev {
                delete: true,
                key: w.key,
                seq,
                rv,
            }),
            (None, None) => {}
        }
        match w.after {
            Some(s) => state.insert(w.key, s),
            None => state.remove(&w.key),
        };
    }
    (out, sel.select(&state))
}

/// The prefixes of `writes` a list at resource version `rv` may reflect: every write known
/// to be at or below `rv` in, every one known above out; deletes (whose versions the
/// writer does not learn) between the last write in and the first out may be either.
pub(crate) fn prefixes_at(writes: &[Write], rv: u64) -> std::ops::RangeInclusive<usize> {
    let known_in = writes
        .iter()
        .rposition(|w| w.rv.is_some_and(|v| v <= rv))
        .map_or(0, |i| i + 1);
    let first_out = writes
        .iter()
        .position(|w| w.rv.is_some_and(|v| v > rv))
        .unwrap_or(writes.len());
    // A late write (appended after writes it preceded in etcd) can put `first_out` before
    // `known_in`; the range is then the one prefix `known_in`.
    known_in..=first_out.max(known_in)
}

/// The prefix of `writes` that a list at `rv` which returned `listing` reflects: the first
/// of [`prefixes_at`] whose selected state is `listing`.
pub(crate) fn listed_prefix(
    sel: &Selection,
    writes: &[Write],
    rv: u64,
    listing: &BTreeMap<Key, u64>,
) -> Option<usize> {
    prefixes_at(writes, rv).find(|p| sel.select(&state_after(&writes[..*p])) == *listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: Key, after: Option<Obj>, rv: Option<u64>) -> Write {
        Write { key, after, rv }
    }

    #[test]
    fn a_list_version_places_deletes_either_side() {
        let writes = [
            w((0, 0), Some((0, 1)), Some(10)),
            w((0, 0), None, None),
            w((0, 1), Some((0, 3)), Some(20)),
        ];
        assert_eq!(prefixes_at(&writes, 5), 0..=0);
        assert_eq!(prefixes_at(&writes, 10), 1..=2);
        assert_eq!(prefixes_at(&writes, 19), 1..=2);
        assert_eq!(prefixes_at(&writes, 20), 3..=3);
    }
}
