//! A kind's schema compiled for the write path's walks ([`Plan`]), and the lookup those
//! walks are written against ([`SchemaView`]), which both [`Node`] and [`PlanNode`] answer.
//!
//! What it owns: the table a write's schema walks read (the typed check, the canonical
//! form, field validation's unknown fields, the label selectors) instead of the catalog's
//! JSON. [`Node::field`] resolves a field with several string-keyed lookups in the
//! definitions' JSON (`properties`, the field, `$ref`, the definition, the shape's
//! keywords) at every step of every walk; a [`Plan`] does that once per kind, when it is
//! first asked for ([`crate::Catalog::plan`]), and a walk then takes one binary search
//! per field. It also knows which parts of a kind can hold a `LabelSelector`
//! ([`SchemaView::may_hold_selector`]), so the selector walk passes over the rest of a
//! body (a pod's containers, its metadata).
//!
//! Invariants: a plan answers every question of [`SchemaView`] exactly as the [`Node`] it
//! was compiled from answers it, at every node reachable from the kind (the tests walk
//! every built-in kind's plan beside its nodes); so each walk, written once against
//! [`SchemaView`], gives the same result over either. A plan has one entry per distinct
//! node of the kind's schema (a recursive schema is a cycle of entries, not an unbounded
//! tree), owns its data (no borrow of the catalog) and is immutable once built.

use std::collections::HashMap;

use crate::node::{Node, Shape};
use crate::typecheck::{INT_OR_STRING, MICRO_TIME, QUANTITY, TIME};

/// The definition of `metav1.LabelSelector`.
pub(crate) const LABEL_SELECTOR: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector";

/// The apimachinery types a walk treats on their own (by the definition a node refers to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// None of these.
    None,
    /// `intstr.IntOrString`.
    IntOrString,
    /// `resource.Quantity`.
    Quantity,
    /// `metav1.Time` or `metav1.MicroTime`.
    Time,
    /// `metav1.LabelSelector`.
    LabelSelector,
}

impl Special {
    fn of(ref_name: Option<&str>) -> Self {
        match ref_name {
            Some(INT_OR_STRING) => Special::IntOrString,
            Some(QUANTITY) => Special::Quantity,
            Some(TIME | MICRO_TIME) => Special::Time,
            Some(LABEL_SELECTOR) => Special::LabelSelector,
            _ => Special::None,
        }
    }
}

/// The JSON type (`type`, with `format`) the resolved schema declares, as the typed check,
/// its messages and the canonical form's zero values read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// `string` (not `byte`).
    String,
    /// `string` with `format: byte` (Go's `[]byte`).
    Bytes,
    /// `boolean`.
    Boolean,
    /// `number`.
    Number,
    /// `integer` with `format: int32`.
    Int32,
    /// Any other `integer`.
    Int64,
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// No `type` (or another one).
    Other,
}

impl Scalar {
    /// What the resolved schema `ty` declares.
    pub(crate) fn of(ty: &serde_json::Value) -> Self {
        let format = ty.get("format").and_then(serde_json::Value::as_str);
        match (ty.get("type").and_then(serde_json::Value::as_str), format) {
            (Some("string"), Some("byte")) => Scalar::Bytes,
            (Some("string"), _) => Scalar::String,
            (Some("boolean"), _) => Scalar::Boolean,
            (Some("number"), _) => Scalar::Number,
            (Some("integer"), Some("int32")) => Scalar::Int32,
            (Some("integer"), _) => Scalar::Int64,
            (Some("object"), _) => Scalar::Object,
            (Some("array"), _) => Scalar::Array,
            _ => Scalar::Other,
        }
    }
}

