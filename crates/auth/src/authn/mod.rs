//! Authentication: who sent a request, from the credentials it carries.
//!
//! [`Authentication`] is upstream's authenticator chain: X.509 client certificates
//! (`--client-ca-file`), then bearer tokens — the static token file (`--token-auth-file`),
//! then ServiceAccount JWTs — and finally anonymous (`--anonymous-auth`).
//!
//! Invariants (upstream's union + fail-on-error + bearer-token rules):
//! - the first authenticator that recognises a credential decides; a successful user gets
//!   `system:authenticated` added;
//! - a credential that is presented but not accepted (an unknown or invalid bearer token, a
//!   client certificate that does not verify against the client CA) is a 401 — never a
//!   fallback to anonymous;
//! - a request without any credential is anonymous when anonymous auth is on, else 401;
//! - what memory can decide is decided synchronously ([`TokenAnswer::Now`]); an
//!   authenticator that must read storage first (a ServiceAccount its informer has not
//!   seen) answers [`TokenAnswer::Later`], a future bounded by its own deadline.

use std::sync::Arc;

use rustls_pki_types::CertificateDer;

use crate::user::UserInfo;

pub mod service_account;
pub mod token_file;
pub mod x509;

pub use service_account::{
    Account, BoxFuture, ServiceAccountLookup, ServiceAccountTokens, TokenIssuer, TokenRequestSpec,
};
pub use token_file::TokenFile;
pub use x509::{ClientCa, RequestClientCert};

/// What a request presents.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'a> {
    /// The bearer token (`Authorization: Bearer …`, or the websocket protocol
    /// `base64url.bearer.authorization.k8s.io.…`).
    pub bearer: Option<&'a str>,
    /// The TLS client certificate chain (end entity first), when the client sent one.
    pub client_certs: Option<&'a [CertificateDer<'static>]>,
}

/// Why a request was not authenticated. Every variant is a 401; the message is for the
/// log, never for the client (upstream answers only "Unauthorized").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    /// A bearer token no authenticator accepted.
    #[error("invalid bearer token")]
    InvalidToken,
    /// A token this server issued, but no longer valid (expired, bad signature, wrong
    /// audience, deleted or replaced ServiceAccount).
    #[error("invalid service account token: {0}")]
    ServiceAccount(String),
    /// A client certificate that does not verify.
    #[error("verifying certificate: {0}")]
    Certificate(String),
    /// No credential, and anonymous requests are not allowed.
    #[error("no credentials and anonymous access is disabled")]
    NoCredentials,
    /// Several authenticators failed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<AuthnError>),
}

/// What a token authenticator answers: `Ok(None)` is not a token it knows (the next one
/// is asked), `Ok(Some(user))` accepts it, `Err` refuses it (401).
pub type TokenResult = Result<Option<Arc<UserInfo>>, AuthnError>;

/// A token authenticator's answer: decided from memory, or after a (deadline-bounded) read.
pub enum TokenAnswer<'a> {
    /// Decided now.
    Now(TokenResult),
    /// Decided once this future resolves (it has its own deadline).
    Later(BoxFuture<'a, TokenResult>),
}

impl TokenAnswer<'_> {
    /// The answer, waiting for it if it is not decided yet.
    pub async fn resolve(self) -> TokenResult {
        match self {
            TokenAnswer::Now(r) => r,
            TokenAnswer::Later(f) => f.await,
        }
    }
}

impl std::fmt::Debug for TokenAnswer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenAnswer::Now(r) => f.debug_tuple("Now").field(r).finish(),
            TokenAnswer::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// A bearer-token authenticator.
pub trait TokenAuthenticator: Send + Sync {
    /// What this authenticator says of `token`.
    fn authenticate_token(&self, token: &str) -> TokenAnswer<'_>;

    /// What it says of `token` meant for one of `audiences` (a TokenReview's
    /// `spec.audiences`, upstream's `authenticator.WithAudiences`). Authenticators whose
    /// tokens carry no audiences (static tokens) answer as
    /// [`authenticate_token`](Self::authenticate_token); the review then matches the server's
    /// audiences, upstream's implicit ones.
    fn authenticate_token_for(&self, token: &str, audiences: &[String]) -> TokenAnswer<'_> {
        let _ = audiences;
        self.authenticate_token(token)
    }
}

/// The user with `system:authenticated` (shared, not copied, when it already has it).
pub fn authenticated(user: Arc<UserInfo>) -> Arc<UserInfo> {
    if user.in_group(crate::user::ALL_AUTHENTICATED)
        || user.in_group(crate::user::ALL_UNAUTHENTICATED)
    {
        user
    } else {
        Arc::new(UserInfo::clone(&user).with_authenticated_group())
    }
}

/// The authenticator chain.
#[derive(Clone, Default)]
pub struct Authentication {
    /// `--client-ca-file`.
    pub x509: Option<Arc<ClientCa>>,
    /// Token authenticators, asked in order.
    pub tokens: Vec<Arc<dyn TokenAuthenticator>>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
}

