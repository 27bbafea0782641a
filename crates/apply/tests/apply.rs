//! Server-side apply scenarios through the field manager, as the server drives it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use listwatch_apply::{
    ApplyError, FieldSet, FieldsLimits, ListType, MapType, Scope, TypeAt, TypeInfo, Untyped,
};
use serde_json::{Value, json};

/// Pod-like semantics: containers keyed by name, their ports by (containerPort,
/// protocol) with protocol defaulting to TCP, finalizers a set, labels a map.
struct PodTypes;

impl TypeInfo for PodTypes {
    fn field(&self, at: TypeAt, name: &str) -> TypeAt {
        by_path_field(at, name)
    }

    fn list_type(&self, at: TypeAt) -> ListType {
        let path = by_path(at);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["spec", "containers"] => ListType::Map(vec!["name".into()]),
            ["spec", "containers", "ports"] => {
                ListType::Map(vec!["containerPort".into(), "protocol".into()])
            }
            ["metadata", "finalizers"] => ListType::Set,
            _ => ListType::Atomic,
        }
    }

    fn map_type(&self, at: TypeAt) -> MapType {
        let path = by_path(at);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["metadata", "labels" | "annotations"] | ["data"] => MapType::Granular,
            ["spec", "selector"] => MapType::Atomic,
            _ => MapType::Struct,
        }
    }

    fn key_default(&self, _at: TypeAt, key: &str) -> Option<Value> {
        (key == "protocol").then(|| json!("TCP"))
    }
}

// Test types by schema path: a position is an index into the paths asked about (a test's
// few paths; the server's `SchemaTypes` walks schema nodes instead).
thread_local! {
    static PATHS: std::cell::RefCell<Vec<Vec<String>>> = std::cell::RefCell::new(vec![Vec::new()]);
}

fn by_path(at: TypeAt) -> Vec<String> {
    PATHS.with(|p| p.borrow().get(at.0 as usize).cloned().unwrap_or_default())
}

fn by_path_field(at: TypeAt, name: &str) -> TypeAt {
    let mut p = by_path(at);
    p.push(name.to_owned());
    PATHS.with(|paths| {
        let mut paths = paths.borrow_mut();
        match paths.iter().position(|q| *q == p) {
            Some(i) => TypeAt(i as u32),
            None => {
                paths.push(p);
                TypeAt((paths.len() - 1) as u32)
            }
        }
    })
}

const LIMITS: FieldsLimits = FieldsLimits {
    max_depth: 100,
    max_entries: 100_000,
};

/// A scope of `v1` ConfigMaps (`kind` changed where a test applies another kind).
fn scope<'t>(types: &'t dyn TypeInfo, now: &'t str) -> Scope<'t> {
    let mut ignored = FieldSet::new();
    ignored.insert(&listwatch_apply::fieldmanager::field_path(&["status"]));
    Scope {
        types,
        api_version: "v1",
        kind: "ConfigMap",
        subresource: "",
        ignored,
        now,
        limits: LIMITS,
    }
}

fn cm(data: Value) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":data})
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_owned(),
                        e["operation"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == manager))
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn second_manager_conflicts_force_takes_and_dropped_fields_go() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let a = s
        .apply(None, &cm(json!({"k": "1", "x": "a"})), "alice", false)
        .unwrap();
    assert_eq!(a["data"], json!({"k":"1","x":"a"}));
    assert_eq!(managers(&a), [("alice".into(), "Apply".into())]);
    assert_eq!(
        fields_of(&a, "alice"),
        json!({"f:data":{"f:k":{},"f:x":{}}})
    );
    assert_eq!(
        a["metadata"]["managedFields"][0]["time"],
        "2026-12-01T10:00:00Z"
    );

    // bob changes k: a conflict naming the field and its manager.
    let err = s
        .apply(Some(&a), &cm(json!({"k": "2"})), "bob", false)
        .unwrap_err();
    let ApplyError::Conflicts(c) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "alice": .data.k"#
    );
    assert_eq!(c.causes()[0].1, ".data.k");

    // bob applying the same value shares k; no conflict.
    let shared = s
        .apply(Some(&a), &cm(json!({"k": "1", "y": "b"})), "bob", false)
        .unwrap();
    assert_eq!(shared["data"], json!({"k":"1","x":"a","y":"b"}));

    // Forced: bob takes k from alice.
    let forced = s
        .apply(Some(&a), &cm(json!({"k": "2"})), "bob", true)
        .unwrap();
    assert_eq!(forced["data"]["k"], "2");
    assert_eq!(fields_of(&forced, "alice"), json!({"f:data":{"f:x":{}}}));
    assert_eq!(fields_of(&forced, "bob"), json!({"f:data":{"f:k":{}}}));

    // alice drops x: removed (nobody else owns it); alice drops k from the shared
    // object: kept, bob owns it.
    let dropped = s
        .apply(Some(&shared), &cm(json!({"z": "c"})), "alice", false)
        .unwrap();
    assert_eq!(dropped["data"], json!({"k":"1","y":"b","z":"c"}));
}

