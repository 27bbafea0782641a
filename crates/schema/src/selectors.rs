//! Where a body holds a `metav1.LabelSelector` ([`Node::label_selectors`]): every position
//! the schema types as one (a PodDisruptionBudget's, Deployment's or Job's
//! `spec.selector`, a NetworkPolicy's pod and namespace selectors, a pod template's
//! affinity terms and topology spread constraints, webhooks' selectors, …), named by
//! upstream's field path (`spec.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector`),
//! so that the registry validates each as upstream's `ValidateLabelSelector` does.
//!
//! Invariants: one walk over the value, as deep as the value; the path is built only for a
//! selector found (a linked list of borrowed steps on the stack until then); a `null`
//! selector is no selector.

use serde_json::Value;

use crate::node::{Node, Shape};
use crate::plan::{Plan, SchemaView, Special};

/// One step of the path to the current value; `parent` is the step before.
struct Path<'p> {
    parent: Option<&'p Path<'p>>,
    step: Step<'p>,
}

enum Step<'p> {
    Field(&'p str),
    Index(usize),
    Key(&'p str),
}

impl Path<'_> {
    /// Upstream's `field.Path` text: `a.b[0][key]`.
    fn render(&self) -> String {
        let mut steps = Vec::new();
        let mut at = Some(self);
        while let Some(p) = at {
            steps.push(&p.step);
            at = p.parent;
        }
        let mut out = String::new();
        for s in steps.into_iter().rev() {
            match s {
                Step::Field(f) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(f);
                }
                Step::Index(i) => out.push_str(&format!("[{i}]")),
                Step::Key(k) => out.push_str(&format!("[{k}]")),
            }
        }
        out
    }
}

impl Node<'_> {
    /// Calls `found` with the field path and value of every `LabelSelector` in `v`, in the
    /// value's order (see the module doc).
    pub fn label_selectors(&self, v: &Value, found: &mut dyn FnMut(&str, &Value)) {
        walk(*self, None, v, found);
    }
}

impl Plan {
    /// [`Node::label_selectors`] of the kind's body `v`, read from the plan: the parts of
    /// the body that cannot hold a selector are passed over.
    pub fn label_selectors(&self, v: &Value, found: &mut dyn FnMut(&str, &Value)) {
        walk(self.root(), None, v, found);
    }
}

fn walk<S: SchemaView>(
    node: S,
    path: Option<&Path<'_>>,
    v: &Value,
    found: &mut dyn FnMut(&str, &Value),
) {
    if v.is_null() || !node.may_hold_selector() {
        return;
    }
    if node.special() == Special::LabelSelector {
        let text = path.map(Path::render).unwrap_or_default();
        found(&text, v);
        return;
    }
    match node.shape() {
        Shape::Struct => {
            if let Value::Object(m) = v {
                for (k, child) in m {
                    if let Some(field) = node.field(k) {
                        let p = Path {
                            parent: path,
                            step: Step::Field(k),
                        };
                        walk(field, Some(&p), child, found);
                    }
                }
            }
        }
        Shape::Map => {
            if let (Value::Object(m), Some(val)) = (v, node.field("")) {
                for (k, child) in m {
                    let p = Path {
                        parent: path,
                        step: Step::Key(k),
                    };
                    walk(val, Some(&p), child, found);
                }
            }
        }
        Shape::List => {
            if let (Value::Array(items), Some(it)) = (v, node.items()) {
                for (i, child) in items.iter().enumerate() {
                    let p = Path {
                        parent: path,
                        step: Step::Index(i),
                    };
                    walk(it, Some(&p), child, found);
                }
            }
        }
        Shape::Scalar | Shape::Untyped => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::Catalog;
    use serde_json::{Value, json};

    fn found(group: &str, kind: &str, v: Value) -> Vec<(String, Value)> {
        let cat = Catalog::builtin();
        let mut out = Vec::new();
        cat.kind(group, "v1", kind)
            .unwrap()
            .label_selectors(&v, &mut |p, s| out.push((p.to_owned(), s.clone())));
        out
    }

    #[test]
    fn every_typed_selector_is_found_with_its_path() {
        let sel = json!({"matchLabels": {"a": "b"}});
        let dep = json!({"spec": {"selector": sel, "template": {"spec": {
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "k", "labelSelector": sel}]}},
            "topologySpreadConstraints": [{"maxSkew": 1, "labelSelector": sel}]}}}});
        let paths: Vec<String> = found("apps", "Deployment", dep)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.selector",
                "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
                "spec.template.spec.topologySpreadConstraints[0].labelSelector",
            ]
        );
        let pdb = found(
            "policy",
            "PodDisruptionBudget",
            json!({"spec": {"selector": {"matchExpressions": [{}]}}}),
        );
        assert_eq!(
            pdb,
            [(
                "spec.selector".to_owned(),
                json!({"matchExpressions": [{}]})
            )]
        );
        let np = found(
            "networking.k8s.io",
            "NetworkPolicy",
            json!({"spec": {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}}),
        );
        let mut np: Vec<String> = np.into_iter().map(|(p, _)| p).collect();
        np.sort();
        assert_eq!(
            np,
            [
                "spec.ingress[0].from[0].namespaceSelector",
                "spec.podSelector"
            ]
        );
        assert!(found("", "ConfigMap", json!({"data": {"selector": "x"}})).is_empty());
        assert!(
            found(
                "policy",
                "PodDisruptionBudget",
                json!({"spec": {"selector": null}})
            )
            .is_empty()
        );
    }
}
