//! The resources the collector follows, and the mapping of an owner reference's
//! `apiVersion`/`kind` to one of them (upstream's REST mapper).

use std::sync::Arc;

use listwatch_endpoints::{KindSpec, Resource};
use listwatch_storage::Key;

/// Resources the collector never follows (upstream's `DefaultIgnoredResources`): events
/// churn, are never owners, and take no part in garbage collection.
const IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// The served resources the collector watches, by index, with the key of each one's
/// whole collection.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    resources: Arc<[(Resource, Key)]>,
}

impl Catalog {
    /// Every served resource but the ignored ones.
    pub(crate) fn new(served: &[Resource]) -> Self {
        let resources: Vec<(Resource, Key)> = served
            .iter()
            .filter(|r| {
                !IGNORED
                    .iter()
                    .any(|(g, p)| r.info.group == *g && r.info.plural == *p)
            })
            .filter_map(|r| match Key::collection(&r.info.storage_resource, None) {
                Ok(k) => Some((r.clone(), k)),
                Err(e) => {
                    tracing::warn!(resource = %r.info.qualified_resource(), error = %e,
                        "garbage collector: cannot follow this resource");
                    None
                }
            })
            .collect();
        Self {
            resources: resources.into(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.resources.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Resource> {
        self.resources.get(i).map(|(r, _)| r)
    }

    /// Every resource with its collection key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Resource, &Key)> {
        self.resources
            .iter()
            .enumerate()
            .map(|(i, (r, k))| (i, r, k))
    }

    /// The resource an owner reference names: the one of that group, version and kind, else
    /// (another version of the same kind) the first of that group and kind. `None` when no
    /// served resource has that kind.
    pub(crate) fn resolve(&self, api_version: &str, kind: &str) -> Option<usize> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let same_kind = |r: &KindSpec| r.group == group && r.kind == kind;
        self.resources
            .iter()
            .position(|(r, _)| same_kind(&r.info) && r.info.version == version)
            .or_else(|| self.resources.iter().position(|(r, _)| same_kind(&r.info)))
    }
}

/// The path of `name` (in `namespace`) of `info`, for requests through the router; every
/// segment percent-encoded.
pub(crate) fn object_path(info: &KindSpec, namespace: Option<&str>, name: &str) -> String {
    let mut p = if info.group.is_empty() {
        format!("/api/{}", encode(&info.version))
    } else {
        format!("/apis/{}/{}", encode(&info.group), encode(&info.version))
    };
    if let Some(ns) = namespace.filter(|_| info.namespaced) {
        p.push_str("/namespaces/");
        p.push_str(&encode(ns));
    }
    p.push('/');
    p.push_str(&encode(&info.plural));
    p.push('/');
    p.push_str(&encode(name));
    p
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(info: KindSpec) -> Resource {
        Resource::new(info, Arc::new(listwatch_memstore::MemStore::new()))
    }

    #[test]
    fn owner_kinds_resolve_by_group_and_kind_and_paths_are_encoded() {
        let c = Catalog::new(&[
            res(KindSpec::new("", "v1", "events", "Event")),
            res(KindSpec::new("", "v1", "configmaps", "ConfigMap")),
            res(KindSpec::new("apps", "v1", "deployments", "Deployment")),
            res(KindSpec::new("", "v1", "nodes", "Node").namespaced(false)),
        ]);
        assert_eq!(c.len(), 3, "events are not followed");
        assert_eq!(c.resolve("v1", "Event"), None);
        let cm = c.resolve("v1", "ConfigMap").unwrap();
        assert_eq!(c.get(cm).unwrap().info.plural, "configmaps");
        let d = c.resolve("apps/v1beta1", "Deployment").unwrap();
        assert_eq!(c.get(d).unwrap().info.plural, "deployments");
        assert_eq!(c.resolve("extensions/v1beta1", "Deployment"), None);
        assert_eq!(c.resolve("", ""), None);
        assert_eq!(
            object_path(&c.get(d).unwrap().info, Some("n s"), "a:b/é"),
            "/apis/apps/v1/namespaces/n%20s/deployments/a%3Ab%2F%C3%A9"
        );
        let n = c.resolve("v1", "Node").unwrap();
        assert_eq!(
            object_path(&c.get(n).unwrap().info, Some("ignored"), "n1"),
            "/api/v1/nodes/n1"
        );
    }
}
