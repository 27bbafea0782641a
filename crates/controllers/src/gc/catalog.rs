//! The resources the collector follows, and the mapping of an owner reference's
//! `apiVersion`/`kind` to one of them (upstream's REST mapper).

use std::sync::{Arc, RwLock};

use listwatch_endpoints::{KindSpec, Resource};
use listwatch_storage::Key;

/// Resources the collector never follows (upstream's `DefaultIgnoredResources`): events
/// churn, are never owners, and take no part in garbage collection.
const IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// The served resources the collector follows, by index, with the key of each one's whole
/// collection. It changes as the served kinds do ([`Catalog::apply`]): a kind added gets the
/// next index, a kind no longer served leaves its index empty, so an index names one kind
/// for the collector's whole run (work-queue items carry it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Catalog {
    resources: Arc<RwLock<Vec<Slot>>>,
}

/// One index of the catalog: a followed resource with its collection key, or `None` once
/// it is no longer served.
type Slot = Option<(Resource, Key)>;

/// What [`Catalog::apply`] changed: the indexes followed from now on, and those dropped.
#[derive(Debug, Default)]
pub(crate) struct Changed {
    pub(crate) added: Vec<(usize, Resource, Key)>,
    pub(crate) removed: Vec<usize>,
}

/// Whether the collector follows `r`: as upstream's `GetDeletableResources`, a resource
/// serving `list`, `watch` and `delete` (not the computed, read-only `componentstatuses`),
/// upstream's `DefaultIgnoredResources` aside.
fn followed(r: &Resource) -> bool {
    ["list", "watch", "delete"]
        .iter()
        .all(|verb| r.info.serves_verb(verb))
        && !IGNORED
            .iter()
            .any(|(g, p)| r.info.group == *g && r.info.plural == *p)
}

/// The identity of a served resource across kind-set changes.
fn same(a: &KindSpec, b: &KindSpec) -> bool {
    a.group == b.group && a.version == b.version && a.plural == b.plural
}

impl Catalog {
    /// Every served resource but the ignored ones.
    #[cfg(test)]
    pub(crate) fn new(served: &[Resource]) -> Self {
        let c = Self::default();
        c.apply(served);
        c
    }

    /// Makes `served` (the whole set of served resources) the followed set: resources new to
    /// it are appended, those no longer in it leave their index empty.
    pub(crate) fn apply(&self, served: &[Resource]) -> Changed {
        let mut changed = Changed::default();
        let mut slots = self
            .resources
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some((r, _)) = slot
                && !served.iter().any(|s| same(&s.info, &r.info))
            {
                *slot = None;
                changed.removed.push(i);
            }
        }
        for r in served.iter().filter(|r| followed(r)) {
            if slots.iter().flatten().any(|(f, _)| same(&f.info, &r.info)) {
                continue;
            }
            match Key::collection(&r.info.storage_resource, None) {
                Ok(k) => {
                    changed.added.push((slots.len(), r.clone(), k.clone()));
                    slots.push(Some((r.clone(), k)));
                }
                Err(e) => {
                    tracing::warn!(resource = %r.info.qualified_resource(), error = %e,
                        "garbage collector: cannot follow this resource");
                }
            }
        }
        changed
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Slot>> {
        self.resources
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many resources are followed.
    pub(crate) fn len(&self) -> usize {
        self.read().iter().flatten().count()
    }

    /// The resource of index `i`, while it is followed.
    pub(crate) fn get(&self, i: usize) -> Option<Resource> {
        self.read()
            .get(i)
            .and_then(|s| s.as_ref())
            .map(|(r, _)| r.clone())
    }

    /// The resource an owner reference names: the one of that group, version and kind, else
    /// (another version of the same kind) the first of that group and kind. `None` when no
    /// followed resource has that kind.
    pub(crate) fn resolve(&self, api_version: &str, kind: &str) -> Option<usize> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let same_kind = |r: &KindSpec| r.group == group && r.kind == kind;
        let slots = self.read();
        let info = |s: &Slot| s.as_ref().map(|(r, _)| Arc::clone(&r.info));
        slots
            .iter()
            .position(|s| info(s).is_some_and(|i| same_kind(&i) && i.version == version))
            .or_else(|| {
                slots
                    .iter()
                    .position(|s| info(s).is_some_and(|i| same_kind(&i)))
            })
    }
}

/// The path of `name` (in `namespace`) of `info`, as the API serves it (what the collector's
/// errors name its calls by); every segment percent-encoded.
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
            res(
                KindSpec::new("", "v1", "componentstatuses", "ComponentStatus")
                    .namespaced(false)
                    .only_verbs(&["get", "list"]),
            ),
        ]);
        assert_eq!(c.len(), 3, "events and read-only kinds are not followed");
        assert_eq!(c.resolve("v1", "Event"), None);
        assert_eq!(c.resolve("v1", "ComponentStatus"), None);
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

    /// A kind added gets the next index, a kind removed leaves its index empty (never reused
    /// in a run), and applying the same set again changes nothing.
    #[test]
    fn the_catalog_follows_the_served_set_as_it_changes() {
        let cm = res(KindSpec::new("", "v1", "configmaps", "ConfigMap"));
        let w = res(KindSpec::new("example.com", "v1", "widgets", "Widget"));
        let c = Catalog::new(std::slice::from_ref(&cm));
        assert_eq!(c.resolve("example.com/v1", "Widget"), None);
        let added = c.apply(&[cm.clone(), w.clone()]);
        assert_eq!(added.added.iter().map(|a| a.0).collect::<Vec<_>>(), [1]);
        assert!(added.removed.is_empty());
        assert_eq!(c.resolve("example.com/v1", "Widget"), Some(1));
        let again = c.apply(&[cm.clone(), w.clone()]);
        assert!(again.added.is_empty() && again.removed.is_empty());
        let removed = c.apply(std::slice::from_ref(&w));
        assert_eq!(removed.removed, [0]);
        assert!(c.get(0).is_none());
        assert_eq!(c.resolve("v1", "ConfigMap"), None);
        assert_eq!(c.len(), 1);
        let back = c.apply(&[cm, w]);
        assert_eq!(back.added.iter().map(|a| a.0).collect::<Vec<_>>(), [2]);
        assert_eq!(c.resolve("v1", "ConfigMap"), Some(2));
    }
}
