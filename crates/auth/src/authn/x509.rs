//! X.509 client certificates (`--client-ca-file`): the user is the subject's common name,
//! the groups its organizations, as upstream's `CommonNameUserConversion`.
//!
//! TLS only *requests* a client certificate ([`RequestClientCert`], Go's
//! `tls.RequestClientCert`): the handshake checks that the client holds the key of the
//! certificate it presents, and the chain is verified here against the client CA, per
//! request, so a certificate from another CA is a 401 as upstream — not a failed handshake.
//!
//! Invariants: only a chain that verifies for client authentication at the current time
//! against a CA of the file yields a user; verified identities are cached by end-entity
//! certificate for at most [`CACHE_TTL`] and never past the certificate's expiry; the cache
//! is bounded.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};

use crate::authn::AuthnError;
use crate::user::UserInfo;

/// How long a verified certificate's identity is reused without verifying again.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most identities cached.
const CACHE_MAX: usize = 4096;

/// Why the client CA file is unusable.
#[derive(Debug, thiserror::Error)]
#[error("client CA file {path}: {message}")]
pub struct ClientCaError {
    /// The file.
    pub path: String,
    /// Why.
    pub message: String,
}

/// Verified identities by end-entity certificate (DER), with when they expire.
type IdentityCache = HashMap<Vec<u8>, (Instant, Arc<UserInfo>), foldhash::fast::RandomState>;