#[test]
fn updates_record_ownership_and_appliers_conflict_with_them() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let mut created = cm(json!({"k": "1"}));
    s.update(None, &mut created, "kubectl-create");
    assert_eq!(
        managers(&created),
        [("kubectl-create".into(), "Update".into())]
    );
    assert_eq!(
        fields_of(&created, "kubectl-create"),
        json!({"f:data":{".":{},"f:k":{}}})
    );
    let err = s
        .apply(Some(&created), &cm(json!({"k": "2"})), "ctl", false)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.k"#
    );
    // A later update by another manager takes what it changes, without conflict.
    let mut edited = created.clone();
    edited["data"]["k"] = json!("3");
    edited["data"]["n"] = json!("4");
    s.update(Some(&created), &mut edited, "editor");
    // It keeps the map it created (still there), not the key it no longer set.
    assert_eq!(fields_of(&edited, "kubectl-create"), json!({"f:data":{}}));
    assert_eq!(
        fields_of(&edited, "editor"),
        json!({"f:data":{"f:k":{},"f:n":{}}})
    );
    // Two updates by one manager merge into one entry.
    let mut again = edited.clone();
    again["data"]["m"] = json!("5");
    s.update(Some(&edited), &mut again, "editor");
    assert_eq!(
        managers(&again),
        [
            ("editor".into(), "Update".into()),
            ("kubectl-create".into(), "Update".into())
        ]
    );
    assert_eq!(
        fields_of(&again, "editor"),
        json!({"f:data":{"f:k":{},"f:m":{},"f:n":{}}})
    );
}

#[test]
fn managed_fields_sent_with_an_update_replace_the_live_ones_and_empty_resets() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let a = s
        .apply(None, &cm(json!({"k": "1"})), "alice", false)
        .unwrap();
    // A client that edits managedFields (kubectl's client-side-apply migration does).
    let mut edited = a.clone();
    edited["metadata"]["managedFields"][0]["manager"] = json!("carol");
    s.update(Some(&a), &mut edited, "editor");
    assert_eq!(managers(&edited), [("carol".into(), "Apply".into())]);
    // A client that does not know managedFields leaves them out: the live ones stay.
    let mut unaware = a.clone();
    unaware["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    s.update(Some(&a), &mut unaware, "editor");
    assert_eq!(managers(&unaware), [("alice".into(), "Apply".into())]);
    // `[]` resets them.
    let mut reset = a.clone();
    reset["metadata"]["managedFields"] = json!([]);
    s.update(Some(&a), &mut reset, "editor");
    assert!(reset["metadata"].get("managedFields").is_none());
    // ... and, as upstream's `skipNonAppliedManager`, later updates of the object (now
    // owned by nobody) are not tracked, even when they change fields (`[{}]` resets too).
    let mut reset = a.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    reset["data"]["k"] = json!("changed");
    s.update(Some(&a), &mut reset, "editor");
    assert!(reset["metadata"].get("managedFields").is_none(), "{reset}");
    let mut later = reset.clone();
    later["data"]["other"] = json!("new");
    s.update(Some(&reset), &mut later, "editor");
    assert!(later["metadata"].get("managedFields").is_none(), "{later}");
    // A create is always tracked.
    let mut created = cm(json!({"k": "1"}));
    s.update(None, &mut created, "maker");
    assert_eq!(managers(&created), [("maker".into(), "Update".into())]);
    // Garbage is dropped, not kept.
    let mut garbage = a.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager":"x","operation":"Nope"}]);
    s.update(Some(&a), &mut garbage, "editor");
    assert_eq!(managers(&garbage), [("alice".into(), "Apply".into())]);
}

