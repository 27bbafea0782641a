//! Table-driven tests per rule (upstream's examples and messages), and a property test that
//! hostile schemas and objects never panic and stay bounded.

use serde_json::{Value, json};

use super::*;

fn s(schema: Value) -> Structural {
    match Structural::new(&schema) {
        Ok(s) => s,
        Err(e) => panic!("{schema}: {e:?}"),
    }
}

fn refused(schema: Value) -> Vec<String> {
    match Structural::new(&schema) {
        Ok(_) => panic!("accepted {schema}"),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

fn errors(schema: &Structural, obj: Value) -> Vec<String> {
    schema
        .validate(&obj)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn spec(props: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
}

#[test]
fn non_structural_schemas_are_refused_with_upstreams_messages() {
    let cases = [
        (
            json!({"type": "object", "properties": {"spec": {"properties": {}}}}),
            "properties[spec].type: Required value: must not be empty for specified object fields",
        ),
        (
            json!({}),
            "type: Required value: must not be empty at the root",
        ),
        (
            json!({"type": "string"}),
            "type: Invalid value: \"string\": must be object at the root",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array"}}}),
            "properties[a].items: Required value: must be specified",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}),
            "properties[a].items.type: Required value: must not be empty for specified array items",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}}}),
            "properties[a].anyOf[0].type: Forbidden: must be empty to be structural",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "allOf": [{"default": "x"}]}}}),
            "properties[a].allOf[0].default: Forbidden: must be undefined to be structural",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object"}}, "anyOf": [{"properties": {"a": {"properties": {"b": {"minLength": 1}}}}}]}),
            "properties[a].properties[b]: Required value: because it is defined in anyOf[0].properties[a].properties[b]",
        ),
        (
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
            "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
        ),
        (
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            "additionalProperties: Forbidden: must not be used at the root",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-validations": [{"rule": "self.x > 0"}]}}}),
            "properties[a].x-kubernetes-validations: Forbidden: CEL validation rules (x-kubernetes-validations) are not supported by this server",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
            "properties[a].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: error parsing regexp: unclosed group",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}}),
            "properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/x"}}}),
            "properties[a].$ref: Forbidden: $ref is not supported",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer", "default": "x"}}}),
            "properties[a].default: Invalid value: \"string\": properties[a].default in body must be of type integer: \"string\"",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "default": {"c": 1}}}}),
            "properties[a].default: Invalid value: {\"c\":1}: must not have unknown fields",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}, "x-kubernetes-list-type": "map"}}}),
            "properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-embedded-resource": true}}}),
            "properties[a].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "thing"}}}),
            "properties[a].type: Unsupported value: \"thing\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
        ),
    ];
    for (schema, want) in cases {
        let got = refused(schema.clone());
        assert!(
            got.iter().any(|e| e == want),
            "{schema}\n want {want}\n got {got:#?}"
        );
    }
}

#[test]
fn structural_schemas_are_accepted() {
    for schema in [
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}}}}),
        // Upstream's int-or-string patterns.
        json!({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}),
        json!({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": true, "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+%?$"}]}}}),
        json!({"type": "object", "properties": {"free": {"x-kubernetes-preserve-unknown-fields": true}}}),
        json!({"type": "object", "properties": {"e": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}}),
        json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
        json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "anyOf": [{"required": ["b"]}, {"properties": {"b": {"minLength": 2}}}]}}}),
    ] {
        s(schema);
    }
}

