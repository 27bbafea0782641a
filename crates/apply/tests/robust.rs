//! Arbitrary live objects, configurations and managedFields through the field manager,
//! with the real schemas of built-in kinds: nothing panics, every result's managedFields
//! decode again, and after a successful apply the applier owns exactly what its
//! configuration sets (less server-owned metadata).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use listwatch_apply::managed::{Managers, VersionedSet};
use listwatch_apply::update::Updater;
use listwatch_apply::value::{added_by_create, compare, to_field_set};
use listwatch_apply::{FieldSet, FieldsLimits, Managed, ManagerId, Operation, SchemaTypes, Scope};
use listwatch_schema::Catalog;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const LIMITS: FieldsLimits = FieldsLimits {
    max_depth: 100,
    max_entries: 100_000,
};

/// JSON built from the names a Pod and a Deployment use, so that list-maps, sets and
/// atomic fields are hit, with some noise.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0i64..4).prop_map(Value::from),
        prop::sample::select(vec!["a", "b", "TCP", "UDP", "x/y"]).prop_map(Value::from),
    ];
    let names = prop::sample::select(vec![
        "spec",
        "template",
        "containers",
        "name",
        "image",
        "ports",
        "containerPort",
        "protocol",
        "selector",
        "matchLabels",
        "metadata",
        "labels",
        "finalizers",
        "env",
        "value",
        "replicas",
        "status",
        "conditions",
        "type",
        "tolerations",
        "k",
    ]);
    leaf.prop_recursive(6, 48, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(names.clone().prop_map(str::to_owned), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Containers as clients send them: mostly named objects (two names, so that keys repeat),
/// sometimes without a name or not an object at all; ports keyed by (containerPort,
/// protocol) with the protocol often left to its default.
fn containers() -> impl Strategy<Value = Value> {
    let port = (
        prop::option::of(0i64..3),
        prop::option::of(prop::sample::select(vec!["TCP", "UDP"])),
    )
        .prop_map(|(p, proto)| {
            let mut m = Map::new();
            if let Some(p) = p {
                m.insert("containerPort".into(), json!(p));
            }
            if let Some(proto) = proto {
                m.insert("protocol".into(), json!(proto));
            }
            Value::Object(m)
        });
    let container = (
        prop::option::weighted(0.9, prop::sample::select(vec!["a", "b"])),
        prop::option::of(prop::sample::select(vec!["nginx", "busybox"])),
        prop::option::of(prop::collection::vec(port, 0..3)),
    )
        .prop_map(|(name, image, ports)| {
            let mut m = Map::new();
            if let Some(n) = name {
                m.insert("name".into(), json!(n));
            }
            if let Some(i) = image {
                m.insert("image".into(), json!(i));
            }
            if let Some(p) = ports {
                m.insert("ports".into(), Value::Array(p));
            }
            Value::Object(m)
        });
    prop::collection::vec(prop_oneof![9 => container, 1 => Just(json!("x"))], 0..3)
        .prop_map(Value::Array)
}

/// Puts `containers` where the kind keeps them.
fn with_containers(mut obj: Value, kind: &str, containers: Option<Value>) -> Value {
    let Some(c) = containers else { return obj };
    let path: &[&str] = if kind == "Pod" {
        &["spec"]
    } else {
        &["spec", "template", "spec"]
    };
    let mut at = &mut obj;
    for p in path {
        if !at.get(*p).is_some_and(Value::is_object) {
            at[*p] = json!({});
        }
        at = &mut at[*p];
    }
    at["containers"] = c;
    obj
}

fn object(kind: &str, api_version: &str, body: Value) -> Value {
    let mut o = match body {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    o.insert("apiVersion".into(), json!(api_version));
    o.insert("kind".into(), json!(kind));
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["name"] = json!("x");
    if let Some(m) = meta.as_object_mut() {
        m.remove("managedFields");
    }
    Value::Object(o)
}

fn managed(obj: &Value) -> Managed {
    Managed::decode(obj["metadata"].get("managedFields"), LIMITS).unwrap()
}

static APPLIED: AtomicUsize = AtomicUsize::new(0);
static CONFLICTED: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    fn arbitrary_objects_never_break_the_field_manager_(
        kind in prop::sample::select(vec![("Pod", "", "v1"), ("Deployment", "apps", "v1")]),
        live in value(),
        configs in prop::collection::vec(
            (value(), prop::option::of(containers()), 0u8..3, any::<bool>()),
            1..4,
        ),
        garbage in value(),
    ) {
        let (kind, group, version) = kind;
        let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        let catalog = Catalog::builtin();
        let types = SchemaTypes::new(&catalog, group, version, kind);
        let mut ignored = FieldSet::new();
        ignored.insert(&listwatch_apply::fieldmanager::field_path(&["status"]));
        let scope = Scope { types: &types, api_version: &api_version, kind, subresource: "", ignored: ignored.clone(), now: "2026-12-01T10:00:00Z", limits: LIMITS };

        // An update carrying garbage as managedFields: dropped or ignored, never kept broken.
        let mut live = object(kind, &api_version, live);
        live["metadata"]["managedFields"] = garbage;
        scope.update(None, &mut live, "maker");
        let _ = managed(&live);

        for (config, containers, who, force) in configs {
            let config = with_containers(object(kind, &api_version, config), kind, containers);
            let who = format!("m{who}");
            match scope.apply(Some(&live), &config, &who, force) {
                Ok(out) => {
                    let m = managed(&out);
                    let mine = m.fields.iter()
                        .find(|(id, _)| id.manager == who && id.operation == Operation::Apply)
                        .map(|(_, vs)| vs.set.clone())
                        .unwrap_or_default();
                    let mut want = to_field_set(&types, &config).recursive_difference(&ignored);
                    for p in [&["apiVersion"][..], &["kind"], &["metadata"], &["metadata", "name"]] {
                        let mut s = FieldSet::new();
                        s.insert(&listwatch_apply::fieldmanager::field_path(p));
                        want = want.difference(&s);
                    }
                    prop_assert_eq!(mine, want);
                    // An update of the result read in place (`update_live`, no copy of the
                    // object) records what one by copy does, and leaves the object as it was.
                    let mut edited = out.clone();
                    if let Some(m) = edited.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.insert("labels".into(), json!({"edited": "yes"}));
                    }
                    let mut by_copy = edited.clone();
                    scope.update(Some(&out), &mut by_copy, "editor");
                    let mut in_place = out.clone();
                    scope.update_live(&mut in_place, &mut edited, "editor");
                    prop_assert_eq!(&by_copy, &edited);
                    prop_assert_eq!(&in_place, &out);
                    live = out;
                    APPLIED.fetch_add(1, Relaxed);
                }
                Err(listwatch_apply::ApplyError::Conflicts(_)) => {
                    CONFLICTED.fetch_add(1, Relaxed);
                }
                Err(_) => {
                    REFUSED.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// A create's field set read off the object alone (`added_by_create`, `Updater::create`)
    /// is what the comparison with an empty object gives (`compare`, `Updater::update` from
    /// `{}`: the reference, still the path of every other update), also with other managers
    /// owning some of it and with reset fields.
    #[test]
    fn a_create_records_what_an_update_from_nothing_records(
        kind in prop::sample::select(vec![
            ("Pod", "", "v1"), ("Deployment", "apps", "v1"), ("Widget", "example.com", "v1"),
        ]),
        body in value(),
        containers in prop::option::of(containers()),
        other in value(),
        reset_status in any::<bool>(),
    ) {
        let (kind, group, version) = kind;
        let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        let catalog = Catalog::builtin();
        let types = SchemaTypes::new(&catalog, group, version, kind);
        let obj = with_containers(object(kind, &api_version, body), kind, containers);
        let c = compare(&types, &json!({}), &obj);
        prop_assert_eq!(&added_by_create(&types, &obj), &c.added);
        prop_assert!(c.modified.is_empty() && c.removed.is_empty());
        // Also when the object is not one (never for a create through the API).
        for v in [json!({}), json!([1]), json!("x"), json!(null)] {
            prop_assert_eq!(added_by_create(&types, &v), compare(&types, &json!({}), &v).added);
        }

        let mut ignored = FieldSet::new();
        if reset_status {
            ignored.insert(&listwatch_apply::fieldmanager::field_path(&["status"]));
        }
        let updater = Updater { types: &types, ignored };
        let mut managers = Managers::new();
        let other = object(kind, &api_version, other);
        managers.insert(
            ManagerId::new("other", Operation::Apply, &api_version, ""),
            VersionedSet { set: to_field_set(&types, &other), api_version: api_version.clone(), applied: true },
        );
        let id = ManagerId::new("maker", Operation::Update, &api_version, "");
        let mut by_create = managers.clone();
        updater.create(&obj, &api_version, &mut by_create, &id);
        let mut by_update = managers;
        updater.update(&json!({}), &obj, &api_version, &mut by_update, &id);
        prop_assert_eq!(by_create, by_update);
    }
}

/// The property above, then how often each outcome was reached (each must be).
#[test]
fn arbitrary_objects_never_break_the_field_manager() {
    arbitrary_objects_never_break_the_field_manager_();
    let (a, c, r) = (
        APPLIED.load(Relaxed),
        CONFLICTED.load(Relaxed),
        REFUSED.load(Relaxed),
    );
    eprintln!("applied {a}, conflicted {c}, refused {r}");
    assert!(
        a > 0 && c > 0 && r > 0,
        "applied {a}, conflicted {c}, refused {r}"
    );
}
