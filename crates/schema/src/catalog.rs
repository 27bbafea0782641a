//! The catalog of schemas a server serves: upstream's built-in definitions (parsed once per
//! process) plus the declared schemas of custom resources, indexed by group-version-kind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use serde_json::{Map, Value, json};

use crate::node::Node;
use crate::normalize::{self, COMPONENTS_PREFIX};
use crate::plan::Plan;

/// Kubernetes v1.32.0's definitions, as vendored (see `upstream/README.md`).
const BUILTIN: &str = include_str!("../upstream/v1.32.0/_definitions.json");

/// The upstream version the built-in definitions come from.
pub const BUILTIN_VERSION: &str = "v1.32.0";

/// How deep a custom resource's declared schema may nest (upstream bounds CRD schemas by
/// their object size; a nesting bound keeps every recursive walk here shallow).
pub const MAX_CUSTOM_SCHEMA_DEPTH: usize = 64;

/// `(group, version, kind)`.
type GvkKey = (String, String, String);

/// Upstream's definitions by name, and the kinds they define.
#[derive(Debug, Default)]
struct Definitions {
    defs: HashMap<String, Value>,
    kinds: HashMap<GvkKey, String>,
}

impl Definitions {
    fn index_kinds(&mut self) {
        for (name, def) in &self.defs {
            let Some(Value::Array(gvks)) = def.get("x-kubernetes-group-version-kind") else {
                continue;
            };
            for gvk in gvks {
                let part = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
                // Types shared by every group (DeleteOptions, WatchEvent) list many GVKs;
                // the first definition to claim a GVK keeps it.
                self.kinds
                    .entry((
                        part("group").to_owned(),
                        part("version").to_owned(),
                        part("kind").to_owned(),
                    ))
                    .or_insert_with(|| name.clone());
            }
        }
    }
}

static BUILTIN_DEFS: LazyLock<Definitions> = LazyLock::new(|| {
    let started = std::time::Instant::now();
    let mut out = Definitions::default();
    match serde_json::from_str::<Value>(BUILTIN) {
        Ok(Value::Object(mut doc)) => {
            if let Some(Value::Object(defs)) = doc.remove("$defs") {
                out.defs = defs
                    .into_iter()
                    .map(|(name, def)| (name, normalize::definition(def)))
                    .collect();
            }
        }
        // Unreachable with the vendored file (a unit test parses it); an empty catalog
        // serves preserve-unknown schemas rather than taking the server down.
        Ok(_) | Err(_) => tracing::error!("the vendored OpenAPI definitions do not parse"),
    }
    out.index_kinds();
    tracing::debug!(
        definitions = out.defs.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "built-in OpenAPI definitions loaded"
    );
    out
});

/// Why a custom resource's schema was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema is not a JSON object.
    #[error("the schema of {kind} must be an object")]
    NotAnObject {
        /// The kind.
        kind: String,
    },
    /// A `$ref` (structural schemas have none).
    #[error("the schema of {kind} has a $ref at {at}: structural schemas may not")]
    Reference {
        /// The kind.
        kind: String,
        /// Where, as a dotted path of schema keys.
        at: String,
    },
    /// Nested more than [`MAX_CUSTOM_SCHEMA_DEPTH`] levels.
    #[error("the schema of {kind} nests more than {limit} levels")]
    TooDeep {
        /// The kind.
        kind: String,
        /// The limit.
        limit: usize,
    },
    /// Two resources declare the same group-version-kind.
    #[error("{group}/{version} {kind} is declared twice")]
    Duplicate {
        /// Group.
        group: String,
        /// Version.
        version: String,
        /// Kind.
        kind: String,
    },
}

/// The schemas of every kind a server serves: upstream's built-in definitions plus the
/// custom resources added with [`Catalog::add_custom`]. Cheap to share (`Arc`); immutable
/// once built.
#[derive(Debug, Default)]
pub struct Catalog {
    custom_defs: HashMap<String, Value>,
    custom_kinds: HashMap<GvkKey, String>,
    /// Each kind's [`Plan`], by definition name, compiled when first asked for
    /// ([`Catalog::plan`]); at most one per kind the catalog has.
    plans: RwLock<HashMap<String, Arc<Plan>>>,
}

