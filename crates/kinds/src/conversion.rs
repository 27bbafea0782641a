//! [`Conversion`]: how one served version of a kind reads and writes the objects of another
//! version's storage (upstream's conversion between a served version and the storage
//! version, through the internal type).
//!
//! Two kinds of version share a storage here:
//! - the versions of a custom resource with the `None` strategy ([`ApiVersionOnly`]: the
//!   objects are the same, only `apiVersion` differs);
//! - built-in kinds served in two groups from one storage (`events.k8s.io/v1` Events over
//!   `v1` Events: [`crate::builtin::events::event::EventsV1`]), whose fields are renamed,
//!   or in two versions of one group (`autoscaling/v1` autoscalers over `autoscaling/v2`:
//!   [`crate::builtin::autoscaling::v1::HpaV1`]), whose fields are converted.
//!
//! A [`KindSpec`](crate::KindSpec) with a conversion is served over the storage of the
//! first spec with the same `storage_resource` (the storage version's); the wrapper that
//! applies it lives with the storage (`listwatch_controllers::crd::versions::Versioned`).
//!
//! Invariants: a conversion is pure and bounded by the object's size; `to_stored` after
//! `to_served` gives back the stored object (field for field, for the fields both
//! versions have); every field selector label the served version accepts maps to one the
//! storage version's objects are indexed by ([`Conversion::stored_field`]).

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Conversion between a served version and its storage version.
pub trait Conversion: std::fmt::Debug + Send + Sync + 'static {
    /// The served version's `apiVersion`, e.g. `events.k8s.io/v1`.
    fn served(&self) -> &str;

    /// The storage version's `apiVersion`, e.g. `v1`.
    fn stored(&self) -> &str;

    /// Rewrites a stored object (JSON object) as the served version shows it, `apiVersion`
    /// included.
    fn to_served(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.served()));
    }

    /// Rewrites an object of the served version as it is stored, `apiVersion` included.
    fn to_stored(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.stored()));
    }

    /// The storage version's name of a field selector label of the served version (the
    /// same name by default).
    fn stored_field<'a>(&self, field: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(field)
    }
}

/// The `None` conversion of a custom resource's versions: only `apiVersion` changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionOnly {
    stored: String,
    served: String,
}

impl ApiVersionOnly {
    /// Between the `stored` and the `served` `apiVersion`.
    pub fn new(stored: &str, served: &str) -> Self {
        Self {
            stored: stored.to_owned(),
            served: served.to_owned(),
        }
    }
}

impl Conversion for ApiVersionOnly {
    fn served(&self) -> &str {
        &self.served
    }

    fn stored(&self) -> &str {
        &self.stored
    }
}

/// Renames the top-level fields of `obj` by `pairs` (`(from, to)`), leaving a `to` already
/// present alone when `from` is absent. A `from` and its `to` both present: `from` wins.
pub(crate) fn rename(obj: &mut Map<String, Value>, pairs: &[(&str, &str)]) {
    for (from, to) in pairs {
        if let Some(v) = obj.remove(*from) {
            obj.insert((*to).to_owned(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_version_only_changes_the_api_version() {
        let c = ApiVersionOnly::new("example.com/v1", "example.com/v1beta1");
        let mut o = json!({"apiVersion": "example.com/v1", "spec": {"a": 1}});
        let m = o.as_object_mut().unwrap();
        c.to_served(m);
        assert_eq!(
            o,
            json!({"apiVersion": "example.com/v1beta1", "spec": {"a": 1}})
        );
        c.to_stored(o.as_object_mut().unwrap());
        assert_eq!(o["apiVersion"], "example.com/v1");
        assert_eq!(c.stored_field("spec.a"), "spec.a");
    }
}
