//! ServiceAccount tokens: JWTs this server signs for the TokenRequest subresource
//! (`POST serviceaccounts/{name}/token`, `kubectl create token`) and verifies on requests.
//!
//! Flags as upstream: `--service-account-signing-key-file` (private key, RSA or ECDSA P-256,
//! PEM), `--service-account-key-file` (public or private keys whose public halves verify;
//! defaults to the signing key), `--service-account-issuer` (the first signs; all are
//! accepted), `--api-audiences` (default: the issuers).
//!
//! Invariants:
//! - a token is bound to its ServiceAccount's uid: once the account is deleted (or deleted
//!   and re-created) its tokens are refused — the account is looked up on every request,
//!   never cached here;
//! - the lookup reads an in-process view first (an informer's store) and, when that view
//!   does not hold the account or holds another uid, storage itself (upstream's token
//!   getter: lister first, then a live GET): a token of a just-created account is accepted
//!   although the informer has not seen the create yet, and a token is refused only once
//!   storage confirms the account is gone or replaced. Those reads are bounded (at most
//!   [`MAX_CONCURRENT_READS`] at once) and each has a deadline ([`READ_DEADLINE`]); one
//!   that does not answer in time refuses the token (401), as upstream does when its GET
//!   fails;
//! - an account marked for deletion (`metadata.deletionTimestamp`, held by a finalizer)
//!   stops authenticating its tokens once the mark is older than the clock leeway (60 s),
//!   as upstream;
//! - the signature is verified once per token; verified claims are cached (bounded) and
//!   the expiry is checked on every use;
//! - a JWT from another issuer is not this authenticator's (`Ok(None)`); a JWT claiming
//!   this issuer that does not verify is an error (401).
//!
//! Reading key files and turning PEM keys into verification keys is the private `keys`
//! submodule; the tests are in `service_account/tests.rs`.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::authn::x509::unix_now;
use crate::authn::{AuthnError, TokenAnswer, TokenAuthenticator};
use crate::user::{ALL_SERVICE_ACCOUNTS, UserInfo, service_account_user};

mod keys;

use keys::read;
pub use keys::{KeyError, verification_keys};

/// Default lifetime of a requested token (upstream: one hour).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Shortest lifetime a TokenRequest may ask for (upstream: ten minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Longest lifetime a TokenRequest may ask for (upstream: 2^32 seconds).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Most verified tokens kept.
const CACHE_MAX: usize = 10_000;
/// Clock skew tolerated on `nbf`, `exp` and `iat` (upstream: go-jose's default leeway).
const LEEWAY_SECONDS: u64 = 60;
/// How long a token waits for storage to confirm its account (a place among the reads,
/// then the read) before it is refused.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Most storage reads of accounts in flight at once; further tokens wait for a place
/// (within [`READ_DEADLINE`]).
pub const MAX_CONCURRENT_READS: usize = 16;

/// A boxed, sendable future (a storage read behind a [`ServiceAccountLookup`]).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What token verification needs of a ServiceAccount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.deletionTimestamp` as Unix seconds, when the account is being deleted.
    pub deleted_at: Option<i64>,
}

impl Account {
    /// An account that is not being deleted.
    pub fn live(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            deleted_at: None,
        }
    }
}

/// Finds a ServiceAccount: in a fast in-process view first, in storage when that view
/// misses or disagrees with a token.
pub trait ServiceAccountLookup: Send + Sync {
    /// `namespace/name` in the in-process view (an informer's store), `None` when the view
    /// does not hold it. The view may lag storage: it is never the last word on a refusal.
    fn cached(&self, namespace: &str, name: &str) -> Option<Account>;

    /// `namespace/name` read from storage (the current state, not a cache): `Ok(None)`
    /// when it does not exist, `Err` with a message when the read failed.
    fn stored<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Account>, String>>;
}

