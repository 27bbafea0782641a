//! CRD schema patterns compiled once per process and bounded per CRD: a CRD's validation,
//! its versions' strategies and a later label-only write of it share one compilation of
//! each distinct pattern; a CRD of many versions of many heavy patterns is refused once its
//! patterns together pass `MAX_REGEX_TOTAL_BYTES`, having compiled no more than that; the
//! cache evicts. Each test counts compilations through the process-wide counter, so they run
//! one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Mutex, MutexGuard};

use listwatch_kinds::KindStrategy;
use listwatch_kinds::builtin::apiextensions::customresourcedefinition::CrdStrategy;
use listwatch_kinds::crd::Definition;
use listwatch_kinds::custom::schema::{
    MAX_CACHE_ENTRIES, MAX_REGEX_TOTAL_BYTES, Structural, pattern_compiles,
};
use serde_json::{Value, json};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A CRD `name` whose versions `v1..=vN` each have the schema `props(v)` under `spec`.
fn crd(name: &str, versions: usize, props: impl Fn(usize) -> Value) -> Value {
    let versions: Vec<Value> = (0..versions)
        .map(|v| {
            json!({"name": format!("v{}", v + 1), "served": true, "storage": v == 0,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": props(v)}}}}})
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{name}s.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": format!("{name}s"), "singular": name,
                "kind": "Thing", "listKind": "ThingList"},
            "versions": versions},
        "status": {"storedVersions": ["v1"]}})
}

const UNICODE: [&str; 4] = [
    r"^[\p{L}\p{N}_-]{1,63}$",
    r"^\p{L}{1,100}$",
    r"^[\p{L}\p{N}][\p{L}\p{N} ._-]{0,252}$",
    r"^[^/]{1,255}(/[^/]{1,255}){0,10}$",
];

#[test]
fn a_crd_write_and_its_strategies_compile_each_pattern_once() {
    let _g = serial();
    let crd = crd("uni", 3, |_| {
        UNICODE
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("f{i}"), json!({"type": "string", "pattern": p})))
            .collect::<serde_json::Map<_, _>>()
            .into()
    });
    let before = pattern_compiles();
    assert_eq!(CrdStrategy.validate_create(&crd), Vec::new());
    // Four distinct patterns in three versions: four compilations.
    assert_eq!(pattern_compiles() - before, 4);
    let def = Definition::read(&crd).unwrap();
    let specs = def.kind_specs(&def.names);
    assert_eq!(specs.len(), 3);
    // A label-only write validates the CRD again and rebuilds its strategies: no compile.
    let mut labelled = crd.clone();
    labelled["metadata"]["labels"] = json!({"x": "y"});
    assert_eq!(CrdStrategy.validate_update(&labelled, &crd), Vec::new());
    let def = Definition::read(&labelled).unwrap();
    assert_eq!(def.kind_specs(&def.names).len(), 3);
    assert_eq!(pattern_compiles() - before, 4);
}

#[test]
fn a_crd_of_many_versions_of_heavy_patterns_is_bounded_as_a_whole() {
    let _g = serial();
    // The red team's shape: 10 versions x 75 distinct patterns of ~205 KiB of program each
    // (~15 MiB a version, ~150 MiB the CRD).
    let crd = crd("cost", 10, |v| {
        (0..75)
            .map(|i| {
                let p = format!(r"^(\pL|\pN){{12}}x{v}_{i}$");
                (format!("f{i}"), json!({"type": "string", "pattern": p}))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    });
    let before = pattern_compiles();
    let errs = CrdStrategy.validate_create(&crd);
    let compiled = pattern_compiles() - before;
    assert!(
        errs.iter().any(|e| e
            .to_string()
            .contains("the CRD's patterns take more than the limit")),
        "{:?}",
        errs.first()
    );
    // Compiled only until the CRD's total passed the limit, not all 750.
    assert!(
        compiled <= 1 + (MAX_REGEX_TOTAL_BYTES / (200 << 10)) as u64,
        "{compiled} compilations"
    );
}

#[test]
fn the_cache_evicts_the_least_recently_used_pattern() {
    let _g = serial();
    let schema = |i: usize| json!({"type": "object", "properties": {"a": {"type": "string", "pattern": format!("^evict{i}$")}}});
    Structural::new(&schema(0)).unwrap();
    let before = pattern_compiles();
    Structural::new(&schema(0)).unwrap();
    assert_eq!(pattern_compiles(), before, "cached");
    for i in 1..=MAX_CACHE_ENTRIES {
        Structural::new(&schema(i)).unwrap();
    }
    let before = pattern_compiles();
    Structural::new(&schema(0)).unwrap();
    assert_eq!(pattern_compiles() - before, 1, "evicted, so compiled again");
}
