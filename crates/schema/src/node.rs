//! [`Node`]: one position in a kind's schema, and what strategic merge and server-side
//! apply need to know about it.

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::catalog::Catalog;

/// How many `$ref`/`allOf` hops resolving one schema may take (upstream's definitions need
/// one; the bound only guards against a reference cycle).
const MAX_REF_HOPS: usize = 8;

/// The schema of a field whose shape is not declared: anything goes.
static UNTYPED: LazyLock<Value> =
    LazyLock::new(|| json!({"x-kubernetes-preserve-unknown-fields": true}));

/// What a value at a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An object with declared fields (`properties`).
    Struct,
    /// An object whose keys are data (`additionalProperties`): labels, `data`, resources.
    Map,
    /// An array.
    List,
    /// A string, number, integer, boolean, or int-or-string / quantity.
    Scalar,
    /// Not declared (`x-kubernetes-preserve-unknown-fields`, `RawExtension`, `FieldsV1`,
    /// or a field the schema does not know): merged as JSON, lists replaced.
    Untyped,
}

/// How server-side apply treats a list (`x-kubernetes-list-type`), with upstream's
/// fallback when the extension is absent: a `merge` patch strategy with a merge key is a
/// map keyed by it, a `merge` strategy without one is a set, anything else is atomic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType<'a> {
    /// Replaced whole; owned as one field.
    Atomic,
    /// Scalars, each owned by value.
    Set,
    /// Objects identified by these keys (`x-kubernetes-list-map-keys`), each owned by key.
    Map(Vec<&'a str>),
}

/// How server-side apply treats an object (`x-kubernetes-map-type`): `granular` (each
/// key owned on its own, the default) or `atomic` (replaced whole; e.g. `LabelSelector`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// Each key separately.
    Granular,
    /// The whole object as one.
    Atomic,
}

/// Strategic merge's patch strategy of a field (`x-kubernetes-patch-strategy`, a
/// comma-separated list of `merge`, `retainKeys`, `replace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PatchStrategy {
    /// `merge`: lists are merged (by the merge key, or as a union of scalars) instead of
    /// replaced.
    pub merge: bool,
    /// `retainKeys`: the field accepts a `$retainKeys` directive, which clears the fields
    /// it does not list (kubectl sends one for such fields; strategic merge honours the
    /// directive wherever it appears, as upstream).
    pub retain_keys: bool,
    /// `replace`: an object is replaced whole instead of merged (e.g. a
    /// PodDisruptionBudget's `selector`).
    pub replace: bool,
}

/// One position in a schema: a field's declaration (its own extensions, e.g. a list's
/// `x-kubernetes-list-type`) and the type it resolves to (after `$ref`/`allOf`; e.g. a
/// struct's `x-kubernetes-map-type`). Walk from [`Catalog::kind`] with [`Node::field`]
/// and [`Node::items`]. Copy; borrows the catalog.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    catalog: &'a Catalog,
    /// The schema where the field is declared.
    site: &'a Value,
    /// The schema the declaration resolves to.
    ty: &'a Value,
    /// What a value here is: read off `ty` once, when the node is made (every walk asks it
    /// at least once per node, most several times: [`Node::field`], [`Node::items`]).
    shape: Shape,
}

impl<'a> Node<'a> {
    pub(crate) fn new(catalog: &'a Catalog, site: &'a Value) -> Self {
        let ty = resolve(catalog, site);
        Self {
            catalog,
            site,
            ty,
            shape: shape_of(ty),
        }
    }

    fn untyped(catalog: &'a Catalog) -> Self {
        Self::new(catalog, &UNTYPED)
    }

