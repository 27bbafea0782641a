//! etcd over TLS with client-certificate authentication (`--client-cert-auth`): the client
//! with the CA and a client certificate reads and writes; without its certificate, or
//! trusting another CA, it cannot; an `https://` endpoint without TLS settings is refused,
//! and so is an `http://` endpoint with them (a bare `host:port` is https then).
//! Certificates are made with rcgen; etcd is Debian's, as in every etcd test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::{EtcdClient, EtcdConfig, EtcdStore, EtcdTls};
use listwatch_storage::{GetOptions, Key, Storage};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, SanType,
};

struct Pem {
    cert: String,
    key: String,
}

fn ca(name: &str) -> (Pem, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).unwrap();
    let pem = Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    (pem, Issuer::new(p, key))
}

fn leaf(issuer: &Issuer<'_, KeyPair>, cn: &str, server: bool) -> Pem {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let cert = p.signed_by(&key, issuer).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Etcd(Child);

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_etcd(dir: &Path, client_port: u16) -> Etcd {
    let bin = std::env::var("LISTWATCH_ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned());
    let url = format!("https://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{}", free_port());
    let p = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    let child = Command::new(&bin)
        .args(["--name", "tls", "--data-dir", &p("data")])
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("tls={peer}")])
        .args([
            "--cert-file",
            &p("server.crt"),
            "--key-file",
            &p("server.key"),
        ])
        .args(["--client-cert-auth", "--trusted-ca-file", &p("ca.crt")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} not runnable ({e}): `cargo xtask test` installs etcd"));
    Etcd(child)
}

fn store(client: EtcdClient) -> EtcdStore {
    EtcdStore::new(client, "/registry", SelectableFields::none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn client_certificates_reach_a_tls_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, issuer) = ca("etcd-ca");
    let server = leaf(&issuer, "etcd", true);
    let client = leaf(&issuer, "listwatch", false);
    let w = |n: &str, s: &str| std::fs::write(dir.path().join(n), s).unwrap();
    w("ca.crt", &ca_pem.cert);
    w("server.crt", &server.cert);
    w("server.key", &server.key);
    let _ = ca_pem.key;
    let port = free_port();
    let _etcd = start_etcd(dir.path(), port);
    let url = format!("https://127.0.0.1:{port}");

    let config = |tls: Option<EtcdTls>| {
        let mut c = EtcdConfig::new([url.clone()])
            .request_timeout(Duration::from_secs(5))
            .dial_timeout(Duration::from_secs(2));
        c.tls = tls;
        c
    };
    let good = EtcdTls {
        ca_pem: ca_pem.cert.clone().into_bytes(),
        cert_pem: Some(client.cert.clone().into_bytes()),
        key_pem: Some(client.key.clone().into_bytes()),
    };
    let s = store(EtcdClient::new(config(Some(good.clone()))).unwrap());
    let key = Key::object("configmaps", Some("demo"), "tls").unwrap();
    let obj = Object::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tls", "namespace": "demo"}}),
        &SelectableFields::none(),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match s.create(&key, obj.clone(), None).await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "etcd over TLS never answered: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = s.get(&key, &GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(got.name(), "tls");

    // A bare host:port is https when TLS is configured; an http:// URL with TLS settings
    // is refused (issue 23: they would not apply to it, and objects would go in clear).
    let mut bare = EtcdConfig::new([format!("127.0.0.1:{port}")])
        .request_timeout(Duration::from_secs(5))
        .dial_timeout(Duration::from_secs(2));
    bare.tls = Some(good.clone());
    let s2 = store(EtcdClient::new(bare).unwrap());
    assert_eq!(
        s2.get(&key, &GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .name(),
        "tls"
    );
    let mut plain = EtcdConfig::new([format!("http://127.0.0.1:{port}")]);
    plain.tls = Some(good);
    assert!(matches!(
        EtcdClient::new(plain),
        Err(listwatch_etcd::ConfigError::PlainWithTls { .. })
    ));

    // Without a client certificate etcd refuses the connection.
    let anonymous = EtcdTls {
        ca_pem: ca_pem.cert.clone().into_bytes(),
        cert_pem: None,
        key_pem: None,
    };
    let s = store(EtcdClient::new(config(Some(anonymous))).unwrap());
    assert!(s.get(&key, &GetOptions::default()).await.is_err());

    // Trusting another CA, the client refuses etcd's certificate.
    let (other, _) = ca("other-ca");
    let wrong = EtcdTls {
        ca_pem: other.cert.into_bytes(),
        cert_pem: Some(client.cert.into_bytes()),
        key_pem: Some(client.key.into_bytes()),
    };
    let s = store(EtcdClient::new(config(Some(wrong))).unwrap());
    assert!(s.get(&key, &GetOptions::default()).await.is_err());

    // https without TLS settings is a configuration error, not a plain-text attempt.
    assert!(matches!(
        EtcdClient::new(config(None)),
        Err(listwatch_etcd::ConfigError::TlsRequired { .. })
    ));
}
