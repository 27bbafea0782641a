//! What upstream's decoding makes of a well-typed body, written back into it
//! ([`Node::canonicalize`]): upstream decodes a built-in kind's body into Go types and
//! stores and serves the Go value re-encoded, so some JSON that decodes does not come back
//! as it was sent. This module gives a body that passed [`Node::check_types`] the shape
//! upstream would store:
//!
//! - a `Quantity` (a string or a JSON number) becomes upstream's canonical string
//!   ([`crate::quantity::canonical`]: `1` → `"1"`, `1.5` → `"1500m"`, `"1000m"` → `"1"`);
//!   a value of a `ResourceList` (a map of quantities: `limits`, `hard`, `capacity`, …) of
//!   a kind whose upstream v1 defaulting rounds them ([`rounds_resource_lists`]) is also
//!   rounded up to a thousandth ([`crate::quantity::canonical_in_resource_list`]: `"1n"` →
//!   `"1m"`);
//!   an `IntOrString` keeps its JSON kind (a number stays a number);
//! - a `null` item of a typed list, or `null` value of a typed map, becomes the zero value
//!   of its Go type, as Go's decoder leaves it: `{}` for a struct (which the kind's
//!   validation then judges, e.g. a selector requirement with no key or operator), `""`
//!   for a string or `[]byte`, `0` for a number or an `IntOrString`, `false` for a
//!   boolean, `"0"` for a quantity, `{}`/`[]` for a map or list; untyped items and times
//!   (whose zero Go encodes as `null`) stay `null`.
//!
//! A `null` field of a struct is left as it is (Go leaves the field at its zero value,
//! which it then omits or writes; the fields' own rules decide), as is anything the schema
//! does not type (`RawExtension`, preserved unknown fields, undeclared fields).
//!
//! Invariants: one walk over the value, as deep as the value (whose depth the decoder
//! bounds), allocating only what it writes; a value that is already canonical is left
//! unchanged, so canonicalizing twice is canonicalizing once.

use serde_json::{Map, Value};

use crate::node::{Node, Shape};
use crate::plan::{Plan, Scalar, SchemaView, Special};

impl Node<'_> {
    /// Rewrites `v` as upstream's decoding would leave it (see the module doc), the values
    /// of its `ResourceList`s rounded up to a thousandth when `round_resource_lists` (see
    /// [`rounds_resource_lists`]). Meant for a value [`Node::check_types`] accepted;
    /// anything else is walked as far as it fits.
    pub fn canonicalize(&self, v: &mut Value, round_resource_lists: bool) {
        walk(*self, v, false, round_resource_lists);
    }
}

impl Plan {
    /// [`Node::canonicalize`] of the kind's body `v`, read from the plan.
    pub fn canonicalize(&self, v: &mut Value, round_resource_lists: bool) {
        walk(self.root(), v, false, round_resource_lists);
    }
}

/// Whether upstream's v1 defaulting of a built-in kind of `group` rounds the values of its
/// `ResourceList`s up to a thousandth: `SetDefaults_ResourceList`, which the defaulters of
/// core/v1 call and those of the groups that embed pod templates or volume claim
/// templates (apps/v1, batch/v1) call too. Other groups' maps of quantities (a
/// RuntimeClass's `overhead.podFixed`) have no defaulter.
pub fn rounds_resource_lists(group: &str) -> bool {
    matches!(group, "" | "apps" | "batch")
}

/// `in_list`: `v` is a value of a map of quantities, to be rounded when `round`.
fn walk<S: SchemaView>(node: S, v: &mut Value, in_list: bool, round: bool) {
    if v.is_null() {
        return;
    }
    match node.special() {
        Special::Quantity => {
            if let Some(c) = crate::quantity::canonical_value(v, in_list && round)
                && v.as_str() != Some(c.as_str())
            {
                *v = Value::String(c);
            }
            return;
        }
        Special::IntOrString | Special::Time => return,
        Special::LabelSelector | Special::None => {}
    }
    match node.shape() {
        Shape::Struct => {
            if let Value::Object(m) = v {
                for (k, child) in m.iter_mut() {
                    if let Some(field) = node.field(k) {
                        walk(field, child, false, round);
                    }
                }
            }
        }
        Shape::Map => {
            if let (Value::Object(m), Some(val)) = (v, node.field("")) {
                for child in m.values_mut() {
                    item(val, child, true, round);
                }
            }
        }
        Shape::List => {
            if let (Value::Array(items), Some(it)) = (v, node.items()) {
                for child in items.iter_mut() {
                    item(it, child, false, round);
                }
            }
        }
        Shape::Scalar | Shape::Untyped => {}
    }
}

/// A list's item or a map's value (`in_map`): `null` becomes the zero value.
fn item<S: SchemaView>(node: S, v: &mut Value, in_map: bool, round: bool) {
    if v.is_null() {
        if let Some(zero) = zero_value(node) {
            *v = zero;
        }
        return;
    }
    walk(node, v, in_map, round);
}

