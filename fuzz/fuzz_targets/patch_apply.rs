//! Every patch type (`Patch::parse` then `Patch::apply`, as the PATCH handler does) applied
//! to a fixed Deployment, with the Deployment's real schema (strategic merge reads its
//! patch strategies and merge keys). The first byte picks the type (json, merge,
//! strategic, apply); the rest is the body.
//!
//! Checked beyond "no panic": the patched object nests at most `MAX_DEPTH` levels, and its
//! encoded size is at most the original's + what the body carries (8 × its size, or the
//! YAML expansion budget for an apply body) + the copy budget (a JSON patch's
//! `copy` operations together copy at most `max_copy_bytes`; everything else a patch adds
//! comes from its own body); a JSON patch with more than 10 000 operations is refused; a
//! merge patch is idempotent (applying it to its own result changes nothing, RFC 7386).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use listwatch_endpoints::limits::{self, MAX_DEPTH, MAX_JSON_PATCH_OPERATIONS};
use listwatch_endpoints::patch::{Patch, PatchError, PatchLimits, PatchType};
use listwatch_schema::Catalog;
use serde_json::{Value, json};

const MAX_COPY_BYTES: usize = 64 * 1024;

fn original() -> &'static (Value, usize) {
    static DOC: OnceLock<(Value, usize)> = OnceLock::new();
    DOC.get_or_init(|| {
        let v = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "default", "uid": "u-1",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"a": "b"},
                "finalizers": ["x/y"]
            },
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "nginx",
                             "ports": [{"containerPort": 80, "protocol": "TCP"}],
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                             "volumeMounts": [{"name": "v", "mountPath": "/data"}]},
                            {"name": "d", "image": "busybox", "args": ["sleep", "1"]}
                        ],
                        "volumes": [{"name": "v", "emptyDir": {}}],
                        "imagePullSecrets": [{"name": "s"}]
                    }
                }
            },
            "status": {"replicas": 3, "conditions": [{"type": "Available", "status": "True"}]}
        });
        let n = serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0);
        (v, n)
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let kind = match selector % 4 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        2 => PatchType::StrategicMerge,
        _ => PatchType::Apply,
    };
    let patch = match Patch::parse(kind, body) {
        Ok(p) => p,
        Err(PatchError::TooManyOperations { got }) => {
            assert!(got > MAX_JSON_PATCH_OPERATIONS);
            return;
        }
        Err(_) => return,
    };
    if let Patch::Json(ops) = &patch {
        assert!(ops.len() <= MAX_JSON_PATCH_OPERATIONS);
    }
    let limits = PatchLimits {
        max_copy_bytes: MAX_COPY_BYTES,
    };
    let (doc, doc_len) = original();
    let catalog = Catalog::builtin();
    let schema = catalog.kind("apps", "v1", "Deployment");
    let Ok(patched) = patch.apply(doc, schema, limits) else {
        return;
    };
    assert!(limits::depth(&patched) <= MAX_DEPTH, "too deep");
    // An apply body in YAML may expand to `yaml_budget` (its aliases), any other body
    // carries at most 8 × its size of JSON (a float such as `1e15` prints longer).
    let carried = (8 * body.len()).max(limits::yaml_budget(body.len()));
    let bound = doc_len + carried + MAX_COPY_BYTES + 64;
    let size = limits::encoded_len_capped(&patched, usize::MAX).unwrap_or(usize::MAX);
    assert!(
        size <= bound,
        "{kind:?}: a {}-byte patch made a {size}-byte object (bound {bound})",
        body.len()
    );
    if let Patch::Merge(_) = &patch {
        match patch.apply(&patched, schema, limits) {
            Ok(twice) => assert_eq!(twice, patched, "a merge patch is idempotent"),
            Err(e) => panic!("a merge patch applies once but not twice: {e}"),
        }
    }
});
