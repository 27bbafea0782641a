//! `componentstatuses` (v1 ComponentStatus), computed on each read as upstream's
//! `pkg/registry/core/componentstatus` computes them: never stored, never written.
//!
//! What it owns: the [`Storage`] the binary installs for `componentstatuses` instead of a
//! backend's. A `get` or `list` probes, all at once:
//! - `scheduler` and `controller-manager`: `GET https://127.0.0.1:10259/healthz` and
//!   `:10257/healthz`, their certificates not verified (upstream's `InsecureSkipVerify`). The
//!   in-process controllers (garbage collector, namespaces, ...) are not reported as the
//!   controller manager: they are a part of one, and `Healthy` would hide that no
//!   kube-controller-manager runs; a real one on its default port is reported as upstream
//!   reports it.
//! - `etcd-N` for each `--etcd-servers` member (configuration order), when on etcd: the
//!   member's own Status through the server's etcd client (its TLS, its client certificate),
//!   healthy when it knows a leader and reports no alarm — what etcd's `/health` checks.
//!   On the embedded store nothing is listed for etcd: there is no etcd server, and the
//!   store's health is `/readyz`'s and `/livez`'s.
//!
//! Invariants: every probe ends within [`PROBE_TIMEOUT`] (an unreachable component is
//! listed, `Healthy` `"False"` with the probe's error); a probe's answer is read up to
//! [`MAX_BODY`] bytes; a `get` of any other name is `NotFound`; a `list` applies the request's
//! label and field selectors and is never paged; every write, and a watch, is refused (the
//! kind serves only `get` and `list`, so the HTTP layer answers 405 before reaching here).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::EtcdClient;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, Result, Stats, Storage,
    UpdateFn, ValidateDeleteFn, WatchStream,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one probe may take (upstream waits up to 20 s; a `kubectl get cs` should not).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a probe's answer read (upstream's prober reads 10 KiB of body).
pub(crate) const MAX_BODY: usize = 10 * 1024;

/// The kube-scheduler's and kube-controller-manager's default secure ports.
const LOCAL_COMPONENTS: [(&str, u16); 2] = [("controller-manager", 10257), ("scheduler", 10259)];

/// The computed `componentstatuses` storage.
pub(crate) struct ComponentStatuses {
    etcd: Option<EtcdClient>,
    fields: SelectableFields,
    tls: tokio_rustls::TlsConnector,
}

/// One component's probe outcome: healthy or not, the message (the answer's body) and the
/// error (why the probe failed).
struct Probe {
    healthy: bool,
    message: String,
    error: String,
}

impl ComponentStatuses {
    /// The statuses of the local components, and of `etcd`'s members when on etcd.
    pub(crate) fn new(
        etcd: Option<EtcdClient>,
        fields: SelectableFields,
    ) -> std::result::Result<Self, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(Self {
            etcd,
            fields,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Every component's status, sorted by name.
    async fn statuses(&self) -> Result<Vec<Object>> {
        let local = LOCAL_COMPONENTS.map(|(name, port)| async move {
            let probe = tokio::time::timeout(PROBE_TIMEOUT, self.healthz(port))
                .await
                .unwrap_or_else(|_| {
                    Probe::failed(format!(
                        "Get \"https://127.0.0.1:{port}/healthz\": no answer within {PROBE_TIMEOUT:?}"
                    ))
                });
            (name.to_owned(), probe)
        });
        let etcd = async {
            let Some(client) = &self.etcd else {
                return Vec::new();
            };
            // Each member's Status is bounded by the client's health timeout; this is a backstop.
            let members = tokio::time::timeout(PROBE_TIMEOUT * 2, client.member_health())
                .await
                .unwrap_or_default();
            members
                .into_iter()
                .enumerate()
                .map(|(i, (_, health))| {
                    let probe = match health {
                        Ok(()) => Probe {
                            healthy: true,
                            message: r#"{"health":"true"}"#.to_owned(),
                            error: String::new(),
                        },
                        Err(e) => Probe::failed(e),
                    };
                    (format!("etcd-{i}"), probe)
                })
                .collect::<Vec<_>>()
        };
        let (local, etcd) = futures::join!(futures::future::join_all(local), etcd);
        let mut all: Vec<(String, Probe)> = local.into_iter().chain(etcd).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter()
            .map(|(name, probe)| self.object(&name, probe))
            .collect()
    }

    fn object(&self, name: &str, probe: Probe) -> Result<Object> {
        let status = if probe.healthy { "True" } else { "False" };
        let mut condition = json!({"type": "Healthy", "status": status});
        // Both are `omitempty` upstream.
        for (field, text) in [("message", probe.message), ("error", probe.error)] {
            if !text.is_empty() {
                condition[field] = json!(text);
            }
        }
        let value = json!({
            "apiVersion": "v1",
            "kind": "ComponentStatus",
            "metadata": {"name": name},
            "conditions": [condition],
        });
        Object::from_value(value, &self.fields)
            .map_err(|e| Error::internal(format!("componentstatus {name}: {e}")))
    }

    /// `GET https://127.0.0.1:{port}/healthz`, unbounded in time (the caller bounds it).
    async fn healthz(&self, port: u16) -> Probe {
        let url = format!("https://127.0.0.1:{port}/healthz");
        match self.https_get(port).await {
            Ok((code, body)) if (200..400).contains(&code) => Probe {
                healthy: true,
                message: body,
                error: String::new(),
            },
            Ok((code, body)) => Probe {
                healthy: false,
                message: body,
                error: format!("Get \"{url}\": HTTP status {code}"),
            },
            Err(e) => Probe::failed(format!("Get \"{url}\": {e}")),
        }
    }

    /// The status code and (at most [`MAX_BODY`] bytes of) body of `/healthz` on `port`.
    async fn https_get(&self, port: u16) -> std::io::Result<(u16, String)> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("dial tcp 127.0.0.1:{port}: {e}"))
            })?;
        let host = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut tls = self.tls.connect(host, tcp).await?;
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: listwatch-apiserver\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await?;
        // Headers and body, bounded: the headers of a health answer are small.
        let limit = MAX_BODY + 16 * 1024;
        let mut answer = Vec::new();
        (&mut tls)
            .take(u64::try_from(limit).unwrap_or(u64::MAX))
            .read_to_end(&mut answer)
            .await?;
        parse_answer(&answer).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response")
        })
    }
}

