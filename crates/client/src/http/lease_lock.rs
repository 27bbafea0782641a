//! [`HttpLeaseLock`]: the leader election's [`LeaseLock`] over HTTP, a
//! `coordination.k8s.io/v1` Lease read and written through an [`HttpClient`] (the election
//! itself is the runtime's, [`listwatch_runtime::leaderelection`]).
//!
//! Invariant: every write is conditional (a create that fails when the Lease exists, a
//! replace naming the `resourceVersion` read), which the election's safety rests on.

use async_trait::async_trait;
use listwatch_runtime::leaderelection::{LeaseLock, LeaseRecord, LeaseState, lease_state};
use serde_json::{Value, json};

use super::HttpClient;
use crate::{Error, Result};

/// A [`LeaseLock`] over HTTP: the Lease `namespace/name` of any Kubernetes-compatible
/// server, through an [`HttpClient`].
#[derive(Debug, Clone)]
pub struct HttpLeaseLock {
    client: HttpClient,
    namespace: String,
    name: String,
}

impl HttpLeaseLock {
    /// The lock on Lease `namespace/name`; both must be DNS-1123 subdomains.
    pub fn new(client: HttpClient, namespace: &str, name: &str) -> Result<Self> {
        for (what, v) in [("namespace", namespace), ("name", name)] {
            let ok = !v.is_empty()
                && v.len() <= 253
                && v.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !ok {
                return Err(Error::Request(format!(
                    "lease {what} {v:?} is not a DNS-1123 subdomain"
                )));
            }
        }
        Ok(Self {
            client,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    fn collection(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        )
    }

    fn path(&self) -> String {
        format!("{}/{}", self.collection(), self.name)
    }

    fn body(&self, record: &LeaseRecord, resource_version: Option<&str>) -> Value {
        let mut meta = json!({"name": self.name, "namespace": self.namespace});
        if let Some(rv) = resource_version {
            meta["resourceVersion"] = json!(rv);
        }
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": record.to_spec(),
        })
    }
}

#[async_trait]
impl LeaseLock for HttpLeaseLock {
    async fn get(&self) -> Result<Option<LeaseState>> {
        match self.client.get(&self.path()).await? {
            Some(v) => lease_state(&v).map(Some),
            None => Ok(None),
        }
    }

    async fn create(&self, record: &LeaseRecord) -> Result<LeaseState> {
        let v = self
            .client
            .create(&self.collection(), &self.body(record, None))
            .await?;
        lease_state(&v)
    }

    async fn update(&self, record: &LeaseRecord, resource_version: &str) -> Result<LeaseState> {
        let v = self
            .client
            .replace(&self.path(), &self.body(record, Some(resource_version)))
            .await?;
        lease_state(&v)
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
