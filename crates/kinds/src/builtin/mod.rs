//! The built-in kinds: a small core of Kubernetes' own, one file per kind under its group
//! (`core/pod.rs`, `apps/deployment.rs`, `rbac/role.rs`, ...), each with the selectable
//! fields, short names, printing and strategy upstream gives it, and the storage-only kinds
//! of the core groups from the derived metadata [`table`] ([`derived`]; a file under their
//! group only for those with code: defaults, printing). Adding a built-in kind with its own
//! rules is a new file and one line in [`all`]; adding a storage-only one is a row in the
//! table.

pub mod apiextensions;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod coordination;
pub mod core;
pub mod create_only;
pub mod derived;
pub mod discovery;
pub mod events;
pub mod networking;
pub mod policy;
pub mod print;
pub mod quantity;
pub mod rbac;
pub mod storage;
pub mod table;

pub use self::core::event::EVENT_FIELDS;
pub use self::core::pod::POD_FIELDS;

/// Every built-in resource, namespaces first, the storage-only kinds of [`derived`] last.
///
/// A DELETE that removes an object answers with the object for namespaces, pods, services
/// and service accounts, whose upstream storage sets `ReturnDeletedObject`
/// (pkg/registry/core/{namespace,pod,service,serviceaccount}/storage/storage.go), and with a
/// `Success` Status for the others.
///
/// `metadata.generation` is set and bumped only for pods (spec changes,
/// pkg/registry/core/pod/strategy.go), deployments (spec or annotation changes,
/// pkg/registry/apps/deployment/strategy.go) and custom resource definitions (spec changes);
/// the other strategies here leave it unset.
/// A `/status` write keeps the request's metadata but `ownerReferences` for pods
/// (`podStatusStrategy.PrepareForUpdate`), but the labels for deployments
/// (`deploymentStatusStrategy`), all of it for services (`serviceStatusStrategy`, which
/// resets only the spec), namespaces and nodes (`namespaceStatusStrategy`,
/// `nodeStatusStrategy`: the spec only); other kinds keep the stored metadata.
///
/// Selectable fields read as upstream's `*ToSelectableFields` read them: a field the v1
/// defaulting always fills (pkg/apis/core/v1/defaults.go: a namespace's `status.phase`, a
/// secret's `type`, a service's `spec.type`, a pod's `spec.restartPolicy` and
/// `spec.schedulerName`) reads as its default when a stored object lacks it, and a `bool`
/// read with `strconv.FormatBool` (a node's `spec.unschedulable`, a pod's
/// `spec.hostNetwork`) reads as `"false"` ([`KindSpec::field_default`](crate::KindSpec::field_default)).
///
/// A PUT of a missing object creates it where
/// upstream's strategy allows create-on-update: services, endpoints, events, leases and
/// the RBAC kinds (not namespaces, nodes, pods, config maps, secrets, service accounts or
/// deployments).
pub fn all() -> Vec<crate::KindSpec> {
    vec![
        core::namespace::spec(),
        core::node::spec(),
        core::pod::spec(),
        core::configmap::spec(),
        core::secret::spec(),
        core::service::spec(),
        core::endpoints::spec(),
        core::event::spec(),
        events::event::spec(),
        core::serviceaccount::spec(),
        coordination::lease::spec(),
        rbac::role::spec(),
        rbac::rolebinding::spec(),
        rbac::clusterrole::spec(),
        rbac::clusterrolebinding::spec(),
        apps::deployment::spec(),
        apiextensions::customresourcedefinition::spec(),
        discovery::endpointslice::spec(),
    ]
    .into_iter()
    .chain(derived::all())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Generation;

    #[test]
    fn namespaces_come_first_and_no_kind_is_declared_twice() {
        let all = all();
        assert_eq!(all[0].plural, "namespaces");
        let mut seen = std::collections::HashSet::new();
        for k in &all {
            assert!(seen.insert((k.group.clone(), k.version.clone(), k.plural.clone())));
        }
    }

    #[test]
    fn deleted_objects_and_generations_follow_upstreams_storage_and_strategies() {
        let all = all();
        let returned: Vec<&str> = all
            .iter()
            .filter(|r| r.return_deleted_object)
            .map(|r| r.plural.as_str())
            .collect();
        assert_eq!(
            returned,
            ["namespaces", "pods", "services", "serviceaccounts"]
        );
        let generation: Vec<(&str, Generation)> = all
            .iter()
            .filter(|r| r.generation != Generation::None)
            .filter(|r| !derived::GENERATION.contains(&(r.group.as_str(), r.plural.as_str())))
            .map(|r| (r.plural.as_str(), r.generation))
            .collect();
        assert_eq!(
            generation,
            [
                ("pods", Generation::Spec),
                ("deployments", Generation::SpecAndAnnotations),
                ("customresourcedefinitions", Generation::Spec)
            ]
        );
    }

    #[test]
    fn create_on_update_follows_upstreams_strategies() {
        let allowed: Vec<String> = all()
            .into_iter()
            .filter(|r| r.allow_create_on_update)
            .map(|r| r.qualified_resource())
            .collect();
        assert_eq!(
            allowed,
            [
                "services",
                "endpoints",
                "events",
                "events.events.k8s.io",
                "leases.coordination.k8s.io",
                "roles.rbac.authorization.k8s.io",
                "rolebindings.rbac.authorization.k8s.io",
                "clusterroles.rbac.authorization.k8s.io",
                "clusterrolebindings.rbac.authorization.k8s.io",
                "limitranges",
            ]
        );
    }
}
