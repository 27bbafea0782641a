//! A CustomResourceDefinition (`apiextensions.k8s.io/v1`) read as what it defines: its
//! names, scope and versions ([`Definition`]), and the [`KindSpec`] of each served version
//! ([`Definition::kind_specs`]) — the one conversion both the CRD controller (CRDs created
//! through the API) and `--resources` (CRD manifests in a file) use.
//!
//! Read: `metadata.name`; `spec.group`; `spec.names` (`kind`, `plural`, `singular` —
//! defaulting to the lower-case kind —, `shortNames`, `categories`, `listKind`); `spec.scope`;
//! of every version: `name`, `served`, `storage`, `schema.openAPIV3Schema`,
//! `subresources.status`, `subresources.scale`, `additionalPrinterColumns` and
//! `selectableFields`. Whether those make a valid CRD is the CRD kind's validation
//! (`builtin::apiextensions::customresourcedefinition`); reading only refuses what it cannot
//! read at all, naming the field.
//!
//! Invariants: every served version maps to one spec, all of them over one storage (the
//! storage version's: `storage_resource` is `<plural>.<group>` for each, so a version's
//! objects are the others' with their `apiVersion` rewritten); the storage version's spec
//! comes first; reading costs one pass over the document.

use serde_json::Value;

use crate::custom::CustomResourceStrategy;
use crate::{KindSpec, Printer, PrinterColumn, ScaleSubresource};

/// The CRD API's group.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The CRD API's version.
pub const VERSION: &str = "v1";
/// `apiextensions.k8s.io/v1`.
pub const API_VERSION: &str = "apiextensions.k8s.io/v1";
/// The CRD kind.
pub const KIND: &str = "CustomResourceDefinition";
/// The finalizer a CRD's first DELETE adds; removed once every custom resource is gone
/// (upstream's `apiextensions.CustomResourceCleanupFinalizer`).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The names a CRD's resource is served under (`spec.names`, or `status.acceptedNames`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Names {
    /// e.g. `widgets`.
    pub plural: String,
    /// e.g. `widget`.
    pub singular: String,
    /// e.g. `Widget`.
    pub kind: String,
    /// e.g. `WidgetList`.
    pub list_kind: String,
    /// e.g. `wd`.
    pub short_names: Vec<String>,
    /// e.g. `all`.
    pub categories: Vec<String>,
}

impl Names {
    /// The names of `names` (a CRD's `spec.names` or `status.acceptedNames`), with
    /// upstream's defaults: `singular` the lower-case kind, `listKind` the kind + `List`.
    pub fn read(names: &Value) -> Self {
        let kind = str_at(names, "kind").unwrap_or("").to_owned();
        Self {
            plural: str_at(names, "plural").unwrap_or("").to_owned(),
            singular: str_at(names, "singular")
                .filter(|s| !s.is_empty())
                .map_or_else(|| kind.to_ascii_lowercase(), str::to_owned),
            list_kind: str_at(names, "listKind")
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("{kind}List"), str::to_owned),
            kind,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
        }
    }

    /// As a CRD's `status.acceptedNames`.
    pub fn to_value(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("plural".into(), Value::from(self.plural.as_str()));
        m.insert("singular".into(), Value::from(self.singular.as_str()));
        if !self.short_names.is_empty() {
            m.insert("shortNames".into(), Value::from(self.short_names.clone()));
        }
        m.insert("kind".into(), Value::from(self.kind.as_str()));
        m.insert("listKind".into(), Value::from(self.list_kind.as_str()));
        if !self.categories.is_empty() {
            m.insert("categories".into(), Value::from(self.categories.clone()));
        }
        Value::Object(m)
    }
}

