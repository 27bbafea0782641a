//! Fault injection for tests (feature `fault-injection`, which no production build enables):
//! makes a cacher's watch cache miss the backend's events for chosen objects, so that the
//! cache's state disagrees with the backend's as a lost event would leave it — an object
//! created meanwhile is missing from the cache, an object updated meanwhile keeps its old
//! resource version there, one deleted meanwhile stays. The dispatcher does not see the
//! missed events either.
//!
//! Set in process with [`Cacher::set_faults`](crate::Cacher::set_faults), or for a whole
//! process (the binary under test) with the environment variable
//! `LISTWATCH_FAULT_CACHE_MISS_EVENTS`: comma-separated `resource/namespace/name` (or
//! `resource/name` for a cluster-scoped object), read when each cacher starts. Nothing in the
//! API reaches either.
//!
//! Invariant: with no fault set, the feeder applies every event as without the feature.

use std::sync::Mutex;

use listwatch_api::Object;

/// The environment variable read by every cacher at its start (see the module docs).
pub const ENV: &str = "LISTWATCH_FAULT_CACHE_MISS_EVENTS";

/// One object whose events the cache misses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissEvents {
    /// Its namespace (`None`: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl MissEvents {
    /// The object `namespace/name` (or `name` when `namespace` is `None`).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn matches(&self, o: &Object) -> bool {
        o.name() == self.name && o.namespace() == self.namespace.as_deref()
    }
}

/// The faults of one cacher.
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<Vec<MissEvents>>);

impl Faults {
    /// The faults `ENV` names for `resource`.
    pub(crate) fn from_env(resource: &str) -> Self {
        let faults = std::env::var(ENV)
            .map(|v| parse(&v, resource))
            .unwrap_or_default();
        if !faults.is_empty() {
            tracing::warn!(
                resource,
                ?faults,
                "fault injection: the watch cache will miss these objects' events"
            );
        }
        Self(Mutex::new(faults))
    }

    pub(crate) fn set(&self, faults: Vec<MissEvents>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = faults;
    }

    /// Whether the cache is to miss this event of `o`.
    pub(crate) fn misses(&self, o: &Object) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|f| f.matches(o))
    }
}

fn parse(value: &str, resource: &str) -> Vec<MissEvents> {
    value
        .split(',')
        .filter_map(|item| {
            let mut parts = item.trim().split('/');
            let (r, first, second) = (parts.next()?, parts.next()?, parts.next());
            if r != resource || parts.next().is_some() {
                return None;
            }
            Some(match second {
                Some(name) => MissEvents::new(Some(first), name),
                None => MissEvents::new(None, first),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_objects_of_one_resource() {
        let got = parse(
            "configmaps/ns/a, namespaces/b,pods/x/y,configmaps/c/d/e",
            "configmaps",
        );
        assert_eq!(got, vec![MissEvents::new(Some("ns"), "a")]);
        assert_eq!(
            parse("configmaps/ns/a,namespaces/b", "namespaces"),
            vec![MissEvents::new(None, "b")]
        );
    }
}
