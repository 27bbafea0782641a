//! Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}`, aggregated discovery (v2) and `/version` (the OpenAPI v3
//! documents are the `openapi` module's).
//!
//! Every document is built once, when the router is built, and served as shared bytes.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::resource::{KindSpec, Resource};
use listwatch_kinds::builtin::create_only::CreateOnly;

/// The Kubernetes version this server reports (kubectl picks its build by the minor).
pub const KUBE_MAJOR: &str = "1";
/// See [`KUBE_MAJOR`].
pub const KUBE_MINOR: &str = "32";
/// See [`KUBE_MAJOR`].
pub const KUBE_GIT_VERSION: &str = "v1.32.0";

/// Which build serves: what `/version` reports beside the Kubernetes version. The
/// embedding binary fills it from its build (the apiserver's `build.rs`: the git commit,
/// the tree state, the build time); [`BuildInfo::default`] says "unknown".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// `gitVersion`: upstream-shaped, [`KUBE_GIT_VERSION`] with the build's own version as
    /// semver build metadata (`v1.32.0+listwatch.0.1.0`), so that clients parsing it as
    /// upstream's (kubectl, client-go's version checks) read 1.32.0.
    pub git_version: String,
    /// `gitCommit`: the commit built, or `unknown`.
    pub git_commit: String,
    /// `gitTreeState`: `clean`, `dirty` (uncommitted changes were built) or `unknown`.
    pub git_tree_state: String,
    /// `buildDate`: RFC 3339 UTC, or `unknown`.
    pub build_date: String,
}

impl Default for BuildInfo {
    fn default() -> Self {
        Self {
            git_version: format!("{KUBE_GIT_VERSION}+listwatch.{}", env!("CARGO_PKG_VERSION")),
            git_commit: "unknown".into(),
            git_tree_state: "unknown".into(),
            build_date: "unknown".into(),
        }
    }
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

/// The verbs of a resource: all of them, except that namespaces have no collection delete
/// (as upstream's namespace registry) and a kind restricting its verbs lists only those.
fn verbs(info: &KindSpec) -> Vec<&'static str> {
    VERBS
        .into_iter()
        .filter(|v| !(*v == "deletecollection" && crate::lifecycle::is_namespaces(info)))
        .filter(|v| info.serves_verb(v))
        .collect()
}

/// Pre-encoded discovery documents.
#[derive(Debug, Default)]
pub(crate) struct Documents {
    pub(crate) core_versions: Bytes,
    pub(crate) groups: Bytes,
    pub(crate) core_aggregated: Bytes,
    pub(crate) groups_aggregated: Bytes,
    /// The ETags of the two aggregated documents, quoted (upstream's: the SHA-512 of the
    /// JSON in upper-case hex, `ServeHTTPWithETag` in `endpoints/discovery/aggregated`).
    pub(crate) core_aggregated_etag: String,
    pub(crate) groups_aggregated_etag: String,
    /// `(group, version)` → APIResourceList; `("", "v1")` is `/api/v1`.
    pub(crate) resource_lists: HashMap<(String, String), Bytes>,
    /// group → APIGroup.
    pub(crate) group_docs: HashMap<String, Bytes>,
    pub(crate) version: Bytes,
}

fn bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// Groups and versions in a stable order: core first, then groups by name.
fn by_group_version(resources: &[Resource]) -> BTreeMap<(String, String), Vec<&KindSpec>> {
    let mut m: BTreeMap<(String, String), Vec<&KindSpec>> = BTreeMap::new();
    for r in resources {
        m.entry((r.info.group.clone(), r.info.version.clone()))
            .or_default()
            .push(&r.info);
    }
    m
}

/// `v<major>[(alpha|beta)<minor>]` as (stability, major, minor): GA 2, beta 1, alpha 0.
fn kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (major, tail) = rest.split_at(digits);
    let major: u64 = major.parse().ok().filter(|m| *m > 0)?;
    if tail.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, minor) = if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else {
        (0, tail.strip_prefix("alpha")?)
    };
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stability, major, minor.parse().ok()?))
}

/// Upstream's `version.CompareKubeAwareVersionStrings` as discovery sorts a group's versions
/// (a CRD's served versions): kube-like versions first — GA, then beta, then alpha, each by
/// major then minor version, highest first — then the others by name (`v2`, `v1`, `v1beta1`,
/// `v1alpha1`, `foo1`).
fn kube_version_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (kube_version(a), kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn gv_string(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The create-only subresources of `info` (`pods/binding`, `serviceaccounts/token`).
fn create_only_subs<'a>(
    info: &'a KindSpec,
    create_only: &'a [CreateOnly],
) -> impl Iterator<Item = (&'static str, &'a CreateOnly)> + 'a {
    create_only.iter().filter_map(move |c| {
        let (parent, sub) = c.subresource()?;
        (c.group == info.group && c.version == info.version && parent == info.plural)
            .then_some((sub, c))
    })
}

