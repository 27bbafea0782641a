//! Real CustomResourceDefinition manifests (`apiextensions.k8s.io/v1`) as `--resources`
//! declarations: what of a CRD is read, and how it maps onto an entry of the resources file.
//!
//! Read: `spec.group`; `spec.names` (`kind`, `plural`, `singular`, `shortNames`,
//! `categories`, `listKind`, which must be `<kind>List` as the schema catalog names it);
//! `spec.scope` (`Namespaced` or `Cluster`); of `spec.versions`, the one with `storage: true`
//! (else the first served): its `name`, `schema.openAPIV3Schema`, `subresources.status`,
//! `additionalPrinterColumns` and `selectableFields`. Everything else (metadata, conversion,
//! other versions, validation rules) is ignored.
//!
//! Invariant: a document that is not a CRD of `apiextensions.k8s.io/v1`, or lacks a field
//! the declaration needs, is refused with a message naming the field; nothing is guessed
//! except the defaults a CRD itself has (`singular` from `kind`).

use serde_json::Value;

use super::{Column, Entry};

/// The API version and kind of a CRD manifest.
pub(super) const API_VERSION: &str = "apiextensions.k8s.io/v1";
pub(super) const KIND: &str = "CustomResourceDefinition";

/// Whether `doc` is a CRD manifest (by its `apiVersion` and `kind`), or names the CRD API
/// in another version (refused by [`entry`]).
pub(super) fn is_crd(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
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

/// The resources-file entry a CRD manifest declares; `Err` names what is missing or wrong.
pub(super) fn entry(doc: &Value) -> Result<Entry, String> {
    let api_version = str_at(doc, &["apiVersion"]).unwrap_or("");
    if api_version != API_VERSION {
        return Err(format!(
            "a {KIND} must be apiVersion {API_VERSION}, not {api_version:?}"
        ));
    }
    let spec = doc
        .get("spec")
        .ok_or("a CustomResourceDefinition needs spec")?;
    let group = str_at(spec, &["group"]).ok_or("spec.group is required")?;
    let names = spec.get("names").ok_or("spec.names is required")?;
    let kind = str_at(names, &["kind"]).ok_or("spec.names.kind is required")?;
    let plural = str_at(names, &["plural"]).ok_or("spec.names.plural is required")?;
    if let Some(list_kind) = str_at(names, &["listKind"])
        && list_kind != format!("{kind}List")
    {
        return Err(format!(
            "spec.names.listKind {list_kind:?}: only {kind}List is supported"
        ));
    }
    let namespaced = match str_at(spec, &["scope"]) {
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
        .ok_or("spec.versions must list at least one version")?;
    let flag = |v: &Value, k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let version = versions
        .iter()
        .find(|v| flag(v, "storage"))
        .or_else(|| versions.iter().find(|v| flag(v, "served")))
        .ok_or("spec.versions: no version is served")?;
    let name = str_at(version, &["name"]).ok_or("spec.versions[].name is required")?;
    let columns = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| {
                    Ok(Column {
                        name: str_at(c, &["name"])
                            .ok_or("additionalPrinterColumns[].name is required")?
                            .to_owned(),
                        type_: str_at(c, &["type"]).unwrap_or("string").to_owned(),
                        json_path: str_at(c, &["jsonPath"])
                            .ok_or("additionalPrinterColumns[].jsonPath is required")?
                            .to_owned(),
                        description: str_at(c, &["description"]).unwrap_or("").to_owned(),
                        priority: c
                            .get("priority")
                            .and_then(Value::as_i64)
                            .and_then(|p| i32::try_from(p).ok())
                            .unwrap_or(0),
                    })
                })
                .collect::<Result<Vec<_>, &str>>()
        })
        .transpose()?
        .unwrap_or_default();
    let selectable = version
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|s| str_at(s, &["jsonPath"]))
                .map(|p| p.trim_start_matches('.').to_owned())
                .collect()
        })
        .unwrap_or_default();
    Ok(Entry {
        group: group.to_owned(),
        version: name.to_owned(),
        kind: kind.to_owned(),
        plural: Some(plural.to_owned()),
        singular: str_at(names, &["singular"]).map(str::to_owned),
        namespaced,
        short_names: strings(names.get("shortNames")),
        categories: strings(names.get("categories")),
        selectable_fields: selectable,
        trigger_field: None,
        status_subresource: version
            .get("subresources")
            .and_then(|s| s.get("status"))
            .is_some(),
        printer_columns: columns,
        open_api_v3_schema: version
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .cloned(),
    })
}
