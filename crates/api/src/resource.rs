//! What a client cache needs to know about an object: its key and its resource version.
//!
//! [`Resource`] is implemented for the dynamic [`Object`] and, through
//! [`HasMetadata`], for any typed struct that carries an [`ObjectMeta`] (so a user can keep a
//! `Store<MyPod>`) or, with the `k8s-openapi` feature, k8s-openapi's (`Store<Pod>`). Keys
//! follow client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` for cluster-scoped
//! objects. With the `kube` feature, every kube-rs resource of a static type is one too
//! (`kube_core::Resource<DynamicType = ()>`: what kube-rs's `#[derive(CustomResource)]` makes).
//!
//! Why it lives here and not in listwatch-client, which is its user: k8s-openapi's types reach
//! [`Resource`] through one blanket implementation (`impl<K: k8s_openapi::Metadata> HasMetadata
//! for K`, then [`HasMetadata`] → [`Resource`]), and Rust accepts a blanket implementation
//! over a foreign trait next to the direct one for [`Object`] only in the crate that defines
//! [`Object`] (elsewhere "upstream crates may add an impl" makes them overlap). Two blanket
//! implementations of one trait would overlap anywhere, hence one chain through
//! [`HasMetadata`]; the orphan rule forbids implementing k8s-openapi's traits for our types.

use std::borrow::Cow;
use std::fmt;

use crate::{Object, ObjectMeta};

/// An object the reflector can store: it has a name, maybe a namespace, and a version.
pub trait Resource: Clone + Send + Sync + 'static {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.namespace`, `None` for cluster-scoped objects.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion` exactly as the server sent it, `""` when unset.
    ///
    /// Opaque, as in client-go and kube-rs: a client stores it and sends it back, and never
    /// parses or orders it (a server other than listwatch's or kube-apiserver's may use any
    /// string). Numeric versions are the server's own business ([`Object::resource_version`]
    /// and [`crate::rv`]).
    fn resource_version(&self) -> Cow<'_, str>;

    /// `metadata.uid`, when the type carries it (a sharded reflector filters by it; `None`
    /// lets every object through).
    fn uid(&self) -> Option<&str> {
        None
    }

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
    fn resource_version(&self) -> Cow<'_, str> {
        match Object::resource_version(self) {
            0 => Cow::Borrowed(""),
            rv => Cow::Owned(crate::rv::format(rv)),
        }
    }
    fn uid(&self) -> Option<&str> {
        Object::uid(self)
    }
}

/// The metadata fields the client reads: implemented for listwatch's
/// [`ObjectMeta`] and, with the `k8s-openapi` feature, for k8s-openapi's.
pub trait MetadataFields {
    /// `name`.
    fn name(&self) -> Option<&str>;
    /// `namespace`.
    fn namespace(&self) -> Option<&str>;
    /// `resourceVersion`, as sent.
    fn resource_version(&self) -> Option<&str>;
    /// `uid` (`None` for a metadata type without it).
    fn uid(&self) -> Option<&str> {
        None
    }
}

impl MetadataFields for ObjectMeta {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
}

/// A typed object with standard metadata; implementing it makes the type a [`Resource`].
///
/// Every k8s-openapi resource type (`Pod`, `Deployment`, …) implements it already with the
/// `k8s-openapi` feature; a type of your own says which metadata type it carries:
///
/// ```
/// use listwatch_api::ObjectMeta;
/// use listwatch_api::resource::{HasMetadata, Resource};
///
/// #[derive(Clone, serde::Deserialize)]
/// struct MyPod {
///     metadata: ObjectMeta,
/// }
/// impl HasMetadata for MyPod {
///     type Metadata = ObjectMeta;
///     fn metadata(&self) -> &ObjectMeta {
///         &self.metadata
///     }
/// }
/// let pod: MyPod = serde_json::from_str(
///     r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
/// ).unwrap();
/// assert_eq!(pod.key().to_string(), "ns/a");
/// assert_eq!(pod.resource_version(), "7");
/// ```
pub trait HasMetadata {
    /// The metadata's type: [`ObjectMeta`], or k8s-openapi's `ObjectMeta`.
    type Metadata: MetadataFields;
    /// The object's metadata.
    fn metadata(&self) -> &Self::Metadata;
}

