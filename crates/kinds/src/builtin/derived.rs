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

/// A printer of plain-field columns (NAME, these, AGE).
fn columns(cols: &[(&str, &str, &str)]) -> Printer {
    Printer::Columns(
        cols.iter()
            .map(|(name, type_, path)| PrinterColumn::new(name, type_, path))
            .collect(),
    )
}

/// The kinds with code of their own (their file under their group).
fn own_code(spec: KindSpec) -> KindSpec {
    use super::{apps, autoscaling, batch, certificates, core, networking, policy, storage};
    match (spec.group.as_str(), spec.plural.as_str()) {
        ("", "replicationcontrollers") => core::replicationcontroller::spec(spec),
        ("", "componentstatuses") => core::componentstatus::spec(spec),
        // Kinds whose upstream columns are plain fields (printers.go), before AGE.
        ("scheduling.k8s.io", "priorityclasses") => spec.printer(columns(&[
            ("Value", "integer", ".value"),
            ("Global-Default", "boolean", ".globalDefault"),
        ])),
        ("node.k8s.io", "runtimeclasses") => {
            spec.printer(columns(&[("Handler", "string", ".handler")]))
        }
        ("storage.k8s.io", "volumeattachments") => spec.printer(columns(&[
            ("Attacher", "string", ".spec.attacher"),
            ("PV", "string", ".spec.source.persistentVolumeName"),
            ("Node", "string", ".spec.nodeName"),
            ("Attached", "boolean", ".status.attached"),
        ])),
        ("", "persistentvolumes") => core::persistentvolume::spec(spec),
        ("", "persistentvolumeclaims") => core::persistentvolumeclaim::spec(spec),
        // Upstream's limit range strategy allows create on update.
        ("", "limitranges") => spec.allow_create_on_update(true),
        ("apps", "replicasets") => apps::replicaset::spec(spec),
        ("apps", "daemonsets") => apps::daemonset::spec(spec),
        ("apps", "statefulsets") => apps::statefulset::spec(spec),
        ("batch", "jobs") => batch::job::spec(spec),
        ("batch", "cronjobs") => batch::cronjob::spec(spec),
        ("autoscaling", "horizontalpodautoscalers") => {
            autoscaling::horizontalpodautoscaler::spec(spec)
        }
        ("policy", "poddisruptionbudgets") => policy::poddisruptionbudget::spec(spec),
        ("networking.k8s.io", "ingresses") => networking::ingress::spec(spec),
        ("networking.k8s.io", "networkpolicies") => networking::networkpolicy::spec(spec),
        ("storage.k8s.io", "storageclasses") => storage::storageclass::spec(spec),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            certificates::certificatesigningrequest::spec(spec)
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