impl Catalog {
    /// A catalog of the built-in definitions only. The first call in a process parses the
    /// vendored file (about 1.3 MB of JSON); later calls share it.
    pub fn new() -> Self {
        LazyLock::force(&BUILTIN_DEFS);
        Self::default()
    }

    /// The built-in catalog, shared.
    pub fn builtin() -> Arc<Catalog> {
        static SHARED: LazyLock<Arc<Catalog>> = LazyLock::new(|| Arc::new(Catalog::new()));
        Arc::clone(&SHARED)
    }

    /// Adds a custom resource's kind with its declared `openAPIV3Schema` (a CRD version's
    /// `schema.openAPIV3Schema`), or, without one, a schema that keeps every field
    /// (`x-kubernetes-preserve-unknown-fields`). As upstream publishes CRDs: the definition
    /// is named `<reversed group>.<version>.<Kind>`, `metadata` refers to `ObjectMeta`,
    /// `apiVersion`/`kind` are described, and it carries its group-version-kind; a
    /// `<Kind>List` definition (items of the kind, `ListMeta`) is added alongside.
    pub fn add_custom(
        &mut self,
        group: &str,
        version: &str,
        kind: &str,
        declared: Option<&Value>,
    ) -> Result<(), SchemaError> {
        // Plans compiled so far are of other kinds and stay true; dropped all the same, so
        // nothing compiled before a change is kept past it.
        self.plans
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let key: GvkKey = (group.into(), version.into(), kind.into());
        let list_kind = format!("{kind}List");
        let list_key: GvkKey = (group.into(), version.into(), list_kind.clone());
        for (k, shown) in [(&key, kind), (&list_key, list_kind.as_str())] {
            if self.custom_kinds.contains_key(k) || BUILTIN_DEFS.kinds.contains_key(k) {
                return Err(SchemaError::Duplicate {
                    group: group.into(),
                    version: version.into(),
                    kind: shown.into(),
                });
            }
        }
        let mut def = match declared {
            None => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            Some(Value::Object(m)) => {
                check_structural(&Value::Object(m.clone()), kind, "", 0)?;
                Value::Object(m.clone())
            }
            Some(_) => return Err(SchemaError::NotAnObject { kind: kind.into() }),
        };
        let mut props = match def.get("properties") {
            Some(Value::Object(p)) => p.clone(),
            _ => Map::new(),
        };
        // Described as the Pod definition describes them.
        let pod = BUILTIN_DEFS
            .defs
            .get("io.k8s.api.core.v1.Pod")
            .and_then(|p| p.get("properties"));
        for field in ["apiVersion", "kind"] {
            let described = pod
                .and_then(|p| p.get(field))
                .cloned()
                .unwrap_or_else(|| json!({"type": "string"}));
            props.insert(field.into(), described);
        }
        props.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("{COMPONENTS_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}],
                   "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
        if let Value::Object(m) = &mut def {
            m.insert("properties".into(), Value::Object(props));
            m.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": kind}]),
            );
        }
        let name = custom_name(group, version, kind);
        let list_name = custom_name(group, version, &list_kind);
        let list = list_definition(pod, group, version, kind, &name);
        self.custom_defs.insert(name.clone(), def);
        self.custom_kinds.insert(key, name);
        self.custom_defs.insert(list_name.clone(), list);
        self.custom_kinds.insert(list_key, list_name);
        Ok(())
    }

    /// The definition name of a kind (`io.k8s.api.core.v1.Pod`), if the catalog has it.
    pub fn definition_name(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        let key: GvkKey = (group.into(), version.into(), kind.into());
        self.custom_kinds
            .get(&key)
            .or_else(|| BUILTIN_DEFS.kinds.get(&key))
            .map(String::as_str)
    }

