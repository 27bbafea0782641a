//! Where a kind of object lives on the server: group, version, plural and scope, and the URL
//! paths derived from them.
//!
//! [`ApiResource`] is that information as a value (for dynamic use, and what [`Api`](crate::Api)
//! carries); [`ResourceType`] is the same information attached to a Rust type, so that
//! `Api::<Pod>::namespaced(client, "ns")` needs no hand-written URL. With the `k8s-openapi`
//! feature every k8s-openapi resource type is a [`ResourceType`] (`k8s.rs`), with the `kube`
//! feature every kube-rs resource of a static type, those of kube-rs's
//! `#[derive(CustomResource)]` included (`kube.rs`); a type of your own implements it in a few
//! lines.
//!
//! Paths follow kube-apiserver's layout, as kube-rs and client-go build them:
//! - the legacy core group (`""`) lives under `/api/{version}`, every other group under
//!   `/apis/{group}/{version}`;
//! - a namespaced kind in one namespace: `{prefix}/namespaces/{namespace}/{plural}`, in all
//!   namespaces: `{prefix}/{plural}`; a cluster-scoped kind: `{prefix}/{plural}`;
//! - one object: the collection's path plus `/{name}`.
//!
//! Invariants: a path is only ever built from segments that are valid Kubernetes path segment
//! names (apimachinery's `IsValidPathSegmentName`: not empty, not `.` or `..`, no `/` or `%`)
//! with every byte outside RFC 3986's `pchar` set percent-encoded, so a caller's name or
//! namespace can never change which collection a request goes to; an object path of a
//! namespaced kind always has a namespace, and a cluster-scoped kind never gets one (both are
//! [`Error::Request`], never a request to the wrong path).

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::Resource;
use crate::{Error, Result};

/// Whether a kind is namespaced, at the type level (see [`ResourceType::Scope`]).
pub trait Scope {
    /// `true` for namespaced kinds.
    const NAMESPACED: bool;
}

/// A namespaced scope: [`Api::namespaced`](crate::Api::namespaced) is offered for kinds with it.
pub trait Namespaced: Scope {}

/// A cluster scope: [`Api::cluster`](crate::Api::cluster) is offered for kinds with it.
pub trait ClusterScoped: Scope {}

/// The scope of a namespaced kind of your own.
#[derive(Debug)]
pub enum NamespaceScope {}

impl Scope for NamespaceScope {
    const NAMESPACED: bool = true;
}
impl Namespaced for NamespaceScope {}

/// The scope of a cluster-scoped kind of your own.
#[derive(Debug)]
pub enum ClusterScope {}

impl Scope for ClusterScope {
    const NAMESPACED: bool = false;
}
impl ClusterScoped for ClusterScope {}

/// A Rust type of one kind of object: where its collection lives.
///
/// Every k8s-openapi resource type implements it with the `k8s-openapi` feature, and every
/// type made by kube-rs's `#[derive(CustomResource)]` with the `kube` feature (module
/// `listwatch_client::kube`): that is the way to a custom resource with its CRD and schema derived.
/// By hand, for a type with listwatch's own [`ObjectMeta`](listwatch_api::ObjectMeta):
///
/// ```
/// use std::borrow::Cow;
///
/// use listwatch_api::ObjectMeta;
/// use listwatch_client::{ApiResource, HasMetadata, NamespaceScope, ResourceType};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Widget {
///     metadata: ObjectMeta,
/// }
/// impl HasMetadata for Widget {
///     type Metadata = ObjectMeta;
///     fn metadata(&self) -> &ObjectMeta {
///         &self.metadata
///     }
/// }
/// impl ResourceType for Widget {
///     type Scope = NamespaceScope;
///     fn group() -> Cow<'static, str> {
///         "example.com".into()
///     }
///     fn version() -> Cow<'static, str> {
///         "v1".into()
///     }
///     fn kind() -> Cow<'static, str> {
///         "Widget".into()
///     }
///     fn plural() -> Cow<'static, str> {
///         "widgets".into()
///     }
/// }
/// let ar = ApiResource::of::<Widget>();
/// assert_eq!(ar.collection_path(Some("ns")).unwrap(), "/apis/example.com/v1/namespaces/ns/widgets");
/// ```
pub trait ResourceType: Resource {
    /// [`NamespaceScope`] or [`ClusterScope`] (k8s-openapi's scope types for its own).
    type Scope: Scope;
    /// The API group, `""` for the legacy core group.
    fn group() -> Cow<'static, str>;
    /// The API version within the group, e.g. `v1`.
    fn version() -> Cow<'static, str>;
    /// The kind, e.g. `Pod`.
    fn kind() -> Cow<'static, str>;
    /// The resource's plural name, its URL path segment, e.g. `pods`.
    fn plural() -> Cow<'static, str>;
    /// Whether `Self` is the server's metadata-only form of the kind: then an
    /// [`Api`](crate::Api) of it asks for `PartialObjectMetadata` on its reads (gets, lists,
    /// watches). `false` unless overridden; [`PartialObjectMetadata`](crate::PartialObjectMetadata)
    /// sets it.
    const METADATA_ONLY: bool = false;
}

/// A kind's place on the server, as a value: what [`Api`](crate::Api) carries, and what a
/// dynamic client builds paths with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ApiResource {
    /// The API group, `""` for the legacy core group.
    pub group: String,
    /// The API version within the group.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// The plural name (URL path segment).
    pub plural: String,
    /// Whether objects of this kind live in namespaces.
    pub namespaced: bool,
}

impl ApiResource {
    /// The place of `K`.
    pub fn of<K: ResourceType>() -> Self {
        Self {
            group: K::group().into_owned(),
            version: K::version().into_owned(),
            kind: K::kind().into_owned(),
            plural: K::plural().into_owned(),
            namespaced: <K::Scope as Scope>::NAMESPACED,
        }
    }

