//! Pod priority, as upstream's `Priority` admission plugin
//! (plugin/pkg/admission/priority) and the scheduling storage's start hook
//! (pkg/registry/scheduling/rest: `AddSystemPriorityClasses`):
//!
//! - at start, the system classes `system-node-critical` and `system-cluster-critical`
//!   are created unless they exist ([`bootstrap_system_classes`]);
//! - a pod's create resolves its `priorityClassName` into `spec.priority` and
//!   `spec.preemptionPolicy` (a pod without one takes the global default class, else
//!   priority 0 and `PreemptLowerPriority`); an unknown class, or a priority or policy in
//!   the body that differs from the class's, is upstream's 403;
//! - a class may be the global default only while no other class is ([`PriorityAdmission`]'s
//!   validation, a 403 as upstream's).
//!
//! The classes are read from an in-process informer over the `priorityclasses` storage (as
//! upstream reads its informer's lister), so a class created an instant before a pod that
//! names it may not be seen yet; the pod's create is then refused as upstream's would be
//! with the same lag. A pod update keeps the resolved fields (the pod strategy copies them
//! from the stored pod when the body omits them).
//!
//! Invariants: admission reads only the informer's store (no I/O, bounded by the stored
//! classes); the bootstrap never changes an existing class.

use std::sync::Arc;

use listwatch_api::Object;
use listwatch_endpoints::Resource;
use listwatch_kinds::builtin::scheduling::priorityclass::SYSTEM_PRIORITY_CLASSES;
use listwatch_registry::admission::{Admission, AdmissionRequest, MutationRequest, Operation};
use listwatch_registry::{ApiError, CreateOptions, Store, StoreError};
use listwatch_runtime::Informer;
use serde_json::{Value, json};

use crate::Error as ServerError;

const GROUP: &str = "scheduling.k8s.io";
const PLURAL: &str = "priorityclasses";

/// Upstream's `DefaultPriorityWhenNoDefaultClassExists`.
const NO_DEFAULT_PRIORITY: i64 = 0;

/// The part of a stored class [`PriorityAdmission::global_default`] looks at first.
#[derive(serde::Deserialize)]
struct Marked {
    #[serde(rename = "globalDefault", default)]
    global_default: Option<Value>,
}

/// Whether the stored class `o` is marked `globalDefault: true` (read without decoding the
/// rest of it into a tree).
fn marked_default(o: &Object) -> bool {
    serde_json::from_slice::<Marked>(o.stored_json())
        .is_ok_and(|m| m.global_default == Some(Value::Bool(true)))
}

/// The `Priority` admission plugin over an informer of the stored priority classes.
pub struct PriorityAdmission {
    /// The informer of `priorityclasses`; `None` when the kind is not served.
    classes: Option<Informer<Object>>,
}

impl std::fmt::Debug for PriorityAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorityAdmission")
            .field("served", &self.classes.is_some())
            .finish()
    }
}

impl PriorityAdmission {
    /// Starts the informer over the served `priorityclasses` (none when not served).
    pub fn start(resources: &[Resource]) -> Self {
        Self {
            classes: crate::local::find(resources, GROUP, PLURAL).and_then(crate::local::informer),
        }
    }

    /// The stored class `name`, as JSON.
    fn class(&self, name: &str) -> Option<Value> {
        let store = self.classes.as_ref()?.store();
        store.get_by_name(None, name)?.to_value().ok()
    }

    /// The global default class, if one is marked (the one with the lowest value when
    /// several are, as upstream's `getDefaultPriorityClass`).
    fn global_default(&self) -> Option<Value> {
        let store = self.classes.as_ref()?.store();
        store
            .list()
            .iter()
            // Only a marked class is decoded whole: every pod create without a class asks,
            // and decoding each class was most of this plugin's cost per create.
            .filter(|o| marked_default(o))
            .filter_map(|o| o.to_value().ok())
            .filter(|v| v["globalDefault"] == true)
            .min_by_key(|v| v["value"].as_i64().unwrap_or(0))
    }

