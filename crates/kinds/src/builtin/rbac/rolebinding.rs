//! RoleBindings (`rbac.authorization.k8s.io/v1`, namespaced).

use crate::KindSpec;

/// `rbac.authorization.k8s.io/v1` `rolebindings`.
pub fn spec() -> KindSpec {
    super::rbac("rolebindings", "RoleBinding", true)
}
