//! The one-flag secure setup (`--pki-dir DIR`, k3s-style): a CA, a serving certificate, an
//! admin client certificate (`kubernetes-admin` in `system:masters`) and a ServiceAccount
//! signing key, created in `DIR` on first start and reused afterwards, and
//! `DIR/admin.kubeconfig`, written once the server knows its address.
//!
//! Invariants:
//! - the directory is one this creates (mode 0700) or an existing one owned by the server's
//!   user with no group or other access; anything else is refused before a key is written
//!   (another user could read the keys, or replace a file by a link that a write follows);
//! - private keys (and the kubeconfig, which holds the admin key) are mode 0600 after every
//!   write, whatever mode an earlier file had; a directory this creates is mode 0700;
//! - without a usable CA (`ca.crt` and `ca.key`) everything is made anew, so no certificate
//!   is left signed by a CA that is gone; with one, the CA is kept and only what is missing
//!   or unfit is made again with it: the serving certificate when it does not name every
//!   wanted name ([`ServingNames`]: the fixed names, the host name, the bind address or,
//!   for a wildcard bind, the interface addresses, and `--tls-san`), no longer chains to the
//!   CA, or expires within [`RENEW_BEFORE_DAYS`]; the admin certificate in the same cases
//!   (but names); the ServiceAccount key pair when half of it is missing. So an existing
//!   `admin.kubeconfig` keeps working across a change of bind address or names;
//! - a key is written before its certificate, so an interrupted regeneration is redone at
//!   the next start.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

mod names;

pub use names::{
    MAX_INTERFACE_ADDRESSES, SERVICE_NAMES, ServingNames, hostname, interface_addresses, parse_san,
};

/// The files of the setup.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The directory.
    pub dir: PathBuf,
    /// Whether each write is flushed to disk (`fsync`) before the next: so a crash leaves
    /// no key behind its certificate. Off for a directory thrown away with the process
    /// (the test environment's), where it only waits on the disk.
    pub durable: bool,
}

/// The admin user of the generated client certificate.
pub const ADMIN_USER: &str = "kubernetes-admin";

/// A serving or admin certificate that expires within this many days is made anew at start
/// (they are made for 365 days; the CA for 3650).
pub const RENEW_BEFORE_DAYS: u64 = 30;

/// Writes `data`; a secret ends up mode 0600 even when the file existed with another mode
/// (the mode of `open` only applies to a file it creates).
fn write(path: &Path, data: &[u8], secret: bool, durable: bool) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        // Before the data goes in, so the secret is never readable by others.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    std::io::Write::write_all(&mut f, data)?;
    if durable { f.sync_all() } else { Ok(()) }
}

fn err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
}

fn new_ca() -> std::io::Result<(String, Issuer<'static, KeyPair>)> {
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
    Ok((ca_cert.pem(), Issuer::new(ca, ca_key)))
}

/// `(certificate PEM, key PEM)` of a serving certificate for `names`.
fn serving_cert(
    names: &ServingNames,
    issuer: &Issuer<'_, KeyPair>,
) -> std::io::Result<(String, String)> {
    let key = KeyPair::generate().map_err(err)?;
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "listwatch-apiserver");
    for d in &names.dns {
        p.subject_alt_names
            .push(SanType::DnsName(d.as_str().try_into().map_err(err)?));
    }
    p.subject_alt_names
        .extend(names.ips.iter().copied().map(SanType::IpAddress));
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut p, 365);
    let cert = p.signed_by(&key, issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// `(certificate PEM, key PEM)` of the admin client certificate.
fn admin_cert(issuer: &Issuer<'_, KeyPair>) -> std::io::Result<(String, String)> {
    let key = KeyPair::generate().map_err(err)?;
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, ADMIN_USER);
    p.distinguished_name.push(
        DnType::OrganizationName,
        listwatch_auth::user::SYSTEM_MASTERS,
    );
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    validity(&mut p, 365);
    let cert = p.signed_by(&key, issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The moment a kept certificate must still be valid at.
fn renewal_horizon() -> UnixTime {
    let now = UnixTime::now().as_secs();
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        now.saturating_add(RENEW_BEFORE_DAYS * 24 * 3600),
    ))
}

fn roots(ca_pem: &[u8]) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn first_cert(pem: &[u8]) -> Result<CertificateDer<'static>, String> {
    CertificateDer::from_pem_slice(pem).map_err(|e| e.to_string())
}