    /// A pod's create: its class resolved into its priority and preemption policy.
    fn admit_pod(&self, info: &listwatch_kinds::KindSpec, pod: &mut Value) -> Result<(), ApiError> {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let class_name = spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let (priority, policy) = if class_name.is_empty() {
            match self.global_default() {
                Some(class) => {
                    if let Some(n) = class["metadata"]["name"].as_str() {
                        spec.insert("priorityClassName".into(), json!(n));
                    }
                    (
                        class["value"].as_i64().unwrap_or(0),
                        class["preemptionPolicy"].as_str().map(str::to_owned),
                    )
                }
                None => (NO_DEFAULT_PRIORITY, Some("PreemptLowerPriority".to_owned())),
            }
        } else {
            match self.class(&class_name) {
                Some(class) => (
                    class["value"].as_i64().unwrap_or(0),
                    class["preemptionPolicy"].as_str().map(str::to_owned),
                ),
                None => {
                    return Err(ApiError::forbidden(
                        info,
                        &name,
                        &format!("no PriorityClass with name {class_name} was found"),
                    ));
                }
            }
        };
        if let Some(given) = spec.get("priority").and_then(Value::as_i64)
            && given != priority
        {
            return Err(ApiError::forbidden(
                info,
                &name,
                &format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; \
                     priority admission controller computed {priority} from the given PriorityClass name"
                ),
            ));
        }
        spec.insert("priority".into(), json!(priority));
        if let Some(policy) = policy {
            if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
                && given != policy
            {
                return Err(ApiError::forbidden(
                    info,
                    &name,
                    &format!(
                        "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
                         priority admission controller computed {policy} from the given PriorityClass name"
                    ),
                ));
            }
            spec.insert("preemptionPolicy".into(), json!(policy));
        }
        Ok(())
    }
}

fn is(info: &listwatch_kinds::KindSpec, group: &str, plural: &str) -> bool {
    info.group == group && info.plural == plural
}

impl Admission for PriorityAdmission {
    fn mutate(&self, request: &MutationRequest<'_>, object: &mut Value) -> Result<(), ApiError> {
        if request.operation == Operation::Create && is(request.info, "", "pods") {
            return self.admit_pod(request.info, object);
        }
        Ok(())
    }

    fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !is(request.info, GROUP, PLURAL) || request.object["globalDefault"] != true {
            return Ok(());
        }
        let name = request.object["metadata"]["name"].as_str().unwrap_or("");
        if let Some(other) = self.global_default()
            && other["metadata"]["name"].as_str() != Some(name)
        {
            let other = other["metadata"]["name"].as_str().unwrap_or("");
            return Err(ApiError::forbidden(
                request.info,
                name,
                &format!(
                    "PriorityClass {other} is already marked as default. Only one default can exist"
                ),
            ));
        }
        Ok(())
    }
}

/// Creates the system priority classes that do not exist (an existing one is left as it
/// is), recorded under the API server's manager.
pub async fn bootstrap_system_classes(api: &listwatch_endpoints::Api) -> Result<(), ServerError> {
    let Some(res) = api
        .resources()
        .iter()
        .find(|r| is(&r.info, GROUP, PLURAL))
        .cloned()
    else {
        return Ok(());
    };
    let store = Store::new(Arc::clone(&res.info), Arc::clone(&res.storage));
    let opts = CreateOptions::by(listwatch_endpoints::SERVER_MANAGER);
    for (name, value, description) in SYSTEM_PRIORITY_CLASSES {
        let failed = |source| ServerError::BootstrapPriorityClass {
            name: name.to_owned(),
            source,
        };
        let Value::Object(obj) = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description})
        else {
            continue;
        };
        match store.create(None, obj, &opts).await {
            Ok(_) => tracing::info!(priority_class = name, "created"),
            Err(e) if e.is_already_exists() => {}
            Err(StoreError::Storage(e)) => return Err(failed(e)),
            Err(StoreError::Rejected(e)) => {
                return Err(failed(listwatch_storage::Error::internal(e.to_string())));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    /// A class is marked only by `globalDefault: true`, as the whole-object reading of the
    /// default's choice tells it (which still judges the marked ones).
    #[test]
    fn only_true_marks_a_class_as_the_global_default() {
        for (class, marked) in [
            (
                json!({"metadata": {"name": "a"}, "value": 1, "globalDefault": true}),
                true,
            ),
            (
                json!({"metadata": {"name": "b"}, "value": 1, "globalDefault": false}),
                false,
            ),
            (json!({"metadata": {"name": "c"}, "value": 1}), false),
            (
                json!({"metadata": {"name": "d"}, "globalDefault": "true"}),
                false,
            ),
            (
                json!({"metadata": {"name": "e"}, "globalDefault": null}),
                false,
            ),
        ] {
            let whole = class["globalDefault"] == true;
            let o = Object::from_value(class, &SelectableFields::default()).unwrap();
            assert_eq!(marked_default(&o), marked);
            assert_eq!(whole, marked);
        }
    }
}
