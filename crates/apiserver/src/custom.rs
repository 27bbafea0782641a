//! `--resources FILE`: generic resources declared in YAML, CRD-style.
//!
//! ```yaml
//! resources:
//! - group: example.com
//!   version: v1
//!   kind: Widget
//!   plural: widgets            # default: lower-case kind + "s"
//!   singular: widget           # default: lower-case kind
//!   namespaced: true           # default
//!   shortNames: [wd]
//!   categories: [all]
//!   selectableFields: [spec.color]
//!   triggerField: spec.color   # must be selectable
//!   statusSubresource: true
//!   printerColumns:
//!   - {name: Color, type: string, jsonPath: .spec.color}
//!   openAPIV3Schema:           # optional, as a CRD version's schema.openAPIV3Schema
//!     type: object
//!     properties:
//!       spec:
//!         type: object
//!         properties:
//!           color: {type: string, description: The widget's colour.}
//! ```
//!
//! Each entry is served as upstream serves a CRD's resource: its schema (the declared one,
//! else one that keeps every field) in the OpenAPI documents and for server-side apply,
//! strategic merge refused (415), no create on PUT. An entry naming a kind upstream defines
//! (e.g. `networking.k8s.io/v1` `Ingress`, not built into the server) is served as that
//! built-in kind instead, with upstream's schema and strategic merge (it may not declare
//! `openAPIV3Schema`).
//!
//! Invariant: every declared resource is checked (names, group, trigger field, schema:
//! structural — no `$ref` — nesting, not declared twice) before the server starts; a bad
//! file stops startup with a message naming the entry.

use listwatch_endpoints::{Printer, PrinterColumn, ResourceInfo};
use serde::Deserialize;

/// Why a resources file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ResourcesFileError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML of the expected shape.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: serde_yaml::Error,
    },
    /// An entry breaks a rule.
    #[error("resource {index} ({kind}): {message}")]
    Invalid {
        /// Position in the file, from 0.
        index: usize,
        /// Its kind, as given.
        kind: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    resources: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    group: String,
    version: String,
    kind: String,
    plural: Option<String>,
    singular: Option<String>,
    #[serde(default = "yes")]
    namespaced: bool,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    selectable_fields: Vec<String>,
    trigger_field: Option<String>,
    #[serde(default)]
    status_subresource: bool,
    #[serde(default)]
    printer_columns: Vec<Column>,
    #[serde(rename = "openAPIV3Schema")]
    open_api_v3_schema: Option<serde_json::Value>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Column {
    name: String,
    #[serde(rename = "type", default = "string")]
    type_: String,
    json_path: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    priority: i32,
}

fn string() -> String {
    "string".into()
}

fn lower_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// Parses a resources document.
pub fn parse(text: &str, path: &str) -> Result<Vec<ResourceInfo>, ResourcesFileError> {
    let file: File = serde_yaml::from_str(text).map_err(|source| ResourcesFileError::Parse {
        path: path.into(),
        source,
    })?;
    // The schemas as the server's catalog will take them: checked here, so that a bad one
    // stops startup naming its entry.
    let mut catalog = listwatch_schema::Catalog::new();
    file.resources
        .into_iter()
        .enumerate()
        .map(|(index, e)| {
            let invalid = |message: String| ResourcesFileError::Invalid {
                index,
                kind: e.kind.clone(),
                message,
            };
            // A kind upstream defines (e.g. networking.k8s.io/v1 Ingress, which the server
            // does not build in) is served as the built-in it is, with upstream's schema.
            let builtin = listwatch_schema::Catalog::builtin()
                .kind(&e.group, &e.version, &e.kind)
                .is_some();
            if builtin {
                if e.open_api_v3_schema.is_some() {
                    return Err(invalid(format!(
                        "{}/{} {} is a built-in kind: its schema is upstream's (no openAPIV3Schema)",
                        e.group, e.version, e.kind
                    )));
                }
            } else {
                catalog
                    .add_custom(&e.group, &e.version, &e.kind, e.open_api_v3_schema.as_ref())
                    .map_err(|err| invalid(err.to_string()))?;
            }
            entry(index, e, !builtin)
        })
        .collect()
}

/// Reads and parses a resources file.
pub fn load(path: &std::path::Path) -> Result<Vec<ResourceInfo>, ResourcesFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ResourcesFileError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&text, &shown)
}

