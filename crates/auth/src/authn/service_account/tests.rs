//! Tests of ServiceAccount tokens: issuing, verification, the informer/storage lookup
//! and its bounds, forged and foreign tokens, TokenRequest validation.

use super::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Uids = Arc<Mutex<HashMap<(String, String), Account>>>;

/// An informer view (`cache`) and storage (`stored`) that can disagree, as they do
/// while an informer lags. `hang` makes storage reads never answer; `fail` makes them
/// fail; `reads` counts them.
#[derive(Clone, Default)]
struct Accounts {
    cache: Uids,
    stored: Uids,
    hang: Arc<std::sync::atomic::AtomicBool>,
    fail: Arc<std::sync::atomic::AtomicBool>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
    /// Hung reads in flight now, and the most ever at once.
    in_flight: Arc<Mutex<(usize, usize)>>,
}

/// A hung read, counted while it is in flight.
struct InFlight(Arc<Mutex<(usize, usize)>>);

impl InFlight {
    fn new(counts: &Arc<Mutex<(usize, usize)>>) -> Self {
        let mut c = counts.lock().unwrap();
        c.0 += 1;
        c.1 = c.1.max(c.0);
        Self(Arc::clone(counts))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().unwrap().0 -= 1;
    }
}

impl Accounts {
    fn put(&self, ns: &str, name: &str, uid: &str) {
        for m in [&self.cache, &self.stored] {
            m.lock()
                .unwrap()
                .insert((ns.into(), name.into()), Account::live(uid));
        }
    }
}

impl ServiceAccountLookup for Accounts {
    fn cached(&self, ns: &str, name: &str) -> Option<Account> {
        self.cache
            .lock()
            .unwrap()
            .get(&(ns.into(), name.into()))
            .cloned()
    }

    fn stored<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Account>, String>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.reads.fetch_add(1, SeqCst);
        if self.hang.load(SeqCst) {
            let guard = InFlight::new(&self.in_flight);
            return Box::pin(async move {
                let _guard = guard;
                std::future::pending().await
            });
        }
        if self.fail.load(SeqCst) {
            return Box::pin(std::future::ready(Err("etcd is down".into())));
        }
        let uid = self
            .stored
            .lock()
            .unwrap()
            .get(&(ns.into(), name.into()))
            .cloned();
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(uid)
        })
    }
}

const ISS: &str = "https://kubernetes.default.svc.cluster.local";

fn setup() -> (TokenIssuer, ServiceAccountTokens, Accounts) {
    let key = rcgen::KeyPair::generate().unwrap();
    let issuer =
        TokenIssuer::from_pem(key.serialize_pem().as_bytes(), ISS, vec![ISS.into()]).unwrap();
    let accounts = Accounts::default();
    let keys = verification_keys(key.public_key_pem().as_bytes()).unwrap();
    let from_private = verification_keys(key.serialize_pem().as_bytes()).unwrap();
    assert_eq!(from_private.len(), 1);
    let tokens = ServiceAccountTokens::new(
        keys,
        vec![ISS.into()],
        vec![ISS.into()],
        Box::new(accounts.clone()),
    );
    (issuer, tokens, accounts)
}

async fn auth(tokens: &ServiceAccountTokens, token: &str) -> crate::authn::TokenResult {
    tokens.authenticate_token(token).resolve().await
}

fn decided_now(tokens: &ServiceAccountTokens, token: &str) -> bool {
    matches!(tokens.authenticate_token(token), TokenAnswer::Now(_))
}

#[tokio::test]
async fn issued_tokens_authenticate_until_the_account_goes() {
    let (issuer, tokens, accounts) = setup();
    accounts.put("demo", "builder", "uid-1");
    let (token, exp) = issuer
        .issue("demo", "builder", "uid-1", &TokenRequestSpec::default())
        .unwrap();
    assert!(exp > unix_now() + 3000);
    let user = auth(&tokens, &token).await.unwrap().unwrap();
    assert_eq!(user.name, "system:serviceaccount:demo:builder");
    assert_eq!(user.uid, "uid-1");
    assert_eq!(
        user.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:demo",
            "system:authenticated"
        ]
    );
    // cached the second time, same answer, from memory
    assert!(decided_now(&tokens, &token));
    assert_eq!(auth(&tokens, &token).await.unwrap().unwrap(), user);
    assert_eq!(accounts.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    // re-created with another uid: refused
    accounts.put("demo", "builder", "uid-2");
    assert!(auth(&tokens, &token).await.is_err());
    // deleted everywhere: refused, storage confirming
    accounts.cache.lock().unwrap().clear();
    accounts.stored.lock().unwrap().clear();
    let e = auth(&tokens, &token).await.unwrap_err();
    assert!(e.to_string().contains("deleted"), "{e}");
}