/// What the write path's schema walks ask of a position in a kind's schema. [`Node`] reads
/// it from the catalog's JSON at each call (the reference); [`PlanNode`] from a [`Plan`].
pub trait SchemaView: Copy {
    /// What a value here is.
    fn shape(&self) -> Shape;
    /// The apimachinery type a value here is, if one of the [`Special`] ones.
    fn special(&self) -> Special;
    /// The definition the declaration refers to, if it is a reference.
    fn ref_name(&self) -> Option<&str>;
    /// The node of the field (or map key) `name`: see [`Node::field`].
    fn field(&self, name: &str) -> Option<Self>;
    /// The node of a list's items: see [`Node::items`].
    fn items(&self) -> Option<Self>;
    /// The JSON type the resolved schema declares.
    fn scalar(&self) -> Scalar;
    /// Whether a `LabelSelector` can be here or below; `false` lets the selector walk
    /// pass over the value. The reference answers `true` everywhere.
    fn may_hold_selector(&self) -> bool {
        true
    }
}

impl SchemaView for Node<'_> {
    fn shape(&self) -> Shape {
        Node::shape(self)
    }
    fn special(&self) -> Special {
        Special::of(Node::ref_name(self))
    }
    fn ref_name(&self) -> Option<&str> {
        Node::ref_name(self)
    }
    fn field(&self, name: &str) -> Option<Self> {
        Node::field(self, name)
    }
    fn items(&self) -> Option<Self> {
        Node::items(self)
    }
    fn scalar(&self) -> Scalar {
        Scalar::of(self.resolved())
    }
}

/// One node of a plan.
#[derive(Debug)]
struct Entry {
    shape: Shape,
    special: Special,
    scalar: Scalar,
    ref_name: Option<Box<str>>,
    /// The declared fields, sorted by name.
    fields: Box<[(Box<str>, u32)]>,
    /// The node of any name not in `fields` (a map's values, an untyped node's anything,
    /// a struct's `additionalProperties` or preserved unknown fields); `None`: no such field.
    other: Option<u32>,
    items: Option<u32>,
    selectors: bool,
}

/// A kind's schema compiled for the write path's walks (see the module doc). Built by
/// [`crate::Catalog::plan`].
#[derive(Debug)]
pub struct Plan {
    /// The kind's definition (`io.k8s.api.core.v1.Pod`), as [`Node::check_types`] is given it.
    def_name: Box<str>,
    /// The root is entry 0.
    entries: Vec<Entry>,
}

/// A position in a [`Plan`]. Copy; borrows the plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanNode<'p> {
    plan: &'p Plan,
    id: u32,
}

