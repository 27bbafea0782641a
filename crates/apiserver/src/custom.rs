//! `--resources FILE`: generic resources declared in YAML: a `resources:` list in this
//! format, or CustomResourceDefinition manifests (`apiextensions.k8s.io/v1`, one or more
//! YAML documents, or a `List` of them; see the `crd` module for what of a CRD is read). The user
//! documentation of both is in docs/endpoints.md ("Declaring resources").
//!
//! ```yaml
//! resources:
//! - group: example.com
//!   version: v1
//!   kind: Widget
//!   plural: widgets            # default: upstream's plural of the lower-case kind
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
//! is served as that built-in kind instead, with upstream's schema and strategic merge (it
//! may not declare `openAPIV3Schema`); one the server builds in already (e.g.
//! `networking.k8s.io/v1` `Ingress`) is the built-in itself (`all_resources`). Any group may
//! be named: the core group `""`, upstream's dotless groups (`batch`, `apps`) or a DNS name.
//!
//! Invariant: every declared resource is checked (names, group, trigger field, schema:
//! structural — no `$ref` — nesting, not declared twice) before the server starts; a bad
//! file stops startup with a message naming the entry.

mod crd;
pub mod yaml_guard;

use listwatch_endpoints::{KindSpec, Printer, PrinterColumn};
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
    /// A document of the file is neither a `resources:` list nor a CRD manifest.
    #[error("parsing {path}: document {index}: {message}")]
    Document {
        /// The file.
        path: String,
        /// Position of the document in the file, from 0.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// YAML too costly to read for its length (nesting, alias replays): see [`yaml_guard`].
    #[error("parsing {path}: {message}")]
    TooCostly {
        /// The file.
        path: String,
        /// Which budget it exceeds.
        message: String,
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

/// One declaration of a resources file: an entry of a `resources:` list, or the kinds of a
/// CRD manifest (one per served version).
#[derive(Debug)]
enum Declared {
    Entry(Box<Entry>),
    Crd(Vec<KindSpec>),
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

/// Upstream's plural of a lower-case kind, as gengo's plural namer forms it (the names
/// client-gen and kubebuilder give): `-s`, `-x`, `-z`, `-ch`, `-sh` take `es`, a consonant
/// and `y` become `ies`, everything else takes `s` (`ingress` → `ingresses`, `policy` →
/// `policies`, `gateway` → `gateways`).
pub fn plural_of(singular: &str) -> String {
    let b = singular.as_bytes();
    let last = b.last().copied();
    let before = b.len().checked_sub(2).and_then(|i| b.get(i)).copied();
    let vowel = |c: u8| matches!(c, b'a' | b'e' | b'i' | b'o' | b'u');
    match (before, last) {
        (_, Some(b's' | b'x' | b'z')) | (Some(b'c' | b's'), Some(b'h')) => format!("{singular}es"),
        (Some(c), Some(b'y')) if !vowel(c) => {
            format!("{}ies", singular.strip_suffix('y').unwrap_or(singular))
        }
        _ => format!("{singular}s"),
    }
}

/// The entries of a resources file: one `resources:` document, or CRD manifests (each YAML
/// document a CRD, or a `List` whose items are CRDs).
fn entries(text: &str, path: &str) -> Result<Vec<Declared>, ResourcesFileError> {
    let mut out = Vec::new();
    yaml_guard::check(text).map_err(|message| ResourcesFileError::TooCostly {
        path: path.into(),
        message,
    })?;
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            serde_yaml::Value::deserialize(doc).map_err(|source| ResourcesFileError::Parse {
                path: path.into(),
                source,
            })?;
        if value.is_null() {
            continue;
        }
        let bad = |message: String| ResourcesFileError::Document {
            path: path.into(),
            index,
            message,
        };
        if value.get("resources").is_some() {
            let file: File =
                serde_yaml::from_value(value).map_err(|source| ResourcesFileError::Parse {
                    path: path.into(),
                    source,
                })?;
            out.extend(
                file.resources
                    .into_iter()
                    .map(|e| Declared::Entry(Box::new(e))),
            );
            continue;
        }
        for d in crds_of(&value, "a `resources:` list or ").map_err(bad)? {
            out.push(Declared::Crd(crd::specs(&d).map_err(bad)?));
        }
    }
    Ok(out)
}

/// One document as the objects it holds: the items of a `kind: List`, else itself.
fn list_items(json: serde_json::Value) -> Vec<serde_json::Value> {
    match json.get("kind").and_then(serde_json::Value::as_str) {
        Some("List") => json
            .get("items")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => vec![json],
    }
}

/// The CRD manifests of one YAML document: itself, or the items of a `kind: List`; anything
/// else is refused, saying what was `expected` besides a CRD.
fn crds_of(value: &serde_yaml::Value, expected: &str) -> Result<Vec<serde_json::Value>, String> {
    let json: serde_json::Value = serde_json::to_value(value).map_err(|e| e.to_string())?;
    let docs = list_items(json);
    if let Some(d) = docs.iter().find(|d| !crd::is_crd(d)) {
        return Err(format!(
            "expected {expected}a {} ({}), found kind {:?}",
            crd::KIND,
            crd::API_VERSION,
            d.get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        ));
    }
    Ok(docs)
}

/// The CustomResourceDefinitions of a manifest text — one, several separated by `---`, or
/// a `kind: List` of them (a leading byte order mark is skipped) — as JSON values in order,
/// unchecked: what a client creates through the API (the test environment does). Any other
/// document is an error naming it.
pub fn crd_manifests(text: &str, path: &str) -> Result<Vec<serde_json::Value>, ResourcesFileError> {
    manifests(text, path, false)
}

/// The CustomResourceDefinitions of a manifest file as envtest reads its CRD paths: as
/// [`crd_manifests`], but a document (or `List` item) of another kind is skipped, not an
/// error, so a kubebuilder `config/crd` directory with its `kustomization.yaml` works. A text
/// that is not YAML is still an error.
pub fn crd_manifests_skipping_others(
    text: &str,
    path: &str,
) -> Result<Vec<serde_json::Value>, ResourcesFileError> {
    manifests(text, path, true)
}

/// [`crd_manifests`], or with `skip_others` [`crd_manifests_skipping_others`].
fn manifests(
    text: &str,
    path: &str,
    skip_others: bool,
) -> Result<Vec<serde_json::Value>, ResourcesFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    yaml_guard::check(text).map_err(|message| ResourcesFileError::TooCostly {
        path: path.into(),
        message,
    })?;
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            serde_yaml::Value::deserialize(doc).map_err(|source| ResourcesFileError::Parse {
                path: path.into(),
                source,
            })?;
        if value.is_null() {
            continue;
        }
        let bad = |message: String| ResourcesFileError::Document {
            path: path.into(),
            index,
            message,
        };
        if skip_others {
            let json: serde_json::Value =
                serde_json::to_value(&value).map_err(|e| bad(e.to_string()))?;
            out.extend(list_items(json).into_iter().filter(crd::is_crd));
        } else {
            out.extend(crds_of(&value, "").map_err(bad)?);
        }
    }
    Ok(out)
}

