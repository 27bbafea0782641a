//! `cargo xtask deps`: the layering of the workspace as an executable rule.
//!
//! It owns [`ALLOWED`], the one table of the edges allowed between workspace crates — the
//! "depends only on … / must never depend on …" lines of each crate's doc and the layers of
//! docs/architecture.md, written as data — and checks it against `cargo metadata`.
//!
//! The rules:
//! - **normal and build dependencies** of a workspace member on another workspace crate must
//!   be in its row of [`ALLOWED`] (optional ones included: a feature can turn them on);
//! - **dev-dependencies** may be wider — tests drive a crate with real backends, clients and
//!   the testkit — but never on a crate that itself depends, through normal or build edges, on
//!   the crate under test (that would build a second copy of it into its own tests and let a
//!   lower layer's tests lean on a higher one); a crate's dev-dependency on itself (to turn on
//!   its own features in its tests) is fine;
//! - every workspace member has a row: a new crate is not allowed anything until its row says
//!   what it sits on, and why.
//!
//! A forbidden edge fails the task with one line per edge. Cheap: `cargo metadata --no-deps`
//! reads the manifests only (no resolution, no build), so `ci` runs it first.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use crate::Result;

/// The allowed normal and build edges between workspace crates, bottom to top: each crate may
/// depend on exactly the workspace crates of its row (external crates are not checked here).
/// The comment above each row says why each edge is there, and what the crate must never use.
pub(crate) const ALLOWED: &[(&str, &[&str])] = &[
    // Wire types at the bottom; "must never depend on storage, HTTP or async runtimes".
    ("listwatch-api", &[]),
    // The Storage trait speaks api's types; "traits and plain data only: never etcd, HTTP or
    // the watch cache".
    ("listwatch-storage", &["listwatch-api"]),
    // The embedded backend implements storage; "never etcd, HTTP or the cache".
    (
        "listwatch-memstore",
        &["listwatch-api", "listwatch-storage"],
    ),
    // The etcd adapter implements storage; "never the watch cache, the cacher, HTTP serving or
    // the apiserver".
    ("listwatch-etcd", &["listwatch-api", "listwatch-storage"]),
    // The watch cache keeps storage's events; "never a backend, HTTP or the cacher above it".
    (
        "listwatch-watchcache",
        &["listwatch-api", "listwatch-storage"],
    ),
    // The controller runtime (reflector, store, informer, work queue, leader election) speaks
    // api's types through its own traits; "never HTTP, kubeconfig, credential plugins,
    // storage, the watch cache or the server crates".
    ("listwatch-runtime", &["listwatch-api"]),
    // The HTTP client implements the runtime's traits over HTTP and re-exports it; "never
    // storage, the watch cache or the server crates".
    ("listwatch-client", &["listwatch-api", "listwatch-runtime"]),
    // The cacher serves Storage from the watch cache, fed by the runtime's reflector over an
    // in-process lister-watcher; "never a concrete backend or HTTP" (so not the client).
    (
        "listwatch-cacher",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-watchcache",
            "listwatch-runtime",
        ],
    ),
    // Authentication and RBAC over the runtime's informer stores; "nothing of HTTP servers,
    // storage or the endpoints".
    ("listwatch-auth", &["listwatch-api", "listwatch-runtime"]),
    // Audit records auth's user and attributes; "nothing HTTP".
    ("listwatch-audit", &["listwatch-auth"]),
    // The kinds served, as data over api's types; "never storage, HTTP, the registry or the
    // server crates". Quantities are read by the schema crate's parse (pure data).
    ("listwatch-kinds", &["listwatch-api", "listwatch-schema"]),
    // The vendored OpenAPI schemas: pure data, no workspace crate.
    ("listwatch-schema", &[]),
    // Server-side apply reads field types from the schemas; pure: no I/O.
    ("listwatch-apply", &["listwatch-api", "listwatch-schema"]),
    // Server infrastructure (flow control, the request compute pool, request metrics): no
    // workspace crate; "never HTTP serving, storage, the registry or the endpoints".
    ("listwatch-server", &[]),
    // The registry: the typed write path over any Storage, the kinds' rules, apply's field
    // manager and the schemas; "never HTTP serving (axum, the endpoints), a particular backend
    // or the cacher".
    (
        "listwatch-registry",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-kinds",
            "listwatch-apply",
            "listwatch-schema",
            // The request compute pool's `waiting`: the namespace lifecycle's re-read gives
            // its place in the pool back while it pauses.
            "listwatch-server",
        ],
    ),
    // Protobuf request bodies decoded to JSON (the wire format and the kinds' field tables),
    // with the registry's clock for `metav1.Time`; "never HTTP serving, storage or the
    // endpoints".
    ("listwatch-protobuf", &["listwatch-registry"]),
    // CBOR (KEP-4222) transcoded to and from JSON: pure, no workspace crate.
    ("listwatch-cbor", &[]),
    // The REST endpoints over any Storage, with apply's field manager and the schemas; "never
    // a particular backend (memstore, etcd) or the cacher". The registry is what a write means.
    (
        "listwatch-endpoints",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-kinds",
            "listwatch-registry",
            "listwatch-protobuf",
            "listwatch-cbor",
            "listwatch-server",
            "listwatch-apply",
            "listwatch-schema",
        ],
    ),
    // The background controllers (garbage collector, namespace controller, CRD controller,
    // bootstrap and per-namespace defaults, the singleton runner and its leader election): the
    // endpoints' API in process (its live kinds and each kind's store), the registry's
    // store (every write, with its field manager over the schema catalog), the
    // runtime's informers, work queues and elector, the cacher's in-process lister-watcher,
    // storage for the lease lock; "never HTTP serving, a concrete
    // backend, auth or the server binary; only the server binary depends on it".
    (
        "listwatch-controllers",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-runtime",
            "listwatch-cacher",
            "listwatch-endpoints",
            "listwatch-registry",
            "listwatch-schema",
            // The live kind set's snapshots, which the collector and the namespace
            // controller follow; the CRD controller reads CRDs into kinds
            // (`listwatch_kinds::crd`).
            "listwatch-kinds",
        ],
    ),
    // The binary composes every server layer (the built-in kinds and the custom resource
    // strategy from kinds); its background work runs on the runtime (the RBAC informers, the
    // leader election over its own storage), so it takes no HTTP client; the testkit is for
    // tests only.
    (
        "listwatch-apiserver",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-memstore",
            "listwatch-etcd",
            "listwatch-cacher",
            "listwatch-endpoints",
            "listwatch-kinds",
            "listwatch-registry",
            "listwatch-schema",
            "listwatch-auth",
            "listwatch-audit",
            "listwatch-runtime",
            "listwatch-controllers",
        ],
    ),
    // The test environment embeds the whole server and hands out its HTTP client; "nothing
    // in the workspace depends on it but tests".
    (
        "listwatch-testenv",
        &["listwatch-apiserver", "listwatch-client"],
    ),
    // Test harness pieces: a dev-dependency only, so nothing has it in a normal row. Its
    // storage wrapper (feature `storage`) implements the Storage trait over another storage;
    // "never a backend, the cache or HTTP serving beyond the router helpers".
    ("listwatch-testkit", &["listwatch-api", "listwatch-storage"]),
    // The benchmarks and load generator drive the pipeline's layers directly, and the
    // runtime's reflector (over an in-process lister-watcher); they measure the server over
    // HTTP with their own requests, not through the client.
    (
        "listwatch-benches",
        &[
            "listwatch-api",
            "listwatch-storage",
            "listwatch-memstore",
            "listwatch-etcd",
            "listwatch-watchcache",
            "listwatch-cacher",
            "listwatch-runtime",
            // The CBOR wire variant of `wire_variants` (issue 33 item 3).
            "listwatch-cbor",
        ],
    ),
    // The developer workflows drive cargo, never the crates.
    ("xtask", &[]),
];