fn api_resource(info: &KindSpec, create_only: &[CreateOnly]) -> Vec<Value> {
    let mut out = vec![json!({
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": verbs(info),
        "shortNames": info.short_names,
        "categories": info.categories,
        "storageVersionHash": "",
    })];
    if info.finalize_subresource {
        out.push(json!({
            "name": format!("{}/finalize", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": KindSpec::subresource_verbs("finalize"),
        }));
    }
    if info.status_subresource {
        out.push(json!({
            "name": format!("{}/status", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": STATUS_VERBS,
        }));
    }
    if info.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": STATUS_VERBS,
        }));
    }
    if info.approval_subresource {
        out.push(json!({
            "name": format!("{}/approval", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": STATUS_VERBS,
        }));
    }
    for (sub, c) in create_only_subs(info, create_only) {
        let mut e = json!({
            "name": format!("{}/{sub}", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": c.kind,
            "verbs": ["create"],
        });
        if (c.kind_group, c.kind_version) != (c.group, c.version) {
            e["group"] = json!(c.kind_group);
            e["version"] = json!(c.kind_version);
        }
        out.push(e);
    }
    if info.ephemeral_containers_subresource {
        out.push(json!({
            "name": format!("{}/ephemeralcontainers", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": STATUS_VERBS,
        }));
    }
    out
}

fn aggregated_resource(info: &KindSpec, create_only: &[CreateOnly]) -> Value {
    let kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let mut r = json!({
        "resource": info.plural,
        "responseKind": kind,
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": verbs(info),
        "shortNames": info.short_names,
        "categories": info.categories,
    });
    let mut subs = Vec::new();
    if info.finalize_subresource {
        subs.push(json!({"subresource": "finalize", "responseKind": kind,
            "verbs": KindSpec::subresource_verbs("finalize")}));
    }
    if info.status_subresource {
        subs.push(json!({"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}));
    }
    if info.scale.is_some() {
        subs.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": STATUS_VERBS}));
    }
    if info.approval_subresource {
        subs.push(json!({"subresource": "approval", "responseKind": kind, "verbs": STATUS_VERBS}));
    }
    for (sub, c) in create_only_subs(info, create_only) {
        subs.push(json!({"subresource": sub,
            "responseKind": {"group": c.kind_group, "version": c.kind_version, "kind": c.kind},
            "verbs": ["create"]}));
    }
    if info.ephemeral_containers_subresource {
        subs.push(
            json!({"subresource": "ephemeralcontainers", "responseKind": kind,
            "verbs": STATUS_VERBS}),
        );
    }
    if !subs.is_empty() {
        r["subresources"] = Value::Array(subs);
    }
    r
}

fn aggregated_list(
    groups: &BTreeMap<String, Vec<(String, Vec<&KindSpec>)>>,
    create_only: &[CreateOnly],
) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            json!({
                "metadata": {"name": group, "creationTimestamp": null},
                "versions": versions.iter().map(|(v, infos)| json!({
                    "version": v,
                    "resources": infos.iter().map(|i| aggregated_resource(i, create_only)).collect::<Vec<_>>(),
                    "freshness": "Current",
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// `GOOS/GOARCH` as Go names them (upstream's `/version` reports `runtime.GOOS` and
/// `runtime.GOARCH`): `linux/amd64` on x86_64, `linux/arm64` on aarch64, and so on, from
/// Rust's names for the target.
fn go_platform(os: &str, arch: &str) -> String {
    let os = match os {
        "macos" => "darwin",
        "ios" => "ios",
        other => other,
    };
    let arch = match arch {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "powerpc" => "ppc",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "loongarch64" => "loong64",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "wasm32" => "wasm",
        other => other,
    };
    format!("{os}/{arch}")
}

/// Builds every document for a set of resources, and the create-only resources and
/// subresources the embedding server routes itself (listed with the verb `create`; a
/// subresource only under its served parent).
pub(crate) fn build(
    resources: &[Resource],
    build_info: &BuildInfo,
    create_only: &[CreateOnly],
) -> Documents {
    let top: Vec<KindSpec> = create_only
        .iter()
        .filter(|c| c.subresource().is_none())
        .map(|c| {
            KindSpec::new(c.group, c.version, c.resource, c.kind)
                .namespaced(c.namespaced)
                .only_verbs(&["create"])
        })
        .collect();
    let mut gvs = by_group_version(resources);
    for spec in &top {
        gvs.entry((spec.group.clone(), spec.version.clone()))
            .or_default()
            .push(spec);
    }
    let mut docs = Documents::default();
    let mut core: BTreeMap<String, Vec<(String, Vec<&KindSpec>)>> = BTreeMap::new();
    let mut groups: BTreeMap<String, Vec<(String, Vec<&KindSpec>)>> = BTreeMap::new();
    let mut core_versions = Vec::new();
    for ((group, version), infos) in &gvs {
        let list = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv_string(group, version),
            "resources": infos.iter().flat_map(|i| api_resource(i, create_only)).collect::<Vec<_>>(),
        });
        docs.resource_lists
            .insert((group.clone(), version.clone()), bytes(&list));
        if group.is_empty() {
            core_versions.push(version.clone());
            core.entry(String::new())
                .or_default()
                .push((version.clone(), infos.clone()));
        } else {
            groups
                .entry(group.clone())
                .or_default()
                .push((version.clone(), infos.clone()));
        }
    }
    // A group's versions in upstream's priority (its preferred version first).
    for versions in groups.values_mut() {
        versions.sort_by(|a, b| kube_version_order(&a.0, &b.0));
    }
    docs.core_versions = bytes(&json!({
        "kind": "APIVersions",
        "versions": core_versions,
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }));
    let api_group = |name: &str, versions: &[(String, Vec<&KindSpec>)]| {
        let vs: Vec<Value> = versions
            .iter()
            .map(|(v, _)| json!({"groupVersion": gv_string(name, v), "version": v}))
            .collect();
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": vs, "preferredVersion": vs.first()})
    };
    let mut group_list = Vec::new();
    for (name, versions) in &groups {
        let g = api_group(name, versions);
        docs.group_docs.insert(name.clone(), bytes(&g));
        group_list.push(g);
    }
    docs.groups = bytes(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_list}));
    docs.core_aggregated = bytes(&aggregated_list(&core, create_only));
    docs.groups_aggregated = bytes(&aggregated_list(&groups, create_only));
    docs.core_aggregated_etag = format!("\"{}\"", crate::openapi::etag(&docs.core_aggregated));
    docs.groups_aggregated_etag = format!("\"{}\"", crate::openapi::etag(&docs.groups_aggregated));
    docs.version = bytes(&json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": build_info.git_version,
        "gitCommit": build_info.git_commit,
        "gitTreeState": build_info.git_tree_state,
        "buildDate": build_info.build_date,
        "goVersion": concat!("listwatch ", env!("CARGO_PKG_VERSION")),
        "compiler": "rustc",
        "platform": go_platform(std::env::consts::OS, std::env::consts::ARCH),
    }));
    docs
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_groups_versions_are_in_upstreams_priority() {
        let mut v = vec![
            "v1alpha1",
            "foo1",
            "v1",
            "v10",
            "v2",
            "v1beta1",
            "v11beta2",
            "v10beta3",
            "v3beta1",
            "v12alpha1",
            "v11alpha2",
            "foo10",
        ];
        v.sort_by(|a, b| super::kube_version_order(a, b));
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v11beta2",
                "v10beta3",
                "v3beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    use super::*;
    use std::sync::Arc;

    #[test]
    fn documents_list_every_group_and_resource() {
        let store: Arc<dyn listwatch_storage::Storage> =
            Arc::new(listwatch_memstore::MemStore::new());
        let mk = |info: KindSpec| Resource::new(info, Arc::clone(&store));
        let docs = build(
            &[
                mk(KindSpec::new("", "v1", "pods", "Pod")
                    .short_names(["po"])
                    .status_subresource(true)),
                mk(KindSpec::new("apps", "v1", "deployments", "Deployment")),
            ],
            &BuildInfo::default(),
            &[],
        );
        let v: Value =
            serde_json::from_slice(&docs.resource_lists[&(String::new(), "v1".to_owned())])
                .unwrap();
        assert_eq!(v["resources"][0]["name"], "pods");
        assert_eq!(v["resources"][1]["name"], "pods/status");
        let g: Value = serde_json::from_slice(&docs.groups).unwrap();
        assert_eq!(
            g["groups"][0]["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        let agg: Value = serde_json::from_slice(&docs.core_aggregated).unwrap();
        assert_eq!(
            agg["items"][0]["versions"][0]["resources"][0]["shortNames"][0],
            "po"
        );
        let ver: Value = serde_json::from_slice(&docs.version).unwrap();
        assert_eq!(
            ver["platform"],
            go_platform(std::env::consts::OS, std::env::consts::ARCH)
        );
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!(ver["platform"], "linux/amd64");
        #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
        assert_eq!(ver["platform"], "linux/arm64");
        assert_eq!(go_platform("linux", "x86_64"), "linux/amd64");
        assert_eq!(go_platform("linux", "aarch64"), "linux/arm64");
        assert_eq!(go_platform("macos", "aarch64"), "darwin/arm64");
        assert_eq!(go_platform("windows", "x86"), "windows/386");
        assert_eq!(go_platform("linux", "s390x"), "linux/s390x");
        assert_eq!(go_platform("freebsd", "riscv64"), "freebsd/riscv64");
        assert_eq!(
            (ver["major"].as_str(), ver["minor"].as_str()),
            (Some("1"), Some("32"))
        );
    }
}
