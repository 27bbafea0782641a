//! ClusterRoles (`rbac.authorization.k8s.io/v1`, cluster-scoped).

use crate::KindSpec;

/// `rbac.authorization.k8s.io/v1` `clusterroles`.
pub fn spec() -> KindSpec {
    super::rbac("clusterroles", "ClusterRole", false)
}
