//! ClusterRoleBindings (`rbac.authorization.k8s.io/v1`, cluster-scoped).

use crate::KindSpec;

/// `rbac.authorization.k8s.io/v1` `clusterrolebindings`.
pub fn spec() -> KindSpec {
    super::rbac("clusterrolebindings", "ClusterRoleBinding", false)
}