impl Plan {
    /// Compiles the schema below `root`, the kind's node, whose definition is `def_name`.
    pub(crate) fn compile(def_name: &str, root: Node<'_>) -> Plan {
        let mut c = Compiler {
            ids: HashMap::new(),
            entries: Vec::new(),
            todo: Vec::new(),
        };
        c.id_of(root);
        while let Some((id, n)) = c.todo.pop() {
            let mut fields: Vec<(Box<str>, u32)> = Vec::new();
            for name in n.field_names() {
                if let Some(child) = n.field(name) {
                    fields.push((name.into(), c.id_of(child)));
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            // A name the node does not declare: what `field` gives any other name.
            let mut undeclared = String::new();
            while fields
                .binary_search_by(|f| (*f.0).cmp(undeclared.as_str()))
                .is_ok()
            {
                undeclared.push('\0');
            }
            let other = match n.shape() {
                Shape::List => None,
                _ => n.field(&undeclared).map(|ch| c.id_of(ch)),
            };
            let items = n.items().map(|ch| c.id_of(ch));
            if let Some(e) = c.entries.get_mut(id as usize) {
                e.fields = fields.into_boxed_slice();
                e.other = other;
                e.items = items;
            }
        }
        let mut entries = c.entries;
        mark_selectors(&mut entries);
        Plan {
            def_name: def_name.into(),
            entries,
        }
    }

    /// The kind's node.
    pub fn root(&self) -> PlanNode<'_> {
        PlanNode { plan: self, id: 0 }
    }

    /// The kind's definition name.
    pub fn def_name(&self) -> &str {
        &self.def_name
    }

    /// How many distinct nodes the kind's schema has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the plan is empty (never: a plan has its root).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A plan being built: the entries so far, by node identity, and the nodes whose
/// children are still to be read.
struct Compiler<'a> {
    ids: HashMap<(usize, usize), u32>,
    entries: Vec<Entry>,
    todo: Vec<(u32, Node<'a>)>,
}

impl<'a> Compiler<'a> {
    /// The entry of `n`, added (its children to be read) if it is new.
    fn id_of(&mut self, n: Node<'a>) -> u32 {
        if let Some(id) = self.ids.get(&n.identity()) {
            return *id;
        }
        let id = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        self.entries.push(Entry {
            shape: n.shape(),
            special: Special::of(n.ref_name()),
            scalar: Scalar::of(n.resolved()),
            ref_name: n.ref_name().map(Into::into),
            fields: Box::default(),
            other: None,
            items: None,
            selectors: false,
        });
        self.ids.insert(n.identity(), id);
        self.todo.push((id, n));
        id
    }
}

/// Sets `selectors` on every entry that is a `LabelSelector` or reaches one (a fixpoint over
/// the graph, which may have cycles).
fn mark_selectors(entries: &mut [Entry]) {
    for e in entries.iter_mut() {
        e.selectors = e.special == Special::LabelSelector;
    }
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..entries.len() {
            let Some(e) = entries.get(i) else { break };
            if e.selectors {
                continue;
            }
            let reaches = |c: u32| entries.get(c as usize).is_some_and(|c| c.selectors);
            let any = e.fields.iter().any(|(_, c)| reaches(*c))
                || e.other.is_some_and(reaches)
                || e.items.is_some_and(reaches);
            if any {
                if let Some(e) = entries.get_mut(i) {
                    e.selectors = true;
                }
                changed = true;
            }
        }
    }
}

impl<'p> PlanNode<'p> {
    fn entry(&self) -> Option<&'p Entry> {
        self.plan.entries.get(self.id as usize)
    }

    fn at(&self, id: u32) -> Self {
        PlanNode {
            plan: self.plan,
            id,
        }
    }

    /// The declared field names, sorted (for tests).
    #[cfg(test)]
    fn declared(&self) -> Vec<&'p str> {
        self.entry()
            .map(|e| e.fields.iter().map(|f| &*f.0).collect())
            .unwrap_or_default()
    }
}

