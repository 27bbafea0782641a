//! The CRD kind's unit tests: defaulting, validation in upstream's words, the first
//! DELETE and conditions.

use super::*;

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}]
        }
    })
}

fn created(mut c: Value) -> Value {
    CrdStrategy.prepare_for_create(&mut c);
    c
}

fn fields(errs: &[FieldError]) -> Vec<&str> {
    errs.iter().map(|e| e.field.as_str()).collect()
}

/// Red team rt9 item 7: both were accepted (and the first ignored).
#[test]
fn preserve_unknown_fields_false_or_at_the_spec_is_refused_as_upstream() {
    let mut c = crd();
    c["spec"]["preserveUnknownFields"] = json!(true);
    let c = created(c);
    let errs = CrdStrategy.validate_create(&c);
    assert_eq!(fields(&errs), ["spec.preserveUnknownFields"]);
    assert!(errs[0].to_string().contains("cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"), "{}", errs[0]);
    // An update of a CRD that already had it may keep it (upstream ratchets).
    assert!(!fields(&CrdStrategy.validate_update(&c, &c)).contains(&"spec.preserveUnknownFields"));

    let mut c = crd();
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": false}}});
    let errs = CrdStrategy.validate_create(&created(c));
    assert_eq!(
        fields(&errs),
        [
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-preserve-unknown-fields"
        ]
    );
    assert!(
        errs[0].to_string().contains("must be true or undefined"),
        "{}",
        errs[0]
    );
}

#[test]
fn a_create_is_defaulted_and_records_the_storage_version() {
    let c = created(crd());
    assert_eq!(c["spec"]["names"]["singular"], "widget");
    assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(c["spec"]["conversion"]["strategy"], "None");
    assert_eq!(c["status"], json!({"storedVersions": ["v1"]}));
    assert!(CrdStrategy.validate_create(&c).is_empty());
}

#[test]
fn what_clients_rely_on_is_validated_in_upstreams_words() {
    type Case = (fn(&mut Value), &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            |c| c["metadata"]["name"] = json!("other.example.com"),
            "metadata.name",
            "must be spec.names.plural+\".\"+spec.group",
        ),
        (
            |c| {
                c["spec"]["group"] = json!("example");
                c["metadata"]["name"] = json!("widgets.example");
            },
            "spec.group",
            "should be a domain with at least one dot",
        ),
        (
            |c| c["spec"]["scope"] = json!("Galaxy"),
            "spec.scope",
            "supported values: \"Cluster\", \"Namespaced\"",
        ),
        (
            |c| c["spec"]["versions"][0]["storage"] = json!(false),
            "spec.versions",
            "must have exactly one version marked as storage version",
        ),
        (
            |c| c["spec"]["versions"] = json!([]),
            "spec.versions",
            "must have at least one version",
        ),
        (
            |c| c["spec"]["names"]["plural"] = json!("Widgets"),
            "spec.names.plural",
            "a DNS-1035 label",
        ),
        (
            |c| c["spec"]["names"]["listKind"] = json!("Many"),
            "spec.names.listKind",
            "supported values: \"WidgetList\"",
        ),
        (
            |c| c["spec"]["conversion"] = json!({"strategy": "Webhook"}),
            "spec.conversion.strategy",
            "supported values: \"None\"",
        ),
        (
            |c| {
                c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = json!({"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "true"}]}})
            },
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations",
            "not supported",
        ),
    ];
    for (edit, field, detail) in cases {
        let mut c = crd();
        edit(&mut c);
        let c = created(c);
        let errs = CrdStrategy.validate_create(&c);
        assert!(
            errs.iter()
                .any(|e| e.field == field && e.detail.contains(detail)),
            "{field}: {errs:?}"
        );
    }
}

#[test]
fn updates_keep_group_plural_and_once_established_scope_and_kind() {
    let old = created(crd());
    let mut new = old.clone();
    new["spec"]["group"] = json!("other.com");
    new["spec"]["names"]["plural"] = json!("gadgets");
    new["spec"]["scope"] = json!("Cluster");
    CrdStrategy.prepare_for_update(&mut new, &old);
    assert_eq!(
        fields(&CrdStrategy.validate_update(&new, &old)),
        ["spec.group", "spec.names.plural"]
    );
    let mut established = old.clone();
    set_condition(&mut established, "Established", "True", "r", "m", "t");
    assert_eq!(
        fields(&CrdStrategy.validate_update(&new, &established)),
        ["spec.group", "spec.names.plural", "spec.scope"]
    );
}

#[test]
fn stored_versions_must_hold_the_storage_version_and_only_known_ones() {
    let old = created(crd());
    let mut new = old.clone();
    new["status"]["storedVersions"] = json!(["v0"]);
    let errs = CrdStrategy.validate_update(&new, &old);
    assert_eq!(
        fields(&errs),
        ["status.storedVersions", "status.storedVersions[0]"]
    );
    // An update of the spec adds a new storage version to the stored ones.
    let mut new = old.clone();
    new["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": false},
                                     {"name": "v2", "served": true, "storage": true}]);
    CrdStrategy.prepare_for_update(&mut new, &old);
    assert_eq!(new["status"]["storedVersions"], json!(["v1", "v2"]));
    assert!(CrdStrategy.validate_update(&new, &old).is_empty());
}

#[test]
fn the_first_delete_adds_the_cleanup_finalizer_and_terminating() {
    let mut c = created(crd());
    CrdStrategy.prepare_for_delete(&mut c);
    assert_eq!(c["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
    assert!(condition_true(&c, "Terminating"));
    CrdStrategy.prepare_for_delete(&mut c);
    assert_eq!(c["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
}

#[test]
fn conditions_keep_their_transition_time_unless_the_status_changes() {
    let mut c = json!({});
    assert!(set_condition(
        &mut c,
        "Established",
        "False",
        "a",
        "b",
        "t1"
    ));
    assert!(!set_condition(
        &mut c,
        "Established",
        "False",
        "a",
        "b",
        "t2"
    ));
    assert!(set_condition(
        &mut c,
        "Established",
        "False",
        "c",
        "d",
        "t3"
    ));
    assert_eq!(c["status"]["conditions"][0]["lastTransitionTime"], "t1");
    assert!(set_condition(&mut c, "Established", "True", "c", "d", "t4"));
    assert_eq!(c["status"]["conditions"][0]["lastTransitionTime"], "t4");
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
}
