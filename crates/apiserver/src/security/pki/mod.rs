//! The one-flag secure setup (`--pki-dir DIR`, k3s-style): a CA, a serving certificate, an
//! admin client certificate (`kubernetes-admin` in `system:masters`) and a ServiceAccount
//! signing key, created in `DIR` on first start and reused afterwards, and
//! `DIR/admin.kubeconfig`, written once the server knows its address.
//!
//! Invariants: private keys are written with mode 0600; the set is generated whole (if any
//! file is missing, all are made anew, so a CA never signs with a key it does not match);
//! the serving certificate names `localhost`, `127.0.0.1`, `::1` and the bind address.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The files of the setup.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The directory.
    pub dir: PathBuf,
}

const FILES: [&str; 8] = [
    "ca.crt",
    "ca.key",
    "server.crt",
    "server.key",
    "admin.crt",
    "admin.key",
    "service-account.key",
    "service-account.pub",
];

/// The admin user of the generated client certificate.
pub const ADMIN_USER: &str = "kubernetes-admin";

fn write(path: &Path, data: &[u8], secret: bool) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    std::io::Write::write_all(&mut opts.open(path)?, data)
}

fn err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
}

impl Pki {
    /// A path in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Creates the files unless they all exist.
    pub fn ensure(dir: &Path, bind: SocketAddr) -> std::io::Result<Self> {
        let pki = Self {
            dir: dir.to_owned(),
        };
        if FILES.iter().all(|f| pki.path(f).exists()) {
            tracing::info!(dir = %dir.display(), "reusing the certificates and keys of --pki-dir");
            return Ok(pki);
        }
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name
            .push(DnType::CommonName, "listwatch-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut ca, 3650);
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca, ca_key);

        let server_key = KeyPair::generate().map_err(err)?;
        let mut server = CertificateParams::new(vec!["localhost".to_owned()]).map_err(err)?;
        server.distinguished_name = DistinguishedName::new();
        server
            .distinguished_name
            .push(DnType::CommonName, "listwatch-apiserver");
        let mut ips: Vec<IpAddr> = vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ];
        if !bind.ip().is_unspecified() && !ips.contains(&bind.ip()) {
            ips.push(bind.ip());
        }
        server
            .subject_alt_names
            .extend(ips.into_iter().map(SanType::IpAddress));
        for name in ["kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
            if let Ok(n) = name.try_into() {
                server.subject_alt_names.push(SanType::DnsName(n));
            }
        }
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut server, 365);
        let server_cert = server.signed_by(&server_key, &issuer).map_err(err)?;

        let admin_key = KeyPair::generate().map_err(err)?;
        let mut admin = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        admin.distinguished_name = DistinguishedName::new();
        admin
            .distinguished_name
            .push(DnType::CommonName, ADMIN_USER);
        admin.distinguished_name.push(
            DnType::OrganizationName,
            listwatch_auth::user::SYSTEM_MASTERS,
        );
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut admin, 365);
        let admin_cert = admin.signed_by(&admin_key, &issuer).map_err(err)?;

        let sa_key = KeyPair::generate().map_err(err)?;

        write(&pki.path("ca.crt"), ca_cert.pem().as_bytes(), false)?;
        write(
            &pki.path("ca.key"),
            issuer.key().serialize_pem().as_bytes(),
            true,
        )?;
        write(&pki.path("server.crt"), server_cert.pem().as_bytes(), false)?;
        write(
            &pki.path("server.key"),
            server_key.serialize_pem().as_bytes(),
            true,
        )?;
        write(&pki.path("admin.crt"), admin_cert.pem().as_bytes(), false)?;
        write(
            &pki.path("admin.key"),
            admin_key.serialize_pem().as_bytes(),
            true,
        )?;
        write(
            &pki.path("service-account.key"),
            sa_key.serialize_pem().as_bytes(),
            true,
        )?;
        write(
            &pki.path("service-account.pub"),
            sa_key.public_key_pem().as_bytes(),
            false,
        )?;
        tracing::info!(dir = %dir.display(), "created a CA, serving and admin certificates and a ServiceAccount key");
        Ok(pki)
    }

    /// Writes `admin.kubeconfig` for a server at `addr` and returns its path.
    pub fn write_kubeconfig(&self, addr: SocketAddr) -> std::io::Result<PathBuf> {
        let b64 = |name: &str| -> std::io::Result<String> {
            Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(self.path(name))?))
        };
        let host = if addr.ip().is_unspecified() {
            SocketAddr::new(IpAddr::from([127, 0, 0, 1]), addr.port())
        } else {
            addr
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n    server: https://{host}\n    certificate-authority-data: {}\nusers:\n- name: {ADMIN_USER}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: {ADMIN_USER}\ncurrent-context: listwatch\n",
            b64("ca.crt")?,
            b64("admin.crt")?,
            b64("admin.key")?,
        );
        let path = self.path("admin.kubeconfig");
        write(&path, config.as_bytes(), true)?;
        Ok(path)
    }
}

/// Applies `--pki-dir`: creates or reuses the files and turns on what they serve (TLS,
/// client certificates, ServiceAccount tokens, RBAC) where the flags do not already say
/// otherwise.
pub fn apply(opts: &mut crate::Options, dir: &Path) -> Result<Pki, crate::ServerError> {
    let pki = Pki::ensure(dir, opts.bind).map_err(|e| {
        crate::security::SecurityError::File(format!("--pki-dir {}: {e}", dir.display()))
    })?;
    if opts.tls_cert_file.is_none() {
        opts.tls_cert_file = Some(pki.path("server.crt"));
        opts.tls_private_key_file = Some(pki.path("server.key"));
    }
    let s = &mut opts.security;
    if s.client_ca_file.is_none() {
        s.client_ca_file = Some(pki.path("ca.crt"));
    }
    if s.service_account_signing_key_file.is_none() {
        s.service_account_signing_key_file = Some(pki.path("service-account.key"));
    }
    if s.service_account_key_file.is_empty() {
        s.service_account_key_file = vec![pki.path("service-account.pub")];
    }
    Ok(pki)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_once_and_the_admin_certificate_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        let pki = Pki::ensure(dir.path(), bind).unwrap();
        let ca = std::fs::read(pki.path("ca.crt")).unwrap();
        Pki::ensure(dir.path(), bind).unwrap();
        assert_eq!(std::fs::read(pki.path("ca.crt")).unwrap(), ca, "reused");
        let ca = listwatch_auth::authn::ClientCa::load(&pki.path("ca.crt")).unwrap();
        use rustls_pki_types::pem::PemObject;
        let admin = rustls_pki_types::CertificateDer::from_pem_file(pki.path("admin.crt")).unwrap();
        let user = ca.authenticate(&[admin]).unwrap().unwrap();
        assert_eq!(user.name, ADMIN_USER);
        assert!(user.in_group("system:masters"));
        let kc = pki.write_kubeconfig(bind).unwrap();
        let text = std::fs::read_to_string(kc).unwrap();
        assert!(text.contains("server: https://127.0.0.1:6443"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(pki.path("admin.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0);
        }
    }
}
