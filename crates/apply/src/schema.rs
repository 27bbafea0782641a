//! [`TypeInfo`] from the schema catalog (`listwatch-schema`): a kind's OpenAPI schema says
//! how its lists and maps merge; what it does not declare merges as upstream's deduced
//! type does (lists atomic, objects granular maps).

use std::cell::RefCell;
use std::collections::HashMap;

use listwatch_schema::{Catalog, Node, Shape};
use serde_json::Value;

use crate::types::{ListType, MapType, TypeInfo};

/// The types of one kind in a catalog. Nodes are remembered by path, so a walk over an
/// object looks each path up once (the cache holds at most one entry per distinct path
/// asked about: make one per request).
pub struct SchemaTypes<'a> {
    /// The kind's schema, looked up once (`None`: the catalog does not know the kind).
    root: Option<Node<'a>>,
    cache: RefCell<HashMap<String, Option<Node<'a>>>>,
}

/// An unambiguous key of a path (each name length-prefixed).
fn key(path: &[&str]) -> String {
    let mut k = String::with_capacity(path.iter().map(|p| p.len() + 4).sum());
    for p in path {
        k.push_str(&p.len().to_string());
        k.push(':');
        k.push_str(p);
    }
    k
}

impl<'a> SchemaTypes<'a> {
    /// The types of `group/version kind`.
    pub fn new(catalog: &'a Catalog, group: &str, version: &str, kind: &str) -> Self {
        Self {
            root: catalog.kind(group, version, kind),
            cache: RefCell::new(HashMap::new()),
        }
    }

    fn node(&self, path: &[&str]) -> Option<Node<'a>> {
        let Some((last, parent)) = path.split_last() else {
            return self.root;
        };
        let k = key(path);
        if let Some(n) = self.cache.borrow().get(&k) {
            return *n;
        }
        let n = self.node(parent).and_then(|p| p.field(last));
        self.cache.borrow_mut().insert(k, n);
        n
    }

    /// The node of the object at `path`: a list's items, else the node itself.
    fn object(&self, path: &[&str]) -> Option<Node<'a>> {
        let n = self.node(path)?;
        match n.shape() {
            Shape::List => n.items(),
            _ => Some(n),
        }
    }
}

impl TypeInfo for SchemaTypes<'_> {
    fn list_type(&self, path: &[&str]) -> ListType {
        match self.node(path) {
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

    fn map_type(&self, path: &[&str]) -> MapType {
        let Some(n) = self.object(path) else {
            return MapType::Granular;
        };
        let atomic = n.map_type() == listwatch_schema::MapType::Atomic;
        match n.shape() {
            _ if atomic => MapType::Atomic,
            Shape::Struct => MapType::Struct,
            _ => MapType::Granular,
        }
    }

    /// The key field's declared default; else `TCP` for `protocol`, the one defaulted
    /// list-map key of the built-in kinds (container, service and endpoint ports: upstream's
    /// schemas declare `default: TCP`, the vendored definitions leave defaults out).
    fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let declared = self
            .object(path)
            .and_then(|items| items.field(key))
            .and_then(|f| f.declaration().get("default").cloned());
        declared.or_else(|| (key == "protocol").then(|| Value::String("TCP".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_kinds_merge_as_their_schemas_say() {
        let catalog = Catalog::builtin();
        let pod = SchemaTypes::new(&catalog, "", "v1", "Pod");
        assert_eq!(
            pod.list_type(&["spec", "containers"]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            pod.list_type(&["spec", "containers", "ports"]),
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(pod.list_type(&["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(pod.list_type(&["metadata", "finalizers"]), ListType::Set);
        assert_eq!(pod.map_type(&[]), MapType::Struct);
        assert_eq!(pod.map_type(&["spec", "containers"]), MapType::Struct);
        assert_eq!(pod.map_type(&["metadata", "labels"]), MapType::Granular);
        assert_eq!(
            pod.key_default(&["spec", "containers", "ports"], "protocol"),
            Some(Value::String("TCP".into()))
        );
        let deploy = SchemaTypes::new(&catalog, "apps", "v1", "Deployment");
        assert_eq!(deploy.map_type(&["spec", "selector"]), MapType::Atomic);
        // A kind the catalog does not know: deduced.
        let cr = SchemaTypes::new(&catalog, "example.com", "v1", "Widget");
        assert_eq!(cr.map_type(&["spec"]), MapType::Granular);
        assert_eq!(cr.list_type(&["spec", "items"]), ListType::Atomic);
    }
}
