//! The test environment through its users' eyes: kube-rs (a derived custom resource and a
//! `Controller`), listwatch's client, kubectl through the CLI mode's kubeconfig.
//!
//! `environment`: the environment from a library user (a kube-rs controller, CRDs, errors,
//! drop, two side by side); `cli`: the CLI mode (its kubeconfig, stdin and SIGTERM, refused
//! inputs); `credentials`: only the environment's own credential is served. This file holds
//! the example custom resource and the helpers they share (polling, a GET through a
//! kubeconfig).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod credentials;
mod environment;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use listwatch_testenv::{Error, TestEnv};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The example custom resource of docs/testing.md: a Widget asks for a ConfigMap holding its
/// colour; its status says whether the ConfigMap exists.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Widget", namespaced)]
#[kube(status = "WidgetStatus", shortname = "wd")]
#[kube(printcolumn = r#"{"name":"Color","type":"string","jsonPath":".spec.color"}"#)]
pub struct WidgetSpec {
    color: String,
}

/// What the controller observed of a Widget.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct WidgetStatus {
    ready: bool,
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GET `path` with the client a kubeconfig file describes (listwatch's), in a runtime of
/// its own: the body, or the error.
fn get_with_kubeconfig(kubeconfig: &Path, path: &str) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config =
            listwatch_client::HttpConfig::from_kubeconfig(kubeconfig).map_err(|e| e.to_string())?;
        let client = listwatch_client::HttpClient::new(config).map_err(|e| e.to_string())?;
        tokio::time::timeout(Duration::from_secs(30), client.get(path))
            .await
            .map_err(|_| "no answer within 30 s".to_owned())?
            .map(|v| format!("{v:?}"))
            .map_err(|e| e.to_string())
    })
}