    /// The schema of a kind, to walk with [`Node::field`]; `None` when the catalog has no
    /// such kind.
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<Node<'_>> {
        let name = self.definition_name(group, version, kind)?;
        let def = self.definition(name)?;
        Some(Node::new(self, def))
    }

    /// The kind's schema compiled for the write path's walks ([`Plan`]), built on the
    /// first call for the kind and shared after; `None` when the catalog has no such kind.
    pub fn plan(&self, group: &str, version: &str, kind: &str) -> Option<Arc<Plan>> {
        let name = self.definition_name(group, version, kind)?;
        if let Some(p) = self
            .plans
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return Some(Arc::clone(p));
        }
        let root = self.kind(group, version, kind)?;
        let plan = Arc::new(Plan::compile(name, root));
        let mut plans = self.plans.write().unwrap_or_else(PoisonError::into_inner);
        Some(Arc::clone(plans.entry(name.to_owned()).or_insert(plan)))
    }

    /// Every built-in kind's group, version and kind (unordered).
    pub fn builtin_kinds(&self) -> impl Iterator<Item = (String, String, String)> + use<> {
        BUILTIN_DEFS
            .kinds
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The node at a dotted field path of a kind (`["spec", "containers", "ports"]`); list
    /// items are stepped through, so a path names fields only.
    pub fn lookup(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        path: &[&str],
    ) -> Option<Node<'_>> {
        path.iter()
            .try_fold(self.kind(group, version, kind)?, |n, f| n.field(f))
    }

    /// Whether `group/version kind` was added with [`Catalog::add_custom`].
    pub fn is_custom(&self, group: &str, version: &str, kind: &str) -> bool {
        self.custom_kinds
            .contains_key(&(group.to_owned(), version.to_owned(), kind.to_owned()))
    }

    /// A definition by name.
    pub fn definition(&self, name: &str) -> Option<&Value> {
        self.custom_defs
            .get(name)
            .or_else(|| BUILTIN_DEFS.defs.get(name))
    }

    /// The definition a `$ref` (`#/components/schemas/NAME`) names.
    pub(crate) fn resolve_ref(&self, reference: &str) -> Option<&Value> {
        self.definition(reference.strip_prefix(COMPONENTS_PREFIX)?)
    }

    /// The `components.schemas` of an OpenAPI v3 document for the given roots: the roots
    /// and every definition they reach, by name, sorted.
    pub fn components(&self, roots: &[&str]) -> Map<String, Value> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut queue: Vec<String> = roots.iter().map(|r| (*r).to_owned()).collect();
        let mut out = std::collections::BTreeMap::new();
        while let Some(name) = queue.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            let Some(def) = self.definition(&name) else {
                continue;
            };
            collect_refs(def, &mut queue);
            out.insert(name, def.clone());
        }
        out.into_iter().collect()
    }
}

