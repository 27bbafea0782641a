//! CRD schema patterns compiled once per process, bounded per CRD and per server: a CRD's
//! validation, its versions' strategies and a later label-only write of it share one
//! compilation of each distinct pattern; a CRD of many versions of many heavy patterns is
//! refused once its patterns together pass `MAX_REGEX_TOTAL_BYTES`, having compiled no more
//! than that; the recent list evicts; the server-wide limit refuses a CRD whose new patterns
//! would pass it, and the live total drops when a served CRD's schemas are dropped. Each
//! test counts compilations or live bytes through process-wide counters, so they run one at
//! a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Mutex, MutexGuard};

use listwatch_kinds::KindSpec;
use listwatch_kinds::KindStrategy;
use listwatch_kinds::builtin::apiextensions::customresourcedefinition::CrdStrategy;
use listwatch_kinds::crd::Definition;
use listwatch_kinds::custom::schema::{
    DEFAULT_PATTERN_LIMIT_BYTES, MAX_RECENT_ENTRIES, MAX_REGEX_TOTAL_BYTES, Structural,
    pattern_bytes, pattern_compiles, release_unused_patterns, set_pattern_limit,
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
fn the_recent_list_evicts_the_least_recently_used_pattern() {
    let _g = serial();
    let schema = |i: usize| json!({"type": "object", "properties": {"a": {"type": "string", "pattern": format!("^evict{i}$")}}});
    Structural::new(&schema(0)).unwrap();
    let before = pattern_compiles();
    Structural::new(&schema(0)).unwrap();
    assert_eq!(pattern_compiles(), before, "cached");
    for i in 1..=MAX_RECENT_ENTRIES {
        Structural::new(&schema(i)).unwrap();
    }
    let before = pattern_compiles();
    Structural::new(&schema(0)).unwrap();
    assert_eq!(pattern_compiles() - before, 1, "evicted, so compiled again");
}

/// A CRD `name` of one version with four distinct patterns of ~200 KiB of program each.
fn heavy(name: &str) -> Value {
    crd(name, 1, |_| {
        (0..4)
            .map(|i| {
                let p = format!(r"^(\pL|\pN){{12}}x{name}{i}$");
                (format!("f{i}"), json!({"type": "string", "pattern": p}))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    })
}

/// What the CRD controller holds while it serves `crd`: its kinds' specs (strategies).
fn serve(crd: &Value) -> Vec<KindSpec> {
    let def = Definition::read(crd).unwrap();
    def.kind_specs(&def.names)
}

/// Whether `errs` is the server-wide limit's one cause (the patterns after the first
/// refused are neither compiled nor reported).
fn refused_for_the_server(errs: &[listwatch_kinds::field::FieldError]) -> bool {
    errs.len() == 1
        && errs[0]
            .to_string()
            .contains("the patterns of the server's CRDs would take more than the limit of")
}

/// Restores the default limit when a test ends, passed or not.
struct DefaultLimit;

impl Drop for DefaultLimit {
    fn drop(&mut self) {
        set_pattern_limit(DEFAULT_PATTERN_LIMIT_BYTES);
    }
}

#[test]
fn the_server_wide_limit_refuses_a_crd_past_it_and_admits_it_once_another_is_gone() {
    let _g = serial();
    let _restore = DefaultLimit;
    release_unused_patterns();
    let base = pattern_bytes();
    // One CRD's patterns, as served: what the live total grows by.
    let a = heavy("mema");
    assert_eq!(CrdStrategy.validate_create(&a), Vec::new());
    let served_a = serve(&a);
    release_unused_patterns();
    let one = pattern_bytes() - base;
    assert!(one > 400 << 10, "{one} bytes");
    // Room for two such CRDs, not three.
    set_pattern_limit(base + one * 5 / 2);
    let b = heavy("memb");
    assert_eq!(CrdStrategy.validate_create(&b), Vec::new());
    let served_b = serve(&b);
    let c = heavy("memc");
    let errs = CrdStrategy.validate_create(&c);
    assert!(refused_for_the_server(&errs), "{errs:?}");
    // Refused: nothing of it is kept.
    release_unused_patterns();
    assert_eq!(pattern_bytes(), base + 2 * one);
    // A write of a served CRD adds nothing, so it is admitted over the limit.
    set_pattern_limit(base + one);
    let mut labelled = b.clone();
    labelled["metadata"]["labels"] = json!({"x": "y"});
    assert_eq!(CrdStrategy.validate_update(&labelled, &b), Vec::new());
    set_pattern_limit(base + one * 5 / 2);
    // The first CRD deleted (the controller drops its kinds and releases the recent list):
    // its patterns' bytes are no longer counted, and the third fits.
    drop(served_a);
    release_unused_patterns();
    assert_eq!(pattern_bytes(), base + one);
    assert_eq!(CrdStrategy.validate_create(&c), Vec::new());
    let served_c = serve(&c);
    drop((served_b, served_c));
    release_unused_patterns();
    assert_eq!(pattern_bytes(), base);
}

#[test]
fn a_schema_change_releases_the_patterns_only_the_old_schema_held() {
    let _g = serial();
    release_unused_patterns();
    let base = pattern_bytes();
    let old = heavy("memd");
    let served = serve(&old);
    // The CRD's new schema drops two of its four patterns and adds none.
    let mut new = old.clone();
    let props = new
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(Value::as_object_mut)
        .unwrap();
    props.remove("f2");
    props.remove("f3");
    assert_eq!(CrdStrategy.validate_update(&new, &old), Vec::new());
    let one = pattern_bytes() - base;
    let replaced = serve(&new);
    drop(served);
    release_unused_patterns();
    let left = pattern_bytes() - base;
    assert!(left * 3 < one * 2 && left > 0, "{left} of {one} bytes");
    drop(replaced);
    release_unused_patterns();
    assert_eq!(pattern_bytes(), base);
}