#[test]
fn deep_or_huge_schemas_are_refused_not_overflowed() {
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    let got = refused(deep);
    assert!(
        got.iter()
            .any(|e| e.contains("must not be nested more than 64 levels")),
        "{got:?}"
    );
    let mut anys = json!({"minLength": 1});
    for _ in 0..200 {
        anys = json!({"anyOf": [anys]});
    }
    let got = refused(
        json!({"type": "object", "properties": {"a": {"type": "string", "allOf": [anys]}}}),
    );
    assert!(
        got.iter().any(|e| e.contains("nested more than")),
        "{got:?}"
    );
    let props: serde_json::Map<String, Value> = (0..MAX_NODES + 5)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    let got = refused(json!({"type": "object", "properties": props}));
    assert!(
        got.iter().any(|e| e.contains("must not have more than")),
        "{got:?}"
    );
    // A pattern whose program is too large is refused at compile time.
    let got = refused(
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(\\pL{100}){100}"}}}),
    );
    assert!(
        got.iter()
            .any(|e| e.contains("must be a valid regular expression")),
        "{got:?}"
    );
}

#[test]
fn validation_messages_are_upstreams() {
    let schema = s(spec(json!({
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1, "multipleOf": 0.25},
        "name": {"type": "string", "minLength": 3, "maxLength": 5, "pattern": "^[a-z]+$"},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "level": {"type": "integer", "enum": [1, 2]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1, "minProperties": 1},
        "when": {"type": "string", "format": "date-time"},
        "port": {"x-kubernetes-int-or-string": true},
        "opt": {"type": "string", "nullable": true},
        "chars": {"type": "string", "maxLength": 3},
        "req": {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}},
    })));
    let cases = [
        (
            json!({"replicas": "3"}),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
        ),
        (
            json!({"replicas": 0}),
            "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
        ),
        (
            json!({"replicas": 11}),
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ),
        (
            json!({"replicas": 2.5}),
            "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\"",
        ),
        (
            json!({"replicas": null}),
            "spec.replicas: Invalid value: \"null\": spec.replicas in body must be of type integer: \"null\"",
        ),
        (
            json!({"ratio": 1}),
            "spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1",
        ),
        (
            json!({"ratio": 0.3}),
            "spec.ratio: Invalid value: 0.3: spec.ratio in body should be a multiple of 0.25",
        ),
        (
            json!({"name": "ab"}),
            "spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long",
        ),
        (
            json!({"name": "abcdef"}),
            "spec.name: Too long: must have at most 5 bytes",
        ),
        (
            json!({"name": "abC"}),
            "spec.name: Invalid value: \"abC\": spec.name in body should match '^[a-z]+$'",
        ),
        (
            json!({"mode": "c"}),
            "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
        ),
        (
            json!({"level": 3}),
            "spec.level: Unsupported value: 3: supported values: \"1\", \"2\"",
        ),
        (
            json!({"tags": []}),
            "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
        ),
        (
            json!({"tags": ["a", "b", "c"]}),
            "spec.tags: Too many: 3: must have at most 2 items",
        ),
        (
            json!({"tags": ["a", 1]}),
            "spec.tags[1]: Invalid value: \"integer\": spec.tags[1] in body must be of type string: \"integer\"",
        ),
        (
            json!({"labels": {"a": "x", "b": "y"}}),
            "spec.labels: Too many: 2: must have at most 1 item",
        ),
        (
            json!({"labels": {}}),
            "spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties",
        ),
        (
            json!({"labels": {"a": 1}}),
            "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
        ),
        (
            json!({"when": "yesterday"}),
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ),
        (
            json!({"port": true}),
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
        ),
        (json!({"req": {}}), "spec.req.x: Required value"),
    ];
    for (obj, want) in cases {
        let got = errors(&schema, json!({"spec": obj}));
        assert!(
            got.iter().any(|e| e == want),
            "{obj}\n want {want}\n got {got:#?}"
        );
    }
    for ok in [
        json!({"replicas": 3, "ratio": 0.75, "name": "abc", "mode": "a", "port": 80}),
        json!({"replicas": 3.0, "port": "http", "opt": null, "when": "2024-01-01T00:00:00Z"}),
        // Lengths count characters, not bytes.
        json!({"chars": "ééé"}),
    ] {
        let got = errors(&schema, json!({"spec": ok}));
        assert!(got.is_empty(), "{ok}: {got:?}");
    }
}

