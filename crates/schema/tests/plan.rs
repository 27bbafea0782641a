//! The write path's schema walks give the same results read from a kind's [`Plan`] as read
//! from its [`Node`]s (the reference): the typed check (its error too), the canonical form
//! and the label selectors found, over bodies built from the kinds' own field names.

use listwatch_schema::{Catalog, rounds_resource_lists};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Field names the kinds below declare (and a few they do not), so generated bodies
/// reach deep into their schemas.
const NAMES: &[&str] = &[
    "metadata",
    "labels",
    "annotations",
    "name",
    "finalizers",
    "ownerReferences",
    "spec",
    "status",
    "containers",
    "initContainers",
    "image",
    "args",
    "env",
    "value",
    "ports",
    "containerPort",
    "protocol",
    "resources",
    "limits",
    "requests",
    "cpu",
    "memory",
    "volumes",
    "emptyDir",
    "sizeLimit",
    "projected",
    "sources",
    "clusterTrustBundle",
    "labelSelector",
    "affinity",
    "podAffinity",
    "podAntiAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "topologyKey",
    "topologySpreadConstraints",
    "maxSkew",
    "selector",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "template",
    "replicas",
    "minAvailable",
    "podSelector",
    "namespaceSelector",
    "ingress",
    "from",
    "data",
    "binaryData",
    "hard",
    "used",
    "creationTimestamp",
    "targetPort",
    "port",
    "overhead",
    "readinessProbe",
    "httpGet",
    "periodSeconds",
    "x-unknown",
    "",
];

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "",
            "1",
            "100m",
            "1.5Gi",
            "1n",
            "abc",
            "2026-01-01T00:00:00Z",
            "In",
            "Exists",
            "a/b",
            "bad key!",
            "TCP",
            "aGk=",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(7, 96, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(NAMES), inner), 0..5).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

const KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("apps", "Deployment"),
    ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ResourceQuota"),
    ("node.k8s.io", "RuntimeClass"),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn plan_walks_equal_node_walks(
        kind in prop::sample::select(KINDS),
        spec in arb_value(),
        metadata in arb_value(),
        other in arb_value(),
    ) {
        let (group, kind) = kind;
        let cat = Catalog::builtin();
        let node = cat.kind(group, "v1", kind).expect("kind");
        let plan = cat.plan(group, "v1", kind).expect("plan");
        let def = cat.definition_name(group, "v1", kind).expect("def").to_owned();
        let body = json!({"metadata": metadata, "spec": spec, "data": other.clone(), "status": other});

        let by_node = node.check_types(&def, &body);
        prop_assert_eq!(&by_node, &plan.check_types(&body));

        let round = rounds_resource_lists(group);
        let (mut a, mut b) = (body.clone(), body.clone());
        node.canonicalize(&mut a, round);
        plan.canonicalize(&mut b, round);
        prop_assert_eq!(&a, &b);

        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        node.label_selectors(&a, &mut |p, s| sa.push((p.to_owned(), s.clone())));
        plan.label_selectors(&a, &mut |p, s| sb.push((p.to_owned(), s.clone())));
        prop_assert_eq!(sa, sb);
    }
}