impl std::fmt::Debug for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authentication")
            .field("x509", &self.x509.is_some())
            .field("tokens", &self.tokens.len())
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

impl Authentication {
    /// Whether any authenticator (other than anonymous) is configured.
    pub fn has_authenticators(&self) -> bool {
        self.x509.is_some() || !self.tokens.is_empty()
    }

    /// Authenticates a bearer token alone for `audiences` (a TokenReview): no client
    /// certificate, no anonymous fallback.
    pub async fn authenticate_token_for(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Arc<UserInfo>, AuthnError> {
        let mut errors = Vec::new();
        for t in &self.tokens {
            match t.authenticate_token_for(token, audiences).resolve().await {
                Ok(Some(user)) => return Ok(authenticated(user)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => Err(AuthnError::InvalidToken),
            1 => Err(errors.remove(0)),
            _ => Err(AuthnError::Several(errors)),
        }
    }

    /// Authenticates a request. Resolves without waiting unless a token authenticator
    /// has to read storage ([`TokenAnswer::Later`]).
    pub async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Arc<UserInfo>, AuthnError> {
        let mut errors = Vec::new();
        if let (Some(ca), Some(chain)) = (&self.x509, creds.client_certs) {
            match ca.authenticate(chain) {
                Ok(Some(user)) => return Ok(authenticated(user)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if let Some(token) = creds.bearer {
            let mut token_errors = Vec::new();
            for t in &self.tokens {
                match t.authenticate_token(token).resolve().await {
                    Ok(Some(user)) => return Ok(authenticated(user)),
                    Ok(None) => {}
                    Err(e) => token_errors.push(e),
                }
            }
            if token_errors.is_empty() {
                token_errors.push(AuthnError::InvalidToken);
            }
            errors.extend(token_errors);
        }
        match errors.len() {
            0 if self.anonymous => Ok(Arc::new(UserInfo::anonymous())),
            0 => Err(AuthnError::NoCredentials),
            1 => Err(errors.remove(0)),
            _ => Err(AuthnError::Several(errors)),
        }
    }
}

/// The bearer token of an `Authorization` header value (upstream's rules: `Bearer` in any
/// case, one space, a non-empty token; anything else is no token).
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let v = authorization.trim();
    let mut parts = v.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The prefix of the websocket subprotocol carrying a bearer token.
pub const WEBSOCKET_PROTOCOL_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// The bearer token of a `Sec-WebSocket-Protocol` header value, as upstream's websocket
/// authenticator reads it (base64url without padding).
pub fn websocket_bearer_token(protocols: &str) -> Option<String> {
    use base64::Engine;
    protocols.split(',').map(str::trim).find_map(|p| {
        let encoded = p.strip_prefix(WEBSOCKET_PROTOCOL_PREFIX)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .ok()?;
        String::from_utf8(raw).ok().filter(|t| !t.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, TokenResult);
    impl TokenAuthenticator for Fixed {
        fn authenticate_token(&self, token: &str) -> TokenAnswer<'_> {
            if token == self.0 {
                TokenAnswer::Now(self.1.clone())
            } else {
                TokenAnswer::Now(Ok(None))
            }
        }
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("  bearer abc  "), Some("abc"));
        assert_eq!(bearer_token("Bearer abc def"), Some("abc"));
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Basic YWxpY2U6eA=="), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(
            websocket_bearer_token("v4.channel.k8s.io, base64url.bearer.authorization.k8s.io.YWJj"),
            Some("abc".to_owned())
        );
        assert_eq!(
            websocket_bearer_token("base64url.bearer.authorization.k8s.io.!!"),
            None
        );
    }

    #[tokio::test]
    async fn bad_credentials_never_become_anonymous() {
        let auth = Authentication {
            x509: None,
            tokens: vec![
                Arc::new(Fixed(
                    "good",
                    Ok(Some(Arc::new(UserInfo::new("alice", ["dev"])))),
                )),
                Arc::new(Fixed(
                    "stale",
                    Err(AuthnError::ServiceAccount("expired".into())),
                )),
            ],
            anonymous: true,
        };
        let with = |t| Credentials {
            bearer: Some(t),
            client_certs: None,
        };
        let alice = auth.authenticate(&with("good")).await.unwrap();
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert_eq!(
            auth.authenticate(&with("bogus")).await,
            Err(AuthnError::InvalidToken)
        );
        assert!(matches!(
            auth.authenticate(&with("stale")).await,
            Err(AuthnError::ServiceAccount(_))
        ));
        assert_eq!(
            auth.authenticate(&Credentials::default()).await,
            Ok(Arc::new(UserInfo::anonymous()))
        );
        let closed = Authentication {
            anonymous: false,
            ..auth
        };
        assert_eq!(
            closed.authenticate(&Credentials::default()).await,
            Err(AuthnError::NoCredentials)
        );
    }
}