/// Why the serving certificate `cert_pem` cannot be kept: it does not chain to the CA
/// (through the renewal horizon), or lacks one of `names`. `None` when it fits.
fn serving_unfit(cert_pem: &[u8], ca_pem: &[u8], names: &ServingNames) -> Option<String> {
    use rustls::client::danger::ServerCertVerifier;
    let check = || -> Result<Vec<String>, String> {
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots(ca_pem)?, provider())
                .build()
                .map_err(|e| e.to_string())?;
        let cert = first_cert(cert_pem)?;
        let when = renewal_horizon();
        let wanted = names
            .dns
            .iter()
            .map(|d| (d.clone(), ServerName::try_from(d.clone()).ok()))
            .chain(
                names
                    .ips
                    .iter()
                    .map(|ip| (ip.to_string(), Some(ServerName::IpAddress((*ip).into())))),
            );
        let mut missing = Vec::new();
        for (label, name) in wanted {
            // A wildcard name is checked as one name it covers.
            let name = match label.strip_prefix("*.") {
                Some(rest) => ServerName::try_from(format!("listwatch-check.{rest}")).ok(),
                None => name,
            };
            let Some(name) = name else {
                return Err(format!("{label} is not a server name"));
            };
            match verifier.verify_server_cert(&cert, &[], &name, &[], when) {
                Ok(_) => {}
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                )) => missing.push(label),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(missing)
    };
    match check() {
        Ok(missing) if missing.is_empty() => None,
        Ok(missing) => Some(format!("it does not name {}", missing.join(", "))),
        Err(e) => Some(e),
    }
}

/// Why the admin certificate cannot be kept (does not chain to the CA through the renewal
/// horizon), `None` when it fits.
fn admin_unfit(cert_pem: &[u8], ca_pem: &[u8]) -> Option<String> {
    let check = || -> Result<(), String> {
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca_pem)?, provider())
                .build()
                .map_err(|e| e.to_string())?;
        verifier
            .verify_client_cert(&first_cert(cert_pem)?, &[], renewal_horizon())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    check().err()
}

/// Makes `dir` (mode 0700, its missing parents too) or accepts it as it is when it is a
/// directory of this user that nobody else can enter or list (no group or other bits): the
/// files go in with their own names, so a directory another user created first (or can
/// write to) would let that user read the keys or swap a file for a link.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut parents = std::fs::DirBuilder::new();
    parents.recursive(true);
    let mut this = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        parents.mode(0o700);
        this.mode(0o700);
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        parents.create(parent)?;
    }
    match this.create(dir) {
        // Made here: this user's, 0700 (less with a umask).
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => existing_dir_is_private(dir),
        Err(e) => Err(e),
    }
}

/// Why an existing `dir` cannot hold the keys (see [`private_dir`]); a link counts as its
/// target, and must be this user's too.
#[cfg(unix)]
fn existing_dir_is_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let link = std::fs::symlink_metadata(dir)?;
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(err("it exists and is not a directory"));
    }
    if let Some(why) = dir_unfit(
        link.file_type().is_symlink().then_some(link.uid()),
        meta.uid(),
        meta.mode(),
        me,
    ) {
        return Err(err(why));
    }
    Ok(())
}

#[cfg(not(unix))]
fn existing_dir_is_private(dir: &Path) -> std::io::Result<()> {
    if std::fs::metadata(dir)?.is_dir() {
        Ok(())
    } else {
        Err(err("it exists and is not a directory"))
    }
}

/// Why an existing directory owned by `owner` with `mode` (and, when the path is a link, the
/// link's owner `link_owner`) cannot hold the keys of user `me`; `None` when it can.
pub(crate) fn dir_unfit(link_owner: Option<u32>, owner: u32, mode: u32, me: u32) -> Option<String> {
    if let Some(l) = link_owner.filter(|l| *l != me) {
        return Some(format!(
            "it is a link owned by uid {l}, not by this user (uid {me}): use a directory of \
             this user"
        ));
    }
    if owner != me {
        return Some(format!(
            "it exists and is owned by uid {owner}, not by this user (uid {me}): use a \
             directory of this user, or let the server create it"
        ));
    }
    if mode & 0o077 != 0 {
        return Some(format!(
            "its mode is {:04o}: others may read or change it; it must be this user's alone \
             (chmod 700)",
            mode & 0o7777
        ));
    }
    None
}