/// One version of a CRD (`spec.versions[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    /// e.g. `v1`.
    pub name: String,
    /// Whether it is served.
    pub served: bool,
    /// Whether objects are stored in it.
    pub storage: bool,
    /// `schema.openAPIV3Schema`.
    pub schema: Option<Value>,
    /// `subresources.status` is set.
    pub status: bool,
    /// `subresources.scale`.
    pub scale: Option<ScaleSubresource>,
    /// `additionalPrinterColumns`.
    pub columns: Vec<PrinterColumn>,
    /// `selectableFields[].jsonPath`, without the leading dot.
    pub selectable_fields: Vec<String>,
    /// `deprecated`.
    pub deprecated: bool,
    /// `deprecationWarning`.
    pub deprecation_warning: Option<String>,
}

/// What a CRD defines.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// `metadata.name` (`<plural>.<group>` once valid).
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.names`.
    pub names: Names,
    /// `spec.scope` is `Namespaced`.
    pub namespaced: bool,
    /// `spec.versions`, in order.
    pub versions: Vec<Version>,
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.as_str()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A JSONPath of a CRD (`.spec.replicas`) as a dotted path (`spec.replicas`).
fn dotted(path: &str) -> String {
    path.trim_start_matches('.').to_owned()
}

impl Definition {
    /// Reads the CRD `crd` (its JSON); `Err` names what is missing or not readable.
    pub fn read(crd: &Value) -> Result<Self, String> {
        let api_version = str_at(crd, "apiVersion").unwrap_or("");
        if api_version != API_VERSION {
            return Err(format!(
                "a {KIND} must be apiVersion {API_VERSION}, not {api_version:?}"
            ));
        }
        let name = crd
            .get("metadata")
            .and_then(|m| str_at(m, "name"))
            .unwrap_or("")
            .to_owned();
        let spec = crd
            .get("spec")
            .ok_or("a CustomResourceDefinition needs spec")?;
        let group = str_at(spec, "group").ok_or("spec.group is required")?;
        let names = spec.get("names").ok_or("spec.names is required")?;
        str_at(names, "kind").ok_or("spec.names.kind is required")?;
        str_at(names, "plural").ok_or("spec.names.plural is required")?;
        let namespaced = match str_at(spec, "scope") {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            other => {
                return Err(format!(
                    "spec.scope must be Namespaced or Cluster, not {:?}",
                    other.unwrap_or("")
                ));
            }
        };
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .filter(|v| !v.is_empty())
            .ok_or("spec.versions must list at least one version")?
            .iter()
            .map(read_version)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name,
            group: group.to_owned(),
            names: Names::read(names),
            namespaced,
            versions,
        })
    }

    /// The storage version: the one with `storage: true` (else the first served, as a
    /// manifest without one is read by `--resources`).
    pub fn storage_version(&self) -> Option<&Version> {
        self.versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| self.versions.iter().find(|v| v.served))
    }

    /// The warning a request to version `v` gets: none unless `v` is deprecated; then its
    /// `deprecationWarning`, or upstream's default: `<group>/<version> <Kind> is deprecated`,
    /// followed by `; use <group>/<newest> <Kind>` naming the newest served, not deprecated
    /// version of the same or a greater stability (GA over beta over alpha), if any.
    pub fn deprecation_warning(&self, v: &Version, kind: &str) -> Option<String> {
        if !v.deprecated {
            return None;
        }
        if let Some(w) = &v.deprecation_warning {
            return Some(w.clone());
        }
        let mut msg = format!("{}/{} {kind} is deprecated", self.group, v.name);
        let floor = version_priority(&v.name).0;
        let newest = self
            .versions
            .iter()
            .filter(|o| o.served && !o.deprecated && version_priority(&o.name).0 >= floor)
            .max_by(|a, b| version_priority(&a.name).cmp(&version_priority(&b.name)));
        if let Some(n) = newest {
            msg.push_str(&format!("; use {}/{} {kind}", self.group, n.name));
        }
        Some(msg)
    }

    /// `<plural>.<group>` under `names`: the storage key segment every version shares.
    pub fn storage_resource(&self, names: &Names) -> String {
        format!("{}.{}", names.plural, self.group)
    }

    /// The spec of every served version under `names` (the accepted ones), the storage
    /// version first. Empty when no version is served.
    pub fn kind_specs(&self, names: &Names) -> Vec<KindSpec> {
        let storage = self.storage_version().map(|v| v.name.clone());
        let mut out: Vec<KindSpec> = Vec::new();
        for v in self.versions.iter().filter(|v| v.served) {
            let mut spec = KindSpec::new(&self.group, &v.name, &names.plural, &names.kind)
                .singular(&names.singular)
                .namespaced(self.namespaced)
                .short_names(names.short_names.clone())
                .categories(names.categories.clone())
                .selectable_fields(v.selectable_fields.clone())
                .status_subresource(v.status)
                .storage_resource(&self.storage_resource(names))
                .custom_resource(v.schema.clone())
                .strategy(
                    // The schema was checked by `Structural::new` when the CRD was validated
                    // (through the API and in `--resources` alike), so it compiles here.
                    CustomResourceStrategy::with_schema(v.status, v.schema.as_ref())
                        .unwrap_or_else(|_| CustomResourceStrategy::new(v.status)),
                );
            if let Some(scale) = &v.scale {
                spec = spec.scale(scale.clone());
            }
            if !v.columns.is_empty() {
                spec = spec.printer(Printer::Columns(v.columns.clone()));
            }
            spec.warning = self.deprecation_warning(v, &names.kind);
            if Some(&v.name) == storage.as_ref() {
                out.insert(0, spec);
            } else {
                out.push(spec);
            }
        }
        out
    }
}

/// Upstream's Kubernetes-aware version order (`v2` > `v1` > `v1beta2` > `v1beta1` >
/// `v1alpha1` > anything else), as a sortable key: (stability, major, minor). A name not of
/// the form `v<major>[alpha|beta<minor>]` has stability 0 and sorts below every other.
fn version_priority(name: &str) -> (u8, u64, u64) {
    let Some(rest) = name.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (major, tail) = rest.split_at(digits);
    let Ok(major) = major.parse::<u64>() else {
        return (0, 0, 0);
    };
    let level = |t: &str| -> Option<u64> {
        t.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    match tail {
        "" => (3, major, 0),
        t => match (t.strip_prefix("beta"), t.strip_prefix("alpha")) {
            (Some(m), _) => level(m).map_or((0, 0, 0), |m| (2, major, m)),
            (_, Some(m)) => level(m).map_or((0, 0, 0), |m| (1, major, m)),
            _ => (0, 0, 0),
        },
    }
}

fn read_version(v: &Value) -> Result<Version, String> {
    let name = str_at(v, "name").ok_or("spec.versions[].name is required")?;
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let columns = v
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| {
                    Ok(PrinterColumn {
                        name: str_at(c, "name")
                            .ok_or("additionalPrinterColumns[].name is required")?
                            .to_owned(),
                        type_: str_at(c, "type").unwrap_or("string").to_owned(),
                        json_path: str_at(c, "jsonPath")
                            .ok_or("additionalPrinterColumns[].jsonPath is required")?
                            .to_owned(),
                        description: str_at(c, "description").unwrap_or("").to_owned(),
                        priority: c
                            .get("priority")
                            .and_then(Value::as_i64)
                            .and_then(|p| i32::try_from(p).ok())
                            .unwrap_or(0),
                        format: str_at(c, "format").unwrap_or("").to_owned(),
                    })
                })
                .collect::<Result<Vec<_>, &str>>()
        })
        .transpose()?
        .unwrap_or_default();
    let selectable_fields = v
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|s| str_at(s, "jsonPath"))
                .map(dotted)
                .collect()
        })
        .unwrap_or_default();
    let subresources = v.get("subresources");
    let scale = subresources.and_then(|s| s.get("scale")).and_then(|s| {
        let spec = str_at(s, "specReplicasPath")?;
        let status = str_at(s, "statusReplicasPath")?;
        let mut scale = ScaleSubresource {
            spec_replicas_path: dotted(spec),
            status_replicas_path: dotted(status),
            label_selector_path: None,
        };
        if let Some(sel) = str_at(s, "labelSelectorPath") {
            scale = scale.label_selector(&dotted(sel));
        }
        Some(scale)
    });
    Ok(Version {
        name: name.to_owned(),
        served: flag("served"),
        storage: flag("storage"),
        schema: v
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .cloned(),
        status: subresources.and_then(|s| s.get("status")).is_some(),
        scale,
        columns,
        selectable_fields,
        deprecated: flag("deprecated"),
        deprecation_warning: str_at(v, "deprecationWarning").map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector"}},
                     "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}],
                     "selectableFields": [{"jsonPath": ".spec.color"}],
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn versions_order_as_upstreams_kube_aware_comparison() {
        let mut names = [
            "v1alpha1", "foo", "v2", "v1beta1", "v1", "v1beta2", "v10", "v3alpha1",
        ];
        names.sort_by_key(|n| std::cmp::Reverse(version_priority(n)));
        assert_eq!(
            names,
            [
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v3alpha1", "v1alpha1", "foo"
            ]
        );
    }

    #[test]
    fn a_deprecated_version_warns_with_its_text_or_upstreams_default() {
        let mut c = crd();
        c["spec"]["versions"] = json!([
            {"name": "v1alpha1", "served": true, "storage": false, "deprecated": true},
            {"name": "v1beta1", "served": true, "storage": false, "deprecated": true,
             "deprecationWarning": "use v1, please"},
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2alpha1", "served": true, "storage": false}
        ]);
        let d = Definition::read(&c).unwrap();
        let names = d.names.clone();
        let warnings: Vec<_> = d
            .kind_specs(&names)
            .into_iter()
            .map(|s| (s.version.clone(), s.warning.clone()))
            .collect();
        let of = |v: &str| warnings.iter().find(|w| w.0 == v).and_then(|w| w.1.clone());
        assert_eq!(of("v1"), None);
        assert_eq!(of("v2alpha1"), None);
        assert_eq!(of("v1beta1").as_deref(), Some("use v1, please"));
        // The newest served, not deprecated version of equal or greater stability: v1 (GA)
        // over v2alpha1.
        assert_eq!(
            of("v1alpha1").as_deref(),
            Some("example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget")
        );
    }

    #[test]
    fn every_served_version_is_a_spec_over_the_storage_versions_storage() {
        let d = Definition::read(&crd()).unwrap();
        assert_eq!(d.names.singular, "widget");
        assert_eq!(d.names.list_kind, "WidgetList");
        let specs = d.kind_specs(&d.names);
        let versions: Vec<&str> = specs.iter().map(|s| s.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
        for s in &specs {
            assert_eq!(s.storage_resource, "widgets.example.com");
            assert!(s.custom_resource);
            assert_eq!(s.short_names, ["wd"]);
        }
        let v1 = &specs[0];
        assert!(v1.status_subresource);
        assert_eq!(
            v1.scale.as_ref().map(|s| s.spec_replicas_path.as_str()),
            Some("spec.replicas")
        );
        assert!(v1.selectable_fields.supports("spec.color"));
        assert!(matches!(&v1.printer, Printer::Columns(c) if c[0].json_path == ".spec.color"));
        assert!(!specs[1].status_subresource);
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        let mut c = crd();
        c["spec"]["scope"] = json!("Galaxy");
        assert!(Definition::read(&c).unwrap_err().contains("spec.scope"));
        let mut c = crd();
        c["apiVersion"] = json!("apiextensions.k8s.io/v1beta1");
        assert!(Definition::read(&c).unwrap_err().contains("apiVersion"));
        let mut c = crd();
        c["spec"]["versions"] = json!([]);
        assert!(Definition::read(&c).unwrap_err().contains("spec.versions"));
    }

    #[test]
    fn accepted_names_round_trip() {
        let d = Definition::read(&crd()).unwrap();
        assert_eq!(Names::read(&d.names.to_value()), d.names);
    }
}
