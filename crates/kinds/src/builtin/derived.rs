//! The storage-only built-in kinds (no controllers run for them): one [`KindSpec`] per row
//! of the derived metadata table ([`super::table`]), with its upstream names and
//! subresources, and the code of the kinds that have some (defaults, printing) from their
//! own file under their group (`apps/replicaset.rs`, `batch/job.rs`, ...).
//!
//! A kind with a `/status` subresource and no file of its own gets [`ResetStatus`]: a create
//! cannot set its status, which starts as upstream's empty status serialises (its
//! non-`omitempty` fields at zero). `metadata.generation` is set and bumped only for the kinds
//! whose upstream strategy does ([`GENERATION`]). Invariant: adding a kind is a row in the
//! table (and its names beside it); a file under its group only when it has code.

use serde_json::{Value, json};

use super::table::{self, KindRow};
use crate::strategy::KindStrategy;
use crate::{Generation, KindSpec, Printer, PrinterColumn, ScaleSubresource};

/// Kinds whose upstream strategy sets `metadata.generation` to 1 on create and bumps it on
/// spec changes (`pkg/registry/<group>/<kind>/strategy.go`, `PrepareForCreate`).
pub const GENERATION: &[(&str, &str)] = &[
    ("", "replicationcontrollers"),
    ("", "podtemplates"),
    ("apps", "replicasets"),
    ("apps", "daemonsets"),
    ("apps", "statefulsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "ingresses"),
    ("networking.k8s.io", "networkpolicies"),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    ),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"),
    (
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
    ),
];

/// A create's status, for a kind with `/status` and no code of its own: upstream's
/// `PrepareForCreate` sets the empty status, which serialises with its non-`omitempty`
/// fields at zero.
#[derive(Debug, Clone, Copy)]
pub struct ResetStatus(pub fn() -> Value);

impl KindStrategy for ResetStatus {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), (self.0)());
        }
    }
}

fn empty() -> Value {
    json!({})
}

/// The empty status of a kind with `/status` (its non-`omitempty` fields at zero).
fn empty_status(group: &str, plural: &str) -> fn() -> Value {
    match (group, plural) {
        ("storage.k8s.io", "volumeattachments") => || json!({"attached": false}),
        ("", "persistentvolumes" | "persistentvolumeclaims") => || json!({"phase": "Pending"}),
        _ => empty,
    }
}

/// Every storage-only built-in kind, in the table's order.
pub fn all() -> Vec<KindSpec> {
    table::ROWS.iter().map(spec_of).collect()
}

/// The spec of one row: its names and subresources, then its kind's own code.
fn spec_of(row: &KindRow) -> KindSpec {
    let names = table::names_of(row);
    let has = |s: &str| names.subresources.contains(&s);
    let generation = if GENERATION.contains(&(row.group, row.plural)) {
        Generation::Spec
    } else {
        Generation::None
    };
    let mut spec = KindSpec::new(row.group, row.version, row.plural, row.kind)
        .namespaced(row.namespaced)
        .short_names(names.short_names.iter().copied())
        .categories(names.categories.iter().copied())
        .status_subresource(has("status"))
        .approval_subresource(has("approval"))
        .generation(generation);
    if has("scale") {
        spec = spec.scale(ScaleSubresource::replicas().label_selector("spec.selector"));
    }
    if has("status") {
        spec = spec.strategy(ResetStatus(empty_status(row.group, row.plural)));
    }
    own_code(spec)
}

