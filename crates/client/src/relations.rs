//! Owns relations (controller-runtime's `Owns`, kube-runtime's `Controller::owns`): a change
//! of an owned object wakes the reconcile of its controlling owner. For types whose metadata
//! is k8s-openapi's `ObjectMeta`: k8s-openapi's (feature `k8s-openapi`) and kube-rs's derived
//! custom resources (feature `kube`).
//!
//! The other direction, [`controller_owner_reference`], builds the reference a controller
//! puts on the children it creates (kube-rs's `Resource::controller_owner_ref`,
//! controller-runtime's `SetControllerReference`).
//!
//! Invariant: only the owner reference with `controller: true` whose group (the `apiVersion`
//! before its `/`, none for the core group) and `kind` are the owner type's counts (at most
//! one per object, as the API server enforces); the version is not compared, as
//! controller-runtime's `EnqueueRequestForOwner` and the garbage collector do not, so a child
//! made while its owner was served at another version still maps to it. Its key is in the
//! owned object's namespace for a namespaced owner, cluster-wide otherwise.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api_resource::{ApiResource, ResourceType, Scope};
use crate::{HasMetadata, ObjectKey};

/// The key of `object`'s controlling owner of type `Owner`, if it has one.
pub fn controller_owner_key<Owner: ResourceType, K: HasMetadata<Metadata = ObjectMeta>>(
    object: &K,
) -> Option<ObjectKey> {
    let meta = HasMetadata::metadata(object);
    let group = Owner::group();
    let kind = Owner::kind();
    let owner = meta.owner_references.as_deref()?.iter().find(|r| {
        r.controller == Some(true) && r.kind == kind && group_of(&r.api_version) == group
    })?;
    let namespace = if <Owner::Scope as Scope>::NAMESPACED {
        meta.namespace.as_deref()
    } else {
        None
    };
    Some(ObjectKey::new(namespace, &owner.name))
}

/// The group of an `apiVersion`: what comes before its `/`, or `""` (the core group) when
/// it has none (`v1`).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// The owner reference naming `owner` as the controller of an object: its `apiVersion`,
/// `kind`, `name` and `uid`, `controller: true` and `blockOwnerDeletion: true` (a foreground
/// deletion of the owner waits for the child). `None` when `owner` has no name or uid yet
/// (not read from the server): a reference without a uid would be refused.
///
/// ```
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// use listwatch_client::relations::{controller_owner_key, controller_owner_reference};
///
/// let owner = Deployment {
///     metadata: ObjectMeta {
///         name: Some("web".into()),
///         namespace: Some("ns".into()),
///         uid: Some("1234".into()),
///         ..ObjectMeta::default()
///     },
///     ..Deployment::default()
/// };
/// let reference = controller_owner_reference(&owner).unwrap();
/// assert_eq!((reference.kind.as_str(), reference.controller), ("Deployment", Some(true)));
/// let child = ReplicaSet {
///     metadata: ObjectMeta {
///         namespace: Some("ns".into()),
///         owner_references: Some(vec![reference]),
///         ..ObjectMeta::default()
///     },
///     ..ReplicaSet::default()
/// };
/// assert_eq!(controller_owner_key::<Deployment, _>(&child).unwrap().as_str(), "ns/web");
/// ```
pub fn controller_owner_reference<Owner>(owner: &Owner) -> Option<OwnerReference>
where
    Owner: ResourceType + HasMetadata<Metadata = ObjectMeta>,
{
    let meta = HasMetadata::metadata(owner);
    Some(OwnerReference {
        api_version: ApiResource::of::<Owner>().api_version(),
        kind: <Owner as ResourceType>::kind().into_owned(),
        name: meta.name.clone().filter(|n| !n.is_empty())?,
        uid: meta.uid.clone().filter(|u| !u.is_empty())?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The mapping for [`Controller::enqueue`](crate::Controller::enqueue) of an owned kind:
/// its changes queue its controlling `Owner`'s key.
///
/// ```no_run
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use listwatch_client::relations::owned_by;
/// use listwatch_client::{Api, Controller, Informer, InformerConfig, Resource};
/// # fn demo(client: listwatch_client::HttpClient) {
/// let controller = Controller::default();
/// let deployments = Informer::spawn(Api::<Deployment>::all(client.clone()), InformerConfig::default());
/// let replica_sets = Informer::spawn(Api::<ReplicaSet>::all(client), InformerConfig::default());
/// deployments.add_handler(controller.enqueue(|d: &Deployment| Some(d.key())));
/// replica_sets.add_handler(controller.enqueue(owned_by::<Deployment, ReplicaSet>()));
/// # }
/// ```
pub fn owned_by<Owner, K>() -> impl Fn(&K) -> Option<ObjectKey> + Send + 'static
where
    Owner: ResourceType,
    K: HasMetadata<Metadata = ObjectMeta>,
{
    |object: &K| controller_owner_key::<Owner, K>(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owned(refs: Vec<OwnerReference>) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some("rs".into()),
                namespace: Some("ns".into()),
                owner_references: Some(refs),
                ..ObjectMeta::default()
            },
            ..ReplicaSet::default()
        }
    }

    fn reference(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_controlling_reference_of_the_owner_type_counts() {
        let rs = owned(vec![
            reference("apps/v1", "Deployment", "not-controller", false),
            reference("v1", "Deployment", "wrong-group", true),
            reference("extensions/v1beta1", "Deployment", "other-group", true),
            reference("apps/v1", "Deployment", "web", true),
        ]);
        assert_eq!(
            controller_owner_key::<Deployment, _>(&rs).map(|k| k.to_string()),
            Some("ns/web".to_owned())
        );
        assert_eq!(owned_by::<Deployment, ReplicaSet>()(&owned(vec![])), None);
        // A cluster-scoped owner's key has no namespace.
        let rs = owned(vec![reference("v1", "Namespace", "ns", true)]);
        assert_eq!(
            controller_owner_key::<Namespace, _>(&rs).map(|k| k.to_string()),
            Some("ns".to_owned())
        );
    }
}