#[test]
fn map_lists_merge_by_key_and_items_are_owned_per_key() {
    let s = Scope {
        kind: "Pod",
        ..scope(&PodTypes, "2026-12-01T10:00:00Z")
    };
    let pod = |containers: Value| json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":containers}});
    let a = s
        .apply(
            None,
            &pod(json!([{"name":"app","image":"nginx","ports":[{"containerPort":80}]}])),
            "alice",
            false,
        )
        .unwrap();
    assert_eq!(
        fields_of(&a, "alice"),
        json!({"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},
            "f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}})
    );
    // bob adds a sidecar: merged by key, no conflict, alice's container untouched.
    let b = s
        .apply(
            Some(&a),
            &pod(json!([{"name":"sidecar","image":"busybox"}])),
            "bob",
            false,
        )
        .unwrap();
    let names: Vec<&str> = b["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "sidecar"]);
    // bob changing alice's image conflicts on that key's field.
    let err = s
        .apply(
            Some(&b),
            &pod(json!([{"name":"app","image":"httpd"}])),
            "bob",
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "alice": .spec.containers[name="app"].image"#
    );
    // alice stops applying her container: it goes, bob's stays.
    let gone = s.apply(Some(&b), &pod(json!([])), "alice", false).unwrap();
    assert_eq!(
        gone["spec"]["containers"],
        json!([{"name":"sidecar","image":"busybox"}])
    );
    // Items without their key, or twice the same key, are refused.
    for bad in [json!([{"image": "x"}]), json!([{"name":"a"},{"name":"a"}])] {
        let e = s.apply(Some(&b), &pod(bad), "bob", false).unwrap_err();
        assert!(matches!(e, ApplyError::Invalid(_)), "{e}");
    }
}

#[test]
fn set_lists_and_atomic_values() {
    let s = Scope {
        kind: "X",
        ..scope(&PodTypes, "2026-12-01T10:00:00Z")
    };
    let obj = |fins: Value, sel: Value| json!({"apiVersion":"v1","kind":"X","metadata":{"name":"x","finalizers":fins},"spec":{"selector":sel,"args":["a","b"]}});
    let a = s
        .apply(
            None,
            &obj(json!(["a/x"]), json!({"app":"1"})),
            "alice",
            false,
        )
        .unwrap();
    let b = s
        .apply(
            Some(&a),
            &obj(json!(["b/y"]), json!({"app":"1"})),
            "bob",
            false,
        )
        .unwrap();
    assert_eq!(b["metadata"]["finalizers"], json!(["a/x", "b/y"]));
    assert_eq!(
        fields_of(&b, "bob"),
        json!({"f:metadata":{"f:finalizers":{"v:\"b/y\"":{}}},"f:spec":{"f:args":{},"f:selector":{}}})
    );
    // The selector is atomic: a different one conflicts as a whole.
    let e = s
        .apply(
            Some(&b),
            &obj(json!(["b/y"]), json!({"app":"2"})),
            "bob",
            false,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(r#"conflict with "alice": .spec.selector"#),
        "{e}"
    );
}

#[test]
fn first_apply_to_an_unmanaged_object_conflicts_with_before_first_apply() {
    let s = scope(&Untyped, "2026-12-01T10:00:00Z");
    let live = cm(json!({"k": "1"}));
    let e = s
        .apply(Some(&live), &cm(json!({"k": "2"})), "alice", false)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.k"#
    );
    // Forced: before-first-apply keeps the rest, stamped like any update.
    let mut live = cm(json!({"k": "1", "o": "2"}));
    live["metadata"]["uid"] = json!("u");
    let out = s
        .apply(Some(&live), &cm(json!({"k": "2"})), "alice", true)
        .unwrap();
    let entries = out["metadata"]["managedFields"].as_array().unwrap();
    let before = entries
        .iter()
        .find(|e| e["manager"] == "before-first-apply")
        .unwrap();
    assert_eq!(before["time"], "2026-12-01T10:00:00Z", "{before}");
    assert_eq!(before["fieldsV1"], json!({"f:data": {".": {}, "f:o": {}}}));
}

#[test]
fn a_last_applied_annotation_past_the_annotation_limit_is_dropped() {
    // Upstream's `SetLastApplied`: kubectl's server-side apply over a client-side-applied
    // object whose refreshed annotation would pass 256 KiB applies without it.
    let s = scope(&Untyped, "2026-12-01T10:00:00Z");
    let last = r#"{"apiVersion":"v1","data":{"k":"1"},"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}"#;
    let mut live = cm(json!({"k": "1"}));
    live["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": last, "keep": "me"});
    let big = "x".repeat(256 * 1024);
    let out = s
        .apply(
            Some(&live),
            &cm(json!({"k": "1", "big": big})),
            "kubectl",
            false,
        )
        .unwrap();
    assert_eq!(out["data"]["big"].as_str().map(str::len), Some(big.len()));
    assert_eq!(out["metadata"]["annotations"], json!({"keep": "me"}));
    // Just under the limit: kept in step.
    let out = s
        .apply(Some(&live), &cm(json!({"k": "2"})), "kubectl", false)
        .unwrap();
    let kept = out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    assert!(kept.contains(r#""k":"2""#), "{kept}");
}

#[test]
fn kubectl_upgrades_from_client_side_apply_through_the_last_applied_annotation() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let last = r#"{"apiVersion":"v1","data":{"k":"1"},"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}"#;
    let mut live = cm(json!({"k": "1", "other": "o"}));
    live["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": last});
    s.update(None, &mut live, "kubectl-client-side-apply");
    // Another manager owns `other`, changed since.
    let mut edited = live.clone();
    edited["data"]["other"] = json!("p");
    s.update(Some(&live), &mut edited, "editor");

    let mut config = cm(json!({"k": "2"}));
    // The conflict on k is allowed (last-applied set it and it is unchanged)...
    let out = s.apply(Some(&edited), &config, "kubectl", false).unwrap();
    assert_eq!(out["data"]["k"], "2");
    // ...and the annotation now holds what kubectl applied.
    let ann = out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    let ann: Value = serde_json::from_str(ann).unwrap();
    assert_eq!(ann["data"], json!({"k":"2"}));
    // A field the annotation did not set still conflicts; other managers get no pass.
    config["data"]["other"] = json!("q");
    let e = s
        .apply(Some(&edited), &config, "kubectl", false)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"Apply failed with 1 conflict: conflict with "editor" using v1: .data.other"#
    );
    let e = s
        .apply(
            Some(&edited),
            &cm(json!({"k": "2"})),
            "kubectl-other",
            false,
        )
        .unwrap_err();
    assert!(matches!(e, ApplyError::Conflicts(_)));
}

#[test]
fn apply_refuses_managed_fields_and_other_versions() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let mut c = cm(json!({}));
    c["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        s.apply(None, &c, "a", false).unwrap_err(),
        ApplyError::ManagedFieldsSet
    );
    // Upstream's `versionCheckManager` messages: the configuration's group/version and
    // kind, as `GroupVersionKind.String` writes them.
    for (api_version, kind, shown) in [
        (json!("v2"), json!("ConfigMap"), "/v2, Kind=ConfigMap"),
        (
            json!("apps/v1"),
            json!("ConfigMap"),
            "apps/v1, Kind=ConfigMap",
        ),
        (json!("v1"), Value::Null, "/v1, Kind="),
        (json!("v1"), json!("Secret"), "/v1, Kind=Secret"),
        (Value::Null, json!("ConfigMap"), "/, Kind=ConfigMap"),
        (json!("a/b/c"), json!("ConfigMap"), "/, Kind="),
        (json!(1), json!(2), "/, Kind="),
    ] {
        let mut c = cm(json!({}));
        c["apiVersion"] = api_version;
        c["kind"] = kind;
        let e = s.apply(None, &c, "a", false).unwrap_err();
        assert_eq!(e, ApplyError::ObjectType(shown.into()));
        assert_eq!(e.to_string(), format!("invalid object type: {shown}"));
    }
    let mut c = cm(json!({}));
    c.as_object_mut().unwrap().remove("kind");
    assert!(s.apply(None, &c, "a", false).is_err());
}

