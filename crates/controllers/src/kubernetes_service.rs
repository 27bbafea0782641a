//! The `kubernetes` Service of `default`, with its Endpoints and EndpointSlice pointing at
//! this server, as upstream's apiserver keeps them (pkg/controlplane/controller/
//! kubernetesservice and the endpoint reconciler with its EndpointSlice adapter): created at
//! start and put back every [`INTERVAL`] when deleted or changed.
//!
//! - Service: labels `component: apiserver`, `provider: kubernetes`; one port `https` 443/TCP
//!   whose `targetPort` is the server's own port; the range's first address as cluster IP;
//! - Endpoints: the advertised address and port `https`, labelled
//!   `endpointslice.kubernetes.io/skip-mirror: "true"` as upstream;
//! - EndpointSlice `kubernetes`: `kubernetes.io/service-name: kubernetes`, the address
//!   ready, the same port.
//!
//! All written through the registry's [`Store`](listwatch_registry::Store) (created) or a
//! conditional update (reset), as manager `kube-apiserver`. Runs as a singleton: with
//! several replicas only the leader's address is advertised (upstream's lease reconciler
//! lists every apiserver's; not done here).
//!
//! Invariant: each round reads fresh and writes only what differs, so a cut round or a
//! successor redoing it is harmless.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use listwatch_endpoints::Resource;
use serde_json::{Value, json};

use crate::local::{APISERVER_MANAGER, ensure, find};

/// How often the objects are checked (upstream's `EndpointInterval`, 10 s).
pub const INTERVAL: Duration = Duration::from_secs(10);

/// What the `kubernetes` Service advertises.
#[derive(Debug, Clone)]
pub struct Advertised {
    /// The Service's cluster IP (the range's first address).
    pub cluster_ip: IpAddr,
    /// The address and port clients reach this server at.
    pub endpoint: SocketAddr,
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv6() { "IPv6" } else { "IPv4" }
}

/// The Service as upstream's controller creates it.
pub fn service(a: &Advertised) -> Value {
    let ip = a.cluster_ip.to_string();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": ip, "clusterIPs": [ip],
            "ipFamilies": [family(a.cluster_ip)], "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                "targetPort": a.endpoint.port()}],
        },
    })
}

/// The Endpoints as upstream's reconciler writes them.
pub fn endpoints(a: &Advertised) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{
            "addresses": [{"ip": a.endpoint.ip().to_string()}],
            "ports": [{"name": "https", "port": a.endpoint.port(), "protocol": "TCP"}],
        }],
    })
}

/// The EndpointSlice as upstream's adapter derives it from the Endpoints.
pub fn endpoint_slice(a: &Advertised) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": family(a.endpoint.ip()),
        "endpoints": [{"addresses": [a.endpoint.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": a.endpoint.port(), "protocol": "TCP"}],
    })
}

/// One round: each object created when missing, reset when it differs.
pub async fn reconcile(resources: &[Resource], a: &Advertised) -> Result<(), String> {
    if let Some(svc) = find(resources, "", "services") {
        // Only the port and type are reset, as upstream (the rest is the allocator's and
        // the user's).
        let desired = service(a);
        let current = listwatch_registry::Store::new(
            std::sync::Arc::clone(&svc.info),
            std::sync::Arc::clone(&svc.storage),
        )
        .get(Some("default"), "kubernetes")
        .await
        .map_err(|e| e.to_string())?;
        let drifted = current
            .map(|c| c.to_value().map_err(|e| e.to_string()))
            .transpose()?
            .map(|c| {
                c.pointer("/spec/ports") != desired.pointer("/spec/ports")
                    || c.pointer("/spec/type") != desired.pointer("/spec/type")
            });
        match drifted {
            None => {
                ensure(
                    svc,
                    "default",
                    "kubernetes",
                    &desired,
                    &["spec"],
                    APISERVER_MANAGER,
                )
                .await?;
            }
            Some(true) => {
                let mut spec = current_spec(svc).await?;
                spec["ports"] = desired["spec"]["ports"].clone();
                spec["type"] = desired["spec"]["type"].clone();
                let mut want = desired.clone();
                want["spec"] = spec;
                ensure(
                    svc,
                    "default",
                    "kubernetes",
                    &want,
                    &["spec"],
                    APISERVER_MANAGER,
                )
                .await?;
            }
            Some(false) => {}
        }
    }
    if let Some(ep) = find(resources, "", "endpoints") {
        ensure(
            ep,
            "default",
            "kubernetes",
            &endpoints(a),
            &["subsets"],
            APISERVER_MANAGER,
        )
        .await?;
    }
    if let Some(slices) = find(resources, "discovery.k8s.io", "endpointslices") {
        ensure(
            slices,
            "default",
            "kubernetes",
            &endpoint_slice(a),
            &["addressType", "endpoints", "ports"],
            APISERVER_MANAGER,
        )
        .await?;
    }
    Ok(())
}

async fn current_spec(svc: &Resource) -> Result<Value, String> {
    let cur = listwatch_registry::Store::new(
        std::sync::Arc::clone(&svc.info),
        std::sync::Arc::clone(&svc.storage),
    )
    .get(Some("default"), "kubernetes")
    .await
    .map_err(|e| e.to_string())?
    .ok_or("the kubernetes Service went away")?;
    let v = cur.to_value().map_err(|e| e.to_string())?;
    Ok(v.get("spec").cloned().unwrap_or_else(|| json!({})))
}

/// Keeps the three objects in place: a round at once, then every [`INTERVAL`] (sooner,
/// after a second, when a round failed); marks `done` (its post-start hook) after the
/// first round that succeeded. Runs until dropped.
pub async fn run(
    api: listwatch_endpoints::Api,
    advertised: Advertised,
    done: Option<crate::poststart::Done>,
) {
    loop {
        let resources = api.resources();
        let wait = match reconcile(&resources, &advertised).await {
            Ok(()) => {
                if let Some(d) = &done {
                    d.mark();
                }
                INTERVAL
            }
            Err(e) => {
                tracing::warn!(error = %e, "the kubernetes Service: reconciling failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::time::sleep(wait).await;
    }
}