/// The task: checks the workspace's manifests against [`ALLOWED`].
pub(crate) fn run(root: &std::path::Path) -> Result {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let metadata = String::from_utf8_lossy(&out.stdout);
    let edges = check(&metadata, ALLOWED)?;
    eprintln!(
        "xtask deps: {edges} workspace edges of {} crates follow the layering",
        ALLOWED.len()
    );
    Ok(())
}

/// One dependency of a workspace member on another workspace crate.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    /// `normal`, `build` or `dev`.
    kind: String,
}

/// Checks `metadata` (`cargo metadata --format-version 1` output) against `allowed`; returns
/// how many workspace edges it checked, or every forbidden edge, one per line.
pub(crate) fn check(metadata: &str, allowed: &[(&str, &[&str])]) -> Result<usize> {
    let v: Value =
        serde_json::from_str(metadata).map_err(|e| format!("cargo metadata's JSON: {e}"))?;
    let members = members(&v)?;
    let mut edges = BTreeSet::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let Some(from) = p["name"].as_str() else {
            continue;
        };
        if !members.contains(from) {
            continue;
        }
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let Some(to) = d["name"].as_str() else {
                continue;
            };
            if !members.contains(to) {
                continue;
            }
            let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
            edges.insert(Edge {
                from: from.to_owned(),
                to: to.to_owned(),
                kind,
            });
        }
    }
    let table: BTreeMap<&str, &[&str]> = allowed.iter().copied().collect();
    let mut errors = Vec::new();
    for m in &members {
        if !table.contains_key(m.as_str()) {
            errors.push(format!(
                "workspace crate {m} has no row in xtask/src/deps.rs ALLOWED: add one saying \
                 which crates it may depend on, and why"
            ));
        }
    }
    // What each crate reaches through normal and build edges (for the dev-dependency rule).
    let normal: Vec<&Edge> = edges.iter().filter(|e| e.kind != "dev").collect();
    let reaches = |from: &str, target: &str| -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(c) = stack.pop() {
            if c == target {
                return true;
            }
            if seen.insert(c) {
                stack.extend(normal.iter().filter(|e| e.from == c).map(|e| e.to.as_str()));
            }
        }
        false
    };
    for e in &edges {
        if e.kind == "dev" {
            if e.from != e.to && reaches(&e.to, &e.from) {
                errors.push(format!(
                    "forbidden edge {} -> {} (dev): {} depends on {} itself, so its tests \
                     would build a second copy of it",
                    e.from, e.to, e.to, e.from
                ));
            }
            continue;
        }
        let ok = table
            .get(e.from.as_str())
            .is_some_and(|row| row.contains(&e.to.as_str()));
        if !ok {
            let row = table.get(e.from.as_str()).map_or_else(
                || "nothing (no row)".to_owned(),
                |r| {
                    if r.is_empty() {
                        "no workspace crate".to_owned()
                    } else {
                        r.join(", ")
                    }
                },
            );
            errors.push(format!(
                "forbidden edge {} -> {} ({}): {} may depend on {row} (xtask/src/deps.rs)",
                e.from, e.to, e.kind, e.from
            ));
        }
    }
    if errors.is_empty() {
        Ok(edges.len())
    } else {
        Err(format!(
            "the workspace breaks its layering:\n  {}",
            errors.join("\n  ")
        ))
    }
}

