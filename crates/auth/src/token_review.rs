//! `authentication.k8s.io/v1` `TokenReview` (pkg/registry/authentication/tokenreview): runs
//! the server's token authenticators over `spec.token` for the audiences `spec.audiences`
//! (default: the server's API audiences) and answers `status.authenticated`, `user`,
//! `audiences` and `error`. Nothing is stored.
//!
//! Audiences: a JWT's are its `aud` claim (read once it has verified), any other token's
//! (static tokens) are the server's API audiences (upstream's implicit audiences); a token
//! whose audiences do not meet the wanted ones is not authenticated, with upstream's error.
//! A ServiceAccount token is verified against the review's audiences (the server's when the
//! review names none), as upstream's authenticators are: a token minted for `api` alone passes
//! a review for `api` and is still refused as a credential of a request to this server.
//!
//! Invariants: the token is never echoed back beyond the body it came in; every allocation
//! is bounded by the body (the request-size cap bounds it).

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::authn::{Authentication, AuthnError};
use crate::review::ReviewError;

/// The `aud` claim of a JWT, unverified (called only after a verifier accepted the token).
fn jwt_audiences(token: &str) -> Option<Vec<String>> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: Value = serde_json::from_slice(&raw).ok()?;
    match claims.get("aud")? {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(a) => Some(
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

/// Go's `%q` of a string list, as upstream prints audiences in its error.
fn quoted(list: &[String]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|s| Value::from(s.as_str()).to_string())
        .collect();
    format!("[{}]", items.join(" "))
}

/// Answers a TokenReview body. `authn`: the server's authenticators (`None` in the insecure
/// mode: the review is answered with an empty status, as upstream without an
/// authenticator); `api_audiences`: the server's (`--api-audiences`, default the issuers).
pub async fn token_review(
    authn: Option<&Authentication>,
    api_audiences: &[String],
    body: Value,
) -> Result<Value, ReviewError> {
    let Value::Object(mut body) = body else {
        return Err(ReviewError::BadRequest(
            "the body must be a TokenReview object".into(),
        ));
    };
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if token.is_empty() {
        return Err(ReviewError::BadRequest(
            "token is required for TokenReview in authentication".into(),
        ));
    }
    let requested: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    body.insert("kind".into(), json!("TokenReview"));
    body.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
    if let Value::Object(m) = body.entry("metadata").or_insert_with(|| json!({})) {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    let Some(authn) = authn else {
        body.insert("status".into(), json!({}));
        return Ok(Value::Object(body));
    };
    let wanted = if requested.is_empty() {
        api_audiences.to_vec()
    } else {
        requested
    };
    // Only the token (no client certificate, no anonymous fallback), verified for the
    // review's audiences as upstream's authenticators are under `WithAudiences`.
    let mut status = Map::new();
    match authn.authenticate_token_for(&token, &wanted).await {
        Ok(user) => {
            let have = jwt_audiences(&token).unwrap_or_else(|| api_audiences.to_vec());
            let met: Vec<String> = if wanted.is_empty() {
                have.clone()
            } else {
                have.iter()
                    .filter(|a| wanted.contains(a))
                    .cloned()
                    .collect()
            };
            if !wanted.is_empty() && met.is_empty() {
                status.insert("user".into(), json!({}));
                status.insert(
                    "error".into(),
                    json!(format!(
                        "[invalid bearer token, token audiences {} is invalid for the target audiences {}]",
                        quoted(&have),
                        quoted(&wanted)
                    )),
                );
            } else {
                status.insert("authenticated".into(), json!(true));
                let mut u = serde_json::to_value(&*user)
                    .map_err(|e| ReviewError::BadRequest(e.to_string()))?;
                if let Some(m) = u.as_object_mut() {
                    m.entry("groups").or_insert_with(|| json!([]));
                }
                status.insert("user".into(), u);
                status.insert("audiences".into(), json!(met));
            }
        }
        Err(e) => {
            status.insert("user".into(), json!({}));
            status.insert("error".into(), json!(error_text(&e)));
        }
    }
    body.insert("status".into(), Value::Object(status));
    Ok(Value::Object(body))
}

/// The error as upstream's union authenticator words it (`[invalid bearer token, ...]`).
fn error_text(e: &AuthnError) -> String {
    match e {
        AuthnError::InvalidToken => "[invalid bearer token]".into(),
        other => format!("[invalid bearer token, {other}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn file_tokens() -> Authentication {
        let file = crate::authn::token_file::TokenFile::parse(
            b"secret,alice,u1,\"dev,ops\"\n",
            "tokens.csv",
        )
        .expect("token file");
        Authentication {
            x509: None,
            tokens: vec![Arc::new(file)],
            anonymous: true,
        }
    }

    #[tokio::test]
    async fn a_known_token_is_authenticated_with_its_user_and_audiences() {
        let authn = file_tokens();
        let auds = vec!["https://kubernetes.default.svc".to_owned()];
        let out = token_review(Some(&authn), &auds, json!({"spec": {"token": "secret"}}))
            .await
            .unwrap();
        assert_eq!(out["kind"], "TokenReview");
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["user"]["username"], "alice");
        assert_eq!(out["status"]["user"]["uid"], "u1");
        assert_eq!(out["status"]["audiences"], json!(auds));
        let other = token_review(
            Some(&authn),
            &auds,
            json!({"spec": {"token": "secret", "audiences": ["vault"]}}),
        )
        .await
        .unwrap();
        assert_eq!(other["status"]["authenticated"], Value::Null);
        assert!(
            other["status"]["error"]
                .as_str()
                .unwrap()
                .contains("invalid for the target audiences [\"vault\"]")
        );
    }

    #[tokio::test]
    async fn an_unknown_token_is_not_authenticated_and_anonymous_does_not_count() {
        let authn = file_tokens();
        let out = token_review(Some(&authn), &[], json!({"spec": {"token": "nope"}}))
            .await
            .unwrap();
        assert_eq!(out["status"]["authenticated"], Value::Null);
        assert_eq!(out["status"]["error"], "[invalid bearer token]");
        let empty = token_review(Some(&authn), &[], json!({"spec": {}})).await;
        assert!(matches!(empty, Err(ReviewError::BadRequest(_))));
        let insecure = token_review(None, &[], json!({"spec": {"token": "x"}}))
            .await
            .unwrap();
        assert_eq!(insecure["status"], json!({}));
    }
}