#[test]
fn junctors_validate_values() {
    let schema = s(spec(json!({
        "a": {"type": "string", "anyOf": [{"minLength": 3}, {"pattern": "^x"}]},
        "o": {"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]},
        "n": {"type": "string", "not": {"enum": ["bad"]}},
        "all": {"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3}]},
    })));
    let cases = [
        (
            json!({"a": "ab"}),
            "<nil>: Invalid value: \"\": \"spec.a\" must validate at least one schema (anyOf)",
        ),
        (
            json!({"o": 5}),
            "<nil>: Invalid value: \"\": \"spec.o\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
        ),
        (
            json!({"n": "bad"}),
            "<nil>: Invalid value: \"\": \"spec.n\" must not validate the schema (not)",
        ),
        (
            json!({"all": "a"}),
            "spec.all: Invalid value: \"a\": spec.all in body should be at least 2 chars long",
        ),
        (
            json!({"all": "a"}),
            "<nil>: Invalid value: \"\": \"spec.all\" must validate all the schemas (allOf)",
        ),
    ];
    for (obj, want) in cases {
        let got = errors(&schema, json!({"spec": obj}));
        assert!(
            got.iter().any(|e| e == want),
            "{obj}\n want {want}\n got {got:#?}"
        );
    }
    assert!(
        errors(
            &schema,
            json!({"spec": {"a": "xy", "o": -1, "n": "ok", "all": "ab"}})
        )
        .is_empty()
    );
}

#[test]
fn list_types_refuse_duplicates() {
    let schema = s(spec(json!({
        "set": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}},
    })));
    let got = errors(&schema, json!({"spec": {"set": ["a", "b", "a"]}}));
    assert_eq!(got, ["spec.set[2]: Duplicate value: \"a\""]);
    let got = errors(
        &schema,
        json!({"spec": {"map": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]}}),
    );
    assert_eq!(got, ["spec.map[1]: Duplicate value: {\"name\":\"x\"}"]);
    assert!(
        errors(
            &schema,
            json!({"spec": {"set": ["a", "b"], "map": [{"name": "x"}, {"name": "y"}]}})
        )
        .is_empty()
    );
}

#[test]
fn pruning_drops_unknown_fields_and_keeps_what_is_preserved() {
    let schema = s(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "a": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"known": {"type": "object", "properties": {"x": {"type": "string"}}}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "properties": {"r": {"type": "integer"}}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
    }}));
    let mut obj = json!({
        "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}},
        "spec": {
            "a": "keep", "b": "drop",
            "items": [{"k": "v", "z": 1}],
            "free": {"anything": {"goes": 1}, "known": {"x": "1", "y": 2}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {"r": 1, "s": 2}, "other": 1},
            "labels": {"a": "b"},
        },
        "status": {"x": 1},
    });
    let mut pruned = schema.prune(&mut obj);
    pruned.sort();
    assert_eq!(
        pruned,
        [
            "spec.b",
            "spec.free.known.y",
            "spec.items[0].z",
            "spec.template.metadata.bogus",
            "spec.template.other",
            "spec.template.spec.s",
            "status"
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {
                "a": "keep",
                "items": [{"k": "v"}],
                "free": {"anything": {"goes": 1}, "known": {"x": "1"}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"r": 1}},
                "labels": {"a": "b"},
            },
        })
    );
}

