//! Server-side apply against a reference model, over random sequences of applies and
//! updates by several managers.
//!
//! The model knows only leaves — `data.kN` (a string) and set-list items `tags[="tN"]` —
//! and states upstream's rules on them directly:
//! - an apply by M conflicts on every leaf it changes that another manager owns (unless
//!   forced: then M takes it); M then owns exactly the leaves of its configuration; a leaf
//!   M owned before and no longer applies is removed unless another manager owns it;
//! - an update by M takes every leaf it adds or changes; a removed leaf has no owner;
//! - an update that sends `managedFields: []` clears every owner first (leaves it does not
//!   change are then owned by nobody, and an apply leaves them alone — unless the applier
//!   drops its last leaf of a container nobody else owns anything of: upstream's pruning
//!   then removes the container whole, so the model tracks who owns the containers too: an
//!   update that creates one owns it, as upstream's compare reports it added);
//! - the first apply to an object nobody owns gives its leaves to `before-first-apply`.
//!
//! After every step the object's leaves and every manager's owned leaves must agree with
//! the model, and a refused apply must report exactly the model's conflicts. The run
//! counts the branches it reached (conflict, forced take, removal, removal prevented by
//! another owner, unowned leaf kept, update taking a field, before-first-apply) and fails
//! if one was never reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use listwatch_apply::{
    ApplyError, FieldSet, FieldsLimits, ListType, Managed, MapType, Operation, Scope, TypeAt,
    TypeInfo,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};
use serde_json::{Map, Value, json};

struct Types;

impl TypeInfo for Types {
    fn field(&self, at: TypeAt, name: &str) -> TypeAt {
        by_path_field(at, name)
    }

    fn list_type(&self, at: TypeAt) -> ListType {
        let path = by_path(at);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["tags"] => ListType::Set,
            _ => ListType::Atomic,
        }
    }

    fn map_type(&self, at: TypeAt) -> MapType {
        let path = by_path(at);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["data"] => MapType::Granular,
            _ => MapType::Struct,
        }
    }
}

// Test types by schema path: a position is an index into the paths asked about (a test's
// few paths; the server's `SchemaTypes` walks schema nodes instead).
thread_local! {
    static PATHS: std::cell::RefCell<Vec<Vec<String>>> = std::cell::RefCell::new(vec![Vec::new()]);
}

fn by_path(at: TypeAt) -> Vec<String> {
    PATHS.with(|p| p.borrow().get(at.0 as usize).cloned().unwrap_or_default())
}

fn by_path_field(at: TypeAt, name: &str) -> TypeAt {
    let mut p = by_path(at);
    p.push(name.to_owned());
    PATHS.with(|paths| {
        let mut paths = paths.borrow_mut();
        match paths.iter().position(|q| *q == p) {
            Some(i) => TypeAt(i as u32),
            None => {
                paths.push(p);
                TypeAt((paths.len() - 1) as u32)
            }
        }
    })
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Leaf {
    Data(u8),
    Tag(u8),
}

impl Leaf {
    fn path(&self) -> String {
        match self {
            Leaf::Data(i) => format!(".data.k{i}"),
            Leaf::Tag(i) => format!(".tags[=\"t{i}\"]"),
        }
    }
}

/// What a write sets: data values and tags.
#[derive(Debug, Clone)]
struct Content {
    data: BTreeMap<u8, u8>,
    tags: Vec<u8>,
}

impl Content {
    fn leaves(&self) -> BTreeMap<Leaf, String> {
        let mut out: BTreeMap<Leaf, String> = self
            .data
            .iter()
            .map(|(k, v)| (Leaf::Data(*k), format!("v{v}")))
            .collect();
        for t in &self.tags {
            out.insert(Leaf::Tag(*t), String::new());
        }
        out
    }

    fn object(&self) -> Value {
        let mut o = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}});
        if !self.data.is_empty() {
            let m: Map<String, Value> = self
                .data
                .iter()
                .map(|(k, v)| (format!("k{k}"), json!(format!("v{v}"))))
                .collect();
            o["data"] = Value::Object(m);
        }
        if !self.tags.is_empty() {
            o["tags"] = self.tags.iter().map(|t| json!(format!("t{t}"))).collect();
        }
        o
    }
}