impl<T: HasMetadata + Clone + Send + Sync + 'static> Resource for T {
    fn name(&self) -> &str {
        self.metadata().name().unwrap_or("")
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata().namespace().filter(|n| !n.is_empty())
    }
    fn resource_version(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.metadata().resource_version().unwrap_or(""))
    }
    fn uid(&self) -> Option<&str> {
        self.metadata().uid()
    }
}

#[cfg(feature = "k8s-openapi")]
mod k8s {
    //! k8s-openapi's types: its `ObjectMeta` has the fields, and every type with that
    //! metadata (`Pod`, `Deployment`, `ClusterRole`, …) is [`HasMetadata`], hence [`Resource`];
    //! with the `kube` feature, every kube-rs resource of a static type too (the types of
    //! kube-rs's `#[derive(CustomResource)]`).

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::{HasMetadata, MetadataFields};

    impl MetadataFields for ObjectMeta {
        fn name(&self) -> Option<&str> {
            self.name.as_deref()
        }
        fn namespace(&self) -> Option<&str> {
            self.namespace.as_deref()
        }
        fn resource_version(&self) -> Option<&str> {
            self.resource_version.as_deref()
        }
        fn uid(&self) -> Option<&str> {
            self.uid.as_deref()
        }
    }

    #[cfg(not(feature = "kube"))]
    impl<K: k8s_openapi::Metadata<Ty = ObjectMeta>> HasMetadata for K {
        type Metadata = ObjectMeta;
        fn metadata(&self) -> &ObjectMeta {
            k8s_openapi::Metadata::metadata(self)
        }
    }

    // With the `kube` feature the one blanket implementation is over kube-rs's `Resource`
    // instead: kube-core implements that for every `k8s_openapi::Metadata<Ty = ObjectMeta>`
    // type, so this covers all the implementation above did, plus the types of kube-rs's
    // `#[derive(CustomResource)]` (which implement kube-rs's trait only). Two blanket
    // implementations side by side would overlap (a k8s-openapi type is both), hence the
    // switch rather than an addition. `DynamicType = ()`: a type whose kind is known at
    // compile time (not kube-rs's `DynamicObject`).
    #[cfg(feature = "kube")]
    impl<K: kube_core::Resource<DynamicType = ()>> HasMetadata for K {
        type Metadata = ObjectMeta;
        fn metadata(&self) -> &ObjectMeta {
            kube_core::Resource::meta(self)
        }
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
    use crate::SelectableFields;

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
        assert_eq!(Resource::resource_version(&o), "12");
    }

    #[cfg(feature = "k8s-openapi")]
    #[test]
    fn k8s_openapi_types_are_resources() {
        use k8s_openapi::api::core::v1::{Namespace, Pod};
        use k8s_openapi::api::rbac::v1::ClusterRole;

        let pod: Pod = serde_json::from_str(
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
        )
        .unwrap();
        assert_eq!(
            (pod.key().as_str(), &*pod.resource_version()),
            ("ns/a", "7")
        );
        let ns: Namespace =
            serde_json::from_str(r#"{"metadata":{"name":"kube-system","resourceVersion":"3"}}"#)
                .unwrap();
        assert_eq!(
            (ns.key().as_str(), Resource::namespace(&ns)),
            ("kube-system", None)
        );
        // An empty namespace is none; a version that is no number is kept as sent (opaque).
        let role: ClusterRole = serde_json::from_str(
            r#"{"metadata":{"name":"admin","namespace":"","resourceVersion":"x/1"}}"#,
        )
        .unwrap();
        assert_eq!(
            (role.key().as_str(), &*role.resource_version()),
            ("admin", "x/1")
        );
    }
}