/// Whether an account marked for deletion no longer authenticates: its mark is older than
/// the leeway (upstream: `invalidIfDeletedBefore = now - leeway`).
fn deleted_long_ago(account: &Account, now: i64) -> bool {
    let leeway = i64::try_from(LEEWAY_SECONDS).unwrap_or(0);
    account
        .deleted_at
        .is_some_and(|t| t < now.saturating_sub(leeway))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ref {
    name: String,
    uid: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: Ref,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    nbf: i64,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesClaims,
}

/// The spec of a TokenRequest (`authentication.k8s.io/v1`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRequestSpec {
    /// Audiences; empty means the server's API audiences.
    #[serde(default)]
    pub audiences: Option<Vec<String>>,
    /// Requested lifetime.
    #[serde(default)]
    pub expiration_seconds: Option<i64>,
    /// An object the token is bound to (not supported here).
    #[serde(default)]
    pub bound_object_ref: Option<serde_json::Value>,
}

/// Signs ServiceAccount tokens.
pub struct TokenIssuer {
    key: EncodingKey,
    algorithm: Algorithm,
    issuer: String,
    audiences: Vec<String>,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("algorithm", &self.algorithm)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl TokenIssuer {
    /// An issuer signing with the private key in `path` (PKCS#8 ECDSA P-256, or RSA).
    pub fn load(path: &Path, issuer: &str, audiences: Vec<String>) -> Result<Self, KeyError> {
        let pem = read(path)?;
        Self::from_pem(&pem, issuer, audiences).map_err(|message| KeyError {
            path: path.display().to_string(),
            message,
        })
    }

    /// An issuer from a PEM private key.
    pub fn from_pem(pem: &[u8], issuer: &str, audiences: Vec<String>) -> Result<Self, String> {
        let (key, algorithm) = match EncodingKey::from_ec_pem(pem) {
            Ok(k) => (k, Algorithm::ES256),
            Err(_) => match EncodingKey::from_rsa_pem(pem) {
                Ok(k) => (k, Algorithm::RS256),
                Err(e) => return Err(format!("not an RSA or ECDSA P-256 private key: {e}")),
            },
        };
        let me = Self {
            key,
            algorithm,
            issuer: issuer.to_owned(),
            audiences,
        };
        // A key that parses but cannot sign (e.g. another curve) is refused now.
        me.sign(&me.claims("probe", "probe", "probe", vec![], 600, 0))
            .map_err(|e| format!("the key cannot sign {:?} tokens: {e}", me.algorithm))?;
        Ok(me)
    }

    fn claims(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        aud: Vec<String>,
        ttl: i64,
        now: i64,
    ) -> Claims {
        let mut jti = [0u8; 16];
        rand::Rng::fill(&mut rand::rng(), &mut jti);
        Claims {
            iss: self.issuer.clone(),
            sub: service_account_user(ns, name),
            aud,
            exp: now.saturating_add(ttl),
            iat: now,
            nbf: now,
            jti: jti.iter().map(|b| format!("{b:02x}")).collect(),
            kubernetes: KubernetesClaims {
                namespace: ns.to_owned(),
                serviceaccount: Ref {
                    name: name.to_owned(),
                    uid: uid.to_owned(),
                },
            },
        }
    }

    fn sign(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(self.algorithm), claims, &self.key)
    }

    /// A token for the ServiceAccount `namespace/name` with uid `uid`: `(token, expiry as
    /// Unix seconds)`, or the validation message of a bad spec.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        spec: &TokenRequestSpec,
    ) -> Result<(String, i64), String> {
        if spec.bound_object_ref.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(
                "spec.boundObjectRef: Unsupported value: this server does not bind tokens to objects"
                    .into(),
            );
        }
        let ttl = spec
            .expiration_seconds
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        if ttl < MIN_EXPIRATION_SECONDS {
            return Err("spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes".into());
        }
        if ttl > MAX_EXPIRATION_SECONDS {
            return Err("spec.expirationSeconds: Invalid value: may not specify a duration larger than 2^32 seconds".into());
        }
        let aud = match &spec.audiences {
            Some(a) if !a.is_empty() => a.clone(),
            _ => self.audiences.clone(),
        };
        let claims = self.claims(namespace, name, uid, aud, ttl, unix_now());
        let token = self
            .sign(&claims)
            .map_err(|e| format!("signing failed: {e}"))?;
        Ok((token, claims.exp))
    }
}

#[derive(Debug, Clone)]
struct Verified {
    namespace: String,
    name: String,
    uid: String,
    exp: i64,
    /// Its `aud` claim: a cached token is accepted only for audiences it names.
    audiences: Vec<String>,
    /// The user the token authenticates as, built once.
    user: Arc<UserInfo>,
}