fn entry(index: usize, e: Entry, custom: bool) -> Result<ResourceInfo, ResourcesFileError> {
    let invalid = |message: String| ResourcesFileError::Invalid {
        index,
        kind: e.kind.clone(),
        message,
    };
    if e.group.is_empty() || !e.group.contains('.') || !lower_name(&e.group) {
        return Err(invalid(format!(
            "group {:?} must be a DNS name with a dot (the core group is built in)",
            e.group
        )));
    }
    if !lower_name(&e.version) || !e.version.starts_with('v') {
        return Err(invalid(format!(
            "version {:?} must look like v1, v1beta1",
            e.version
        )));
    }
    if e.kind.is_empty()
        || !e.kind.starts_with(|c: char| c.is_ascii_uppercase())
        || !e.kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(invalid("kind must be CamelCase alphanumerics".into()));
    }
    let plural = e
        .plural
        .clone()
        .unwrap_or_else(|| format!("{}s", e.kind.to_ascii_lowercase()));
    let singular = e
        .singular
        .clone()
        .unwrap_or_else(|| e.kind.to_ascii_lowercase());
    for n in [&plural, &singular] {
        if !lower_name(n) || n.contains('.') {
            return Err(invalid(format!(
                "{n:?} must be lower-case alphanumerics and '-'"
            )));
        }
    }
    if let Some(t) = &e.trigger_field
        && !e.selectable_fields.contains(t)
    {
        return Err(invalid(format!(
            "triggerField {t:?} must be one of selectableFields"
        )));
    }
    let mut info = ResourceInfo::new(&e.group, &e.version, &plural, &e.kind)
        .singular(&singular)
        .namespaced(e.namespaced)
        .short_names(e.short_names)
        .categories(e.categories)
        .selectable_fields(e.selectable_fields)
        .status_subresource(e.status_subresource)
        .storage_resource(&format!("{plural}.{}", e.group));
    if custom {
        info = info.custom_resource(e.open_api_v3_schema);
        if e.status_subresource {
            // Upstream's custom resource strategy: a create cannot set the status.
            info = info.prepare_for_create(crate::strategy::drop_status);
        }
    }
    if let Some(t) = &e.trigger_field {
        info = info.trigger_field(t);
    }
    if !e.printer_columns.is_empty() {
        info = info.printer(Printer::Columns(
            e.printer_columns
                .into_iter()
                .map(|c| PrinterColumn {
                    name: c.name,
                    type_: c.type_,
                    json_path: c.json_path,
                    description: c.description,
                    priority: c.priority,
                })
                .collect(),
        ));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_entry_with_defaults() {
        let text = "resources:\n- group: example.com\n  version: v1\n  kind: Widget\n  shortNames: [wd]\n  \
                    selectableFields: [spec.color]\n  triggerField: spec.color\n  printerColumns:\n  \
                    - {name: Color, jsonPath: .spec.color}\n";
        let r = parse(text, "f").unwrap();
        assert_eq!(r.len(), 1);
        let w = &r[0];
        assert_eq!(
            (w.plural.as_str(), w.singular.as_str(), w.namespaced),
            ("widgets", "widget", true)
        );
        assert_eq!(w.storage_resource, "widgets.example.com");
        assert!(w.selectable_fields.supports("spec.color"));
        assert!(matches!(&w.printer, Printer::Columns(c) if c[0].type_ == "string"));
    }

    #[test]
    fn entries_are_custom_resources_with_their_declared_schema() {
        let text = "resources:\n- group: example.com\n  version: v1\n  kind: Widget\n  openAPIV3Schema:\n    \
                    type: object\n    properties:\n      spec:\n        type: object\n        properties:\n          \
                    color: {type: string}\n- group: example.com\n  version: v1\n  kind: Blob\n";
        let r = parse(text, "f").unwrap();
        assert!(r[0].custom_resource && r[1].custom_resource);
        assert!(!r[0].allow_create_on_update);
        let schema = r[0].custom_schema.as_deref().unwrap();
        assert_eq!(
            schema["properties"]["spec"]["properties"]["color"]["type"],
            "string"
        );
        assert!(r[1].custom_schema.is_none());
        // A kind upstream defines is served as the built-in it is.
        let ingress = parse(
            "resources:\n- {group: networking.k8s.io, version: v1, kind: Ingress, plural: ingresses}\n",
            "f",
        )
        .unwrap();
        assert!(!ingress[0].custom_resource);
    }

    #[test]
    fn rejects_bad_entries_naming_them() {
        for (text, needle) in [
            ("resources:\n- {group: '', version: v1, kind: A}\n", "group"),
            (
                "resources:\n- {group: a.b, version: one, kind: A}\n",
                "version",
            ),
            (
                "resources:\n- {group: a.b, version: v1, kind: lower}\n",
                "kind",
            ),
            (
                "resources:\n- {group: a.b, version: v1, kind: A, triggerField: spec.x}\n",
                "triggerField",
            ),
            (
                "resources:\n- {group: a.b, version: v1, kind: A, colour: red}\n",
                "colour",
            ),
            (
                "resources:\n- {group: a.b, version: v1, kind: A, openAPIV3Schema: {type: object, properties: {x: {$ref: '#/y'}}}}\n",
                "$ref",
            ),
            (
                "resources:\n- {group: a.b, version: v1, kind: A}\n- {group: a.b, version: v1, kind: A}\n",
                "declared twice",
            ),
            (
                "resources:\n- {group: networking.k8s.io, version: v1, kind: Ingress, openAPIV3Schema: {type: object}}\n",
                "is a built-in kind",
            ),
        ] {
            let e = parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