impl SchemaView for PlanNode<'_> {
    fn shape(&self) -> Shape {
        self.entry().map_or(Shape::Untyped, |e| e.shape)
    }
    fn special(&self) -> Special {
        self.entry().map_or(Special::None, |e| e.special)
    }
    fn ref_name(&self) -> Option<&str> {
        self.entry().and_then(|e| e.ref_name.as_deref())
    }
    fn field(&self, name: &str) -> Option<Self> {
        let e = self.entry()?;
        if e.shape == Shape::List {
            return self.items()?.field(name);
        }
        match e.fields.binary_search_by(|f| (*f.0).cmp(name)) {
            Ok(i) => e.fields.get(i).map(|f| self.at(f.1)),
            Err(_) => e.other.map(|c| self.at(c)),
        }
    }
    fn items(&self) -> Option<Self> {
        self.entry()?.items.map(|c| self.at(c))
    }
    fn scalar(&self) -> Scalar {
        self.entry().map_or(Scalar::Other, |e| e.scalar)
    }
    fn may_hold_selector(&self) -> bool {
        self.entry().is_some_and(|e| e.selectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;
    use serde_json::json;
    use std::sync::Arc;

    /// Walks `n` and `p` in lockstep through every node reachable from a kind (each plan
    /// entry once), asserting they answer alike: shape, special, reference, scalar type,
    /// each declared field, an undeclared one, a map key, and the items.
    fn same(n: Node<'_>, p: PlanNode<'_>, seen: &mut HashMap<u32, (usize, usize)>) {
        if let Some(prior) = seen.insert(p.id, n.identity()) {
            assert_eq!(prior, n.identity(), "one entry, one node");
            return;
        }
        assert_eq!(SchemaView::shape(&n), p.shape());
        assert_eq!(SchemaView::special(&n), p.special());
        assert_eq!(SchemaView::ref_name(&n), p.ref_name());
        assert_eq!(SchemaView::scalar(&n), p.scalar());
        let mut names: Vec<&str> = n.field_names().collect();
        names.sort_unstable();
        if n.shape() != Shape::List {
            assert_eq!(names, p.declared());
        }
        names.extend(["", "no-such-field", "\0"]);
        for name in names {
            match (SchemaView::field(&n, name), p.field(name)) {
                (Some(a), Some(b)) => same(a, b, seen),
                (None, None) => {}
                (a, b) => panic!("field {name:?}: {:?} vs {:?}", a.is_some(), b.is_some()),
            }
        }
        match (SchemaView::items(&n), p.items()) {
            (Some(a), Some(b)) => same(a, b, seen),
            (None, None) => {}
            (a, b) => panic!("items: {:?} vs {:?}", a.is_some(), b.is_some()),
        }
    }

    fn check_kind(cat: &Catalog, group: &str, version: &str, kind: &str) -> usize {
        let plan = cat.plan(group, version, kind).expect("a plan");
        let node = cat.kind(group, version, kind).expect("a kind");
        let mut seen = HashMap::new();
        same(node, plan.root(), &mut seen);
        assert_eq!(seen.len(), plan.len(), "every entry is reachable");
        plan.len()
    }

    #[test]
    fn every_builtin_kinds_plan_answers_as_its_nodes() {
        let cat = Catalog::new();
        let mut kinds = 0;
        for (group, version, kind) in cat.builtin_kinds() {
            check_kind(&cat, &group, &version, &kind);
            kinds += 1;
        }
        assert!(kinds > 100, "{kinds}");
        let pod = cat.plan("", "v1", "Pod").expect("pod");
        assert_eq!(pod.def_name(), "io.k8s.api.core.v1.Pod");
        assert!(pod.len() < 5_000, "{}", pod.len());
        assert!(
            Arc::ptr_eq(&pod, &cat.plan("", "v1", "Pod").expect("pod")),
            "kept"
        );
    }

    #[test]
    fn custom_kinds_plans_answer_as_their_nodes() {
        let mut cat = Catalog::new();
        cat.add_custom("example.com", "v1", "Widget", Some(&json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer", "format": "int32"}}}},
                "": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "m": {"type": "object", "additionalProperties": {"type": "boolean"}}}}}}))).unwrap();
        cat.add_custom("example.com", "v1", "Blob", None).unwrap();
        for kind in ["Widget", "WidgetList", "Blob", "BlobList"] {
            check_kind(&cat, "example.com", "v1", kind);
        }
    }

    #[test]
    fn only_the_parts_that_can_hold_a_selector_are_marked() {
        let cat = Catalog::new();
        let pod = cat.plan("", "v1", "Pod").expect("pod");
        let root = pod.root();
        let spec = root.field("spec").expect("spec");
        assert!(root.may_hold_selector() && spec.may_hold_selector());
        assert!(
            spec.field("affinity")
                .is_some_and(|a| a.may_hold_selector())
        );
        for quiet in ["containers", "tolerations", "nodeName"] {
            assert!(
                !spec.field(quiet).expect(quiet).may_hold_selector(),
                "{quiet}"
            );
        }
        assert!(
            !root
                .field("metadata")
                .expect("metadata")
                .may_hold_selector()
        );
        let cm = cat.plan("", "v1", "ConfigMap").expect("cm");
        assert!(!cm.root().may_hold_selector());
    }
}