/// The kinds with code of their own (their file under their group). A kind with `/status`
/// whose file prints it gets the empty status its create resets to.
fn own_code(spec: KindSpec) -> KindSpec {
    use super::{
        admissionregistration as admission, apiregistration, apps, autoscaling, batch,
        certificates, core, flowcontrol, networking, policy, scheduling, storage,
    };
    let status = empty_status(&spec.group, &spec.plural);
    match (spec.group.as_str(), spec.plural.as_str()) {
        ("", "replicationcontrollers") => core::replicationcontroller::spec(spec),
        ("", "componentstatuses") => core::componentstatus::spec(spec),
        ("", "persistentvolumes") => core::persistentvolume::spec(spec),
        ("", "persistentvolumeclaims") => core::persistentvolumeclaim::spec(spec),
        ("", "limitranges") => core::limitrange::spec(spec),
        ("", "resourcequotas") => core::resourcequota::spec(spec, status),
        ("", "podtemplates") => core::podtemplate::spec(spec),
        ("apps", "replicasets") => apps::replicaset::spec(spec),
        ("apps", "daemonsets") => apps::daemonset::spec(spec),
        ("apps", "statefulsets") => apps::statefulset::spec(spec),
        ("apps", "controllerrevisions") => apps::controllerrevision::spec(spec),
        ("batch", "jobs") => batch::job::spec(spec),
        ("batch", "cronjobs") => batch::cronjob::spec(spec),
        ("autoscaling", "horizontalpodautoscalers") => {
            autoscaling::horizontalpodautoscaler::spec(spec)
        }
        ("policy", "poddisruptionbudgets") => policy::poddisruptionbudget::spec(spec),
        ("networking.k8s.io", "ingresses") => networking::ingress::spec(spec),
        ("networking.k8s.io", "ingressclasses") => networking::ingressclass::spec(spec),
        ("networking.k8s.io", "networkpolicies") => networking::networkpolicy::spec(spec),
        ("storage.k8s.io", "storageclasses") => storage::storageclass::spec(spec),
        ("storage.k8s.io", "csidrivers") => storage::csidriver::spec(spec),
        ("storage.k8s.io", "csinodes") => storage::csinode::spec(spec),
        ("storage.k8s.io", "csistoragecapacities") => storage::csistoragecapacity::spec(spec),
        ("storage.k8s.io", "volumeattachments") => storage::volumeattachment::spec(spec, status),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            certificates::certificatesigningrequest::spec(spec)
        }
        ("scheduling.k8s.io", "priorityclasses") => scheduling::priorityclass::spec(spec),
        // Upstream's printer of runtime classes is a plain field (printers.go).
        ("node.k8s.io", "runtimeclasses") => {
            spec.printer(Printer::Columns(vec![PrinterColumn::new(
                "Handler", "string", ".handler",
            )]))
        }
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations" | "validatingwebhookconfigurations",
        ) => admission::webhookconfiguration::spec(spec),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            admission::validatingadmissionpolicy::spec(spec, status)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            admission::validatingadmissionpolicybinding::spec(spec)
        }
        ("apiregistration.k8s.io", "apiservices") => {
            apiregistration::apiservice::spec(spec, status)
        }
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => {
            flowcontrol::flowschema::spec(spec, status)
        }
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            flowcontrol::prioritylevelconfiguration::spec(spec, status)
        }
        _ => spec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_served_with_its_upstream_names() {
        let all = all();
        assert_eq!(all.len(), table::ROWS.len());
        let rs = all.iter().find(|s| s.plural == "replicasets").unwrap();
        assert_eq!(rs.short_names, ["rs"]);
        assert_eq!(rs.categories, ["all"]);
        assert_eq!(rs.subresources(), ["status", "scale"]);
        let csr = all
            .iter()
            .find(|s| s.plural == "certificatesigningrequests")
            .unwrap();
        assert!(!csr.namespaced);
        assert_eq!(csr.subresources(), ["status", "approval"]);
        let cs = all
            .iter()
            .find(|s| s.plural == "componentstatuses")
            .unwrap();
        assert!(cs.serves_verb("list") && !cs.serves_verb("create"));
    }

    #[test]
    fn a_create_resets_the_status_of_a_kind_with_status() {
        let all = all();
        let va = all
            .iter()
            .find(|s| s.plural == "volumeattachments")
            .unwrap();
        let mut obj = json!({"spec": {}, "status": {"attached": true, "attachmentMetadata": {}}});
        va.strategy.prepare_for_create(&mut obj);
        assert_eq!(obj["status"], json!({"attached": false}));
    }
}