#[test]
fn reset_fields_are_not_owned_and_no_op_applies_keep_the_time() {
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let mut c = cm(json!({"k": "1"}));
    c["status"] = json!({"phase": "x"});
    let a = s.apply(None, &c, "alice", false).unwrap();
    assert_eq!(fields_of(&a, "alice"), json!({"f:data":{"f:k":{}}}));
    let later = scope(&PodTypes, "2026-12-01T11:00:00Z");
    let again = later.apply(Some(&a), &c, "alice", false).unwrap();
    assert_eq!(again, a);
}

#[test]
fn large_and_deep_configurations_are_handled_without_quadratic_work_or_deep_stacks() {
    // 100 000 set items and 100 000 map-list items, live and applied in reverse order:
    // every walk groups items through ordered maps (a linear scan per item would make this
    // one take hours).
    let s = Scope {
        kind: "Pod",
        ..scope(&PodTypes, "2026-12-01T10:00:00Z")
    };
    let n = 10_000;
    let fins: Vec<Value> = (0..n).map(|i| json!(format!("f/{i}"))).collect();
    let containers: Vec<Value> = (0..n).map(|i| json!({"name": format!("c{i}")})).collect();
    let obj = |fins: &[Value], containers: &[Value]| {
        json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","finalizers":fins},
            "spec":{"containers":containers}})
    };
    let mut live = obj(&fins, &containers);
    s.update(None, &mut live, "maker");
    let rev = |v: &[Value]| v.iter().rev().cloned().collect::<Vec<_>>();
    let out = s
        .apply(
            Some(&live),
            &obj(&rev(&fins), &rev(&containers)),
            "alice",
            false,
        )
        .unwrap();
    assert_eq!(out["metadata"]["finalizers"].as_array().unwrap().len(), n);
    assert_eq!(out["spec"]["containers"][0]["name"], format!("c{}", n - 1));

    // A configuration nested 90 levels deep (the server refuses bodies past 100).
    let mut deep = json!("leaf");
    for _ in 0..90 {
        deep = json!({ "x": deep });
    }
    let s = scope(&PodTypes, "2026-12-01T10:00:00Z");
    let mut c = cm(json!({}));
    c["spec"] = deep;
    let a = s.apply(None, &c, "alice", false).unwrap();
    let b = s.apply(Some(&a), &cm(json!({})), "alice", false).unwrap();
    assert!(b.get("spec").is_none(), "dropped, nobody else owns it");
}

