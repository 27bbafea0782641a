//! A TokenReview verifies a ServiceAccount token for the review's audiences, as upstream's
//! authenticators under `WithAudiences` (kube-rs's cluster test `create_token_request`): a
//! token minted through TokenRequest for `api` alone is authenticated by a review for `api`,
//! with `status.audiences: [api]`, and still refused for the server's own audiences — also
//! once the verified token is cached, which is the path a bearer request takes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::kube_rs_http2::{admin_tls, kube_over_tls_h2};

use common::Server;
use k8s_openapi::api::authentication::v1::{
    TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_review_verifies_for_its_own_audiences() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let server = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    let client = kube_over_tls_h2(&server.url, admin_tls(&pki));
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "fakesa"}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    let audiences = vec!["api".to_owned()];
    let minted = accounts
        .create_token_request(
            "fakesa",
            &PostParams::default(),
            &TokenRequest {
                metadata: Default::default(),
                spec: TokenRequestSpec {
                    audiences: audiences.clone(),
                    ..Default::default()
                },
                status: None,
            },
        )
        .await
        .unwrap();
    let token = minted.status.unwrap().token;
    let reviews: Api<TokenReview> = Api::all(client);
    let review = |audiences: Option<Vec<String>>| TokenReview {
        metadata: Default::default(),
        spec: TokenReviewSpec {
            audiences,
            token: Some(token.clone()),
        },
        status: None,
    };

    let status = reviews
        .create(&PostParams::default(), &review(Some(audiences.clone())))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.error, None);
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.audiences, Some(audiences));
    assert_eq!(
        status.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:fakesa")
    );

    // For the server's audiences (the review names none) the same token is refused, now
    // that it is cached as verified, as a bearer request's would be.
    for _ in 0..2 {
        let status = reviews
            .create(&PostParams::default(), &review(None))
            .await
            .unwrap()
            .status
            .unwrap();
        assert_ne!(status.authenticated, Some(true), "{status:?}");
        assert!(status.error.is_some(), "{status:?}");
    }
}