    /// `apiVersion` of the kind: `version` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path of the collection: in `namespace`, or across all namespaces (and for
    /// cluster-scoped kinds) with `None`. A namespace for a cluster-scoped kind is an error.
    pub fn collection_path(&self, namespace: Option<&str>) -> Result<String> {
        let mut path = String::with_capacity(64);
        if self.group.is_empty() {
            path.push_str("/api/");
        } else {
            path.push_str("/apis/");
            push_segment(&mut path, &self.group, "group")?;
            path.push('/');
        }
        push_segment(&mut path, &self.version, "version")?;
        path.push('/');
        match (namespace, self.namespaced) {
            (Some(ns), true) => {
                path.push_str("namespaces/");
                push_segment(&mut path, ns, "namespace")?;
                path.push('/');
            }
            (Some(ns), false) => {
                return Err(Error::Request(format!(
                    "{} is cluster-scoped: no namespace ({ns:?}) in its path",
                    self.kind
                )));
            }
            (None, _) => {}
        }
        push_segment(&mut path, &self.plural, "plural")?;
        Ok(path)
    }

    /// The path of one object. A namespaced kind needs its namespace, a cluster-scoped one
    /// takes none.
    pub fn object_path(&self, namespace: Option<&str>, name: &str) -> Result<String> {
        if self.namespaced && namespace.is_none() {
            return Err(Error::Request(format!(
                "{} is namespaced: object {name:?} needs a namespace",
                self.kind
            )));
        }
        let mut path = self.collection_path(namespace)?;
        path.push('/');
        push_segment(&mut path, name, "name")?;
        Ok(path)
    }
}

/// Appends `s` as one path segment: checked as apimachinery's `IsValidPathSegmentName`, then
/// every byte outside RFC 3986's `pchar` set percent-encoded.
fn push_segment(path: &mut String, s: &str, what: &str) -> Result<()> {
    let valid = !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '%']);
    if !valid {
        return Err(Error::Request(format!(
            "invalid {what} {s:?}: a path segment may not be empty, \".\" or \"..\", or contain \"/\" or \"%\""
        )));
    }
    match encode_segment(s) {
        Cow::Borrowed(b) => path.push_str(b),
        Cow::Owned(o) => path.push_str(&o),
    }
    Ok(())
}

fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

fn encode_segment(s: &str) -> Cow<'_, str> {
    if s.bytes().all(is_pchar) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if is_pchar(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar(group: &str, version: &str, plural: &str, namespaced: bool) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            kind: "K".into(),
            plural: plural.into(),
            namespaced,
        }
    }

    #[test]
    fn core_and_grouped_paths_follow_the_apiserver_layout() {
        let pods = ar("", "v1", "pods", true);
        assert_eq!(
            pods.collection_path(Some("ns")).unwrap(),
            "/api/v1/namespaces/ns/pods"
        );
        assert_eq!(pods.collection_path(None).unwrap(), "/api/v1/pods");
        assert_eq!(
            pods.object_path(Some("ns"), "p").unwrap(),
            "/api/v1/namespaces/ns/pods/p"
        );
        assert_eq!(pods.api_version(), "v1");

        let deploys = ar("apps", "v1", "deployments", true);
        assert_eq!(
            deploys.collection_path(Some("ns")).unwrap(),
            "/apis/apps/v1/namespaces/ns/deployments"
        );
        assert_eq!(
            deploys.collection_path(None).unwrap(),
            "/apis/apps/v1/deployments"
        );
        assert_eq!(deploys.api_version(), "apps/v1");

        let roles = ar("rbac.authorization.k8s.io", "v1", "clusterroles", false);
        assert_eq!(
            roles.collection_path(None).unwrap(),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        );
        assert_eq!(
            roles.object_path(None, "admin").unwrap(),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"
        );
        let ns = ar("", "v1", "namespaces", false);
        assert_eq!(
            ns.object_path(None, "kube-system").unwrap(),
            "/api/v1/namespaces/kube-system"
        );
    }

    #[test]
    fn scope_mismatches_are_errors_not_wrong_paths() {
        let pods = ar("", "v1", "pods", true);
        assert!(matches!(
            pods.object_path(None, "p"),
            Err(Error::Request(m)) if m.contains("needs a namespace")
        ));
        let nodes = ar("", "v1", "nodes", false);
        assert!(matches!(
            nodes.collection_path(Some("ns")),
            Err(Error::Request(m)) if m.contains("cluster-scoped")
        ));
        assert!(nodes.object_path(Some("ns"), "n").is_err());
    }

    #[test]
    fn names_cannot_escape_their_segment() {
        let pods = ar("", "v1", "pods", true);
        for bad in ["", ".", "..", "a/b", "../x", "a%2Fb", "%"] {
            assert!(
                matches!(pods.object_path(Some("ns"), bad), Err(Error::Request(_))),
                "name {bad:?}"
            );
            assert!(
                matches!(pods.collection_path(Some(bad)), Err(Error::Request(_))),
                "namespace {bad:?}"
            );
        }
        // Valid path segment names that are not URL-safe are percent-encoded.
        assert_eq!(
            pods.object_path(Some("ns"), "a?b#c d").unwrap(),
            "/api/v1/namespaces/ns/pods/a%3Fb%23c%20d"
        );
        assert_eq!(
            pods.object_path(Some("ns"), "é").unwrap(),
            "/api/v1/namespaces/ns/pods/%C3%A9"
        );
        // A hand-made ApiResource is checked too.
        assert!(ar("a/b", "v1", "x", true).collection_path(None).is_err());
        assert!(ar("", "v1", "", true).collection_path(None).is_err());
    }
}