#[test]
fn defaulting_follows_upstreams_order_and_null_rules() {
    let schema = s(spec(json!({
        "replicas": {"type": "integer", "default": 1},
        "mode": {"type": "string", "default": "auto"},
        "opt": {"type": "string", "nullable": true, "default": "d"},
        "gone": {"type": "string"},
        "nested": {"type": "object", "default": {}, "properties": {"x": {"type": "string", "default": "x"}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"p": {"type": "integer", "default": 80}}}},
        "map": {"type": "object", "additionalProperties": {"type": "string", "default": "m"}},
    })));
    let mut obj = json!({"spec": {
        "mode": null, "opt": null, "gone": null,
        "list": [{}, {"p": 1}], "map": {"a": null, "b": "b"},
    }});
    schema.default(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {
            "replicas": 1, "mode": "auto", "opt": null,
            "nested": {"x": "x"},
            "list": [{"p": 80}, {"p": 1}], "map": {"a": "m", "b": "b"},
        }})
    );
    // A missing spec is not created (only declared defaults are applied).
    let mut bare = json!({"metadata": {"name": "x"}});
    schema.default(&mut bare);
    assert_eq!(bare, json!({"metadata": {"name": "x"}}));
}

#[test]
fn a_validation_over_budget_stops_with_an_error() {
    // `anyOf` alternatives each walk the whole array: many alternatives times a long array.
    let alts: Vec<Value> = (0..64)
        .map(|i| json!({"items": {"minLength": 1000 + i}}))
        .collect();
    let schema = s(spec(
        json!({"a": {"type": "array", "items": {"type": "string"}, "anyOf": alts}}),
    ));
    let big: Vec<Value> = (0..400_000).map(|_| json!("x")).collect();
    let got = schema.validate(&json!({"spec": {"a": big}}));
    assert!(got.len() <= MAX_ERRORS + 1);
    assert!(!got.is_empty());
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    fn keyword() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "type",
            "properties",
            "items",
            "additionalProperties",
            "anyOf",
            "allOf",
            "oneOf",
            "not",
            "default",
            "enum",
            "required",
            "pattern",
            "minimum",
            "maxLength",
            "nullable",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-int-or-string",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys",
            "format",
            "a",
            "metadata",
            "spec",
        ])
        .prop_map(str::to_owned)
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop::sample::select(vec![
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
                "set",
                "map",
                "date-time",
                "(",
                "^a+$",
                "",
            ])
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(8, 256, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keyword(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        #[test]
        fn hostile_schemas_and_objects_never_panic(schema in json_value(), obj in json_value()) {
            if let Ok(st) = Structural::new(&schema) {
                let mut o = obj.clone();
                let _ = st.prune(&mut o);
                st.default(&mut o);
                let errs = st.validate(&o);
                prop_assert!(errs.len() <= MAX_ERRORS + 1);
            } else {
                // Errors are bounded too.
                prop_assert!(Structural::new(&schema).err().map_or(0, |e| e.len()) <= MAX_ERRORS);
            }
        }

        #[test]
        fn a_structural_schema_keeps_pruning_idempotent(obj in json_value()) {
            let st = s(spec(json!({
                "a": {"type": "string"},
                "b": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "integer", "default": 1}}}},
                "free": {"x-kubernetes-preserve-unknown-fields": true},
            })));
            let mut o = json!({"spec": obj});
            st.prune(&mut o);
            st.default(&mut o);
            let again = o.clone();
            prop_assert!(st.prune(&mut o).is_empty());
            prop_assert_eq!(o, again);
        }
    }
}

#[test]
fn patterns_are_compiled_once_and_bounded_together() {
    // One heavy pattern repeated: compiled once, accepted.
    let same: serde_json::Map<String, Value> = (0..2000)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": "^\\pL{1,4}$"}),
            )
        })
        .collect();
    let st = s(json!({"type": "object", "properties": same}));
    assert!(st.validate(&json!({"p1": "abc"})).is_empty());
    assert_eq!(st.validate(&json!({"p1": "a b"})).len(), 1);
    // As many distinct heavy patterns: refused once their heap passes the total.
    let distinct: serde_json::Map<String, Value> = (0..2000)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("^\\pL{{1,4}}{i}$")}),
            )
        })
        .collect();
    let got = refused(json!({"type": "object", "properties": distinct}));
    assert!(
        got.iter()
            .any(|e| e.contains("patterns take more than the limit")),
        "{:?}",
        got.first()
    );
}

