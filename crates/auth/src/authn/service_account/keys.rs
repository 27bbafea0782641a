//! Key files of ServiceAccount tokens: reading them, and turning PEM public or private
//! keys (RSA, ECDSA P-256) into the keys that verify tokens.

use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey};
use ring::signature::KeyPair;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::{PemObject, SectionKind};

/// Why a key file is unusable.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct KeyError {
    /// The file.
    pub path: String,
    /// Why.
    pub message: String,
}

/// The contents of a key file, or a [`KeyError`] naming it.
pub(super) fn read(path: &Path) -> Result<Vec<u8>, KeyError> {
    std::fs::read(path).map_err(|e| KeyError {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// The public verification keys in PEM data: public keys (`PUBLIC KEY`), and the public
/// halves of private keys (PKCS#8 ECDSA P-256 or RSA, PKCS#1 RSA).
pub fn verification_keys(pem: &[u8]) -> Result<Vec<(DecodingKey, Algorithm)>, String> {
    let mut out = Vec::new();
    for section in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(pem) {
        let (kind, der) = section.map_err(|e| e.to_string())?;
        match kind {
            SectionKind::PublicKey => {
                out.push(spki_key(&der)?);
            }
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                let key = PrivateKeyDer::from_pem(kind, der)
                    .ok_or_else(|| "unreadable private key".to_owned())?;
                out.push(public_of_private(&key)?);
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err("no public or private key found".into());
    }
    Ok(out)
}

/// The verification key of a DER `SubjectPublicKeyInfo` (RSA or ECDSA P-256).
fn spki_key(der: &[u8]) -> Result<(DecodingKey, Algorithm), String> {
    use x509_parser::prelude::FromDer;
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(der)
        .map_err(|e| format!("bad public key: {e}"))?;
    let bits = spki.subject_public_key.data.as_ref();
    match spki.algorithm.algorithm.to_id_string().as_str() {
        // rsaEncryption: the bit string is a PKCS#1 RSAPublicKey
        "1.2.840.113549.1.1.1" => Ok((DecodingKey::from_rsa_der(bits), Algorithm::RS256)),
        // id-ecPublicKey: the bit string is the point
        "1.2.840.10045.2.1" => Ok((DecodingKey::from_ec_der(bits), Algorithm::ES256)),
        other => Err(format!("unsupported public key algorithm {other}")),
    }
}

fn public_of_private(key: &PrivateKeyDer<'_>) -> Result<(DecodingKey, Algorithm), String> {
    let rng = ring::rand::SystemRandom::new();
    match key {
        PrivateKeyDer::Pkcs8(k) => {
            if let Ok(ec) = ring::signature::EcdsaKeyPair::from_pkcs8(
                &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                k.secret_pkcs8_der(),
                &rng,
            ) {
                return Ok((
                    DecodingKey::from_ec_der(ec.public_key().as_ref()),
                    Algorithm::ES256,
                ));
            }
            let rsa = ring::signature::RsaKeyPair::from_pkcs8(k.secret_pkcs8_der())
                .map_err(|e| format!("not an ECDSA P-256 or RSA key: {e}"))?;
            Ok((
                DecodingKey::from_rsa_der(rsa.public().as_ref()),
                Algorithm::RS256,
            ))
        }
        PrivateKeyDer::Pkcs1(k) => {
            let rsa = ring::signature::RsaKeyPair::from_der(k.secret_pkcs1_der())
                .map_err(|e| format!("bad RSA key: {e}"))?;
            Ok((
                DecodingKey::from_rsa_der(rsa.public().as_ref()),
                Algorithm::RS256,
            ))
        }
        _ => Err("EC keys must be in PKCS#8 form (\"BEGIN PRIVATE KEY\")".into()),
    }
}
