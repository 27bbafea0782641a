//! Upstream's certificate admission plugins (`plugin/pkg/admission/certificates/approval`
//! and `.../signing`): who may approve a CertificateSigningRequest, and who may sign one, is
//! decided per signer, on top of the RBAC check of the request itself.
//!
//! - a write of `certificatesigningrequests/approval` needs `approve` on
//!   `certificates.k8s.io` `signers` named the request's `spec.signerName`, or named
//!   `<domain>/*` for the signer's domain (the part before its first `/`);
//! - a write of `certificatesigningrequests/status` that changes `status.certificate` needs
//!   `sign` on the signer, the same way.
//!
//! And upstream's strategy parts that need the request ([`mutate`]):
//!
//! - a create's `spec.username`, `uid`, `groups` and `extra` are the requesting user's,
//!   whatever the body claimed (the kind's strategy has cleared them), so the requestor an
//!   approver (or an auto-approver trusting `system:node:*` requestors) reads cannot be
//!   forged;
//! - an `/approval` write changes only `status.conditions`: the rest of the status is the
//!   stored one (the registry's `Subresource::Approval`), so approving cannot also issue a
//!   certificate without `sign`.
//!
//! Invariant: the check asks the server's own authorizer for the writing user; a write with
//! no user (the server's own) is not checked. Refusals are upstream's 403
//! `user not permitted to approve requests with signerName "…"`.

use listwatch_api::status::Status;
use listwatch_auth::UserInfo;
use listwatch_auth::authz::{Attributes, Authorizer};
use listwatch_endpoints::admission::{AdmissionRequest, MutationRequest, Operation};
use listwatch_endpoints::{ApiError, ApiResult, RequestInfo};
use serde_json::Value;

use super::filter::Identity;

/// The API group of CertificateSigningRequests and signers.
pub(super) const GROUP: &str = "certificates.k8s.io";

/// Sets a CertificateSigningRequest's `spec.username`, `uid`, `groups` and `extra` to
/// `user`'s (each left out when empty, as upstream's `omitempty` fields), dropping what the
/// body said (upstream's `csrStrategy.PrepareForCreate`).
pub(super) fn record_requester(object: &mut Value, user: Option<&UserInfo>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    let Some(user) = user else {
        return;
    };
    if !user.name.is_empty() {
        spec.insert("username".into(), Value::from(user.name.clone()));
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), Value::from(user.uid.clone()));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), Value::from(user.groups.clone()));
    }
    if !user.extra.is_empty() {
        let extra: serde_json::Map<String, Value> = user
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        spec.insert("extra".into(), Value::Object(extra));
    }
}

/// Whether `req` writes a CertificateSigningRequest.
pub(super) fn applies(req: &AdmissionRequest<'_>) -> bool {
    is_csr(req.info)
}

/// Whether `info` is CertificateSigningRequests.
pub(super) fn is_csr(info: &listwatch_kinds::KindSpec) -> bool {
    info.group == GROUP && info.plural == "certificatesigningrequests"
}

/// The request-dependent part of upstream's CSR create strategy (see the module doc): on
/// create, the requesting user into the spec. What an `/approval` write may change (only
/// the conditions) is the registry's `Subresource::Approval`.
pub(super) fn mutate(req: &MutationRequest<'_>, object: &mut Value) {
    let sub = req
        .extensions
        .get::<RequestInfo>()
        .map_or("", |i| i.subresource.as_str());
    if req.operation == Operation::Create && sub.is_empty() {
        let user = req.extensions.get::<Identity>().map(|i| &*i.0);
        record_requester(object, user);
    }
}

/// Upstream's `IsAuthorizedForSignerName`: `verb` on the signer by its name, or on its
/// domain's wildcard name.
fn authorized_for_signer(
    authz: &dyn Authorizer,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let attrs = |name: String| Attributes {
        verb: verb.to_owned(),
        resource_request: true,
        namespace: String::new(),
        api_group: GROUP.to_owned(),
        api_version: "*".to_owned(),
        resource: "signers".to_owned(),
        subresource: String::new(),
        name,
        path: String::new(),
    };
    if authz.authorize(user, &attrs(signer.to_owned())).allowed() {
        return true;
    }
    let domain = signer.split_once('/').map_or(signer, |(d, _)| d);
    authz
        .authorize(user, &attrs(format!("{domain}/*")))
        .allowed()
}

/// The checks of a CertificateSigningRequest write by `user` (see the module doc).
pub(super) fn check(
    authz: &dyn Authorizer,
    user: &UserInfo,
    req: &AdmissionRequest<'_>,
) -> ApiResult<()> {
    let sub = req
        .extensions
        .get::<RequestInfo>()
        .map_or("", |i| i.subresource.as_str());
    let signer = req
        .object
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let verb = match sub {
        "approval" => "approve",
        "status" => {
            let cert = |v: &Value| v.pointer("/status/certificate").cloned();
            if req.old.map(cert) == Some(cert(req.object)) {
                return Ok(());
            }
            "sign"
        }
        _ => return Ok(()),
    };
    if authorized_for_signer(authz, user, verb, signer) {
        return Ok(());
    }
    let name = req.name.unwrap_or("");
    Err(ApiError::from_status(
        Status::failure(
            403,
            "Forbidden",
            format!(
                "certificatesigningrequests.{GROUP} {:?} is forbidden: user not permitted to {verb} requests with signerName {:?}",
                listwatch_api::echo::echo(name),
                listwatch_api::echo::echo(signer)
            ),
        )
        .with_target(GROUP, "certificatesigningrequests", name),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use listwatch_auth::authz::{Decision, Reason, Rules};
    use listwatch_endpoints::admission::Operation;
    use serde_json::json;

    /// Allows exactly `approve` on the signer names given.
    struct Approves(&'static [&'static str]);

    impl Authorizer for Approves {
        fn authorize(&self, _: &UserInfo, a: &Attributes) -> Decision {
            if a.verb == "approve" && a.resource == "signers" && self.0.contains(&a.name.as_str()) {
                Decision::Allow(Reason::default())
            } else {
                Decision::NoOpinion(Reason::default())
            }
        }

        fn rules_for(&self, _: &UserInfo, _: &str) -> Rules {
            Rules::default()
        }
    }

    fn approve(authz: &dyn Authorizer, signer: &str) -> ApiResult<()> {
        let info = listwatch_kinds::builtin::all()
            .into_iter()
            .find(|k| k.plural == "certificatesigningrequests")
            .unwrap();
        let mut ext = http::Extensions::new();
        ext.insert(RequestInfo::new(
            &http::Method::PUT,
            &"/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval"
                .parse()
                .unwrap(),
        ));
        let obj = json!({"metadata": {"name": "c"}, "spec": {"signerName": signer}});
        check(
            authz,
            &UserInfo::new("approver", Vec::<String>::new()),
            &AdmissionRequest {
                operation: Operation::Update,
                info: &info,
                namespace: None,
                name: Some("c"),
                object: &obj,
                old: Some(&obj),
                extensions: &ext,
            },
        )
    }

    #[test]
    fn approving_needs_approve_on_the_signer_or_its_domain() {
        let exact = Approves(&["example.com/a"]);
        assert!(approve(&exact, "example.com/a").is_ok());
        assert!(approve(&exact, "example.com/b").is_err());
        let domain = Approves(&["example.com/*"]);
        assert!(approve(&domain, "example.com/b").is_ok());
        let e = approve(&domain, "kubernetes.io/kube-apiserver-client").unwrap_err();
        assert!(
            format!("{e:?}").contains("user not permitted to approve requests with signerName"),
            "{e:?}"
        );
    }
}