#[test]
fn updates_ratchet_what_did_not_change() {
    let schema = s(spec(json!({
        "a": {"type": "string", "maxLength": 3},
        "b": {"type": "integer", "minimum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer", "maximum": 100}}}},
    })));
    // Stored before the schema tightened: `a` too long, a port too high, duplicate tags.
    let old = json!({"spec": {"a": "long", "b": 9, "tags": ["x", "x"], "ports": [{"name": "p", "port": 1000}, {"name": "q", "port": 1}]}});
    // Changing only `b` (validly) is accepted: the rest is unchanged.
    let mut new = old.clone();
    new["spec"]["b"] = json!(6);
    assert!(
        schema.validate_update(&new, &old).is_empty(),
        "{:?}",
        schema.validate_update(&new, &old)
    );
    // Reordering the map list keeps each item correlated by key.
    new["spec"]["ports"] = json!([{"name": "q", "port": 1}, {"name": "p", "port": 1000}]);
    assert!(schema.validate_update(&new, &old).is_empty());
    // A changed value is validated; so is a changed item.
    new["spec"]["b"] = json!(1);
    new["spec"]["ports"] = json!([{"name": "p", "port": 1001}]);
    let got: Vec<String> = schema
        .validate_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        [
            "spec.b: Invalid value: 1: spec.b in body should be greater than or equal to 5",
            "spec.ports[0].port: Invalid value: 1001: spec.ports[0].port in body should be less than or equal to 100",
        ]
    );
    // A create validates everything.
    assert_eq!(
        schema.validate(&old).len(),
        3,
        "{:?}",
        schema.validate(&old)
    );
    // List-type duplicates are checked when the old object had none.
    let clean = json!({"spec": {"tags": ["x"]}});
    let dup = json!({"spec": {"tags": ["x", "x"]}});
    assert_eq!(schema.validate_update(&dup, &clean).len(), 1);
}

#[test]
fn embedded_resources_need_a_type_and_valid_metadata() {
    let schema = s(spec(json!({
        "t": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
    })));
    let got = errors(
        &schema,
        json!({"spec": {"t": {"metadata": {"name": "a/b", "labels": {"k": "bad value"}}}}}),
    );
    for want in [
        "spec.t.apiVersion: Required value",
        "spec.t.kind: Required value",
        "spec.t.metadata.name: Invalid value: \"a/b\": may not contain '/'",
        "spec.t.metadata.labels: Invalid value: \"bad value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    ] {
        assert!(got.iter().any(|e| e == want), "{want}\n{got:#?}");
    }
    let got = errors(
        &schema,
        json!({"spec": {"t": {"apiVersion": "a/b/c", "kind": "1Pod"}}}),
    );
    assert!(got.iter().any(|e| e == "spec.t.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c"), "{got:#?}");
    assert!(got.iter().any(|e| e.starts_with("spec.t.kind: Invalid value: \"1Pod\": may have mixed case, but should otherwise match: a DNS-1035 label")), "{got:#?}");
    assert!(
        errors(
            &schema,
            json!({"spec": {"t": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}}})
        )
        .is_empty()
    );
}

/// Red team rt9 item 10: an embedded resource that preserves unknown fields kept unknown
/// fields of its metadata (upstream's `objectmeta.Coerce` drops them).
#[test]
fn an_embedded_resource_preserving_unknown_fields_keeps_objectmeta_fields_only() {
    let schema = s(spec(json!({
        "t": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
    })));
    let mut obj = json!({"spec": {"t": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "x", "bogus": 1, "labels": {"a": "b"}}, "extra": {"kept": true}}}});
    let pruned = schema.prune(&mut obj);
    assert_eq!(pruned, ["spec.t.metadata.bogus"]);
    assert_eq!(
        obj["spec"]["t"],
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"a": "b"}}, "extra": {"kept": true}})
    );
}