    /// An extension (or keyword) of the declaration, else of the resolved type.
    fn ext(&self, key: &str) -> Option<&'a Value> {
        self.site.get(key).or_else(|| self.ty.get(key))
    }

    /// What a value here is.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The field `name` of a value here: a struct's declared field, a map's value type, a
    /// list's items' field (so a dotted path steps through lists), or untyped where the
    /// schema keeps unknown fields. `None`: the schema has no such field (a struct that
    /// does not preserve unknown fields, or a scalar).
    pub fn field(&self, name: &str) -> Option<Node<'a>> {
        match self.shape() {
            Shape::Struct => {
                if let Some(decl) = self.ty.get("properties").and_then(|p| p.get(name)) {
                    return Some(Node::new(self.catalog, decl));
                }
                match self.ty.get("additionalProperties") {
                    Some(v @ Value::Object(_)) => Some(Node::new(self.catalog, v)),
                    Some(Value::Bool(true)) => Some(Node::untyped(self.catalog)),
                    _ if self.preserves_unknown_fields() => Some(Node::untyped(self.catalog)),
                    _ => None,
                }
            }
            Shape::Map => match self.ty.get("additionalProperties") {
                Some(v @ Value::Object(_)) => Some(Node::new(self.catalog, v)),
                _ => Some(Node::untyped(self.catalog)),
            },
            Shape::List => self.items()?.field(name),
            Shape::Untyped => Some(Node::untyped(self.catalog)),
            Shape::Scalar => None,
        }
    }

    /// The fields a struct declares (none for anything else), in the schema's order.
    pub fn field_names(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        let props = match self.shape() {
            Shape::Struct => self.ty.get("properties").and_then(Value::as_object),
            _ => None,
        };
        props.into_iter().flat_map(|m| m.keys().map(String::as_str))
    }

    /// The items of a list (`None` for anything else; untyped items for an untyped node).
    pub fn items(&self) -> Option<Node<'a>> {
        match self.shape() {
            Shape::List => Some(match self.ty.get("items") {
                Some(items) => Node::new(self.catalog, items),
                None => Node::untyped(self.catalog),
            }),
            Shape::Untyped => Some(Node::untyped(self.catalog)),
            _ => None,
        }
    }

    /// Whether the schema here keeps fields it does not declare.
    pub fn preserves_unknown_fields(&self) -> bool {
        self.ext("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    }

    /// Strategic merge's patch strategy (default: none of them, i.e. lists are replaced
    /// and objects merged).
    pub fn patch_strategy(&self) -> PatchStrategy {
        let mut out = PatchStrategy::default();
        if let Some(s) = self
            .ext("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
        {
            for part in s.split(',').map(str::trim) {
                match part {
                    "merge" => out.merge = true,
                    "retainKeys" => out.retain_keys = true,
                    "replace" => out.replace = true,
                    _ => {}
                }
            }
        }
        out
    }

    /// Strategic merge's merge key of a list of objects (`x-kubernetes-patch-merge-key`).
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.ext("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
    }

    /// Server-side apply's list type (see [`ListType`] for the fallback).
    pub fn list_type(&self) -> ListType<'a> {
        match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                self.ext("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| keys.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
            ),
            Some(_) => ListType::Atomic,
            None if self.patch_strategy().merge => match self.patch_merge_key() {
                Some(key) => ListType::Map(vec![key]),
                None => ListType::Set,
            },
            None => ListType::Atomic,
        }
    }

    /// Server-side apply's map type.
    pub fn map_type(&self) -> MapType {
        match self.ext("x-kubernetes-map-type").and_then(Value::as_str) {
            Some("atomic") => MapType::Atomic,
            _ => MapType::Granular,
        }
    }

    /// The description, for explain-like uses and error messages.
    pub fn description(&self) -> Option<&'a str> {
        self.ext("description").and_then(Value::as_str)
    }

    /// This node's identity in its catalog (where its declaration and its resolved type
    /// are): two nodes of one catalog with the same identity are the same node, so a walker
    /// can remember nodes by it, at most one entry per declaration.
    pub fn identity(&self) -> (usize, usize) {
        (
            std::ptr::from_ref(self.site) as usize,
            std::ptr::from_ref(self.ty) as usize,
        )
    }

    /// The definition the declaration refers to (`io.k8s.api.core.v1.PodSpec`), if it is
    /// a reference (`$ref`, or a single-reference `allOf`).
    pub(crate) fn ref_name(&self) -> Option<&'a str> {
        let site = self.site;
        site.get("$ref")
            .and_then(Value::as_str)
            .or_else(|| {
                match site
                    .get("allOf")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                {
                    Some([only]) => only.get("$ref").and_then(Value::as_str),
                    _ => None,
                }
            })
            .and_then(|r| r.strip_prefix(crate::normalize::COMPONENTS_PREFIX))
    }

    /// The schema the declaration resolves to.
    pub(crate) fn resolved(&self) -> &'a Value {
        self.ty
    }

    /// The declaration's schema as served (with its `allOf`/`$ref`), e.g. to embed.
    pub fn declaration(&self) -> &'a Value {
        self.site
    }
}