/// Parses a resources document (a leading UTF-8 byte order mark, as some editors on Windows
/// write, is skipped, as kubectl's YAML reader does).
pub fn parse(text: &str, path: &str) -> Result<Vec<KindSpec>, ResourcesFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let declared = entries(text, path)?;
    // The schemas as the server's catalog will take them: checked here, so that a bad one
    // stops startup naming its entry.
    let mut catalog = listwatch_schema::Catalog::new();
    let mut out = Vec::new();
    for (index, d) in declared.into_iter().enumerate() {
        let e = match d {
            Declared::Entry(e) => *e,
            Declared::Crd(specs) => {
                for mut spec in specs {
                    let invalid = |message: String| ResourcesFileError::Invalid {
                        index,
                        kind: spec.kind.clone(),
                        message,
                    };
                    // A kind upstream defines (e.g. networking.k8s.io/v1 Ingress) is served
                    // as the built-in it is, with upstream's schema.
                    let builtin = listwatch_schema::Catalog::builtin()
                        .kind(&spec.group, &spec.version, &spec.kind)
                        .is_some();
                    if builtin {
                        spec.custom_resource = false;
                        spec.custom_schema = None;
                        spec.strategy = std::sync::Arc::new(listwatch_kinds::DefaultStrategy);
                    } else {
                        catalog
                            .add_custom(
                                &spec.group,
                                &spec.version,
                                &spec.kind,
                                spec.custom_schema.as_deref(),
                            )
                            .map_err(|err| invalid(err.to_string()))?;
                    }
                    out.push(spec);
                }
                continue;
            }
        };
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
        out.push(entry(index, e, !builtin)?);
    }
    Ok(out)
}

/// Upstream's words for a schema that is not structural (the CRD's `NonStructuralSchema`
/// condition), its errors' paths under `openAPIV3Schema`.
fn non_structural(errs: &[listwatch_kinds::FieldError]) -> String {
    let listed: Vec<String> = errs
        .iter()
        .map(|e| e.clone().prefixed("openAPIV3Schema").to_string())
        .collect();
    format!(
        "openAPIV3Schema is not a supported structural schema: [{}]",
        listed.join(", ")
    )
}

/// Reads and parses a resources file.
pub fn load(path: &std::path::Path) -> Result<Vec<KindSpec>, ResourcesFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ResourcesFileError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&text, &shown)
}