#[derive(Debug, Clone)]
enum Op {
    Apply {
        who: u8,
        content: Content,
        force: bool,
    },
    Update {
        who: u8,
        content: Content,
    },
    /// An update that also resets managedFields.
    Reset {
        who: u8,
        content: Content,
    },
}

fn content() -> impl Strategy<Value = Content> {
    (
        prop::collection::btree_map(0u8..4, 0u8..2, 0..4),
        prop::collection::btree_set(0u8..4, 0..3),
    )
        .prop_flat_map(|(data, tags)| {
            let tags: Vec<u8> = tags.into_iter().collect();
            (Just(data), Just(tags.clone()).prop_shuffle())
        })
        .prop_map(|(data, tags)| Content { data, tags })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, content(), any::<bool>()).prop_map(|(who, content, force)| Op::Apply {
            who,
            content,
            force
        }),
        3 => (0u8..3, content()).prop_map(|(who, content)| Op::Update { who, content }),
        2 => (0u8..3, content()).prop_map(|(who, content)| Op::Reset { who, content }),
    ]
}

type Owner = (String, Operation);

/// The two containers of leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Container {
    Data,
    Tags,
}

impl Leaf {
    fn container(&self) -> Container {
        match self {
            Leaf::Data(_) => Container::Data,
            Leaf::Tag(_) => Container::Tags,
        }
    }
}

const CONTAINERS: [Container; 2] = [Container::Data, Container::Tags];

#[derive(Default)]
struct Model {
    obj: BTreeMap<Leaf, String>,
    owners: BTreeMap<Leaf, BTreeSet<Owner>>,
    /// Who owns a container itself: an update that creates it does (upstream's compare
    /// reports it added), until it goes.
    node_owners: BTreeMap<Container, BTreeSet<Owner>>,
}

static CONFLICTS: AtomicUsize = AtomicUsize::new(0);
static FORCED: AtomicUsize = AtomicUsize::new(0);
static REMOVED: AtomicUsize = AtomicUsize::new(0);
static KEPT_BY_OTHER: AtomicUsize = AtomicUsize::new(0);
static UPDATE_TOOK: AtomicUsize = AtomicUsize::new(0);
static UNOWNED_KEPT: AtomicUsize = AtomicUsize::new(0);
static UNOWNED_DROPPED: AtomicUsize = AtomicUsize::new(0);
static BEFORE_FIRST: AtomicUsize = AtomicUsize::new(0);
static UNTRACKED: AtomicUsize = AtomicUsize::new(0);

impl Model {
    fn present(&self, c: Container) -> bool {
        self.obj.keys().any(|l| l.container() == c)
    }

    /// Containers that are gone are owned by nobody.
    fn forget_gone_containers(&mut self) {
        for c in CONTAINERS {
            if !self.present(c) {
                self.node_owners.remove(&c);
            }
        }
    }

