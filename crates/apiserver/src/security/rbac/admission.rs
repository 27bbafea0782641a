//! The admission hook of the RBAC resources ([`RbacAdmission`]): Roles, ClusterRoles and
//! their bindings validated as upstream's RBAC registry validates them, and a write that
//! would grant more than its author holds refused (escalation); certificate signing
//! requests are handed to the `certificates` module.
//!
//! Invariants: it checks the object about to be stored (bindings defaulted first); an
//! update that changes only the garbage collector's fields is not checked for escalation.

use std::sync::Arc;

use listwatch_api::status::Status;
use listwatch_auth::rbac::{self, GROUP, Role, RoleBinding};
use listwatch_endpoints::admission::{Admission, AdmissionRequest, MutationRequest, Operation};
use listwatch_endpoints::{ApiError, ApiResult};
use serde_json::Value;

use crate::security::Security;
use crate::security::filter::Identity;

/// Whether `new` differs from the stored `old` only in the fields the garbage collector
/// manages (`metadata.ownerReferences`, `metadata.finalizers`) and the server's own
/// bookkeeping of a write (`managedFields`, `resourceVersion`), none of which grants
/// anything (upstream's `IsOnlyMutatingGCFields`).
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
            ] {
                meta.remove(field);
            }
        }
        v
    };
    strip(old) == strip(new)
}

/// Validates RBAC writes and refuses escalation (upstream's RBAC registry checks).
pub struct RbacAdmission(pub std::sync::OnceLock<Arc<Security>>);

fn invalid(kind: &str, name: &str, errors: &[rbac::FieldError]) -> ApiError {
    let name = listwatch_api::echo::echo(name);
    let summary = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = Status::failure(
        422,
        "Invalid",
        format!("{kind}.{GROUP} {name:?} is invalid: {summary}"),
    )
    .with_target(GROUP, kind, &name);
    for e in errors {
        s = s.with_cause("FieldValueInvalid", &e.detail, &e.field);
    }
    ApiError::from_status(s)
}

fn forbidden(plural: &str, name: &str, message: &str) -> ApiError {
    let name = listwatch_api::echo::echo(name);
    let mut s = Status::failure(
        403,
        "Forbidden",
        format!("{plural}.{GROUP} {name:?} is forbidden: {message}"),
    );
    s = s.with_target(GROUP, plural, &name);
    ApiError::from_status(s)
}

impl Admission for RbacAdmission {
    fn mutate(&self, req: &MutationRequest<'_>, object: &mut Value) -> ApiResult<()> {
        if crate::security::certificates::is_csr(req.info) {
            crate::security::certificates::mutate(req, object);
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>) -> ApiResult<()> {
        if crate::security::certificates::applies(req) {
            return match (self.0.get(), req.extensions.get::<Identity>()) {
                (Some(sec), Some(id)) => {
                    crate::security::certificates::check(sec.authz.as_ref(), &id.0, req)
                }
                _ => Ok(()),
            };
        }
        if req.info.group != GROUP {
            return Ok(());
        }
        let name = req
            .object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespaced = req.info.namespaced;
        let ns = req.namespace.unwrap_or("");
        let bad = |e: serde_json::Error| {
            invalid(
                &req.info.kind,
                name,
                &[rbac::FieldError {
                    field: "(body)".into(),
                    detail: format!(
                        "Invalid value: {}",
                        listwatch_api::echo::echo(&e.to_string())
                    ),
                }],
            )
        };
        let sec = self.0.get();
        // An update of only the garbage collector's fields is not checked for escalation
        // (upstream's `IsOnlyMutatingGCFields`): removing a finalizer from (say) an
        // aggregating ClusterRole being deleted needs the update verb, nothing more.
        let user = match req.old {
            Some(old) if only_gc_fields_change(old, req.object) => None,
            _ => req.extensions.get::<Identity>().map(|i| Arc::clone(&i.0)),
        };
        match req.info.plural.as_str() {
            "roles" | "clusterroles" => {
                let role: Role = serde_json::from_value(req.object.clone()).map_err(bad)?;
                let errors = rbac::validate_role(&role, namespaced);
                if !errors.is_empty() {
                    return Err(invalid(&req.info.kind, name, &errors));
                }
                if let (Some(sec), Some(user)) = (sec, user)
                    && sec.rbac.is_some()
                {
                    // The stored version counts (a ClusterRole that aggregated before the
                    // write needs full authority too); it parsed when it was stored, so a
                    // failure here is refused rather than guessed at.
                    let old = match req.old {
                        Some(old) => {
                            Some(serde_json::from_value::<Role>(old.clone()).map_err(|e| {
                                ApiError::internal(format!("the stored {}: {e}", req.info.kind))
                            })?)
                        }
                        None => None,
                    };
                    rbac::check_role_object(
                        sec.authz.as_ref(),
                        &user,
                        ns,
                        req.name.unwrap_or(""),
                        &role,
                        old.as_ref(),
                    )
                    .map_err(|e| forbidden(&req.info.plural, name, &e.0))?;
                }
            }
            "rolebindings" | "clusterrolebindings" => {
                let mut b: RoleBinding = serde_json::from_value(req.object.clone()).map_err(bad)?;
                // Validated as stored: defaulted first, as upstream decodes then validates.
                rbac::default_subjects(&mut b);
                let old_ref = match (req.operation, req.old) {
                    (Operation::Update, Some(old)) => {
                        serde_json::from_value::<RoleBinding>(old.clone())
                            .ok()
                            .map(|o| o.role_ref)
                    }
                    _ => None,
                };
                let errors = rbac::validate_binding(&b, namespaced, old_ref.as_ref());
                if !errors.is_empty() {
                    return Err(invalid(&req.info.kind, name, &errors));
                }
                if let (Some(sec), Some(user)) = (sec, user)
                    && let Some(r) = &sec.rbac
                {
                    rbac::check_binding_write(r, sec.authz.as_ref(), &user, ns, &b.role_ref)
                        .map_err(|e| forbidden(&req.info.plural, name, &e.0))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
