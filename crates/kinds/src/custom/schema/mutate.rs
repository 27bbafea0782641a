//! Pruning and defaulting (upstream's `pruning/algorithm.go` and `defaulting/algorithm.go`,
//! `prunenulls.go`). Every walk follows the schema: a value the schema does not describe is
//! either removed whole or kept whole, never walked, so the depth is the schema's.

use serde_json::Value;

use super::{MAX_DEPTH, MAX_PRUNED, Node};

/// The fields kept at a resource's root (and in embedded resources) whatever the schema.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// ObjectMeta's fields (what an embedded resource's `metadata` keeps).
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

struct Pruner {
    pruned: Vec<String>,
    path: String,
}

impl Pruner {
    fn record(&mut self, k: &str) {
        if self.pruned.len() < MAX_PRUNED {
            self.pruned.push(super::build::join(&self.path, k));
        }
    }
}

/// Prunes a resource (its root keeps `apiVersion`, `kind` and `metadata`).
pub(super) fn prune(root: &Node, obj: &mut Value) -> Vec<String> {
    prune_at(root, obj, true)
}

/// Prunes `x` against `s`; `resource_root` keeps the metadata fields at this level.
pub(super) fn prune_at(s: &Node, x: &mut Value, resource_root: bool) -> Vec<String> {
    let mut p = Pruner {
        pruned: Vec::new(),
        path: String::new(),
    };
    p.prune(Some(s), x, resource_root, 0);
    p.pruned
}

impl Pruner {
    fn prune(&mut self, s: Option<&Node>, x: &mut Value, resource_root: bool, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(s) = s
            && s.preserve_unknown
        {
            self.skip_prune(s, x, depth);
            return;
        }
        match x {
            Value::Object(m) => {
                let Some(s) = s else {
                    let keys: Vec<String> = m.keys().cloned().collect();
                    for k in keys {
                        self.record(&k);
                    }
                    m.clear();
                    return;
                };
                let mut drop = Vec::new();
                for (k, v) in m.iter_mut() {
                    // A resource's root and an embedded resource keep their type and
                    // metadata whatever the schema says (upstream treats the root as an
                    // embedded resource).
                    let meta = (resource_root || s.embedded)
                        && match k.as_str() {
                            "apiVersion" | "kind" => v.is_string(),
                            "metadata" => v.is_object(),
                            _ => false,
                        };
                    if meta {
                        // An embedded resource's metadata keeps ObjectMeta's fields only
                        // (upstream's `objectmeta.Coerce`; the root's is the registry's).
                        if s.embedded && !resource_root && k == "metadata" {
                            self.object_meta(k, v);
                        }
                        continue;
                    }
                    match s.properties.get(k).or(s.additional.as_deref()) {
                        Some(c) => {
                            let len = self.path.len();
                            self.push_key(k);
                            self.prune(Some(c), v, false, depth + 1);
                            self.path.truncate(len);
                        }
                        None if resource_root && META_FIELDS.contains(&k.as_str()) => {}
                        None => {
                            self.record(k);
                            drop.push(k.clone());
                        }
                    }
                }
                for k in drop {
                    m.remove(&k);
                }
            }
            Value::Array(items) => {
                let item_schema = s.and_then(|s| s.items.as_deref());
                for (i, v) in items.iter_mut().enumerate() {
                    let len = self.path.len();
                    self.path.push_str(&format!("[{i}]"));
                    self.prune(item_schema, v, false, depth + 1);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// Drops the fields of an embedded `metadata` that ObjectMeta does not have.
    fn object_meta(&mut self, k: &str, v: &mut Value) {
        let Value::Object(m) = v else { return };
        let len = self.path.len();
        self.push_key(k);
        let unknown: Vec<String> = m
            .keys()
            .filter(|f| !OBJECT_META_FIELDS.contains(&f.as_str()))
            .cloned()
            .collect();
        for f in unknown {
            self.record(&f);
            m.remove(&f);
        }
        self.path.truncate(len);
    }

    /// Under `x-kubernetes-preserve-unknown-fields`: unknown fields stay, the declared ones
    /// are still pruned by their own schemas.
    fn skip_prune(&mut self, s: &Node, x: &mut Value, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        match x {
            Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if s.embedded && META_FIELDS.contains(&k.as_str()) {
                        // Preserving unknown fields does not keep unknown metadata: it is
                        // ObjectMeta (upstream's `objectmeta.Coerce` visits every embedded
                        // resource).
                        if k == "metadata" {
                            self.object_meta(k, v);
                        }
                        continue;
                    }
                    if let Some(c) = s.properties.get(k).or(s.additional.as_deref()) {
                        let len = self.path.len();
                        self.push_key(k);
                        self.prune(Some(c), v, false, depth + 1);
                        self.path.truncate(len);
                    }
                }
            }
            Value::Array(items) => {
                // Upstream keeps preserving inside the items (`skipPrune(v, s.Items)`).
                if let Some(c) = s.items.as_deref() {
                    for (i, v) in items.iter_mut().enumerate() {
                        let len = self.path.len();
                        self.path.push_str(&format!("[{i}]"));
                        self.skip_prune(c, v, depth + 1);
                        self.path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }

    fn push_key(&mut self, k: &str) {
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(k);
    }
}

/// Whether `v` is a `null` the schema `s` does not allow.
fn non_nullable_null(v: &Value, s: &Node) -> bool {
    v.is_null() && !s.nullable
}

/// Upstream's `PruneNonNullableNullsWithoutDefaults`: a `null` where the schema is not
/// nullable and has no default is removed (one with a default is defaulted later).
pub(super) fn prune_nulls(s: &Node, x: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            m.retain(|k, v| {
                let child = s.properties.get(k).or(s.additional.as_deref());
                !child.is_some_and(|c| non_nullable_null(v, c) && c.default.is_none())
            });
            for (k, v) in m.iter_mut() {
                if let Some(c) = s.properties.get(k).or(s.additional.as_deref()) {
                    prune_nulls(c, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(c) = s.items.as_deref() {
                for v in items {
                    prune_nulls(c, v, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Upstream's structural `Default`: a missing property, or a non-nullable `null`, gets the
/// property's default; then every known child is defaulted (defaults included).
pub(super) fn default(s: &Node, x: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                match m.get(k) {
                    Some(v) if !non_nullable_null(v, prop) => {}
                    _ => {
                        m.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(prop, v, depth + 1);
                } else if let Some(a) = s.additional.as_deref() {
                    if non_nullable_null(v, a)
                        && let Some(d) = &a.default
                    {
                        *v = d.clone();
                    }
                    default(a, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(c) = s.items.as_deref() {
                for v in items {
                    if non_nullable_null(v, c)
                        && let Some(d) = &c.default
                    {
                        *v = d.clone();
                    }
                    default(c, v, depth + 1);
                }
            }
        }
        _ => {}
    }
}