    /// The conflicts of an apply, or the new state.
    fn apply(
        &mut self,
        who: &str,
        config: &Content,
        force: bool,
    ) -> Result<(), BTreeSet<(String, String)>> {
        let me: Owner = (who.to_owned(), Operation::Apply);
        let (owners_before, nodes_before) = (self.owners.clone(), self.node_owners.clone());
        if self.owners.is_empty() && self.node_owners.is_empty() && !self.obj.is_empty() {
            // Everything there goes to before-first-apply, containers included.
            BEFORE_FIRST.fetch_add(1, Relaxed);
            let bfa: Owner = ("before-first-apply".to_owned(), Operation::Update);
            for l in self.obj.keys() {
                self.owners
                    .entry(l.clone())
                    .or_default()
                    .insert(bfa.clone());
                self.node_owners
                    .entry(l.container())
                    .or_default()
                    .insert(bfa.clone());
            }
        }
        let want = config.leaves();
        let changed: Vec<&Leaf> = want
            .iter()
            .filter(|(l, v)| self.obj.get(*l) != Some(*v))
            .map(|(l, _)| l)
            .collect();
        let conflicts: BTreeSet<(String, String)> = changed
            .iter()
            .flat_map(|l| {
                self.owners
                    .get(*l)
                    .into_iter()
                    .flatten()
                    .filter(|o| **o != me)
                    .map(|o| (o.0.clone(), l.path()))
            })
            .collect();
        if !conflicts.is_empty() {
            if !force {
                // A refused apply changes nothing (not even before-first-apply).
                self.owners = owners_before;
                self.node_owners = nodes_before;
                CONFLICTS.fetch_add(1, Relaxed);
                return Err(conflicts);
            }
            FORCED.fetch_add(1, Relaxed);
        }
        for l in changed {
            self.owners.remove(l);
        }
        let last: Vec<Leaf> = self
            .owners
            .iter()
            .filter(|(_, o)| o.contains(&me))
            .map(|(l, _)| l.clone())
            .collect();
        for (l, v) in &want {
            self.obj.insert(l.clone(), v.clone());
            self.owners.entry(l.clone()).or_default().insert(me.clone());
        }
        for l in last.iter().filter(|l| !want.contains_key(*l)) {
            let owners = self.owners.entry(l.clone()).or_default();
            owners.remove(&me);
            if owners.is_empty() {
                self.owners.remove(l);
                self.obj.remove(l);
                REMOVED.fetch_add(1, Relaxed);
            } else {
                KEPT_BY_OTHER.fetch_add(1, Relaxed);
            }
        }
        // Upstream's pruning removes a container the applier owned leaves in as a whole
        // when nobody owns it or anything in it any more: leaves nobody owns go with it.
        // Elsewhere, leaves nobody owns stay.
        for c in CONTAINERS {
            let had = last.iter().any(|l| l.container() == c);
            let owned = self.owners.keys().any(|l| l.container() == c)
                || self.node_owners.get(&c).is_some_and(|o| !o.is_empty());
            let unowned: Vec<Leaf> = self
                .obj
                .keys()
                .filter(|l| l.container() == c && !self.owners.contains_key(*l))
                .cloned()
                .collect();
            if unowned.is_empty() {
                continue;
            }
            if had && !owned {
                UNOWNED_DROPPED.fetch_add(1, Relaxed);
                for l in unowned {
                    self.obj.remove(&l);
                }
            } else {
                UNOWNED_KEPT.fetch_add(1, Relaxed);
            }
        }
        self.forget_gone_containers();
        Ok(())
    }

    /// An update (`exists`: of an object already there, not a create).
    fn update(&mut self, who: &str, new: &Content, exists: bool) {
        let me: Owner = (who.to_owned(), Operation::Update);
        let new = new.leaves();
        if exists && self.owners.is_empty() && self.node_owners.is_empty() {
            // Owned by nobody (reset, or never tracked): the update is not tracked either,
            // until an apply (upstream's `skipNonAppliedManager`).
            UNTRACKED.fetch_add(1, Relaxed);
            self.obj = new;
            return;
        }
        let before: Vec<bool> = CONTAINERS.iter().map(|c| self.present(*c)).collect();
        for (l, v) in &new {
            if self.obj.get(l) != Some(v) {
                let owners = self.owners.entry(l.clone()).or_default();
                if owners.iter().any(|o| *o != me) {
                    UPDATE_TOOK.fetch_add(1, Relaxed);
                }
                owners.clear();
                owners.insert(me.clone());
            }
        }
        for l in self.obj.keys() {
            if !new.contains_key(l) {
                self.owners.remove(l);
            }
        }
        self.obj = new;
        for (c, was) in CONTAINERS.iter().zip(before) {
            if !was && self.present(*c) {
                self.node_owners.entry(*c).or_default().insert(me.clone());
            }
        }
        self.forget_gone_containers();
    }
}

const LIMITS: FieldsLimits = FieldsLimits {
    max_depth: 100,
    max_entries: 100_000,
};

fn leaves_of(obj: &Value) -> BTreeMap<Leaf, String> {
    let mut out = BTreeMap::new();
    if let Some(d) = obj.get("data").and_then(Value::as_object) {
        for (k, v) in d {
            let i: u8 = k.trim_start_matches('k').parse().unwrap();
            out.insert(Leaf::Data(i), v.as_str().unwrap().to_owned());
        }
    }
    if let Some(t) = obj.get("tags").and_then(Value::as_array) {
        for v in t {
            let i: u8 = v.as_str().unwrap().trim_start_matches('t').parse().unwrap();
            out.insert(Leaf::Tag(i), String::new());
        }
    }
    out
}

