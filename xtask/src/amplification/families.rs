//! The families: for each body type × verb × content type the server accepts, one request
//! shape whose size scales with a factor (1×, 4×, 16×, …), with the stored state it needs.
//!
//! Invariants: every measured write is `?dryRun=All` (or a patch that fails), so repeating it
//! changes nothing and every round sees the same state; a family's stored state is created by
//! its `setup` once per size, under a name that includes the size; each family names the
//! issue-24 item it would have found.

use super::bodies;

/// One request to measure.
pub struct Req {
    pub method: &'static str,
    pub path: String,
    pub content_type: &'static str,
    pub accept: &'static str,
    pub body: Vec<u8>,
}

/// A request run once before a size is measured (stored state); must answer 2xx.
pub type Setup = Vec<Req>;

/// A family of requests scaled by `n` = `base` × factor.
pub struct Family {
    pub name: &'static str,
    /// Verb and content types, for the table.
    pub what: &'static str,
    /// The issue-24 item (or review note) this family watches.
    pub watches: &'static str,
    pub base: u64,
    /// The statuses a request of this family may answer.
    pub ok: &'static [u16],
    pub setup: fn(u64) -> Setup,
    pub request: fn(u64) -> Req,
}

const NS: &str = "/api/v1/namespaces/default";
const BLOBS: &str = "/apis/amp.example.com/v1/namespaces/default/blobs";
/// Namespace with [`SELECTOR_OBJECTS`] labelled ConfigMaps, for the selector families.
pub const SEL_NS: &str = "amp-sel";
pub const SELECTOR_OBJECTS: u64 = 200;

const JSON: &str = "application/json";
const YAML: &str = "application/yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const JSONPATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// Levels of the deep families at 1× (6, 24, 96: inside the 100-level limit with the two
/// levels above `spec`), leaves per level, and key length.
pub const DEEP_LEVELS: u64 = 6;
const DEEP_LEAVES: u64 = 4;
const DEEP_KEY: usize = 1000;
/// Leaves per level of the narrow deep families (short keys: indentation dominates YAML).
const NARROW_LEAVES: u64 = 64;
/// The chain above the leaves of the `*-chain-leaves` families: 96 levels of 1 000-byte keys (YAML keys stop at 1 024).
const CHAIN_LEVELS: u64 = 96;
const CHAIN_KEY: usize = 1000;

fn req(method: &'static str, path: String, ct: &'static str, body: impl Into<Vec<u8>>) -> Req {
    Req {
        method,
        path,
        content_type: ct,
        accept: JSON,
        body: body.into(),
    }
}

fn get(path: String, accept: &'static str) -> Req {
    Req {
        method: "GET",
        path,
        content_type: JSON,
        accept,
        body: Vec::new(),
    }
}

fn none(_: u64) -> Setup {
    Vec::new()
}

/// A small ConfigMap `amp-target` (JSON patch, merge patch, PUT and managedFields targets).
fn target_cm(_: u64) -> Setup {
    vec![req(
        "POST",
        format!("{NS}/configmaps"),
        JSON,
        bodies::configmap("amp-target", 2, ""),
    )]
}

fn deep_spec(n: u64) -> String {
    bodies::deep(n, DEEP_LEAVES, DEEP_KEY)
}

/// A Blob of `n` levels stored as `amp-deep-N`.
fn stored_deep_blob(n: u64) -> Setup {
    vec![req(
        "POST",
        BLOBS.to_owned(),
        JSON,
        bodies::blob(&format!("amp-deep-{n}"), &deep_spec(n)),
    )]
}

/// A Blob of `n` levels of 64 short keys each, stored as `amp-narrow-N`.
fn stored_narrow_blob(n: u64) -> Setup {
    vec![req(
        "POST",
        BLOBS.to_owned(),
        JSON,
        bodies::blob(
            &format!("amp-narrow-{n}"),
            &bodies::deep(n, NARROW_LEAVES, 4),
        ),
    )]
}

/// A small Blob `amp-blob` (merge and apply targets).
fn small_blob(_: u64) -> Setup {
    vec![req(
        "POST",
        BLOBS.to_owned(),
        JSON,
        bodies::blob("amp-blob", "{\"a\":1}"),
    )]
}

