//! [`TypeInfo`] from the schema catalog (`listwatch-schema`): a kind's OpenAPI schema says
//! how its lists and maps merge; what it does not declare merges as upstream's deduced
//! type does (lists atomic, objects granular maps).

use std::cell::RefCell;
use std::collections::HashMap;

use listwatch_schema::{Catalog, Node, Shape};
use serde_json::Value;

use crate::types::{ListType, MapType, TypeAt, TypeInfo};

/// The types of one kind in a catalog, walked node by node: a [`TypeAt`] is an index into
/// the schema nodes met so far, each remembered once by its place in the catalog (at most
/// one entry per declaration of the catalog, whatever the objects walked: make one per
/// request or share it).
pub struct SchemaTypes<'a> {
    nodes: RefCell<Nodes<'a>>,
    /// Whether the kind is one of the built-in kinds (not a custom resource's): only their
    /// `protocol` keys default to `TCP` without a declared default.
    builtin: bool,
}

/// The schema nodes handed out; index 0 is "the schema knows nothing here".
struct Nodes<'a> {
    list: Vec<Option<Node<'a>>>,
    /// A node's index by its identity in the catalog (the addresses of its declaration and
    /// of the type it resolves to).
    index: HashMap<(usize, usize), u32>,
}

impl<'a> Nodes<'a> {
    fn intern(&mut self, n: Option<Node<'a>>) -> TypeAt {
        let Some(node) = n else {
            return TypeAt(0);
        };
        let id = node.identity();
        if let Some(i) = self.index.get(&id) {
            return TypeAt(*i);
        }
        // Bounded by the catalog's declarations; past u32 (never), "unknown".
        let Ok(i) = u32::try_from(self.list.len()) else {
            return TypeAt(0);
        };
        self.list.push(Some(node));
        self.index.insert(id, i);
        TypeAt(i)
    }
}

impl<'a> SchemaTypes<'a> {
    /// The types of `group/version kind`.
    pub fn new(catalog: &'a Catalog, group: &str, version: &str, kind: &str) -> Self {
        let mut nodes = Nodes {
            list: vec![None],
            index: HashMap::new(),
        };
        // The root is index 1 (or 0 when the catalog does not know the kind).
        let root = nodes.intern(catalog.kind(group, version, kind));
        debug_assert!(root.0 <= 1);
        Self {
            nodes: RefCell::new(nodes),
            builtin: root.0 == 1 && !catalog.is_custom(group, version, kind),
        }
    }

    fn node(&self, at: TypeAt) -> Option<Node<'a>> {
        let i = usize::try_from(at.0).ok()?;
        self.nodes.borrow().list.get(i).copied().flatten()
    }

    /// The node of the objects at `at`: a list's items, else the node itself.
    fn object(&self, at: TypeAt) -> Option<Node<'a>> {
        let n = self.node(at)?;
        match n.shape() {
            Shape::List => n.items(),
            _ => Some(n),
        }
    }
}

impl TypeInfo for SchemaTypes<'_> {
    fn root(&self) -> TypeAt {
        if self.nodes.borrow().list.len() > 1 {
            TypeAt(1)
        } else {
            TypeAt(0)
        }
    }

    fn field(&self, at: TypeAt, name: &str) -> TypeAt {
        let n = self.node(at).and_then(|p| p.field(name));
        self.nodes.borrow_mut().intern(n)
    }

    fn list_type(&self, at: TypeAt) -> ListType {
        match self.node(at) {
            Some(n) if n.shape() == Shape::List => match n.list_type() {
                listwatch_schema::ListType::Atomic => ListType::Atomic,
                listwatch_schema::ListType::Set => ListType::Set,
                listwatch_schema::ListType::Map(keys) => {
                    ListType::Map(keys.into_iter().map(str::to_owned).collect())
                }
            },
            _ => ListType::Atomic,
        }
    }

    fn map_type(&self, at: TypeAt) -> MapType {
        let Some(n) = self.object(at) else {
            return MapType::Granular;
        };
        let atomic = n.map_type() == listwatch_schema::MapType::Atomic;
        match n.shape() {
            _ if atomic => MapType::Atomic,
            Shape::Struct => MapType::Struct,
            _ => MapType::Granular,
        }
    }

    /// The key field's declared default; else, in a built-in kind, `TCP` for `protocol`,
    /// the one defaulted list-map key of the built-in kinds (container, service and
    /// endpoint ports: upstream's schemas declare `default: TCP`, the vendored definitions
    /// leave defaults out). A custom resource's keys default only as its schema declares.
    fn key_default(&self, at: TypeAt, key: &str) -> Option<Value> {
        let declared = self
            .object(at)
            .and_then(|items| items.field(key))
            .and_then(|f| f.declaration().get("default").cloned());
        declared
            .or_else(|| (self.builtin && key == "protocol").then(|| Value::String("TCP".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::type_at;

    #[test]
    fn builtin_kinds_merge_as_their_schemas_say() {
        let catalog = Catalog::builtin();
        let pod = SchemaTypes::new(&catalog, "", "v1", "Pod");
        assert_eq!(
            pod.list_type(type_at(&pod, &["spec", "containers"])),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            pod.list_type(type_at(&pod, &["spec", "containers", "ports"])),
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(
            pod.list_type(type_at(&pod, &["spec", "tolerations"])),
            ListType::Atomic
        );
        assert_eq!(
            pod.list_type(type_at(&pod, &["metadata", "finalizers"])),
            ListType::Set
        );
        assert_eq!(pod.map_type(type_at(&pod, &[])), MapType::Struct);
        assert_eq!(
            pod.map_type(type_at(&pod, &["spec", "containers"])),
            MapType::Struct
        );
        assert_eq!(
            pod.map_type(type_at(&pod, &["metadata", "labels"])),
            MapType::Granular
        );
        assert_eq!(
            pod.key_default(type_at(&pod, &["spec", "containers", "ports"]), "protocol"),
            Some(Value::String("TCP".into()))
        );
        let deploy = SchemaTypes::new(&catalog, "apps", "v1", "Deployment");
        assert_eq!(
            deploy.map_type(type_at(&deploy, &["spec", "selector"])),
            MapType::Atomic
        );
        // A custom resource's list-map keyed by `protocol` without a declared default: no
        // default (only the built-in kinds' `protocol` keys default to TCP); a declared one
        // is used.
        let mut custom = Catalog::new();
        let schema = serde_json::json!({"type": "object", "properties": {"spec": {
            "type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {"type": "object", "properties": {
                        "port": {"type": "integer"}, "protocol": {"type": "string"}}}},
                "routes": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["protocol"],
                    "items": {"type": "object", "properties": {
                        "protocol": {"type": "string", "default": "UDP"}}}}}}}});
        custom
            .add_custom("example.com", "v1", "Gate", Some(&schema))
            .unwrap();
        let gate = SchemaTypes::new(&custom, "example.com", "v1", "Gate");
        assert_eq!(
            gate.key_default(type_at(&gate, &["spec", "ports"]), "protocol"),
            None
        );
        assert_eq!(
            gate.key_default(type_at(&gate, &["spec", "routes"]), "protocol"),
            Some(Value::String("UDP".into()))
        );
        // A kind the catalog does not know: deduced.
        let cr = SchemaTypes::new(&catalog, "example.com", "v1", "Widget");
        assert_eq!(cr.map_type(type_at(&cr, &["spec"])), MapType::Granular);
        assert_eq!(
            cr.list_type(type_at(&cr, &["spec", "items"])),
            ListType::Atomic
        );
    }
}
