//! The RBAC resources at run time: the informers the authorizer reads (and the
//! ServiceAccount informer token verification reads), the bootstrap policy kept in place
//! (created at start, reconciled whenever one of its objects changes), ClusterRole
//! aggregation, and the admission hook that validates RBAC writes and refuses escalation.
//!
//! This module owns the informers ([`Informers`]); the rest is a submodule each:
//! `reconcile` (the bootstrap policy and ClusterRole aggregation kept in place,
//! [`Informers::spawn_reconciler`]), `admission` ([`RbacAdmission`]: RBAC writes validated,
//! escalation refused) and `accounts` ([`Accounts`]: the ServiceAccount lookup of token
//! verification).
//!
//! Invariants: the informers read the resources through their cachers (in process), never
//! per request; writes made here go through the same storage as API writes; the admission
//! hook runs on the object that is about to be stored.

mod accounts;
mod admission;
mod reconcile;

use std::sync::Arc;

use listwatch_api::Object;
use listwatch_auth::rbac::{self, GROUP, Rbac, RbacStores, Role, RoleBinding};
use listwatch_cacher::StorageListerWatcher;
use listwatch_endpoints::Resource;
use listwatch_runtime::{Informer, InformerConfig, Typed};
use listwatch_storage::Key;

pub use accounts::{Accounts, accounts};
pub use admission::RbacAdmission;

fn find<'a>(resources: &'a [Resource], group: &str, plural: &str) -> Option<&'a Resource> {
    resources
        .iter()
        .find(|r| r.info.group == group && r.info.plural == plural)
}

fn lister(r: &Resource) -> Option<StorageListerWatcher> {
    let key = Key::collection(&r.info.storage_resource, None).ok()?;
    Some(StorageListerWatcher::new(Arc::clone(&r.storage), key))
}

/// An informer configuration over a [`StorageListerWatcher`]: no idle deadline (its watch
/// never times out, so a deadline would only re-watch every 5–10 minutes).
fn informer_config<K>() -> InformerConfig<K> {
    InformerConfig {
        reflector: StorageListerWatcher::reflector_config(listwatch_runtime::Config::default()),
        ..InformerConfig::default()
    }
}

/// The running informers; dropping them stops them.
pub struct Informers {
    roles: Informer<Role>,
    cluster_roles: Informer<Role>,
    role_bindings: Informer<RoleBinding>,
    cluster_role_bindings: Informer<RoleBinding>,
    /// ServiceAccounts, for token verification.
    pub service_accounts: Option<Informer<Object>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    /// Starts the informers over the served resources (`None` if the RBAC resources are not
    /// served).
    pub fn start(resources: &[Resource]) -> Option<Self> {
        let typed_role = |plural| -> Option<Informer<Role>> {
            let lw = lister(find(resources, GROUP, plural)?)?;
            Some(Informer::spawn(Typed::new(lw), informer_config()))
        };
        let typed_binding = |plural| -> Option<Informer<RoleBinding>> {
            let lw = lister(find(resources, GROUP, plural)?)?;
            let (name, f) = rbac::subject_index();
            Some(Informer::spawn(
                Typed::new(lw),
                informer_config().index(name, f),
            ))
        };
        let service_accounts = find(resources, "", "serviceaccounts")
            .and_then(lister)
            .map(|lw| Informer::spawn(lw, informer_config()));
        Some(Self {
            roles: typed_role("roles")?,
            cluster_roles: typed_role("clusterroles")?,
            role_bindings: typed_binding("rolebindings")?,
            cluster_role_bindings: typed_binding("clusterrolebindings")?,
            service_accounts,
        })
    }

    /// The RBAC authorizer over these informers' stores.
    pub fn rbac(&self) -> Rbac {
        Rbac::new(RbacStores {
            roles: self.roles.store(),
            cluster_roles: self.cluster_roles.store(),
            role_bindings: self.role_bindings.store(),
            cluster_role_bindings: self.cluster_role_bindings.store(),
        })
    }

    /// Waits until every informer has listed.
    pub async fn wait_synced(&self) {
        // Readiness means listed: a failed list is retried, not taken as the end of the wait.
        let stores = (
            self.roles.store(),
            self.cluster_roles.store(),
            self.role_bindings.store(),
            self.cluster_role_bindings.store(),
        );
        let _ = futures::future::join4(
            stores.0.wait_until_synced_ignoring_failures(),
            stores.1.wait_until_synced_ignoring_failures(),
            stores.2.wait_until_synced_ignoring_failures(),
            stores.3.wait_until_synced_ignoring_failures(),
        )
        .await;
        if let Some(sa) = &self.service_accounts {
            let _ = sa.store().wait_until_synced_ignoring_failures().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The informers' watch never times out: an idle deadline (the reflector's default, the
    /// server timeout plus 30 s) re-watched every 5–10 minutes.
    #[test]
    fn the_informers_have_no_idle_deadline() {
        let config = informer_config::<Role>();
        assert_eq!(
            config.reflector.watch_idle_margin,
            StorageListerWatcher::NO_IDLE_DEADLINE
        );
    }
}
