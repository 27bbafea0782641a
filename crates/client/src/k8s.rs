//! k8s-openapi interop (feature `k8s-openapi`): every k8s-openapi resource type with a list
//! kind and standard metadata (`Pod`, `ConfigMap`, `Namespace`, `Deployment`, `ClusterRole`, …)
//! is a [`ResourceType`], so `Api::<Pod>::namespaced(client, "ns")`, `Store<Pod>` and an
//! [`Informer`](crate::Informer) of `Deployment`s work with no hand-written URL.
//!
//! Group, version, kind and plural come from k8s-openapi's `Resource` constants, the scope
//! from its `Scope` type: `NamespaceResourceScope` is [`Namespaced`], `ClusterResourceScope` is
//! [`ClusterScoped`]; subresources (`SubResourceScope`, e.g. `TokenRequest`) have no
//! collection of their own and are not [`ResourceType`]s. Their [`Resource`](crate::Resource)
//! implementation (key, resource version) comes from `listwatch-api`'s `k8s-openapi` feature,
//! which this one enables.
//!
//! This crate picks no Kubernetes version feature of k8s-openapi (its rule for libraries):
//! the final binary does, as with kube-rs.

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};

use crate::api_resource::{ClusterScoped, Namespaced, Scope};

impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Namespaced for NamespaceResourceScope {}

impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}
impl ClusterScoped for ClusterResourceScope {}

// With the `kube` feature the blanket implementation is over kube-rs's `Resource` instead
// (`kube.rs`), which kube-core implements for every type this one covers.
#[cfg(not(feature = "kube"))]
mod blanket {
    use std::borrow::Cow;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::{ListableResource, Metadata, Resource};

    use crate::api_resource::{ResourceType, Scope};

    impl<K> ResourceType for K
    where
        K: ListableResource + Metadata<Ty = ObjectMeta> + Clone + Send + Sync + 'static,
        <K as Resource>::Scope: Scope,
    {
        type Scope = <K as Resource>::Scope;
        fn group() -> Cow<'static, str> {
            <K as Resource>::GROUP.into()
        }
        fn version() -> Cow<'static, str> {
            <K as Resource>::VERSION.into()
        }
        fn kind() -> Cow<'static, str> {
            <K as Resource>::KIND.into()
        }
        fn plural() -> Cow<'static, str> {
            <K as Resource>::URL_PATH_SEGMENT.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};

    use crate::ApiResource;

    fn paths<K: crate::ResourceType>(ns: Option<&str>) -> (String, String) {
        let ar = ApiResource::of::<K>();
        (
            ar.collection_path(ns).unwrap(),
            ar.object_path(ns, "x").unwrap(),
        )
    }

    #[test]
    fn paths_come_from_the_k8s_openapi_type() {
        // Core group, namespaced: one namespace, and all namespaces for lists.
        assert_eq!(
            paths::<Pod>(Some("ns")),
            (
                "/api/v1/namespaces/ns/pods".into(),
                "/api/v1/namespaces/ns/pods/x".into()
            )
        );
        assert_eq!(
            ApiResource::of::<ConfigMap>()
                .collection_path(None)
                .unwrap(),
            "/api/v1/configmaps"
        );
        // Core group, cluster-scoped.
        assert_eq!(
            paths::<Namespace>(None),
            ("/api/v1/namespaces".into(), "/api/v1/namespaces/x".into())
        );
        assert_eq!(paths::<Node>(None).0, "/api/v1/nodes");
        // Named group, namespaced and cluster-scoped.
        assert_eq!(
            paths::<Deployment>(Some("ns")),
            (
                "/apis/apps/v1/namespaces/ns/deployments".into(),
                "/apis/apps/v1/namespaces/ns/deployments/x".into()
            )
        );
        assert_eq!(
            ApiResource::of::<Deployment>()
                .collection_path(None)
                .unwrap(),
            "/apis/apps/v1/deployments"
        );
        assert_eq!(
            paths::<Role>(Some("ns")).0,
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles"
        );
        assert_eq!(
            paths::<ClusterRole>(None),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles".into(),
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/x".into()
            )
        );
        let d = ApiResource::of::<Deployment>();
        assert_eq!(
            (d.kind.as_str(), d.api_version(), d.namespaced),
            ("Deployment", "apps/v1".to_owned(), true)
        );
        assert!(!ApiResource::of::<ClusterRole>().namespaced);
        // A cluster-scoped kind takes no namespace, a namespaced object needs one.
        assert!(
            ApiResource::of::<Namespace>()
                .collection_path(Some("ns"))
                .is_err()
        );
        assert!(ApiResource::of::<Pod>().object_path(None, "x").is_err());
    }
}