/// Verifies ServiceAccount tokens.
pub struct ServiceAccountTokens {
    keys: Vec<(DecodingKey, Algorithm)>,
    issuers: Vec<String>,
    audiences: Vec<String>,
    accounts: Box<dyn ServiceAccountLookup>,
    cache: RwLock<HashMap<String, Verified, foldhash::fast::RandomState>>,
    /// Places for storage reads of accounts.
    reads: tokio::sync::Semaphore,
    read_deadline: Duration,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("keys", &self.keys.len())
            .field("issuers", &self.issuers)
            .finish_non_exhaustive()
    }
}

/// The `iss` claim of a JWT, read without verifying it.
fn peek_issuer(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    #[derive(Deserialize)]
    struct Iss {
        iss: Option<String>,
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Iss>(&raw).ok()?.iss
}

impl ServiceAccountTokens {
    /// A verifier with keys loaded from `paths` (each a PEM file).
    pub fn load(
        paths: &[&Path],
        issuers: Vec<String>,
        audiences: Vec<String>,
        accounts: Box<dyn ServiceAccountLookup>,
    ) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for p in paths {
            let pem = read(p)?;
            keys.extend(verification_keys(&pem).map_err(|message| KeyError {
                path: p.display().to_string(),
                message,
            })?);
        }
        Ok(Self::new(keys, issuers, audiences, accounts))
    }

    /// A verifier with these keys.
    pub fn new(
        keys: Vec<(DecodingKey, Algorithm)>,
        issuers: Vec<String>,
        audiences: Vec<String>,
        accounts: Box<dyn ServiceAccountLookup>,
    ) -> Self {
        Self {
            keys,
            issuers,
            audiences,
            accounts,
            cache: RwLock::new(HashMap::default()),
            reads: tokio::sync::Semaphore::new(MAX_CONCURRENT_READS),
            read_deadline: READ_DEADLINE,
        }
    }

    /// The same verifier with another deadline for storage reads (tests).
    #[must_use]
    pub fn with_read_deadline(mut self, deadline: Duration) -> Self {
        self.read_deadline = deadline;
        self
    }

    /// Verifies `token`'s signature and claims for `audiences` (the server's, or a
    /// TokenReview's).
    fn verify(&self, token: &str, audiences: &[String]) -> Result<Verified, AuthnError> {
        let mut last = String::from("no verification key");
        for (key, alg) in &self.keys {
            let mut v = Validation::new(*alg);
            v.set_issuer(&self.issuers);
            v.set_audience(audiences);
            v.leeway = LEEWAY_SECONDS;
            v.validate_nbf = true;
            v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            match jsonwebtoken::decode::<Claims>(token, key, &v) {
                Ok(data) => {
                    let c = data.claims;
                    // jsonwebtoken checks `exp` and `nbf` with the leeway; upstream (go-jose's
                    // `Validate`) also refuses a token issued more than the leeway ahead.
                    let leeway = i64::try_from(LEEWAY_SECONDS).unwrap_or(0);
                    if c.iat > unix_now().saturating_add(leeway) {
                        return Err(AuthnError::ServiceAccount(
                            "service account token is issued in the future".into(),
                        ));
                    }
                    let ns = c.kubernetes.namespace;
                    let mut user = UserInfo::new(
                        service_account_user(&ns, &c.kubernetes.serviceaccount.name),
                        [
                            ALL_SERVICE_ACCOUNTS.to_owned(),
                            format!("{ALL_SERVICE_ACCOUNTS}:{ns}"),
                        ],
                    );
                    user.uid.clone_from(&c.kubernetes.serviceaccount.uid);
                    user.extra.insert(
                        "authentication.kubernetes.io/credential-id".into(),
                        vec![format!("JTI={}", c.jti)],
                    );
                    return Ok(Verified {
                        namespace: ns,
                        name: c.kubernetes.serviceaccount.name,
                        uid: c.kubernetes.serviceaccount.uid,
                        exp: c.exp,
                        audiences: c.aud,
                        user: Arc::new(user.with_authenticated_group()),
                    });
                }
                Err(e) => {
                    last = match e.kind() {
                        ErrorKind::ExpiredSignature => "service account token has expired".into(),
                        ErrorKind::ImmatureSignature => {
                            "service account token is not valid yet".into()
                        }
                        _ => e.to_string(),
                    }
                }
            }
        }
        Err(AuthnError::ServiceAccount(last))
    }

    /// Checks a verified token against the clock and the in-process view of the accounts;
    /// when that view does not confirm the account, the answer waits for storage.
    fn check(&self, v: &Verified) -> TokenAnswer<'_> {
        let leeway = i64::try_from(LEEWAY_SECONDS).unwrap_or(0);
        let now = unix_now();
        // Expired once `now - leeway` is past `exp` (upstream, go-jose's `Validate`).
        if v.exp.saturating_add(leeway) < now {
            return TokenAnswer::Now(Err(AuthnError::ServiceAccount(
                "service account token has expired".into(),
            )));
        }
        match self.accounts.cached(&v.namespace, &v.name) {
            // A deletion mark is never removed: the view's word suffices.
            Some(a) if a.uid == v.uid && deleted_long_ago(&a, now) => {
                TokenAnswer::Now(Err(deleted(&v.namespace, &v.name)))
            }
            Some(a) if a.uid == v.uid => TokenAnswer::Now(Ok(Some(Arc::clone(&v.user)))),
            // Not there, or another uid: the view may not have seen a create (or a
            // re-create) yet. Storage decides.
            _ => TokenAnswer::Later(Box::pin(self.confirm(v.clone()))),
        }
    }

    /// Reads the token's account from storage (bounded, with a deadline) and decides.
    async fn confirm(&self, v: Verified) -> Result<Option<Arc<UserInfo>>, AuthnError> {
        let (ns, name) = (v.namespace.as_str(), v.name.as_str());
        let read = async {
            let _place = self.reads.acquire().await.map_err(|e| e.to_string())?;
            self.accounts.stored(ns, name).await
        };
        let stored = match tokio::time::timeout(self.read_deadline, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", self.read_deadline)),
        };
        match stored {
            Err(e) => {
                tracing::warn!(namespace = ns, name, error = %e, "could not read a token's service account");
                Err(AuthnError::ServiceAccount(format!(
                    "looking up service account {ns}/{name}: {e}"
                )))
            }
            Ok(None) => Err(deleted(ns, name)),
            Ok(Some(a)) if a.uid != v.uid => Err(AuthnError::ServiceAccount(format!(
                "service account UID ({}) does not match claim ({})",
                a.uid, v.uid
            ))),
            Ok(Some(a)) if deleted_long_ago(&a, unix_now()) => Err(deleted(ns, name)),
            Ok(Some(_)) => Ok(Some(v.user)),
        }
    }

    fn remember(&self, token: &str, v: &Verified) {
        let mut cache = self
            .cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_MAX {
            let now = unix_now();
            cache.retain(|_, c| c.exp > now);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(token.to_owned(), v.clone());
    }
}