/// The `<Kind>List` definition of a custom kind, as upstream's CRD OpenAPI builder makes it.
fn list_definition(
    pod: Option<&Value>,
    group: &str,
    version: &str,
    kind: &str,
    item_name: &str,
) -> Value {
    let described = |field: &str| {
        pod.and_then(|p| p.get(field))
            .cloned()
            .unwrap_or_else(|| json!({"type": "string"}))
    };
    json!({
        "description": format!("{kind}List is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": described("apiVersion"),
            "kind": described("kind"),
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", kind.to_ascii_lowercase()),
                "type": "array",
                "items": {"$ref": format!("{COMPONENTS_PREFIX}{item_name}")},
            },
            "metadata": {
                "allOf": [{"$ref": format!("{COMPONENTS_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")}],
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": format!("{kind}List")}],
    })
}

/// Upstream's definition name of a custom kind: the group's labels reversed, then version
/// and kind (`com.example.v1.Widget`).
fn custom_name(group: &str, version: &str, kind: &str) -> String {
    let mut labels: Vec<&str> = group.split('.').collect();
    labels.reverse();
    format!("{}.{version}.{kind}", labels.join("."))
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref"
                    && let Some(name) = x.as_str().and_then(|r| r.strip_prefix(COMPONENTS_PREFIX))
                {
                    out.push(name.to_owned());
                } else {
                    collect_refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// Refuses references and nesting past [`MAX_CUSTOM_SCHEMA_DEPTH`].
fn check_structural(v: &Value, kind: &str, at: &str, depth: usize) -> Result<(), SchemaError> {
    if depth > MAX_CUSTOM_SCHEMA_DEPTH {
        return Err(SchemaError::TooDeep {
            kind: kind.into(),
            limit: MAX_CUSTOM_SCHEMA_DEPTH,
        });
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                if k == "$ref" {
                    return Err(SchemaError::Reference {
                        kind: kind.into(),
                        at: here,
                    });
                }
                check_structural(x, kind, &here, depth + 1)?;
            }
            Ok(())
        }
        Value::Array(a) => a
            .iter()
            .try_for_each(|x| check_structural(x, kind, at, depth + 1)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_file_parses_into_every_served_kind() {
        let c = Catalog::new();
        assert!(BUILTIN_DEFS.defs.len() > 600, "{}", BUILTIN_DEFS.defs.len());
        for (g, v, k) in [
            ("", "v1", "Pod"),
            ("", "v1", "Namespace"),
            ("", "v1", "Node"),
            ("", "v1", "ConfigMap"),
            ("", "v1", "Secret"),
            ("", "v1", "Service"),
            ("", "v1", "Endpoints"),
            ("", "v1", "Event"),
            ("", "v1", "ServiceAccount"),
            ("coordination.k8s.io", "v1", "Lease"),
            ("rbac.authorization.k8s.io", "v1", "Role"),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
            ("apps", "v1", "Deployment"),
        ] {
            assert!(c.kind(g, v, k).is_some(), "{g}/{v} {k}");
        }
        assert_eq!(
            c.definition_name("", "v1", "Pod"),
            Some("io.k8s.api.core.v1.Pod")
        );
        assert!(c.kind("", "v1", "Nope").is_none());
    }

    #[test]
    fn components_hold_the_roots_and_everything_they_reach() {
        let c = Catalog::new();
        let comps = c.components(&["io.k8s.api.core.v1.Pod"]);
        for name in [
            "io.k8s.api.core.v1.Pod",
            "io.k8s.api.core.v1.PodSpec",
            "io.k8s.api.core.v1.Container",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
        ] {
            assert!(comps.contains_key(name), "{name}");
        }
        assert!(!comps.contains_key("io.k8s.api.apps.v1.Deployment"));
        let text = serde_json::to_string(&comps).unwrap_or_default();
        assert!(!text.contains("#/$defs/"));
    }

    #[test]
    fn custom_kinds_get_their_declared_schema_or_keep_everything() {
        let mut c = Catalog::new();
        let declared = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"color": {"type": "string", "description": "The colour."},
                           "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}}}}});
        c.add_custom("example.com", "v1", "Widget", Some(&declared))
            .unwrap();
        c.add_custom("example.com", "v1", "Gadget", None).unwrap();
        assert_eq!(
            c.definition_name("example.com", "v1", "Widget"),
            Some("com.example.v1.Widget")
        );
        assert!(c.is_custom("example.com", "v1", "Widget"));
        assert!(!c.is_custom("", "v1", "Pod"));
        let w = c.definition("com.example.v1.Widget").unwrap();
        assert_eq!(w["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
        assert!(
            w["properties"]["metadata"]["allOf"][0]["$ref"]
                .as_str()
                .unwrap()
                .ends_with("ObjectMeta")
        );
        let comps = c.components(&["com.example.v1.Widget"]);
        assert!(comps.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
        let list = c.definition("com.example.v1.WidgetList").unwrap();
        assert_eq!(
            c.definition_name("example.com", "v1", "WidgetList"),
            Some("com.example.v1.WidgetList")
        );
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/com.example.v1.Widget"
        );
        let comps = c.components(&["com.example.v1.WidgetList"]);
        assert!(comps.contains_key("com.example.v1.Widget"));
        assert!(comps.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"));
        let g = c.definition("com.example.v1.Gadget").unwrap();
        assert_eq!(g["x-kubernetes-preserve-unknown-fields"], true);
        assert!(matches!(
            c.add_custom("example.com", "v1", "Widget", None),
            Err(SchemaError::Duplicate { .. })
        ));
        assert!(matches!(
            c.add_custom("", "v1", "Pod", None),
            Err(SchemaError::Duplicate { .. })
        ));
        // A kind named like another's list is refused too.
        assert!(matches!(
            c.add_custom("example.com", "v1", "WidgetList", None),
            Err(SchemaError::Duplicate { kind, .. }) if kind == "WidgetList"
        ));
        let with_ref = json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}});
        assert!(matches!(
            c.add_custom("example.com", "v1", "Bad", Some(&with_ref)),
            Err(SchemaError::Reference { .. })
        ));
        let mut deep = json!({"type": "string"});
        for _ in 0..MAX_CUSTOM_SCHEMA_DEPTH {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(matches!(
            c.add_custom("example.com", "v1", "Deep", Some(&deep)),
            Err(SchemaError::TooDeep { .. })
        ));
        assert!(matches!(
            c.add_custom("example.com", "v1", "Str", Some(&json!("x"))),
            Err(SchemaError::NotAnObject { .. })
        ));
    }
}
