//! [`finalizer`]: run cleanup before an object goes away (kube-runtime's `finalizer`,
//! controller-runtime's `controllerutil.AddFinalizer` pattern), for types whose metadata is
//! k8s-openapi's `ObjectMeta`: k8s-openapi's (feature `k8s-openapi`) and kube-rs's derived
//! custom resources (feature `kube`).
//!
//! Invariants:
//! - an object not being deleted gets the finalizer *before* the reconcile sees it
//!   ([`Event::Apply`] runs only on an object that carries it), so no object the reconcile
//!   acted on can vanish without [`Event::Cleanup`];
//! - the finalizer is removed only after `Cleanup` succeeded; an error leaves it, and the
//!   controller's backoff retries;
//! - both writes are JSON patches with a `test` of the list they change, so a concurrent
//!   change of the finalizers fails the patch (409/422) instead of clobbering another
//!   controller's finalizer;
//! - an object being deleted without this finalizer is left alone (its cleanup was done).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::{Action, Api, HasMetadata, Patch, PatchParams, Resource};

/// What the reconcile is asked to do.
#[derive(Debug, Clone)]
pub enum Event<K> {
    /// Bring the world in line with the object (it carries the finalizer).
    Apply(Arc<K>),
    /// The object is being deleted: clean up; the finalizer is removed once this succeeds.
    Cleanup(Arc<K>),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E> {
    /// The reconcile's own error (on `Apply` or `Cleanup`).
    #[error("reconcile failed: {0}")]
    Reconcile(#[source] E),
    /// Adding the finalizer failed.
    #[error("adding finalizer failed: {0}")]
    Add(#[source] crate::Error),
    /// Removing the finalizer failed.
    #[error("removing finalizer failed: {0}")]
    Remove(#[source] crate::Error),
    /// The object has no name.
    #[error("the object has no name")]
    Unnamed,
}

/// Runs `reconcile` for `object` behind the finalizer `name` (see the module doc).
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use listwatch_client::finalizer::{Event, finalizer};
/// use listwatch_client::{Action, Api};
///
/// # async fn demo(cms: Api<ConfigMap>, cm: Arc<ConfigMap>) {
/// let outcome = finalizer(&cms, "example.com/cleanup", cm, |event| async move {
///     match event {
///         Event::Apply(cm) => { /* create what cm asks for */ let _ = cm; }
///         Event::Cleanup(cm) => { /* delete what was created for cm */ let _ = cm; }
///     }
///     Ok::<_, std::io::Error>(Action::Done)
/// })
/// .await;
/// # let _ = outcome;
/// # }
/// ```
pub async fn finalizer<K, F, Fut, E>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + HasMetadata<Metadata = ObjectMeta> + Serialize + DeserializeOwned,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    let meta = HasMetadata::metadata(&*object);
    let object_name = meta.name.clone().ok_or(FinalizerError::Unnamed)?;
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let position = finalizers.iter().position(|f| f == name);
    let deleting = meta.deletion_timestamp.is_some();
    match (deleting, position) {
        (false, Some(_)) => reconcile(Event::Apply(object))
            .await
            .map_err(FinalizerError::Reconcile),
        (false, None) => {
            // Add it first; the update that follows wakes the reconcile with Apply.
            let patch = if meta.finalizers.is_none() {
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": [name]},
                ])
            } else {
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": name},
                ])
            };
            api.patch(&object_name, &Patch::Json(patch), &PatchParams::default())
                .await
                .map_err(FinalizerError::Add)?;
            Ok(Action::Done)
        }
        (true, Some(i)) => {
            let action = reconcile(Event::Cleanup(object))
                .await
                .map_err(FinalizerError::Reconcile)?;
            let path = format!("/metadata/finalizers/{i}");
            let patch = json!([
                {"op": "test", "path": path, "value": name},
                {"op": "remove", "path": path},
            ]);
            match api
                .patch(&object_name, &Patch::Json(patch), &PatchParams::default())
                .await
            {
                Ok(_) => Ok(action),
                // Gone already: the last finalizer was ours and the server deleted it.
                Err(e) if e.code() == Some(404) => Ok(action),
                Err(e) => Err(FinalizerError::Remove(e)),
            }
        }
        (true, None) => Ok(Action::Done),
    }
}