fn deleted(namespace: &str, name: &str) -> AuthnError {
    AuthnError::ServiceAccount(format!(
        "service account {namespace}/{name} has been deleted"
    ))
}

impl TokenAuthenticator for ServiceAccountTokens {
    fn authenticate_token(&self, token: &str) -> TokenAnswer<'_> {
        self.authenticate_token_for(token, &self.audiences)
    }

    /// As upstream's authenticator under a TokenReview's audiences: the token must name one
    /// of `audiences` (a token cached for others is refused here, as it would be verified).
    fn authenticate_token_for(&self, token: &str, audiences: &[String]) -> TokenAnswer<'_> {
        {
            let cache = self
                .cache
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(v) = cache.get(token) {
                if !v.audiences.iter().any(|a| audiences.contains(a)) {
                    return TokenAnswer::Now(Err(AuthnError::ServiceAccount(
                        "InvalidAudience".into(),
                    )));
                }
                return self.check(v);
            }
        }
        let Some(iss) = peek_issuer(token) else {
            return TokenAnswer::Now(Ok(None));
        };
        if !self.issuers.contains(&iss) {
            return TokenAnswer::Now(Ok(None));
        }
        let v = match self.verify(token, audiences) {
            Ok(v) => v,
            Err(e) => return TokenAnswer::Now(Err(e)),
        };
        self.remember(token, &v);
        self.check(&v)
    }
}

#[cfg(test)]
mod tests;