/// The workspace members' package names.
fn members(v: &Value) -> Result<BTreeSet<String>> {
    let ids: BTreeSet<&str> = v["workspace_members"]
        .as_array()
        .ok_or("cargo metadata without workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    Ok(v["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["id"].as_str().is_some_and(|id| ids.contains(id)))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A package of a synthetic metadata: its name, its dependencies as (name, kind).
    type Package<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)]);

    /// A `cargo metadata` document with `packages`.
    fn metadata(packages: &[Package<'_>]) -> String {
        let packages: Vec<Value> = packages
            .iter()
            .map(|(name, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|(d, kind)| serde_json::json!({"name": d, "kind": kind, "req": "*"}))
                    .collect();
                serde_json::json!({"name": name, "id": format!("path+file:///w/{name}#0.1.0"),
                    "dependencies": deps})
            })
            .collect();
        let ids: Vec<Value> = packages.iter().map(|p| p["id"].clone()).collect();
        serde_json::json!({"packages": packages, "workspace_members": ids, "version": 1})
            .to_string()
    }

    const TABLE: &[(&str, &[&str])] = &[
        ("api", &[]),
        ("runtime", &["api"]),
        ("client", &["api", "runtime"]),
        ("cacher", &["api", "runtime"]),
    ];

    #[test]
    fn a_forbidden_normal_edge_is_named() {
        let m = metadata(&[
            ("api", &[("serde", None)]),
            ("runtime", &[("api", None)]),
            ("client", &[("api", None), ("runtime", None)]),
            // The cacher taking the HTTP client back: what the runtime split removed.
            ("cacher", &[("api", None), ("client", None)]),
        ]);
        let e = check(&m, TABLE).unwrap_err();
        assert!(
            e.contains(
                "forbidden edge cacher -> client (normal): cacher may depend on api, runtime"
            ),
            "{e}"
        );
        assert_eq!(e.matches("forbidden edge").count(), 1, "{e}");
    }

    #[test]
    fn build_edges_are_checked_and_every_forbidden_edge_is_listed() {
        let m = metadata(&[
            ("api", &[("runtime", Some("build"))]),
            ("runtime", &[("api", None), ("client", None)]),
            ("client", &[("api", None), ("runtime", None)]),
            ("cacher", &[]),
        ]);
        let e = check(&m, TABLE).unwrap_err();
        assert!(
            e.contains(
                "forbidden edge api -> runtime (build): api may depend on no workspace crate"
            ),
            "{e}"
        );
        assert!(
            e.contains("forbidden edge runtime -> client (normal)"),
            "{e}"
        );
        assert_eq!(e.matches("forbidden edge").count(), 2, "{e}");
    }

    #[test]
    fn dev_edges_may_go_sideways_and_to_self_but_not_back_up() {
        let m = metadata(&[
            ("api", &[("api", Some("dev"))]),
            ("runtime", &[("api", None)]),
            (
                "client",
                &[("api", None), ("runtime", None), ("cacher", Some("dev"))],
            ),
            ("cacher", &[("runtime", None), ("client", Some("dev"))]),
        ]);
        assert!(check(&m, TABLE).is_ok());
        // The runtime's tests on the client, which depends on the runtime: refused.
        let m = metadata(&[
            ("api", &[]),
            ("runtime", &[("api", None), ("client", Some("dev"))]),
            ("client", &[("api", None), ("runtime", None)]),
            ("cacher", &[]),
        ]);
        let e = check(&m, TABLE).unwrap_err();
        assert!(e.contains("forbidden edge runtime -> client (dev)"), "{e}");
    }

    #[test]
    fn a_member_without_a_row_fails_and_external_crates_are_ignored() {
        let m = metadata(&[
            ("api", &[]),
            ("runtime", &[("api", None), ("hyper", None)]),
            ("client", &[]),
            ("cacher", &[]),
            ("kinds", &[("api", None)]),
        ]);
        let e = check(&m, TABLE).unwrap_err();
        assert!(e.contains("workspace crate kinds has no row"), "{e}");
        assert!(e.contains("forbidden edge kinds -> api (normal)"), "{e}");
        assert!(!e.contains("hyper"), "{e}");
    }

    /// The real workspace follows its layering (what `cargo xtask deps` checks in CI).
    #[test]
    fn the_workspace_follows_the_table() {
        run(&crate::root()).unwrap();
    }
}
