//! Default classes, as upstream's default-on admission plugins `DefaultStorageClass`
//! (plugin/pkg/admission/storage/storageclass/setdefault) and `DefaultIngressClass`
//! (plugin/pkg/admission/network/defaultingressclass):
//!
//! - a PersistentVolumeClaim created without `spec.storageClassName` (absent or `null`; an
//!   explicit `""` means "no class" and is kept) and without the legacy
//!   `volume.beta.kubernetes.io/storage-class` annotation gets the default StorageClass's
//!   name;
//! - an Ingress created without `spec.ingressClassName` and without the legacy
//!   `kubernetes.io/ingress.class` annotation gets the default IngressClass's name.
//!
//! A class is a default when its `storageclass.kubernetes.io/is-default-class` (or the
//! beta `storageclass.beta.kubernetes.io/is-default-class`) or
//! `ingressclass.kubernetes.io/is-default-class` annotation is `"true"`; of several
//! defaults, the newest (by `creationTimestamp`, then name) wins, as upstream since 1.28.
//!
//! The classes are read from in-process informers (upstream reads its listers), so a class
//! marked default an instant before a create may not be seen by it, as upstream.
//!
//! Invariants: admission reads only the informers' stores (no I/O); only creates are
//! changed, and only a field the client left out.

use listwatch_api::Object;
use listwatch_endpoints::Resource;
use listwatch_registry::ApiError;
use listwatch_registry::admission::{Admission, AdmissionRequest, MutationRequest, Operation};
use listwatch_runtime::Informer;
use serde_json::{Map, Value};

/// The storage class annotations that mark a default (GA, then beta).
const STORAGE_DEFAULT: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];
/// The legacy annotation naming a claim's class.
const STORAGE_LEGACY: &str = "volume.beta.kubernetes.io/storage-class";
/// The ingress class annotation that marks a default.
const INGRESS_DEFAULT: &str = "ingressclass.kubernetes.io/is-default-class";
/// The legacy annotation naming an ingress's class.
const INGRESS_LEGACY: &str = "kubernetes.io/ingress.class";

/// The `DefaultStorageClass` and `DefaultIngressClass` admission plugins.
pub struct DefaultClassAdmission {
    storage: Option<Informer<Object>>,
    ingress: Option<Informer<Object>>,
}

impl std::fmt::Debug for DefaultClassAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultClassAdmission")
            .field("storage_classes", &self.storage.is_some())
            .field("ingress_classes", &self.ingress.is_some())
            .finish()
    }
}

impl DefaultClassAdmission {
    /// Starts the informers over the served `storageclasses` and `ingressclasses` (each
    /// none when its kind is not served).
    pub fn start(resources: &[Resource]) -> Self {
        let informer = |group: &str, plural: &str| {
            crate::local::find(resources, group, plural).and_then(crate::local::informer)
        };
        Self {
            storage: informer("storage.k8s.io", "storageclasses"),
            ingress: informer("networking.k8s.io", "ingressclasses"),
        }
    }
}

/// The annotations of `obj`.
fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("annotations")?.as_object()
}

/// The name of the newest class marked default by one of `marks`, if any.
pub fn newest_default<'a>(
    classes: impl IntoIterator<Item = &'a Value>,
    marks: &[&str],
) -> Option<String> {
    classes
        .into_iter()
        .filter(|c| {
            annotations(c).is_some_and(|a| {
                marks
                    .iter()
                    .any(|m| a.get(*m).and_then(Value::as_str) == Some("true"))
            })
        })
        .filter_map(|c| {
            let name = c["metadata"]["name"].as_str()?;
            let created = c["metadata"]["creationTimestamp"].as_str().unwrap_or("");
            Some((created.to_owned(), name.to_owned()))
        })
        // RFC 3339 in UTC with second precision (as the server writes them) sorts as time.
        .max()
        .map(|(_, name)| name)
}