/// The client CA bundle and the certificate authenticator over it.
pub struct ClientCa {
    anchors: Vec<TrustAnchor<'static>>,
    subjects: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
    cache: Mutex<IdentityCache>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("anchors", &self.anchors.len())
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ClientCa {
    /// Loads a PEM bundle of CA certificates.
    pub fn load(path: &Path) -> Result<Self, ClientCaError> {
        let err = |message: String| ClientCaError {
            path: path.display().to_string(),
            message,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(e.to_string()))?;
        Self::from_der(certs).map_err(err)
    }

    /// A CA bundle from DER certificates.
    pub fn from_der(certs: Vec<CertificateDer<'static>>) -> Result<Self, String> {
        if certs.is_empty() {
            return Err("no certificate found".into());
        }
        let mut anchors = Vec::new();
        let mut subjects = Vec::new();
        for c in &certs {
            let anchor = webpki::anchor_from_trusted_cert(c)
                .map_err(|e| format!("not a usable CA certificate: {e}"))?
                .to_owned();
            // The TLS hint is the DER Name, SEQUENCE and all; the anchor keeps only its
            // contents (OpenSSL's clients refuse a CertificateRequest naming the bare
            // contents, Go's do not parse it).
            subjects.push(DistinguishedName::in_sequence(anchor.subject.as_ref()));
            anchors.push(anchor);
        }
        Ok(Self {
            anchors,
            subjects,
            algorithms: provider().signature_verification_algorithms,
            cache: Mutex::new(HashMap::default()),
        })
    }

    /// The CA subjects, as TLS hints for clients choosing a certificate.
    pub fn subjects(&self) -> &[DistinguishedName] {
        &self.subjects
    }

    /// Verifies `chain` (end entity first) and returns its identity; `Ok(None)` when the
    /// certificate names no user (empty common name).
    pub fn authenticate(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<Arc<UserInfo>>, AuthnError> {
        let Some((end, intermediates)) = chain.split_first() else {
            return Ok(None);
        };
        let now = Instant::now();
        if let Some((until, user)) = self.lock().get(end.as_ref()) {
            if *until > now {
                return Ok(Some(Arc::clone(user)));
            }
        }
        let cert = webpki::EndEntityCert::try_from(end)
            .map_err(|e| AuthnError::Certificate(e.to_string()))?;
        let unix_now = UnixTime::now();
        cert.verify_for_usage(
            self.algorithms.all,
            &self.anchors,
            intermediates,
            unix_now,
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| AuthnError::Certificate(e.to_string()))?;
        let (user, not_after) = identity(end.as_ref())?;
        let Some(user) = user else {
            return Ok(None);
        };
        let user = Arc::new(user.with_authenticated_group());
        let left = u64::try_from(not_after)
            .ok()
            .and_then(|t| t.checked_sub(unix_now.as_secs()))
            .map_or(Duration::ZERO, Duration::from_secs);
        let mut cache = self.lock();
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (until, _)| *until > now);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(end.to_vec(), (now + CACHE_TTL.min(left), Arc::clone(&user)));
        Ok(Some(user))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdentityCache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The user (CN) and groups (O) of a certificate, and its expiry (Unix seconds).
fn identity(der: &[u8]) -> Result<(Option<UserInfo>, i64), AuthnError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| AuthnError::Certificate(format!("parsing certificate: {e}")))?;
    let subject = cert.subject();
    // Upstream reads Go's `Subject.CommonName`, which `FillFromRDNSequence` sets to the
    // *last* string-valued CN attribute of the subject: a subject with several CNs is the
    // user its last one names, here too (an approver that reads the first CN and this
    // server must not see different users).
    let mut cn = String::new();
    for attr in subject.iter_common_name() {
        if let Some(value) = go_string(attr)? {
            cn = value;
        }
    }
    let cn = cn.as_str();
    // O values likewise (every string-valued one, in order).
    let mut groups = Vec::new();
    for attr in subject.iter_organization() {
        groups.extend(go_string(attr)?);
    }
    let not_after = cert.validity().not_after.timestamp();
    if cn.is_empty() {
        return Ok((None, not_after));
    }
    Ok((Some(UserInfo::new(cn, groups)), not_after))
}

/// An attribute value as Go's `encoding/asn1` reads it into an `interface{}`: the string
/// types (UTF8, Printable, Numeric, IA5, T61, BMP) are strings, anything else is not
/// (`None`, skipped as Go skips it). A T61 value that is not UTF-8 or a BMP value that is
/// not UTF-16 is refused: Go would keep raw bytes or fail the certificate, and a lossy
/// decoding could make two certificates one user.
fn go_string(
    attr: &x509_parser::x509::AttributeTypeAndValue<'_>,
) -> Result<Option<String>, AuthnError> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let bad = || AuthnError::Certificate("a subject CN that is not a readable string".into());
    let value = attr.attr_value();
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::NumericString
        | Tag::Ia5String
        | Tag::T61String => std::str::from_utf8(data)
            .map(|s| Some(s.to_owned()))
            .map_err(|_| bad()),
        Tag::BmpString => {
            // UCS-2 big-endian; Go strips one trailing NUL.
            if data.len() % 2 != 0 {
                return Err(bad());
            }
            let mut units: Vec<u16> = data
                .chunks_exact(2)
                .filter_map(|c| match c {
                    [a, b] => Some(u16::from_be_bytes([*a, *b])),
                    _ => None,
                })
                .collect();
            if units.last() == Some(&0) {
                units.pop();
            }
            String::from_utf16(&units).map(Some).map_err(|_| bad())
        }
        _ => Ok(None),
    }
}

