//! The ServiceAccount lookup of token verification ([`Accounts`], built by [`accounts`]):
//! the ServiceAccount informer's store first, then the resource's storage.
//!
//! Invariants: the storage read names no resource version (through a cacher, a read of
//! the backend, never of the cache); a stored object's JSON is parsed only when it names
//! `deletionTimestamp`.

use std::sync::Arc;

use listwatch_api::Object;
use listwatch_endpoints::Resource;
use listwatch_storage::Key;

use super::{Informers, find};

/// The ServiceAccounts token verification looks up: the informer's store first, then the
/// resource's storage when the store misses or holds another uid (upstream's token getter:
/// lister, then a live GET). The read goes through the resource's storage with no
/// resource version — through a cacher that is a read of the backend, never of the cache.
pub struct Accounts {
    store: listwatch_runtime::Store<Object>,
    storage: Arc<dyn listwatch_storage::Storage>,
    storage_resource: String,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts")
            .field("storage_resource", &self.storage_resource)
            .finish_non_exhaustive()
    }
}

impl Accounts {
    /// A lookup over this informer store and the serviceaccounts resource's storage (and
    /// its storage resource name, for keys).
    pub fn new(
        store: listwatch_runtime::Store<Object>,
        storage: Arc<dyn listwatch_storage::Storage>,
        storage_resource: String,
    ) -> Self {
        Self {
            store,
            storage,
            storage_resource,
        }
    }
}

/// What token verification needs of a stored ServiceAccount: its uid, and when it is
/// marked for deletion. Only an object whose JSON names `deletionTimestamp` is parsed (the
/// informer path stays a map look-up).
fn account(o: &Object) -> listwatch_auth::authn::Account {
    const MARK: &[u8] = b"\"deletionTimestamp\"";
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default, rename = "deletionTimestamp")]
        deletion_timestamp: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Marked {
        metadata: Meta,
    }
    let deleted_at = if o.stored_json().windows(MARK.len()).any(|w| w == MARK) {
        o.deserialize::<Marked>()
            .ok()
            .and_then(|m| m.metadata.deletion_timestamp)
            .and_then(|t| listwatch_endpoints::clock::parse_rfc3339(&t))
    } else {
        None
    };
    listwatch_auth::authn::Account {
        uid: o.uid().unwrap_or("").to_owned(),
        deleted_at,
    }
}

impl listwatch_auth::authn::ServiceAccountLookup for Accounts {
    fn cached(&self, namespace: &str, name: &str) -> Option<listwatch_auth::authn::Account> {
        self.store
            .get_by_name(Some(namespace), name)
            .map(|o| account(&o))
    }

    fn stored<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> listwatch_auth::authn::BoxFuture<'a, Result<Option<listwatch_auth::authn::Account>, String>>
    {
        Box::pin(async move {
            let key = Key::object(&self.storage_resource, Some(namespace), name)
                .map_err(|e| e.to_string())?;
            let opts = listwatch_storage::GetOptions {
                resource_version: None,
                ignore_not_found: true,
            };
            let found = self
                .storage
                .get(&key, &opts)
                .await
                .map_err(|e| e.to_string())?;
            Ok(found.as_ref().map(account))
        })
    }
}

/// The ServiceAccount lookup of token verification (see [`Accounts`]).
pub fn accounts(
    informers: &Informers,
    resources: &[Resource],
) -> Option<Box<dyn listwatch_auth::authn::ServiceAccountLookup>> {
    let store = informers.service_accounts.as_ref()?.store();
    let resource = find(resources, "", "serviceaccounts")?;
    Some(Box::new(Accounts::new(
        store,
        Arc::clone(&resource.storage),
        resource.info.storage_resource.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_auth::authn::service_account::verification_keys;
    use listwatch_auth::authn::{
        ServiceAccountTokens, TokenAuthenticator, TokenIssuer, TokenRequestSpec,
    };
    use listwatch_storage::{Storage, no_validation};

    const ISS: &str = "https://kubernetes.default.svc.cluster.local";

    async fn create(storage: &dyn Storage, name: &str, uid: &str) {
        create_marked(storage, name, uid, None).await;
    }

    /// Creates an account, marked for deletion `deleted_ago` seconds ago if given.
    async fn create_marked(storage: &dyn Storage, name: &str, uid: &str, deleted_ago: Option<i64>) {
        let key = Key::object("serviceaccounts", Some("demo"), name).unwrap();
        let mut v = serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": "demo", "uid": uid, "finalizers": ["example.com/hold"]},
        });
        if let Some(ago) = deleted_ago {
            let at = listwatch_endpoints::clock::now_unix() - ago;
            v["metadata"]["deletionTimestamp"] =
                listwatch_endpoints::clock::format_rfc3339(at).into();
        }
        storage
            .create(
                &key,
                Object::from_value(v, &Default::default()).unwrap(),
                None,
            )
            .await
            .unwrap();
    }

    /// The race of issue 14 over real storage: the informer has not seen the account
    /// (here: it never sees anything), storage holds it. Before the storage read the token
    /// was refused (401) although the account existed.
    #[tokio::test]
    async fn tokens_of_accounts_the_informer_has_not_seen_are_checked_in_storage() {
        let storage: Arc<dyn Storage> = Arc::new(listwatch_memstore::MemStore::new());
        let held_back = listwatch_runtime::Writer::<Object>::default();
        let accounts = Accounts::new(
            held_back.store(),
            Arc::clone(&storage),
            "serviceaccounts".into(),
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer =
            TokenIssuer::from_pem(key.serialize_pem().as_bytes(), ISS, vec![ISS.into()]).unwrap();
        let tokens = ServiceAccountTokens::new(
            verification_keys(key.public_key_pem().as_bytes()).unwrap(),
            vec![ISS.into()],
            vec![ISS.into()],
            Box::new(accounts),
        );
        create(storage.as_ref(), "builder", "uid-1").await;
        let (token, _) = issuer
            .issue("demo", "builder", "uid-1", &TokenRequestSpec::default())
            .unwrap();
        let user = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "system:serviceaccount:demo:builder");

        // Deleted, then re-created under the same name: storage says "another uid".
        let k = Key::object("serviceaccounts", Some("demo"), "builder").unwrap();
        storage
            .delete(&k, None, no_validation(), None)
            .await
            .unwrap();
        let e = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has been deleted"), "{e}");
        create(storage.as_ref(), "builder", "uid-2").await;
        let e = tokens
            .authenticate_token(&token)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");

        // Held by a finalizer after a delete: the tokens last the 60 s leeway (upstream).
        create_marked(storage.as_ref(), "leaving", "uid-3", Some(10)).await;
        create_marked(storage.as_ref(), "left", "uid-4", Some(120)).await;
        let (leaving, _) = issuer
            .issue("demo", "leaving", "uid-3", &TokenRequestSpec::default())
            .unwrap();
        let (left, _) = issuer
            .issue("demo", "left", "uid-4", &TokenRequestSpec::default())
            .unwrap();
        assert!(tokens.authenticate_token(&leaving).resolve().await.is_ok());
        let e = tokens
            .authenticate_token(&left)
            .resolve()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has been deleted"), "{e}");
    }
}
