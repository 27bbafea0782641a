//! The connector under every [`HttpClient`](super::HttpClient): TCP (no Nagle, a connect
//! deadline, keepalive probes), an `http://` proxy tunnel when one is configured or named by
//! the environment, and with the `rustls` feature TLS (the configured CA or the system's
//! roots, a client certificate, `tls-server-name`, ALPN `h2` and `http/1.1`).
//!
//! Invariants: a connector is built from one [`HttpConfig`] and serves all its servers (so
//! they must all agree on the proxy); TLS material that does not parse is an error when the
//! client is built, never a connection that silently skips it.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

use super::{Connector, HttpConfig, env_proxy, proxy};
use crate::{Error, Result};

/// The TCP layer: no Nagle, a connect deadline, keepalive probes (see [`HttpConfig`]);
/// through the proxy when one is set.
fn proxied(config: &HttpConfig) -> Result<proxy::Connector> {
    let mut tcp = tcp_connector(config);
    tcp.enforce_http(false);
    Ok(proxy::Connector {
        tcp,
        proxy: match &config.proxy_url {
            Some(u) => Some(proxy::Proxy::parse(u, config.connect_timeout)?),
            None => match env_proxy_for(config)? {
                Some(u) => Some(
                    proxy::Proxy::parse(&u, config.connect_timeout)
                        .map_err(|e| Error::Config(format!("from the environment: {e}")))?,
                ),
                None => None,
            },
        },
    })
}

/// The proxy the environment names for the config's servers; every server must get the same
/// answer (one connector serves them all).
fn env_proxy_for(config: &HttpConfig) -> Result<Option<String>> {
    let env = env_proxy::EnvProxy::from_env();
    let mut answer: Option<Option<String>> = None;
    for url in config.server_urls()? {
        let this = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|server| env.proxy_for(&server));
        match &answer {
            None => answer = Some(this),
            Some(first) if *first == this => {}
            Some(_) => {
                return Err(Error::Config(format!(
                    "the environment's HTTPS_PROXY/HTTP_PROXY/NO_PROXY proxy some servers and \
                     not others ({url}); set proxy-url or make NO_PROXY name all or none"
                )));
            }
        }
    }
    Ok(answer.flatten())
}

fn tcp_connector(config: &HttpConfig) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    http.set_keepalive(config.tcp_keepalive);
    if let Some(idle) = config.tcp_keepalive {
        http.set_keepalive_interval(Some((idle / 3).max(Duration::from_secs(1))));
        http.set_keepalive_retries(Some(3));
    }
    http
}

#[cfg(not(feature = "rustls"))]
pub(crate) fn connector(config: &HttpConfig, https: bool) -> Result<Connector> {
    if https {
        return Err(Error::Config(
            "https:// needs the `rustls` feature of listwatch-client".into(),
        ));
    }
    proxied(config)
}

#[cfg(feature = "rustls")]
pub(crate) fn connector(config: &HttpConfig, https: bool) -> Result<Connector> {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let http = proxied(config)?;
    let tls_err = |e: &dyn std::fmt::Display| Error::Config(format!("tls: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| tls_err(&e))?)
                    .map_err(|e| tls_err(&e))?;
            }
        }
        None if https && !config.insecure_skip_tls_verify => {
            // client-go: no CA given means the system's roots.
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "system root CAs");
            }
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::Config(
                    "https:// without a CA bundle and no system root CAs found".into(),
                ));
            }
        }
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(&e))?;
    let builder = if config.insecure_skip_tls_verify {
        if config.ca_pem.is_some() {
            // client-go: "specifying a root certificates file with the insecure flag is not
            // allowed".
            return Err(Error::Config(
                "insecure-skip-tls-verify and a CA may not both be set".into(),
            ));
        }
        tracing::warn!("TLS: insecure-skip-tls-verify: the server's certificate is not checked");
        versions
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(super::insecure::SkipVerify(provider)))
    } else {
        versions.with_root_certificates(roots)
    };
    let tls = match &config.client_identity_pem {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_err(&e))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls_err(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_err(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|e| tls_err(&format!("tls-server-name {name:?}: {e}")))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    // ALPN offers h2 and http/1.1; the pool uses one multiplexed connection when the server
    // picks h2 (client-go does the same; plain http:// stays HTTP/1.1).
    Ok(builder.enable_all_versions().wrap_connector(http))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Uri;

    #[tokio::test]
    async fn connections_have_keepalive_probes_and_no_nagle() {
        use tower::ServiceExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let config = HttpConfig::new("http://127.0.0.1:1").unwrap();
        let conn = tcp_connector(&config).oneshot(uri.clone()).await.unwrap();
        let sock = socket2::SockRef::from(conn.inner());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
        assert!(sock.tcp_nodelay().unwrap());

        let off = config.tcp_keepalive(None);
        let conn = tcp_connector(&off).oneshot(uri).await.unwrap();
        assert!(!socket2::SockRef::from(conn.inner()).keepalive().unwrap());
    }
}