/// The race of issue 14: `kubectl create serviceaccount` then `kubectl create token`
/// then a request with the token, faster than the informer sees the create. Before
/// the storage read, the token was refused (401) because only the informer was asked.
#[tokio::test]
async fn a_token_of_an_account_the_informer_has_not_seen_yet_is_accepted() {
    let (issuer, tokens, accounts) = setup();
    accounts
        .stored
        .lock()
        .unwrap()
        .insert(("demo".into(), "fresh".into()), Account::live("uid-new"));
    let (token, _) = issuer
        .issue("demo", "fresh", "uid-new", &TokenRequestSpec::default())
        .unwrap();
    assert!(
        !decided_now(&tokens, &token),
        "the informer misses: storage decides"
    );
    let user = auth(&tokens, &token).await.unwrap().unwrap();
    assert_eq!(user.name, "system:serviceaccount:demo:fresh");

    // Deleted and re-created: the informer still holds the old uid, storage the new one.
    accounts
        .cache
        .lock()
        .unwrap()
        .insert(("demo".into(), "fresh".into()), Account::live("uid-old"));
    assert!(auth(&tokens, &token).await.unwrap().is_some());
    // ...while a token of the old account is refused once storage says so.
    let (old, _) = issuer
        .issue("demo", "fresh", "uid-old", &TokenRequestSpec::default())
        .unwrap();
    accounts.cache.lock().unwrap().clear();
    let e = auth(&tokens, &old).await.unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");

    // Gone from storage too: refused.
    accounts.stored.lock().unwrap().clear();
    let e = auth(&tokens, &token).await.unwrap_err();
    assert!(e.to_string().contains("has been deleted"), "{e}");
}

