//! The authorizer the endpoints' handlers ask ([`listwatch_endpoints::authorize`]): the
//! `create` check of a PUT or server-side apply that turns out to create its object,
//! answered by the same authorizer chain as the request filter, for the same user.
//!
//! Invariants: the user is the one the filter authenticated (after impersonation), read
//! from the request's [`Identity`]; a request without one is refused (500, as upstream
//! refuses a create-on-update it cannot authorize) rather than allowed; a denial is
//! upstream's `NewForbidden(resource, name, reason)` — `configmaps "x" is forbidden:
//! <authorizer's reason>` — so nothing is written.

use std::sync::{Arc, OnceLock};

use listwatch_api::Status;
use listwatch_auth::Attributes;
use listwatch_endpoints::authorize::{AuthorizationRequest, Authorize};
use listwatch_endpoints::{ApiError, ApiResult};

use super::Security;
use super::filter::Identity;

/// Answers the handlers' questions with [`Security::authz`] (set once the security state is
/// built, which happens after the resources are known).
#[derive(Default)]
pub struct HandlerAuthorizer(pub OnceLock<Arc<Security>>);

/// Upstream's attributes for the question (`authorizer.AttributesRecord`).
fn attributes(req: &AuthorizationRequest<'_>) -> Attributes {
    Attributes {
        verb: req.verb.to_owned(),
        resource_request: true,
        namespace: req.namespace.unwrap_or("").to_owned(),
        api_group: req.info.group.clone(),
        api_version: req.info.version.clone(),
        resource: req.info.plural.clone(),
        subresource: req.subresource.to_owned(),
        name: req.name.to_owned(),
        path: req.path.to_owned(),
    }
}

impl Authorize for HandlerAuthorizer {
    fn authorize(&self, req: &AuthorizationRequest<'_>) -> ApiResult<()> {
        let (Some(sec), Some(user)) = (self.0.get(), req.extensions.get::<Identity>()) else {
            return Err(ApiError::internal(format!(
                "no authorizer or user for the request, unable to authorize a {}",
                req.verb
            )));
        };
        let attrs = attributes(req);
        let decision = sec.authz.authorize(&user.0, &attrs);
        if decision.allowed() {
            return Ok(());
        }
        tracing::debug!(user = %user.0.name, verb = req.verb, resource = %attrs.resource, name = req.name, "forbidden inside the handler");
        let reason = decision.reason().to_string();
        let message = format!(
            "{} {:?} is forbidden: {reason}",
            req.info.qualified_resource(),
            listwatch_api::echo::echo(req.name)
        );
        Err(ApiError::from_status(
            Status::failure(403, "Forbidden", message).with_target(
                &req.info.group,
                &req.info.plural,
                req.name,
            ),
        ))
    }
}
