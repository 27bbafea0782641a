//! Roles (`rbac.authorization.k8s.io/v1`, namespaced).

use crate::KindSpec;

/// `rbac.authorization.k8s.io/v1` `roles`.
pub fn spec() -> KindSpec {
    super::rbac("roles", "Role", true)
}
