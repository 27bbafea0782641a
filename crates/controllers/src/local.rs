//! In-process informers over a served resource's storage (its cacher), for the controllers
//! of this crate that watch built-in kinds (`service_ips`, `kubernetes_service`,
//! `namespace_defaults`).
//!
//! Invariant: the informer reads through the resource's own storage, never over HTTP; its
//! watch has no idle deadline (a storage watch never times out by itself).

use std::sync::Arc;

use listwatch_api::Object;
use listwatch_cacher::StorageListerWatcher;
use listwatch_endpoints::Resource;
use listwatch_runtime::{Informer, InformerConfig};
use listwatch_storage::Key;

/// An informer over every object of `res` (all namespaces).
pub fn informer(res: &Resource) -> Option<Informer<Object>> {
    let key = Key::collection(&res.info.storage_resource, None).ok()?;
    let lw = StorageListerWatcher::new(Arc::clone(&res.storage), key);
    Some(Informer::spawn(
        lw,
        InformerConfig {
            reflector: StorageListerWatcher::reflector_config(listwatch_runtime::Config::default()),
            ..InformerConfig::default()
        },
    ))
}

/// The served resource `group`/`plural`, if any.
pub fn find<'a>(resources: &'a [Resource], group: &str, plural: &str) -> Option<&'a Resource> {
    resources
        .iter()
        .find(|r| r.info.group == group && r.info.plural == plural)
}

/// The manager the API server's own bootstrap writes are recorded under (upstream's
/// loopback client of kube-apiserver).
pub const APISERVER_MANAGER: &str = "kube-apiserver";

/// Makes `name` in `namespace` of `res` hold `desired`'s values at `fields` (top-level
/// keys): creates it from `desired` when missing, else rewrites those fields when they
/// differ (a conditional update, recorded under `manager`). `Ok(true)` when it wrote.
pub async fn ensure(
    res: &Resource,
    namespace: &str,
    name: &str,
    desired: &serde_json::Value,
    fields: &[&str],
    manager: &str,
) -> Result<bool, String> {
    use listwatch_registry::{CreateOptions, Store};
    use listwatch_storage::Updated;
    use serde_json::Value;

    let store = Store::new(Arc::clone(&res.info), Arc::clone(&res.storage));
    let current = store
        .get(Some(namespace), name)
        .await
        .map_err(|e| e.to_string())?;
    let Some(current) = current else {
        let Value::Object(map) = desired.clone() else {
            return Err("not an object".into());
        };
        return match store
            .create(Some(namespace), map, &CreateOptions::by(manager))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_already_exists() => Ok(false),
            Err(e) => Err(e.to_string()),
        };
    };
    let cur = current.to_value().map_err(|e| e.to_string())?;
    if fields.iter().all(|f| cur.get(*f) == desired.get(*f)) {
        return Ok(false);
    }
    let key = Key::object(&res.info.storage_resource, Some(namespace), name)
        .map_err(|e| e.to_string())?;
    let info = Arc::clone(&res.info);
    let catalog = listwatch_schema::Catalog::builtin();
    let internal = |e: String| listwatch_storage::Error::internal(e);
    let mut step = |cur: Option<&listwatch_api::Object>| -> listwatch_storage::Result<Updated> {
        let cur = cur.ok_or_else(|| key.not_found())?;
        let old = cur.to_value().map_err(|e| internal(e.to_string()))?;
        let mut v = old.clone();
        for f in fields {
            match desired.get(*f) {
                Some(d) => v[*f] = d.clone(),
                None => {
                    if let Some(m) = v.as_object_mut() {
                        m.remove(*f);
                    }
                }
            }
        }
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        listwatch_registry::fieldmanager::FieldManager::new(&info, "", &catalog).update(
            Some(&old),
            &mut v,
            manager,
        );
        listwatch_api::Object::from_value(v, &info.selectable_fields)
            .map(Updated::from)
            .map_err(|e| internal(e.to_string()))
    };
    res.storage
        .guaranteed_update(&key, None, false, &mut step, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}
