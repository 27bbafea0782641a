//! The `status` and `scale` subresources of [`Api`]: read and write an object's status
//! without touching its spec (what a controller reports), and a workload's replica count
//! through its `Scale` (what an autoscaler sets).
//!
//! Invariants: every call goes to `<object path>/status` or `<object path>/scale`, so the
//! server applies the subresource's own rules (a status write keeps the spec, a spec write
//! keeps the status; a `Scale` write changes only `spec.replicas`); `Scale` is decoded into
//! any serde type the caller picks (k8s-openapi's `autoscaling::v1::Scale`, or a
//! `serde_json::Value`), with the same 16 MiB body bound as every object.

use http::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::{Api, decode};
use super::client::{json_body, patch_request};
use super::patch::{Patch, PatchParams};
use crate::{Resource, Result};

impl<K: Resource + DeserializeOwned> Api<K> {
    /// The object `name` read through its `status` subresource.
    pub async fn get_status(&self, name: &str) -> Result<K> {
        let path = self.subresource_path(name, "status")?;
        decode(&self.client().call(Method::GET, &path, "", None).await?)
    }

    /// Patches the status of `name` (only `status` changes; a spec in the patch is
    /// ignored by the server); the server's copy.
    ///
    /// ```no_run
    /// # async fn demo(deploys: listwatch_client::Api<k8s_openapi::api::apps::v1::Deployment>) -> listwatch_client::Result<()> {
    /// use listwatch_client::{Patch, PatchParams};
    /// let status = serde_json::json!({"status": {"observedGeneration": 3}});
    /// deploys.patch_status("web", &Patch::Merge(&status), &PatchParams::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn patch_status<P: Serialize>(
        &self,
        name: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<K> {
        let path = self.subresource_path(name, "status")?;
        let (query, body) = patch_request(patch, params)?;
        decode(
            &self
                .client()
                .call(Method::PATCH, &path, &query, Some(body))
                .await?,
        )
    }

    /// The `Scale` of `name` (`autoscaling/v1`), as `S`.
    ///
    /// ```no_run
    /// # async fn demo(deploys: listwatch_client::Api<k8s_openapi::api::apps::v1::Deployment>) -> listwatch_client::Result<()> {
    /// use k8s_openapi::api::autoscaling::v1::Scale;
    /// use listwatch_client::{Patch, PatchParams};
    /// let scale: Scale = deploys.get_scale("web").await?;
    /// let more = serde_json::json!({"spec": {"replicas": 5}});
    /// let scale: Scale = deploys.patch_scale("web", &Patch::Merge(&more), &PatchParams::default()).await?;
    /// # let _ = scale; Ok(()) }
    /// ```
    pub async fn get_scale<S: DeserializeOwned>(&self, name: &str) -> Result<S> {
        let path = self.subresource_path(name, "scale")?;
        decode(&self.client().call(Method::GET, &path, "", None).await?)
    }

    /// Patches the `Scale` of `name`; the server's `Scale`, as `S`.
    pub async fn patch_scale<S: DeserializeOwned, P: Serialize>(
        &self,
        name: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<S> {
        let path = self.subresource_path(name, "scale")?;
        let (query, body) = patch_request(patch, params)?;
        decode(
            &self
                .client()
                .call(Method::PATCH, &path, &query, Some(body))
                .await?,
        )
    }

    /// Replaces the `Scale` of `name` with `scale` (its `metadata.resourceVersion`, when
    /// set, is the precondition); the server's `Scale`, as `S`.
    pub async fn replace_scale<S: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        scale: &S,
    ) -> Result<S> {
        let path = self.subresource_path(name, "scale")?;
        decode(
            &self
                .client()
                .call(Method::PUT, &path, "", Some(json_body(scale)?))
                .await?,
        )
    }
}

impl<K: Resource + Serialize + DeserializeOwned> Api<K> {
    /// Replaces the status of `name` with `object`'s (its `metadata.resourceVersion` is the
    /// precondition; its spec is ignored by the server); the server's copy.
    pub async fn replace_status(&self, name: &str, object: &K) -> Result<K> {
        self.refuse_metadata_only("replace the status of")?;
        let path = self.subresource_path(name, "status")?;
        decode(
            &self
                .client()
                .call(Method::PUT, &path, "", Some(json_body(object)?))
                .await?,
        )
    }
}