/// As upstream: an account held by a finalizer after its delete keeps its tokens for
/// the leeway, then refuses them — whether the informer or storage says so.
#[tokio::test]
async fn an_account_marked_for_deletion_refuses_its_tokens_after_the_leeway() {
    let (issuer, tokens, accounts) = setup();
    let (token, _) = issuer
        .issue("demo", "going", "u", &TokenRequestSpec::default())
        .unwrap();
    let marked = |ago: i64| Account {
        uid: "u".into(),
        deleted_at: Some(unix_now() - ago),
    };
    let key = || ("demo".to_owned(), "going".to_owned());
    accounts.stored.lock().unwrap().insert(key(), marked(10));
    accounts.cache.lock().unwrap().insert(key(), marked(10));
    assert!(
        auth(&tokens, &token).await.unwrap().is_some(),
        "within the leeway"
    );
    accounts.cache.lock().unwrap().insert(key(), marked(120));
    assert!(decided_now(&tokens, &token), "the informer's mark suffices");
    let e = auth(&tokens, &token).await.unwrap_err();
    assert!(e.to_string().contains("has been deleted"), "{e}");
    // Storage's mark, the informer not having the account.
    accounts.cache.lock().unwrap().clear();
    accounts.stored.lock().unwrap().insert(key(), marked(120));
    let e = auth(&tokens, &token).await.unwrap_err();
    assert!(e.to_string().contains("has been deleted"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn storage_that_does_not_answer_refuses_within_the_deadline() {
    let (issuer, tokens, accounts) = setup();
    let tokens = tokens.with_read_deadline(Duration::from_millis(200));
    let (token, _) = issuer
        .issue("demo", "slow", "u", &TokenRequestSpec::default())
        .unwrap();
    accounts
        .hang
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // More requests than places: the ones waiting for a place are bounded by the same
    // deadline.
    let all =
        futures::future::join_all((0..MAX_CONCURRENT_READS + 4).map(|_| auth(&tokens, &token)));
    let started = tokio::time::Instant::now();
    let answers = all.await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(answers.iter().all(|a| {
        a.as_ref()
            .is_err_and(|e| e.to_string().contains("no answer within"))
    }));
    assert_eq!(
        *accounts.in_flight.lock().unwrap(),
        (0, MAX_CONCURRENT_READS),
        "at most {MAX_CONCURRENT_READS} reads at once, none left behind"
    );
    accounts
        .hang
        .store(false, std::sync::atomic::Ordering::SeqCst);
    accounts
        .fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let e = auth(&tokens, &token).await.unwrap_err();
    assert!(e.to_string().contains("etcd is down"), "{e}");
}

#[tokio::test]
async fn foreign_and_forged_tokens() {
    let (issuer, tokens, accounts) = setup();
    accounts.put("demo", "x", "u");
    assert_eq!(auth(&tokens, "not-a-jwt").await.unwrap(), None);
    assert_eq!(auth(&tokens, "a.b.c").await.unwrap(), None);
    // another key, same issuer: a forgery
    let other = rcgen::KeyPair::generate().unwrap();
    let forger =
        TokenIssuer::from_pem(other.serialize_pem().as_bytes(), ISS, vec![ISS.into()]).unwrap();
    let (forged, _) = forger
        .issue("demo", "x", "u", &TokenRequestSpec::default())
        .unwrap();
    assert!(auth(&tokens, &forged).await.is_err());
    // another issuer: not ours
    let elsewhere = TokenIssuer::from_pem(
        other.serialize_pem().as_bytes(),
        "https://other",
        vec!["https://other".into()],
    )
    .unwrap();
    let (foreign, _) = elsewhere
        .issue("demo", "x", "u", &TokenRequestSpec::default())
        .unwrap();
    assert_eq!(auth(&tokens, &foreign).await.unwrap(), None);
    // wrong audience
    let spec = TokenRequestSpec {
        audiences: Some(vec!["vault".into()]),
        ..TokenRequestSpec::default()
    };
    let (vault, _) = issuer.issue("demo", "x", "u", &spec).unwrap();
    assert!(auth(&tokens, &vault).await.is_err());
    // tampered payload
    let (good, _) = issuer
        .issue("demo", "x", "u", &TokenRequestSpec::default())
        .unwrap();
    let mut parts: Vec<&str> = good.split('.').collect();
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[1])
        .unwrap();
    let evil = String::from_utf8(payload)
        .unwrap()
        .replace("\"x\"", "\"y\"");
    let evil = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(evil);
    parts[1] = &evil;
    assert!(auth(&tokens, &parts.join(".")).await.is_err());
    // none of these needed storage
    assert_eq!(accounts.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Issue 23 item 7: the time claims as upstream's (go-jose `Validate`, 60 s leeway): `iat`
/// more than the leeway ahead is refused ("issued in the future"; jsonwebtoken does not
/// check `iat`), `nbf` likewise, `exp` only once more than the leeway behind; a time claim
/// of the wrong JSON type never counts as absent (CVE-2026-25537).
#[tokio::test]
async fn time_claims_are_checked_with_upstreams_leeway() {
    let (issuer, tokens, accounts) = setup();
    accounts.put("demo", "x", "u");
    let now = crate::authn::x509::unix_now();
    let signed = |edit: &dyn Fn(&mut Claims)| {
        let mut c = issuer.claims("demo", "x", "u", vec![ISS.into()], 3600, now);
        edit(&mut c);
        issuer.sign(&c).unwrap()
    };
    let refused = |t: String| {
        let tokens = &tokens;
        async move { auth(tokens, &t).await.unwrap_err().to_string() }
    };
    let e = refused(signed(&|c| c.iat = now + 3600)).await;
    assert!(e.contains("issued in the future"), "{e}");
    let e = refused(signed(&|c| c.nbf = now + 3600)).await;
    assert!(e.contains("not valid yet"), "{e}");
    let e = refused(signed(&|c| c.exp = now - 120)).await;
    assert!(e.contains("has expired"), "{e}");
    // Within the leeway: accepted.
    for edit in [
        &(|c: &mut Claims| c.iat = now + 30) as &dyn Fn(&mut Claims),
        &|c: &mut Claims| c.nbf = now + 30,
        &|c: &mut Claims| c.exp = now - 30,
    ] {
        let user = auth(&tokens, &signed(edit)).await.unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:demo:x");
    }
    // A time claim as a string is a malformed token, not a missing claim.
    for claim in ["nbf", "exp", "iat"] {
        let mut c =
            serde_json::to_value(issuer.claims("demo", "x", "u", vec![ISS.into()], 3600, now))
                .unwrap();
        c[claim] = serde_json::json!((now + 99_999).to_string());
        let t = jsonwebtoken::encode(&Header::new(issuer.algorithm), &c, &issuer.key).unwrap();
        assert!(
            auth(&tokens, &t).await.is_err(),
            "{claim} as a string was accepted"
        );
    }
}

#[test]
fn token_request_validation() {
    let (issuer, _, _) = setup();
    let short = TokenRequestSpec {
        expiration_seconds: Some(60),
        ..TokenRequestSpec::default()
    };
    assert!(
        issuer
            .issue("a", "b", "c", &short)
            .unwrap_err()
            .contains("10 minutes")
    );
    let bound = TokenRequestSpec {
        bound_object_ref: Some(serde_json::json!({"kind": "Pod", "name": "p"})),
        ..TokenRequestSpec::default()
    };
    assert!(issuer.issue("a", "b", "c", &bound).is_err());
}