/// The newest default among an informer's objects.
fn default_of(informer: Option<&Informer<Object>>, marks: &[&str]) -> Option<String> {
    let values: Vec<Value> = informer?
        .store()
        .list()
        .iter()
        .filter_map(|o| o.to_value().ok())
        .collect();
    newest_default(&values, marks)
}

/// Whether `spec[field]` was left out (absent or `null`).
fn left_out(obj: &Value, field: &str) -> bool {
    obj.get("spec")
        .and_then(|s| s.get(field))
        .is_none_or(Value::is_null)
}

/// Sets `spec[field]` to `name` (the spec is made when missing).
fn set_spec(obj: &mut Value, field: &str, name: String) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if !spec.is_object() {
        return;
    }
    if let Some(spec) = spec.as_object_mut() {
        spec.insert(field.into(), Value::String(name));
    }
}

impl Admission for DefaultClassAdmission {
    fn mutate(&self, request: &MutationRequest<'_>, object: &mut Value) -> Result<(), ApiError> {
        if request.operation != Operation::Create {
            return Ok(());
        }
        let info = request.info;
        match (info.group.as_str(), info.plural.as_str()) {
            ("", "persistentvolumeclaims")
                if left_out(object, "storageClassName")
                    && annotations(object).is_none_or(|a| !a.contains_key(STORAGE_LEGACY)) =>
            {
                if let Some(name) = default_of(self.storage.as_ref(), &STORAGE_DEFAULT) {
                    set_spec(object, "storageClassName", name);
                }
            }
            ("networking.k8s.io", "ingresses")
                if left_out(object, "ingressClassName")
                    && annotations(object).is_none_or(|a| !a.contains_key(INGRESS_LEGACY)) =>
            {
                if let Some(name) = default_of(self.ingress.as_ref(), &[INGRESS_DEFAULT]) {
                    set_spec(object, "ingressClassName", name);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// These plugins only default.
    fn validate(&self, _request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: &str, mark: Option<(&str, &str)>) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some((k, v)) = mark {
            c["metadata"]["annotations"] = json!({k: v});
        }
        c
    }

    #[test]
    fn the_newest_marked_class_is_the_default() {
        let classes = [
            class(
                "old",
                "2026-01-01T00:00:00Z",
                Some((STORAGE_DEFAULT[0], "true")),
            ),
            class(
                "beta",
                "2026-02-01T00:00:00Z",
                Some((STORAGE_DEFAULT[1], "true")),
            ),
            class("newest-unmarked", "2026-03-01T00:00:00Z", None),
            class(
                "false",
                "2026-04-01T00:00:00Z",
                Some((STORAGE_DEFAULT[0], "false")),
            ),
        ];
        assert_eq!(
            newest_default(&classes, &STORAGE_DEFAULT).as_deref(),
            Some("beta")
        );
        assert_eq!(newest_default(&classes[2..], &STORAGE_DEFAULT), None);
        // Same second: the name decides, so the choice is stable.
        let tie = [
            class("a", "2026-01-01T00:00:00Z", Some((INGRESS_DEFAULT, "true"))),
            class("b", "2026-01-01T00:00:00Z", Some((INGRESS_DEFAULT, "true"))),
        ];
        assert_eq!(
            newest_default(&tie, &[INGRESS_DEFAULT]).as_deref(),
            Some("b")
        );
    }

    #[test]
    fn only_a_left_out_class_is_filled() {
        assert!(left_out(&json!({"spec": {}}), "storageClassName"));
        assert!(left_out(
            &json!({"spec": {"storageClassName": null}}),
            "storageClassName"
        ));
        assert!(left_out(&json!({}), "storageClassName"));
        assert!(!left_out(
            &json!({"spec": {"storageClassName": ""}}),
            "storageClassName"
        ));
        let mut obj = json!({"metadata": {"name": "c"}});
        set_spec(&mut obj, "storageClassName", "fast".into());
        assert_eq!(obj["spec"]["storageClassName"], "fast");
        let mut odd = json!({"spec": 3});
        set_spec(&mut odd, "storageClassName", "fast".into());
        assert_eq!(odd["spec"], 3);
    }
}