fn entry(index: usize, e: Entry, custom: bool) -> Result<KindSpec, ResourcesFileError> {
    let invalid = |message: String| ResourcesFileError::Invalid {
        index,
        kind: e.kind.clone(),
        message,
    };
    // Any group: the core group (`""`), a group without a dot as upstream's own (`batch`,
    // `apps`), or a DNS name.
    if !(e.group.is_empty() || lower_name(&e.group))
        || e.group.starts_with(['.', '-'])
        || e.group.ends_with(['.', '-'])
    {
        return Err(invalid(format!(
            "group {:?} must be empty (the core group) or lower-case DNS labels",
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
        .unwrap_or_else(|| plural_of(&e.kind.to_ascii_lowercase()));
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
    let storage = if e.group.is_empty() {
        plural.clone()
    } else {
        format!("{plural}.{}", e.group)
    };
    let mut info = KindSpec::new(&e.group, &e.version, &plural, &e.kind)
        .singular(&singular)
        .namespaced(e.namespaced)
        .short_names(e.short_names)
        .categories(e.categories)
        .selectable_fields(e.selectable_fields)
        .status_subresource(e.status_subresource)
        .storage_resource(&storage);
    if custom {
        // Upstream's custom resource strategy: with `/status`, a create cannot set it; a
        // structural schema prunes, defaults and validates every write (a schema that is
        // not one stops the start, with upstream's reasons).
        let strategy = listwatch_kinds::custom::CustomResourceStrategy::with_schema(
            e.status_subresource,
            e.open_api_v3_schema.as_ref(),
        )
        .map_err(|errs| invalid(non_structural(&errs)))?;
        info = info
            .custom_resource(e.open_api_v3_schema)
            .strategy(strategy);
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
                    format: String::new(),
                })
                .collect(),
        ));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Red-team finding of the fifth session: a file starting with a byte order mark stopped
    /// the server (`found kind ""`).
    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n\
                   spec:\n  group: example.com\n  names: {plural: widgets, kind: Widget}\n  scope: Namespaced\n  \
                   versions:\n  - {name: v1, served: true, storage: true}\n";
        let with_bom = format!("\u{feff}{crd}");
        let r = parse(&with_bom, "f").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, "Widget");
    }

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

    /// Issue 28: a CRD manifest's every served version is served (before: only the storage
    /// version), the storage version first, all over one storage key.
    #[test]
    fn every_served_version_of_a_crd_manifest_is_served() {
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n\
                   spec:\n  group: example.com\n  names: {plural: widgets, kind: Widget}\n  scope: Namespaced\n  \
                   versions:\n  - {name: v1beta1, served: true, storage: false}\n  - {name: v1, served: true, storage: true}\n  \
                   - {name: v0, served: false, storage: false}\n";
        let r = parse(crd, "f").unwrap();
        let versions: Vec<&str> = r.iter().map(|s| s.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
        assert!(
            r.iter()
                .all(|s| s.storage_resource == "widgets.example.com")
        );
        // Two storage versions is what a create through the API refuses too.
        let two = crd.replace(
            "storage: false}\n  - {name: v1",
            "storage: true}\n  - {name: v1",
        );
        let e = parse(&two, "f").unwrap_err().to_string();
        assert!(
            e.contains("must have exactly one version marked as storage version"),
            "{e}"
        );
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
    fn any_group_may_be_declared() {
        let r = parse(
            "resources:\n- {group: batch, version: v1, kind: Job}\n- {group: '', version: v1, kind: Widget}\n\
             - {group: apps, version: v1, kind: Gizmo}\n",
            "f",
        )
        .unwrap();
        // Upstream's Job is the built-in; the others are custom resources in any group.
        assert!(!r[0].custom_resource);
        assert_eq!(
            (r[0].group.as_str(), r[0].plural.as_str()),
            ("batch", "jobs")
        );
        assert!(r[1].custom_resource && r[2].custom_resource);
        assert_eq!(r[1].storage_resource, "widgets");
        assert_eq!(r[2].storage_resource, "gizmos.apps");
    }

    #[test]
    fn plurals_are_upstreams() {
        for (kind, plural) in [
            ("ingress", "ingresses"),
            ("box", "boxes"),
            ("quiz", "quizes"),
            ("batch", "batches"),
            ("mesh", "meshes"),
            ("policy", "policies"),
            ("gateway", "gateways"),
            ("widget", "widgets"),
            ("graph", "graphs"),
        ] {
            assert_eq!(plural_of(kind), plural, "{kind}");
        }
    }

    #[test]
    fn rejects_bad_entries_naming_them() {
        for (text, needle) in [
            (
                "resources:\n- {group: 'A.b', version: v1, kind: A}\n",
                "group",
            ),
            (
                "resources:\n- {group: '.b', version: v1, kind: A}\n",
                "group",
            ),
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
            (
                "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\n",
                "must be apiVersion apiextensions.k8s.io/v1",
            ),
            (
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {group: a.b, names: {kind: A, plural: as}, versions: [{name: v1, served: true}]}\n",
                "spec.scope",
            ),
            (
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {group: a.b, scope: Cluster, names: {kind: A, plural: as, listKind: Many}, versions: [{name: v1, served: true, storage: true}]}\n",
                "spec.names.listKind",
            ),
        ] {
            let e = match parse(text, "f") {
                Ok(_) => panic!("accepted: {text}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
