//! What the client needs to know about an object: its key and its resource version.
//!
//! [`Resource`] is implemented for the dynamic [`listwatch_api::Object`] and, through
//! [`HasMetadata`], for any typed struct that carries an [`ObjectMeta`] (so a user can keep a
//! `Store<MyPod>`). Keys follow client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or
//! `name` for cluster-scoped objects.

use std::fmt;

use listwatch_api::{Object, ObjectMeta};

/// An object the reflector can store: it has a name, maybe a namespace, and a version.
pub trait Resource: Clone + Send + Sync + 'static {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.namespace`, `None` for cluster-scoped objects.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion` as a number (0 when unset or unparsable).
    fn resource_version(&self) -> u64;

    /// The store key of this object.
    fn key(&self) -> ObjectKey {
        ObjectKey::new(self.namespace(), self.name())
    }
}

impl Resource for Object {
    fn name(&self) -> &str {
        Object::name(self)
    }
    fn namespace(&self) -> Option<&str> {
        Object::namespace(self)
    }
    fn resource_version(&self) -> u64 {
        Object::resource_version(self)
    }
}

/// A typed object with standard metadata; implementing it makes the type a [`Resource`].
///
/// ```
/// use listwatch_api::ObjectMeta;
/// use listwatch_client::{HasMetadata, Resource};
///
/// #[derive(Clone, serde::Deserialize)]
/// struct MyPod {
///     metadata: ObjectMeta,
/// }
/// impl HasMetadata for MyPod {
///     fn metadata(&self) -> &ObjectMeta {
///         &self.metadata
///     }
/// }
/// let pod: MyPod = serde_json::from_str(
///     r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
/// ).unwrap();
/// assert_eq!(pod.key().to_string(), "ns/a");
/// assert_eq!(pod.resource_version(), 7);
/// ```
pub trait HasMetadata {
    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
}

impl<T: HasMetadata + Clone + Send + Sync + 'static> Resource for T {
    fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata()
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
    }
    fn resource_version(&self) -> u64 {
        self.metadata()
            .resource_version
            .as_deref()
            .and_then(|rv| listwatch_api::rv::parse(rv).ok())
            .unwrap_or(0)
    }
}

/// A store key: `namespace/name`, or `name` for cluster-scoped objects.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Box<str>);

impl ObjectKey {
    /// The key of `name` in `namespace`.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) if !ns.is_empty() => Self(format!("{ns}/{name}").into()),
            _ => Self(name.into()),
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace part, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(ns, _)| ns)
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, n)| n)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    #[test]
    fn keys_follow_client_go_meta_namespace_key_func() {
        let k = ObjectKey::new(Some("ns"), "a");
        assert_eq!(
            (k.as_str(), k.namespace(), k.name()),
            ("ns/a", Some("ns"), "a")
        );
        let c = ObjectKey::new(None, "node-1");
        assert_eq!(
            (c.as_str(), c.namespace(), c.name()),
            ("node-1", None, "node-1")
        );
        assert_eq!(ObjectKey::new(Some(""), "x").as_str(), "x");
    }

    #[test]
    fn dynamic_objects_are_resources() {
        let o = Object::from_json(
            br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"12"}}"#,
            &SelectableFields::none(),
        )
        .unwrap();
        assert_eq!(Resource::key(&o).as_str(), "ns/a");
        assert_eq!(Resource::resource_version(&o), 12);
    }
}