/// A rustls client-certificate verifier that requests a certificate, checks the client's
/// proof of holding its key, and leaves the chain to [`ClientCa::authenticate`].
#[derive(Debug)]
pub struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl RequestClientCert {
    /// A verifier hinting the CA's subjects to clients.
    pub fn new(ca: &ClientCa) -> Self {
        Self {
            hints: ca.subjects().to_vec(),
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // The chain is verified by the authenticator, per request (a bad one is a 401).
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName as Dn, DnType,
        ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    fn ca(name: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = Dn::new();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        (cert.der().clone(), Issuer::new(p, key))
    }

    fn client(issuer: &Issuer<'_, KeyPair>, cn: &str, orgs: &[&str]) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = Dn::new();
        p.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.signed_by(&key, issuer).unwrap().der().clone()
    }

    #[test]
    fn common_name_is_the_user_and_organizations_the_groups() {
        let (ca_der, issuer) = ca("test-ca");
        let ca = ClientCa::from_der(vec![ca_der]).unwrap();
        // (rcgen keeps one value per attribute type; several O values are covered end to end.)
        let cert = client(&issuer, "alice", &["dev"]);
        let user = ca
            .authenticate(std::slice::from_ref(&cert))
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        // cached: same answer
        assert_eq!(ca.authenticate(&[cert]).unwrap().unwrap(), user);
        assert_eq!(ca.authenticate(&[]).unwrap(), None);
    }

    /// Issue 23 item 7: with several CN attributes the last one is the user (Go's
    /// `pkix.Name.CommonName`, which upstream's x509 authenticator reads).
    #[test]
    fn the_last_common_name_is_the_user() {
        let (ca_der, issuer) = ca("test-ca");
        let ca = ClientCa::from_der(vec![ca_der]).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = Dn::new();
        p.distinguished_name.push(DnType::CommonName, "first");
        // rcgen keeps one value per attribute type: the second CN under the same OID as a
        // custom type.
        p.distinguished_name
            .push(DnType::CustomDnType(vec![2, 5, 4, 3]), "last");
        p.distinguished_name.push(DnType::OrganizationName, "dev");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &issuer).unwrap().der().clone();
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert).unwrap();
        let cns: Vec<_> = parsed
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            cns,
            ["first", "last"],
            "the certificate has both CNs, in order"
        );
        let user = ca.authenticate(&[cert]).unwrap().unwrap();
        assert_eq!(user.name, "last");
    }

    /// CN and O values in the string types Go reads besides UTF8/Printable (BMP, T61)
    /// count as upstream's; a BMP value that is not UTF-16 refuses the certificate.
    #[test]
    fn bmp_and_teletex_names_count_as_in_go() {
        use rcgen::DnValue;
        use rcgen::string::{BmpString, TeletexString};
        let (ca_der, issuer) = ca("test-ca");
        let ca = ClientCa::from_der(vec![ca_der]).unwrap();
        let cert = |values: Vec<(DnType, DnValue)>| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name = Dn::new();
            for (t, v) in values {
                p.distinguished_name.push(t, v);
            }
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            p.signed_by(&key, &issuer).unwrap().der().clone()
        };
        let c = cert(vec![
            (DnType::CommonName, DnValue::Utf8String("alice".into())),
            (
                DnType::CustomDnType(vec![2, 5, 4, 3]),
                DnValue::BmpString(BmpString::try_from("röot").unwrap()),
            ),
            (
                DnType::OrganizationName,
                DnValue::TeletexString(TeletexString::try_from("dev").unwrap()),
            ),
        ]);
        let user = ca.authenticate(&[c]).unwrap().unwrap();
        assert_eq!(user.name, "röot");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
    }

    #[test]
    fn the_hinted_subjects_are_the_cas_der_names() {
        // The certificate_authorities of a CertificateRequest are DER `Name`s: OpenSSL
        // (Python's ssl, curl) fails the handshake on anything else.
        let (a, _) = ca("test-ca");
        let (b, _) = ca("other-ca");
        let ca = ClientCa::from_der(vec![a.clone(), b.clone()]).unwrap();
        let names: Vec<Vec<u8>> = [a, b]
            .iter()
            .map(|c| {
                let (_, cert) = x509_parser::parse_x509_certificate(c).unwrap();
                cert.tbs_certificate.subject.as_raw().to_vec()
            })
            .collect();
        let hints: Vec<&[u8]> = ca.subjects().iter().map(|d| d.as_ref()).collect();
        assert_eq!(hints, [&names[0][..], &names[1][..]]);
        assert_eq!(RequestClientCert::new(&ca).root_hint_subjects().len(), 2);
    }

    #[test]
    fn another_ca_is_refused() {
        let (ca_der, _) = ca("test-ca");
        let (_, other) = ca("other-ca");
        let ca = ClientCa::from_der(vec![ca_der]).unwrap();
        let cert = client(&other, "mallory", &["system:masters"]);
        assert!(matches!(
            ca.authenticate(&[cert]),
            Err(AuthnError::Certificate(_))
        ));
        assert!(matches!(
            ca.authenticate(&[CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00])]),
            Err(AuthnError::Certificate(_))
        ));
    }
}
