//! The built-in kinds: a small core of Kubernetes' own, one file per kind under its group
//! (`core/pod.rs`, `apps/deployment.rs`, `rbac/role.rs`, ...), each with the selectable
//! fields, short names, printing and strategy upstream gives it, and the storage-only kinds
//! of the core groups from the derived metadata [`table`] ([`derived`]; a file under their
//! group only for those with code: defaults, printing). Adding a built-in kind with its own
//! rules is a new file and one line in [`all`]; adding a storage-only one is a row in the
//! table.

pub mod admissionregistration;
pub mod amount;
pub mod apiextensions;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod coordination;
pub mod core;
pub mod create_only;
pub mod defaults;
pub mod derived;
pub mod discovery;
pub mod events;
pub mod flowcontrol;
pub(crate) mod int_or_percent;
pub mod networking;
pub mod podspec;
pub mod policy;
pub mod print;
pub mod quantity;
pub mod rbac;
pub mod scheduling;
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
    // Served over the `autoscaling/v2` storage of the derived table's row, so after it.
    .chain(std::iter::once(autoscaling::v1::spec()))
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

    /// A clock for printers that read other times than the age.
    struct NoClock;

    impl crate::Times for NoClock {
        fn since(&self, _: &str) -> String {
            "1s".into()
        }
        fn between(&self, _: &str, _: &str) -> Option<String> {
            None
        }
        fn human(&self, _: u64) -> String {
            "1s".into()
        }
    }

    #[test]
    fn every_kind_has_upstreams_printer_and_every_row_fits_its_columns() {
        // Upstream prints every built-in kind served here with its own columns
        // (printers.go, kube-aggregator's APIService printer, the default convertor's NAME
        // CREATED AT): none is left at this server's NAME AGE fallback.
        let bare: Vec<String> = all()
            .iter()
            .filter(|k| {
                k.strategy.table_columns().is_none() && k.printer == crate::Printer::Default
            })
            .map(crate::KindSpec::qualified_resource)
            .collect();
        assert_eq!(bare, Vec::<String>::new());
        // An object of any shape (an empty one, one of wrong types) prints one cell per
        // column.
        for k in all() {
            if let Some(cols) = k.strategy.table_columns() {
                for obj in [
                    serde_json::json!({}),
                    serde_json::json!({"spec": 1, "status": "x",
                    "metadata": {"labels": 3, "ownerReferences": {}}, "subsets": [1], "data": []}),
                ] {
                    let cells = k
                        .strategy
                        .table_cells_at(&obj, "n", "1s", &NoClock)
                        .unwrap();
                    assert_eq!(cells.len(), cols.len(), "{}", k.qualified_resource());
                }
            }
        }
    }

    #[test]
    fn field_labels_are_upstreams_conversion_functions() {
        let all = all();
        let kind = |r: &str| all.iter().find(|k| k.qualified_resource() == r).unwrap();
        // No function registered: only the two metadata fields, upstream's default message.
        let rs = kind("replicasets.apps");
        assert_eq!(rs.field_label_error("metadata.namespace"), None);
        assert_eq!(
            rs.field_label_error("status.replicas").as_deref(),
            Some(
                "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )
        );
        // Registered functions.
        let pods = kind("pods");
        for f in [
            "spec.nodeName",
            "status.podIPs",
            "spec.host",
            "metadata.namespace",
        ] {
            assert_eq!(pods.field_label_error(f), None, "{f}");
        }
        assert_eq!(
            pods.field_label_error("spec.color").as_deref(),
            Some("field label not supported: spec.color")
        );
        for r in [
            "nodes",
            "namespaces",
            "certificatesigningrequests.certificates.k8s.io",
        ] {
            assert_eq!(
                kind(r).field_label_error("metadata.namespace").as_deref(),
                Some("field label not supported: metadata.namespace"),
                "{r}"
            );
            assert_eq!(kind(r).field_label_error("metadata.name"), None);
        }
        assert_eq!(
            kind("jobs.batch")
                .field_label_error("status.succeeded")
                .as_deref(),
            Some("field label \"status.succeeded\" not supported for batchv1.Job")
        );
        assert_eq!(
            kind("jobs.batch").field_label_error("status.successful"),
            None
        );
        assert!(
            kind("events")
                .field_label_error("source.component")
                .is_some()
        );
        assert_eq!(kind("events").field_label_error("source"), None);
        // A kind that declares selectable fields is never at the default function.
        for k in &all {
            if k.selectable_fields.paths().next().is_some() {
                assert_ne!(k.field_labels, crate::FieldLabels::Default, "{}", k.plural);
            }
        }
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