/// What a value of the resolved schema `ty` is.
fn shape_of(ty: &Value) -> Shape {
    if ty.get("properties").is_some_and(Value::is_object) {
        return Shape::Struct;
    }
    match ty.get("type").and_then(Value::as_str) {
        Some("array") => Shape::List,
        Some("object") => match ty.get("additionalProperties") {
            Some(Value::Object(_) | Value::Bool(true)) => Shape::Map,
            _ => Shape::Untyped,
        },
        Some("string" | "integer" | "number" | "boolean") => Shape::Scalar,
        _ if ty.get("oneOf").is_some() || ty.get("anyOf").is_some() => Shape::Scalar,
        _ if ty.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) => Shape::Scalar,
        _ => Shape::Untyped,
    }
}

/// Follows `$ref` and single-reference `allOf` to the schema they name; an unresolvable
/// reference (or a cycle past [`MAX_REF_HOPS`]) resolves to untyped.
fn resolve<'a>(catalog: &'a Catalog, mut v: &'a Value) -> &'a Value {
    for _ in 0..MAX_REF_HOPS {
        let reference = v.get("$ref").and_then(Value::as_str).or_else(|| {
            match v.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
                Some([only]) => only.get("$ref").and_then(Value::as_str),
                _ => None,
            }
        });
        match reference {
            None => return v,
            Some(r) => match catalog.resolve_ref(r) {
                Some(target) => v = target,
                None => return &UNTYPED,
            },
        }
    }
    &UNTYPED
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(path: &[&str]) -> Node<'static> {
        static CAT: LazyLock<Catalog> = LazyLock::new(Catalog::new);
        CAT.lookup("", "v1", "Pod", path)
            .unwrap_or_else(|| panic!("no {path:?}"))
    }

    /// The shape kept in a node is the one its resolved schema spells, at every node of a
    /// pod's and a deployment's schema (the computation on every call is the reference).
    #[test]
    fn a_nodes_kept_shape_is_its_schemas() {
        fn walk(n: Node<'_>, depth: usize, seen: &mut usize) {
            assert_eq!(n.shape(), shape_of(n.resolved()), "{:?}", n.declaration());
            *seen += 1;
            if depth == 0 {
                return;
            }
            for f in n.field_names() {
                if let Some(c) = n.field(f) {
                    walk(c, depth - 1, seen);
                }
            }
            for c in [n.items(), n.field("any-key")].into_iter().flatten() {
                walk(c, depth - 1, seen);
            }
        }
        let cat = Catalog::new();
        let mut seen = 0;
        for (group, kind) in [("", "Pod"), ("apps", "Deployment")] {
            walk(cat.kind(group, "v1", kind).unwrap(), 6, &mut seen);
        }
        assert!(seen > 1000, "{seen}");
    }

    #[test]
    fn containers_merge_by_name_and_their_ports_by_port_and_protocol() {
        let c = pod(&["spec", "containers"]);
        assert_eq!(c.shape(), Shape::List);
        assert_eq!(c.patch_merge_key(), Some("name"));
        assert!(c.patch_strategy().merge);
        assert_eq!(c.list_type(), ListType::Map(vec!["name"]));
        let ports = pod(&["spec", "containers", "ports"]);
        assert_eq!(ports.patch_merge_key(), Some("containerPort"));
        assert_eq!(
            ports.list_type(),
            ListType::Map(vec!["containerPort", "protocol"])
        );
        assert_eq!(pod(&["spec", "containers", "image"]).shape(), Shape::Scalar);
        assert_eq!(c.items().map(|i| i.shape()), Some(Shape::Struct));
    }

    #[test]
    fn atomic_and_unkeyed_lists_and_maps() {
        let tol = pod(&["spec", "tolerations"]);
        assert_eq!(tol.patch_merge_key(), None);
        assert!(!tol.patch_strategy().merge);
        assert_eq!(tol.list_type(), ListType::Atomic);
        let fin = pod(&["metadata", "finalizers"]);
        assert!(fin.patch_strategy().merge);
        assert_eq!(fin.list_type(), ListType::Set);
        let labels = pod(&["metadata", "labels"]);
        assert_eq!(labels.shape(), Shape::Map);
        assert_eq!(pod(&["metadata", "labels", "app"]).shape(), Shape::Scalar);
        assert_eq!(
            pod(&[
                "spec",
                "affinity",
                "podAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
                "labelSelector"
            ])
            .map_type(),
            MapType::Atomic
        );
        assert_eq!(pod(&["spec"]).map_type(), MapType::Granular);
        let vols = pod(&["spec", "volumes"]);
        assert_eq!(
            vols.patch_strategy(),
            PatchStrategy {
                merge: true,
                retain_keys: true,
                replace: false
            }
        );
        assert_eq!(
            pod(&["spec", "containers", "resources", "limits", "cpu"]).shape(),
            Shape::Scalar
        );
        assert_eq!(
            pod(&["metadata", "managedFields", "fieldsV1"]).shape(),
            Shape::Untyped
        );
        let cat = Catalog::new();
        let pdb = cat
            .lookup("policy", "v1", "PodDisruptionBudget", &["spec", "selector"])
            .unwrap();
        assert!(pdb.patch_strategy().replace);
        assert!(!pod(&["spec"]).patch_strategy().replace);
        assert!(cat.lookup("", "v1", "Pod", &["spec", "nope"]).is_none());
        let taints = cat.lookup("", "v1", "Node", &["spec", "taints"]).unwrap();
        assert_eq!(taints.list_type(), ListType::Atomic);
        assert_eq!(taints.patch_merge_key(), None);
    }

    #[test]
    fn custom_schemas_walk_and_untyped_keeps_everything() {
        let mut cat = Catalog::new();
        cat.add_custom("example.com", "v1", "Widget", Some(&json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}))).unwrap();
        cat.add_custom("example.com", "v1", "Blob", None).unwrap();
        let items = cat
            .lookup("example.com", "v1", "Widget", &["spec", "items"])
            .unwrap();
        assert_eq!(items.list_type(), ListType::Map(vec!["id"]));
        assert!(
            cat.lookup("example.com", "v1", "Widget", &["spec", "other"])
                .is_none()
        );
        let free = cat
            .lookup("example.com", "v1", "Widget", &["spec", "free", "a", "b"])
            .unwrap();
        assert_eq!(free.shape(), Shape::Untyped);
        assert_eq!(free.list_type(), ListType::Atomic);
        let blob = cat
            .lookup("example.com", "v1", "Blob", &["spec", "x"])
            .unwrap();
        assert_eq!(blob.shape(), Shape::Untyped);
        let meta = cat
            .lookup("example.com", "v1", "Blob", &["metadata", "finalizers"])
            .unwrap();
        assert_eq!(meta.list_type(), ListType::Set);
    }
}
