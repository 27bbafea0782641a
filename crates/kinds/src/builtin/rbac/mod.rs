//! The `rbac.authorization.k8s.io` group (served through the same cacher pipeline as every
//! other; the RBAC authorizer reads them through in-process informers). Upstream's RBAC
//! strategies allow create on PUT, keep no generation and validate names as path segments.

use crate::{Generation, KindSpec, NameValidation};

pub mod clusterrole;
pub mod clusterrolebinding;
pub mod role;
pub mod rolebinding;

/// An `rbac.authorization.k8s.io/v1` kind.
fn rbac(plural: &str, kind: &str, namespaced: bool) -> KindSpec {
    KindSpec::new("rbac.authorization.k8s.io", "v1", plural, kind)
        .generation(Generation::None)
        .namespaced(namespaced)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
}