/// The JSON Go writes for the zero value of the type at `node`; `None` where it writes
/// `null` or the type is not known.
fn zero_value<S: SchemaView>(node: S) -> Option<Value> {
    match node.special() {
        Special::Quantity => return Some(Value::String("0".into())),
        Special::IntOrString => return Some(Value::from(0)),
        Special::Time => return None,
        Special::LabelSelector | Special::None => {}
    }
    match node.shape() {
        Shape::Struct | Shape::Map => Some(Value::Object(Map::new())),
        Shape::List => Some(Value::Array(Vec::new())),
        Shape::Untyped => None,
        Shape::Scalar => match node.scalar() {
            Scalar::String | Scalar::Bytes => Some(Value::String(String::new())),
            Scalar::Int32 | Scalar::Int64 | Scalar::Number => Some(Value::from(0)),
            Scalar::Boolean => Some(Value::Bool(false)),
            Scalar::Object | Scalar::Array | Scalar::Other => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::Catalog;
    use serde_json::{Value, json};

    fn canon(group: &str, kind: &str, mut v: Value) -> Value {
        let cat = Catalog::builtin();
        let node = cat.kind(group, "v1", kind).unwrap();
        let def = cat.definition_name(group, "v1", kind).unwrap().to_owned();
        node.check_types(&def, &v).unwrap();
        node.canonicalize(&mut v, super::rounds_resource_lists(group));
        v
    }

    #[test]
    fn quantities_become_canonical_strings_everywhere_they_are_typed() {
        let pod = canon(
            "",
            "Pod",
            json!({"spec": {"containers": [{"name": "c", "resources": {
                "limits": {"cpu": 1, "memory": "1024Mi"}, "requests": {"cpu": 0.5, "memory": "1e3"}}}],
                "overhead": {"cpu": "1000m"}}}),
        );
        let res = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(res["limits"], json!({"cpu": "1", "memory": "1Gi"}));
        assert_eq!(res["requests"], json!({"cpu": "500m", "memory": "1e3"}));
        assert_eq!(pod["spec"]["overhead"]["cpu"], "1");
        let quota = canon(
            "",
            "ResourceQuota",
            json!({"spec": {"hard": {"pods": 10, "cpu": "2000m"}}, "status": {"used": {"pods": 1.5}}}),
        );
        assert_eq!(quota["spec"]["hard"], json!({"pods": "10", "cpu": "2"}));
        assert_eq!(quota["status"]["used"]["pods"], "1500m");
        let node = canon(
            "",
            "Node",
            json!({"status": {"capacity": {"cpu": 4}, "allocatable": {"memory": 2048}}}),
        );
        assert_eq!(node["status"]["capacity"]["cpu"], "4");
        assert_eq!(node["status"]["allocatable"]["memory"], "2048");
        // Int-or-string keeps its kind.
        let svc = canon(
            "",
            "Service",
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        );
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    }

    #[test]
    fn resource_lists_of_defaulted_groups_round_up_to_a_thousandth() {
        // `SetDefaults_ResourceList`: core, apps and batch round their ResourceLists.
        let pod = canon(
            "",
            "Pod",
            json!({"spec": {"containers": [{"name": "c", "resources": {
                "limits": {"cpu": "1n", "memory": "+1"}, "requests": {"cpu": "1e-1000000"}}}],
                "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1n"}}]}}),
        );
        let res = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(res["limits"], json!({"cpu": "1m", "memory": "+1"}));
        assert_eq!(res["requests"]["cpu"], "1e-3");
        // A quantity outside a ResourceList is not rounded.
        assert_eq!(pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"], "1n");
        let dep = canon(
            "apps",
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c",
                "resources": {"limits": {"cpu": "1.0001"}}}]}}}}),
        );
        assert_eq!(
            dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1001m"
        );
        // A RuntimeClass's overhead has no defaulter upstream.
        let rc = canon(
            "node.k8s.io",
            "RuntimeClass",
            json!({"handler": "h", "overhead": {"podFixed": {"cpu": "1n"}}}),
        );
        assert_eq!(rc["overhead"]["podFixed"]["cpu"], "1n");
    }

    #[test]
    fn null_items_and_values_become_zero_values() {
        let cm = canon("", "ConfigMap", json!({"data": {"x": null, "y": "v"}}));
        assert_eq!(cm["data"], json!({"x": "", "y": "v"}));
        let secret = canon("", "Secret", json!({"data": {"x": null}}));
        assert_eq!(secret["data"], json!({"x": ""}));
        let pod = canon(
            "",
            "Pod",
            json!({"metadata": {"labels": {"a": null}, "finalizers": [null]},
                "spec": {"containers": [{"name": "c", "ports": [null], "args": [null, "x"],
                "resources": {"limits": {"cpu": null}}}, null]}}),
        );
        assert_eq!(pod["metadata"]["labels"]["a"], "");
        assert_eq!(pod["metadata"]["finalizers"], json!([""]));
        let c = &pod["spec"]["containers"];
        assert_eq!(c[1], json!({}));
        assert_eq!(c[0]["ports"], json!([{}]));
        assert_eq!(c[0]["args"], json!(["", "x"]));
        assert_eq!(c[0]["resources"]["limits"]["cpu"], "0");
        let pdb = canon(
            "policy",
            "PodDisruptionBudget",
            json!({"spec": {"selector": {"matchExpressions": [null], "matchLabels": {"a": null}}}}),
        );
        assert_eq!(
            pdb["spec"]["selector"],
            json!({"matchExpressions": [{}], "matchLabels": {"a": ""}})
        );
        // A null field is left alone; so is an already canonical body.
        let dep = json!({"spec": {"replicas": null, "template": {"spec": {"containers": [{"name": "c"}]}}}});
        assert_eq!(canon("apps", "Deployment", dep.clone()), dep);
    }
}