/// What the server's strategy does after an apply to the object itself: the stored status.
fn reset_status(new: &mut Value, live: &Value) {
    match live.get("status") {
        Some(s) => new["status"] = s.clone(),
        None => {
            if let Some(o) = new.as_object_mut() {
                o.remove("status");
            }
        }
    }
}

#[test]
fn a_later_identical_apply_carrying_status_changes_nothing() {
    let types = Untyped;
    let config = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},
                        "data":{"a":"1"},"status":{"phase":"Bound"}});
    let first = scope(&types, "2026-12-07T11:00:00Z");
    let mut live = first.apply(None, &config, "kubectl", false).unwrap();
    reset_status(&mut live, &json!({}));
    assert_eq!(fields_of(&live, "kubectl"), json!({"f:data":{"f:a":{}}}));

    // The same configuration a second later: the merge changes status (the time is stamped),
    // the strategy puts the stored status back, and what is left is the stored object.
    let later = scope(&types, "2026-12-07T11:00:01Z");
    let mut again = later.apply(Some(&live), &config, "kubectl", false).unwrap();
    reset_status(&mut again, &live);
    assert!(listwatch_apply::keep_times_if_unchanged(&mut again, &live));
    assert_eq!(again, live);

    // A changed configuration is stamped with its time and kept.
    let changed = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},
                         "data":{"a":"2"},"status":{"phase":"Bound"}});
    let mut next = later
        .apply(Some(&live), &changed, "kubectl", false)
        .unwrap();
    reset_status(&mut next, &live);
    assert!(!listwatch_apply::keep_times_if_unchanged(&mut next, &live));
    assert_eq!(next["data"]["a"], "2");
    assert_eq!(
        next["metadata"]["managedFields"][0]["time"],
        "2026-12-07T11:00:01Z"
    );
}