impl Pki {
    /// A path in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn exists(&self, names: &[&str]) -> bool {
        names.iter().all(|f| self.path(f).exists())
    }

    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.path(name))
            .map_err(|e| std::io::Error::new(e.kind(), format!("{name}: {e}")))
    }

    fn write_pair(&self, cert: &str, key: &str, pem: &(String, String)) -> std::io::Result<()> {
        write(&self.path(key), pem.1.as_bytes(), true, self.durable)?;
        write(&self.path(cert), pem.0.as_bytes(), false, self.durable)
    }

    /// Creates what is missing or unfit (see the module's invariants) for a server bound to
    /// `bind` with the extra serving names `extra_sans` (`--tls-san`, each a [`parse_san`]
    /// result).
    pub fn ensure(dir: &Path, bind: SocketAddr, extra_sans: &[String]) -> std::io::Result<Self> {
        Self::ensure_with(dir, bind, extra_sans, true)
    }

    /// [`Pki::ensure`], flushing each file to disk only when `durable`.
    pub fn ensure_with(
        dir: &Path,
        bind: SocketAddr,
        extra_sans: &[String],
        durable: bool,
    ) -> std::io::Result<Self> {
        let pki = Self {
            dir: dir.to_owned(),
            durable,
        };
        private_dir(dir)?;
        let names = ServingNames::wanted(bind, extra_sans);
        let mut made = Vec::new();
        let (ca_pem, issuer) = if pki.exists(&["ca.crt", "ca.key"]) {
            let ca_pem = pki.read("ca.crt")?;
            let key = String::from_utf8_lossy(&pki.read("ca.key")?).into_owned();
            let key = KeyPair::from_pem(&key).map_err(|e| err(format!("ca.key: {e}")))?;
            let issuer = Issuer::from_ca_cert_pem(&String::from_utf8_lossy(&ca_pem), key)
                .map_err(|e| err(format!("ca.crt: {e}")))?;
            (ca_pem, issuer)
        } else {
            let (pem, issuer) = new_ca()?;
            write(
                &pki.path("ca.key"),
                issuer.key().serialize_pem().as_bytes(),
                true,
                pki.durable,
            )?;
            write(&pki.path("ca.crt"), pem.as_bytes(), false, pki.durable)?;
            made.push("CA".to_owned());
            // Everything the old CA signed goes with it.
            for f in ["server.crt", "admin.crt"] {
                match std::fs::remove_file(pki.path(f)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            (pem.into_bytes(), issuer)
        };

        let serving_reason = if pki.exists(&["server.crt", "server.key"]) {
            serving_unfit(&pki.read("server.crt")?, &ca_pem, &names)
        } else {
            Some("missing".to_owned())
        };
        if let Some(reason) = serving_reason {
            let pem = serving_cert(&names, &issuer)?;
            // A CA key that does not belong to ca.crt signs certificates nobody can verify.
            if let Some(e) = serving_unfit(pem.0.as_bytes(), &ca_pem, &names) {
                return Err(err(format!(
                    "a serving certificate signed with ca.key does not verify against ca.crt \
                     ({e}): do they belong together? Remove ca.crt and ca.key to make a new CA \
                     (clients must then trust the new ca.crt)"
                )));
            }
            pki.write_pair("server.crt", "server.key", &pem)?;
            made.push(format!("serving certificate ({reason})"));
        }
        let admin_reason = if pki.exists(&["admin.crt", "admin.key"]) {
            admin_unfit(&pki.read("admin.crt")?, &ca_pem)
        } else {
            Some("missing".to_owned())
        };
        if let Some(reason) = admin_reason {
            pki.write_pair("admin.crt", "admin.key", &admin_cert(&issuer)?)?;
            made.push(format!("admin certificate ({reason})"));
        }
        if !pki.exists(&["service-account.key", "service-account.pub"]) {
            let sa_key = KeyPair::generate().map_err(err)?;
            let pem = (sa_key.public_key_pem(), sa_key.serialize_pem());
            pki.write_pair("service-account.pub", "service-account.key", &pem)?;
            made.push("ServiceAccount key".to_owned());
        }
        if made.is_empty() {
            tracing::info!(dir = %dir.display(), "reusing the certificates and keys of --pki-dir");
        } else {
            tracing::info!(dir = %dir.display(), made = %made.join("; "),
                dns = ?names.dns, ips = ?names.ips, "--pki-dir: created");
        }
        Ok(pki)
    }

    /// Writes `admin.kubeconfig` for a server at `addr` and returns its path.
    pub fn write_kubeconfig(&self, addr: SocketAddr) -> std::io::Result<PathBuf> {
        let b64 = |name: &str| -> std::io::Result<String> {
            Ok(base64::engine::general_purpose::STANDARD.encode(self.read(name)?))
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n    server: https://{}\n    certificate-authority-data: {}\nusers:\n- name: {ADMIN_USER}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: {ADMIN_USER}\ncurrent-context: listwatch\n",
            dialable(addr),
            b64("ca.crt")?,
            b64("admin.crt")?,
            b64("admin.key")?,
        );
        let path = self.path("admin.kubeconfig");
        write(&path, config.as_bytes(), true, self.durable)?;
        Ok(path)
    }
}

/// The address a client on this machine dials for a server bound to `addr`: loopback for
/// a wildcard bind (`0.0.0.0` → `127.0.0.1`, `::` → `::1`).
pub fn dialable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::from([127, 0, 0, 1]), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::from(std::net::Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

/// Applies `--pki-dir`: creates or reuses the files and turns on what they serve (TLS,
/// client certificates, ServiceAccount tokens, RBAC) where the flags do not already say
/// otherwise.
pub fn apply(opts: &mut crate::Options, dir: &Path) -> Result<Pki, crate::ServerError> {
    let durable = !opts.security.pki_ephemeral;
    let pki = Pki::ensure_with(dir, opts.bind, &opts.security.tls_san, durable).map_err(|e| {
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
mod tests;