/// An HTTP/1.x answer's status code and body (at most [`MAX_BODY`] bytes of it).
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(answer.get(..split)?).ok()?;
    let status_line = head.lines().next()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.parse::<u16>().ok()?;
    let body = answer.get(split + 4..).unwrap_or_default();
    let body = body.get(..MAX_BODY).unwrap_or(body);
    Some((code, String::from_utf8_lossy(body).into_owned()))
}

impl Probe {
    fn failed(error: String) -> Self {
        Self {
            healthy: false,
            message: String::new(),
            error,
        }
    }
}

fn read_only() -> Error {
    Error::bad_request("componentstatuses are computed on each read: they are never written")
}

#[async_trait]
impl Storage for ComponentStatuses {
    async fn create(&self, _: &Key, _: Object, _: Option<Duration>) -> Result<Object> {
        Err(read_only())
    }

    async fn get(&self, key: &Key, _: &GetOptions) -> Result<Option<Object>> {
        let Some(name) = key.name() else {
            return Ok(None);
        };
        let known = name.starts_with("etcd-")
            || LOCAL_COMPONENTS
                .iter()
                .any(|(component, _)| *component == name);
        if !known {
            return Ok(None);
        }
        Ok(self
            .statuses()
            .await?
            .into_iter()
            .find(|o| o.name() == name))
    }

    async fn list(&self, _: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let items = self
            .statuses()
            .await?
            .into_iter()
            .filter(|o| opts.predicate.matches(o))
            .collect();
        Ok(ObjectList {
            items,
            resource_version: 0,
            continue_token: None,
            remaining_item_count: None,
        })
    }

    async fn watch(&self, _: &Key, _: &ListOptions) -> Result<WatchStream> {
        Err(Error::bad_request("componentstatuses cannot be watched"))
    }

    async fn guaranteed_update(
        &self,
        _: &Key,
        _: Option<&Preconditions>,
        _: bool,
        _: &mut UpdateFn<'_>,
        _: Option<Object>,
    ) -> Result<Object> {
        Err(read_only())
    }

    async fn delete(
        &self,
        _: &Key,
        _: Option<&Preconditions>,
        _: &ValidateDeleteFn<'_>,
        _: Option<Object>,
    ) -> Result<Object> {
        Err(read_only())
    }

    async fn stats(&self, _: &Key) -> Result<Stats> {
        Ok(Stats::default())
    }

    async fn request_watch_progress(&self) -> Result<()> {
        Ok(())
    }

    async fn current_resource_version(&self) -> Result<u64> {
        Ok(0)
    }

    fn compacted_revision(&self) -> u64 {
        0
    }

    async fn readiness(&self) -> Result<()> {
        Ok(())
    }
}

/// Accepts any server certificate (upstream's `InsecureSkipVerify` for the local
/// components' health checks), still checking the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_parsed_and_its_body_bounded() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(parse_answer(ok), Some((200, "ok".to_owned())));
        let mut big = b"HTTP/1.1 500 Internal\r\n\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', MAX_BODY * 2));
        let (code, body) = parse_answer(&big).unwrap();
        assert_eq!((code, body.len()), (500, MAX_BODY));
        assert_eq!(parse_answer(b"garbage"), None);
        assert_eq!(parse_answer(b"SSH-2.0\r\n\r\n"), None);
    }
}