/// Owned leaves per manager, from the object's managedFields.
fn owned_of(obj: &Value) -> BTreeMap<Leaf, BTreeSet<Owner>> {
    let managed = Managed::decode(obj["metadata"].get("managedFields"), LIMITS).unwrap();
    let all = [0, 1, 2, 3]
        .into_iter()
        .flat_map(|i| [Leaf::Data(i), Leaf::Tag(i)]);
    let mut out: BTreeMap<Leaf, BTreeSet<Owner>> = BTreeMap::new();
    for l in all {
        let p = l.path();
        for (id, vs) in &managed.fields {
            if vs.set.paths().iter().any(|q| q.to_string() == p) {
                out.entry(l.clone())
                    .or_default()
                    .insert((id.manager.clone(), id.operation));
            }
        }
    }
    out
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut ignored = FieldSet::new();
    ignored.insert(&listwatch_apply::fieldmanager::field_path(&["status"]));
    let scope = Scope {
        types: &Types,
        api_version: "v1",
        kind: "ConfigMap",
        subresource: "",
        ignored,
        now: "2026-12-01T10:00:00Z",
        limits: LIMITS,
    };
    let mut model = Model::default();
    let mut live: Option<Value> = None;
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Apply {
                who,
                content,
                force,
            } => {
                let who = format!("m{who}");
                let got = scope.apply(live.as_ref(), &content.object(), &who, *force);
                match (got, model.apply(&who, content, *force)) {
                    (Ok(obj), Ok(())) => live = Some(obj),
                    (Err(ApplyError::Conflicts(c)), Err(want)) => {
                        let got: BTreeSet<(String, String)> =
                            c.0.iter()
                                .map(|(m, p)| (m.manager.clone(), p.to_string()))
                                .collect();
                        prop_assert_eq!(got, want, "step {}: conflicts", step);
                    }
                    (got, want) => {
                        return Err(TestCaseError::fail(format!(
                            "step {step}: apply gave {got:?}, the model {want:?}"
                        )));
                    }
                }
            }
            Op::Update { who, content } => {
                let who = format!("m{who}");
                let mut new = content.object();
                scope.update(live.as_ref(), &mut new, &who);
                model.update(&who, content, live.is_some());
                live = Some(new);
            }
            Op::Reset { who, content } => {
                let who = format!("m{who}");
                let mut new = content.object();
                new["metadata"]["managedFields"] = json!([]);
                scope.update(live.as_ref(), &mut new, &who);
                model.owners.clear();
                model.node_owners.clear();
                model.update(&who, content, live.is_some());
                live = Some(new);
            }
        }
        let obj = live.clone().unwrap_or(Value::Null);
        prop_assert_eq!(&leaves_of(&obj), &model.obj, "step {}: object", step);
        prop_assert_eq!(&owned_of(&obj), &model.owners, "step {}: owners", step);
    }
    Ok(())
}

#[test]
fn apply_and_update_agree_with_the_reference_model() {
    // A fixed seed: the branch counts asserted below are then the same on every run.
    let config = Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let result = runner.run(&prop::collection::vec(op(), 1..14), |ops| run(&ops));
    if let Err(e) = result {
        panic!("{e}");
    }
    for (name, n) in [
        ("conflict", &CONFLICTS),
        ("forced take", &FORCED),
        ("removal of a dropped field", &REMOVED),
        ("dropped field kept by another owner", &KEPT_BY_OTHER),
        ("update taking a field", &UPDATE_TOOK),
        ("before-first-apply", &BEFORE_FIRST),
        ("untracked update of an object nobody owns", &UNTRACKED),
    ] {
        let n = n.load(Relaxed);
        assert!(n > 0, "the {name} branch was never reached");
        eprintln!("{name}: {n}");
    }
    // Fields nobody owns no longer arise from these operations: an update of an object
    // nobody owns is not tracked (upstream's `skipNonAppliedManager`), so the next apply
    // gives every field to before-first-apply. The branches stay for the model's sake.
    for (name, n) in [
        ("unowned field kept by an apply", &UNOWNED_KEPT),
        ("unowned field dropped with its container", &UNOWNED_DROPPED),
    ] {
        eprintln!("{name}: {}", n.load(Relaxed));
    }
}