/// A pod `amp-pod-N` with N containers.
fn stored_pod(n: u64) -> Setup {
    vec![req(
        "POST",
        format!("{NS}/pods"),
        JSON,
        bodies::pod(&format!("amp-pod-{n}"), n, 0),
    )]
}

/// A pod `amp-gates-N` with N readiness gates and N conditions (set through `/status`).
fn stored_gated_pod(n: u64) -> Setup {
    let name = format!("amp-gates-{n}");
    vec![
        req("POST", format!("{NS}/pods"), JSON, bodies::pod(&name, 1, n)),
        req(
            "PATCH",
            format!("{NS}/pods/{name}/status"),
            MERGE,
            bodies::pod_conditions(n),
        ),
    ]
}

/// A Blob `amp-arr-N` whose `spec.arr` has 4N integers.
fn stored_array(n: u64) -> Setup {
    vec![req(
        "POST",
        BLOBS.to_owned(),
        JSON,
        bodies::blob(
            &format!("amp-arr-{n}"),
            &format!("{{\"arr\":{}}}", bodies::int_array(4 * n)),
        ),
    )]
}

const DRY: &str = "dryRun=All";
const APPLY_Q: &str = "dryRun=All&fieldManager=amp&force=true";

/// Every family, in table order.
pub fn all() -> Vec<Family> {
    vec![
        // Creates (POST) in each request media type.
        Family {
            name: "create-wide-json",
            what: "POST ConfigMap, JSON, N data keys",
            watches: "field manager",
            base: 250,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{NS}/configmaps?{DRY}"),
                    JSON,
                    bodies::configmap(&format!("amp-cw-{n}"), n, ""),
                )
            },
        },
        Family {
            name: "create-wide-yaml",
            what: "POST ConfigMap, YAML body, N data keys",
            watches: "YAML decoding",
            base: 250,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{NS}/configmaps?{DRY}"),
                    YAML,
                    bodies::configmap_yaml(&format!("amp-cy-{n}"), n),
                )
            },
        },
        Family {
            name: "create-wide-protobuf",
            what: "POST ConfigMap, protobuf body, N data keys",
            watches: "protobuf decoding",
            base: 250,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{NS}/configmaps?{DRY}"),
                    PROTOBUF,
                    bodies::configmap_protobuf(&format!("amp-cp-{n}"), n),
                )
            },
        },
        Family {
            name: "create-deep-json",
            what: "POST Blob, JSON, N levels × 1000-byte keys",
            watches: "field manager path cache, critical",
            base: DEEP_LEVELS,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{BLOBS}?{DRY}"),
                    JSON,
                    bodies::blob(&format!("amp-cd-{n}"), &deep_spec(n)),
                )
            },
        },
        Family {
            name: "create-deep-yaml",
            what: "POST Blob, YAML body, N levels × 1000-byte keys",
            watches: "field manager path cache; YAML decoding",
            base: DEEP_LEVELS,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{BLOBS}?{DRY}"),
                    YAML,
                    bodies::blob_yaml(&format!("amp-cdy-{n}"), n, DEEP_LEAVES, DEEP_KEY),
                )
            },
        },
        Family {
            name: "create-chain-leaves",
            what: "POST Blob, JSON, N small objects under a chain of 96 levels × 1000-byte keys",
            watches: "field manager path cache: leaves × path length, critical",
            base: 16,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{BLOBS}?{DRY}"),
                    JSON,
                    bodies::blob(
                        &format!("amp-cl-{n}"),
                        &bodies::chain_leaves(CHAIN_LEVELS, CHAIN_KEY, n),
                    ),
                )
            },
        },
        Family {
            name: "apply-chain-leaves",
            what: "PATCH apply (JSON), Blob of N small objects under 96 levels × 1000-byte keys",
            watches: "field manager path cache, critical",
            base: 16,
            ok: &[200, 201],
            setup: none,
            request: |n| {
                req(
                    "PATCH",
                    format!("{BLOBS}/amp-acl-{n}?{APPLY_Q}"),
                    APPLY,
                    bodies::blob(
                        &format!("amp-acl-{n}"),
                        &bodies::chain_leaves(CHAIN_LEVELS, CHAIN_KEY, n),
                    ),
                )
            },
        },
        Family {
            name: "create-long-keys",
            what: "POST Blob, JSON, 8 levels of keys N bytes long",
            watches: "field manager path cache",
            base: 1000,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{BLOBS}?{DRY}"),
                    JSON,
                    bodies::blob(&format!("amp-lk-{n}"), &bodies::deep(8, 4, n as usize)),
                )
            },
        },
        Family {
            name: "create-list-items",
            what: "POST Blob, JSON, a list of N objects",
            watches: "field manager, list handling",
            base: 500,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{BLOBS}?{DRY}"),
                    JSON,
                    bodies::blob(
                        &format!("amp-li-{n}"),
                        &format!("{{\"items\":{}}}", bodies::items(n)),
                    ),
                )
            },
        },
        Family {
            name: "create-pod-containers",
            what: "POST Pod, JSON, N containers",
            watches: "pod validation and defaulting",
            base: 50,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{NS}/pods?{DRY}"),
                    JSON,
                    bodies::pod(&format!("amp-cpc-{n}"), n, 0),
                )
            },
        },
        Family {
            name: "create-pod-mistyped",
            what: "POST Pod, JSON, N containers, the last one's image a number",
            watches: "typed validation (a full walk, then the refusal)",
            base: 50,
            ok: &[400],
            setup: none,
            request: |n| {
                let body = bodies::pod(&format!("amp-cpm-{n}"), n, 0);
                // The last container's image (`"image":"img"`) becomes a number.
                let body = match body.rfind("\"img\"") {
                    Some(at) => format!(
                        "{}1{}",
                        body.get(..at).unwrap_or_default(),
                        body.get(at + 5..).unwrap_or_default()
                    ),
                    None => body,
                };
                req("POST", format!("{NS}/pods?{DRY}"), JSON, body)
            },
        },
        Family {
            name: "create-managed-fields",
            what: "POST ConfigMap, JSON, N managedFields entries",
            watches: "managedFields decoding",
            base: 50,
            ok: &[201],
            setup: none,
            request: |n| {
                req(
                    "POST",
                    format!("{NS}/configmaps?{DRY}"),
                    JSON,
                    bodies::configmap(&format!("amp-mf-{n}"), n, &bodies::managed_fields(n)),
                )
            },
        },
        // Updates (PUT).
        Family {
            name: "update-wide-json",
            what: "PUT ConfigMap, JSON, N data keys",
            watches: "field manager",
            base: 250,
            ok: &[200],
            setup: target_cm,
            request: |n| {
                req(
                    "PUT",
                    format!("{NS}/configmaps/amp-target?{DRY}"),
                    JSON,
                    bodies::configmap("amp-target", n, ""),
                )
            },
        },
        Family {
            name: "update-managed-fields",
            what: "PUT ConfigMap, JSON, N managedFields entries",
            watches: "managedFields decoding",
            base: 50,
            ok: &[200],
            setup: target_cm,
            request: |n| {
                req(
                    "PUT",
                    format!("{NS}/configmaps/amp-target?{DRY}"),
                    JSON,
                    bodies::configmap("amp-target", n, &bodies::managed_fields(n)),
                )
            },
        },
        Family {
            name: "update-deep-json",
            what: "PUT Blob, JSON, N levels × 1000-byte keys over a small Blob",
            watches: "field manager path cache",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: small_blob,
            request: |n| {
                req(
                    "PUT",
                    format!("{BLOBS}/amp-blob?{DRY}"),
                    JSON,
                    bodies::blob("amp-blob", &deep_spec(n)),
                )
            },
        },
        // Patches.
        Family {
            name: "json-patch-many-ops",
            what: "PATCH json-patch, N add operations",
            watches: "JSON patch",
            base: 500,
            ok: &[200],
            setup: target_cm,
            request: |n| {
                req(
                    "PATCH",
                    format!("{NS}/configmaps/amp-target?{DRY}"),
                    JSONPATCH,
                    bodies::json_patch_adds(n),
                )
            },
        },
        Family {
            name: "json-patch-remove-front",
            what: "PATCH json-patch, N × remove /spec/arr/0 on a 4N array, failing test",
            watches: "JSON patch O(ops × array length)",
            base: 250,
            ok: &[422],
            setup: stored_array,
            request: |n| {
                req(
                    "PATCH",
                    format!("{BLOBS}/amp-arr-{n}?{DRY}"),
                    JSONPATCH,
                    bodies::json_patch_remove_front(n),
                )
            },
        },
        Family {
            name: "merge-patch-wide",
            what: "PATCH merge-patch, N data keys",
            watches: "merge patch",
            base: 250,
            ok: &[200],
            setup: target_cm,
            request: |n| {
                req(
                    "PATCH",
                    format!("{NS}/configmaps/amp-target?{DRY}"),
                    MERGE,
                    format!("{{\"data\":{{{}}}}}", bodies::data_pairs(n)),
                )
            },
        },
        Family {
            name: "merge-patch-deep",
            what: "PATCH merge-patch, N levels × 1000-byte keys",
            watches: "merge patch; field manager path cache",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: small_blob,
            request: |n| {
                req(
                    "PATCH",
                    format!("{BLOBS}/amp-blob?{DRY}"),
                    MERGE,
                    format!("{{\"spec\":{}}}", deep_spec(n)),
                )
            },
        },
        Family {
            name: "strategic-containers",
            what: "PATCH strategic-merge, N containers onto a pod of N",
            watches: "strategic merge per level (review note)",
            base: 50,
            ok: &[200],
            setup: stored_pod,
            request: |n| {
                req(
                    "PATCH",
                    format!("{NS}/pods/amp-pod-{n}?{DRY}"),
                    STRATEGIC,
                    format!(
                        "{{\"spec\":{{\"containers\":{}}}}}",
                        bodies::containers(n, "img2")
                    ),
                )
            },
        },
        Family {
            name: "apply-yaml-wide",
            what: "PATCH apply (YAML), ConfigMap of N data keys",
            watches: "server-side apply",
            base: 250,
            ok: &[200, 201],
            setup: none,
            request: |n| {
                req(
                    "PATCH",
                    format!("{NS}/configmaps/amp-ay-{n}?{APPLY_Q}"),
                    APPLY,
                    bodies::configmap_yaml(&format!("amp-ay-{n}"), n),
                )
            },
        },
        Family {
            name: "apply-json-deep",
            what: "PATCH apply (JSON), Blob of N levels × 1000-byte keys",
            watches: "server-side apply, path cache",
            base: DEEP_LEVELS,
            ok: &[200, 201],
            setup: small_blob,
            request: |n| {
                req(
                    "PATCH",
                    format!("{BLOBS}/amp-blob?{APPLY_Q}"),
                    APPLY,
                    bodies::blob("amp-blob", &deep_spec(n)),
                )
            },
        },
        Family {
            name: "apply-json-containers",
            what: "PATCH apply (JSON), pod of N containers onto a pod of N",
            watches: "apply set operations per level (review note)",
            base: 50,
            ok: &[200],
            setup: stored_pod,
            request: |n| {
                req(
                    "PATCH",
                    format!("{NS}/pods/amp-pod-{n}?{APPLY_Q}"),
                    APPLY,
                    bodies::pod(&format!("amp-pod-{n}"), n, 0),
                )
            },
        },
        // Reads of stored objects in each response media type.
        Family {
            name: "get-deep-json",
            what: "GET Blob of N levels, Accept JSON",
            watches: "JSON encoding",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: stored_deep_blob,
            request: |n| get(format!("{BLOBS}/amp-deep-{n}"), JSON),
        },
        Family {
            name: "get-deep-yaml",
            what: "GET Blob of N levels, Accept YAML",
            watches: "YAML output",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: stored_deep_blob,
            request: |n| get(format!("{BLOBS}/amp-deep-{n}"), YAML),
        },
        Family {
            name: "get-narrow-deep-json",
            what: "GET Blob of N levels × 64 short keys, Accept JSON",
            watches: "baseline of the YAML family",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: stored_narrow_blob,
            request: |n| get(format!("{BLOBS}/amp-narrow-{n}"), JSON),
        },
        Family {
            name: "get-narrow-deep-yaml",
            what: "GET Blob of N levels × 64 short keys, Accept YAML",
            watches: "YAML output indents every element",
            base: DEEP_LEVELS,
            ok: &[200],
            setup: stored_narrow_blob,
            request: |n| get(format!("{BLOBS}/amp-narrow-{n}"), YAML),
        },
        Family {
            name: "get-deep-protobuf",
            what: "GET Blob of N levels, Accept protobuf (406: not served)",
            watches: "content negotiation",
            base: DEEP_LEVELS,
            ok: &[406],
            setup: stored_deep_blob,
            request: |n| get(format!("{BLOBS}/amp-deep-{n}"), PROTOBUF),
        },
        Family {
            name: "get-pod-gates-table",
            what: "GET Pod with N readinessGates and N conditions, Accept Table",
            watches: "Table printing O(gates × conditions)",
            base: 250,
            ok: &[200],
            setup: stored_gated_pod,
            request: |n| get(format!("{NS}/pods/amp-gates-{n}"), TABLE),
        },
        Family {
            name: "get-pod-gates-json",
            what: "GET Pod with N readinessGates and N conditions, Accept JSON",
            watches: "baseline of the Table family",
            base: 250,
            ok: &[200],
            setup: stored_gated_pod,
            request: |n| get(format!("{NS}/pods/amp-gates-{n}"), JSON),
        },
        // Lists and watches with selectors.
        Family {
            name: "list-label-selector",
            what: "GET list of 200 ConfigMaps, labelSelector of N requirements",
            watches: "selectors",
            base: SELECTOR_BASE,
            ok: &[200],
            setup: none,
            request: |n| {
                get(
                    format!(
                        "/api/v1/namespaces/{SEL_NS}/configmaps?labelSelector={}",
                        bodies::label_terms(n)
                    ),
                    JSON,
                )
            },
        },
        Family {
            name: "list-label-notin",
            what: "GET list of 200 ConfigMaps, labelSelector `a notin (N values)`",
            watches: "selectors",
            base: 60,
            ok: &[200],
            setup: none,
            request: |n| {
                get(
                    format!(
                        "/api/v1/namespaces/{SEL_NS}/configmaps?labelSelector={}",
                        bodies::label_notin(n)
                    ),
                    JSON,
                )
            },
        },
        Family {
            name: "list-field-selector",
            what: "GET list of 200 ConfigMaps, fieldSelector of N requirements",
            watches: "selectors",
            base: SELECTOR_BASE,
            ok: &[200],
            setup: none,
            request: |n| {
                get(
                    format!(
                        "/api/v1/namespaces/{SEL_NS}/configmaps?fieldSelector={}",
                        bodies::field_terms(n)
                    ),
                    JSON,
                )
            },
        },
        Family {
            name: "list-label-selector-table",
            what: "GET list of 200 ConfigMaps as Table, labelSelector of N requirements",
            watches: "selectors, Table",
            base: SELECTOR_BASE,
            ok: &[200],
            setup: none,
            request: |n| {
                get(
                    format!(
                        "/api/v1/namespaces/{SEL_NS}/configmaps?labelSelector={}",
                        bodies::label_terms(n)
                    ),
                    TABLE,
                )
            },
        },
        Family {
            name: "watch-label-selector",
            what: "GET watch (RV 0, 1 s) of 200 ConfigMaps, labelSelector of N requirements",
            watches: "selectors on the dispatcher's path",
            base: SELECTOR_BASE,
            ok: &[200],
            setup: none,
            request: |n| {
                get(
                    format!(
                        "/api/v1/namespaces/{SEL_NS}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1&labelSelector={}",
                        bodies::label_terms(n)
                    ),
                    JSON,
                )
            },
        },
    ]
}

/// N for the families of N selector requirements: 6, 24, 96 stay under the server's cap of
/// 100 requirements (past it a selector is refused with 400, which costs nothing to find).
const SELECTOR_BASE: u64 = 6;

/// The requests that store the selector families' ConfigMaps (once per run).
pub fn selector_objects() -> Vec<Req> {
    let mut out = vec![req(
        "POST",
        "/api/v1/namespaces".to_owned(),
        JSON,
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"{SEL_NS}\"}}}}"
        ),
    )];
    for i in 0..SELECTOR_OBJECTS {
        let labels: Vec<String> = (0..8).map(|k| format!("\"a{k}\":\"v{}\"", i % 7)).collect();
        out.push(req(
            "POST",
            format!("/api/v1/namespaces/{SEL_NS}/configmaps"),
            JSON,
            bodies::configmap(
                &format!("o{i}"),
                4,
                &format!(",\"labels\":{{{}}}", labels.join(",")),
            ),
        ));
    }
    out
}

/// The `--resources` file declaring the schemaless `Blob` kind.
pub const RESOURCES: &str = "resources:\n- group: amp.example.com\n  version: v1\n  kind: Blob\n";
