//! Authentication and authorization for listwatch, after upstream kube-apiserver's
//! `k8s.io/apiserver/pkg/authentication`, `pkg/authorization` and the RBAC authorizer.
//!
//! It owns
//! - [`UserInfo`]: who a request is from, and the well-known users and groups;
//! - [`authn`]: the authenticator chain — X.509 client certificates, the static token file,
//!   ServiceAccount JWTs (issuing them for TokenRequest too), anonymous;
//! - [`authz`]: request [`Attributes`], the [`Authorizer`] interface, `AlwaysAllow`,
//!   `AlwaysDeny`, `system:masters`, the chain, upstream's 403;
//! - [`rbac`]: the RBAC authorizer over informer stores, escalation checks, validation,
//!   the bootstrap policy and ClusterRole aggregation;
//! - [`review`]: the review APIs (`SelfSubjectAccessReview`, `SelfSubjectRulesReview`,
//!   `SubjectAccessReview`, `SelfSubjectReview`) as functions over request bodies.
//!
//! It depends on `listwatch-api` and `listwatch-runtime` (the informer stores RBAC reads); it
//! knows nothing of HTTP servers, storage or the endpoints crate: the server resolves a
//! request into [`Attributes`] and credentials, and calls in here.
//!
//! ```
//! use listwatch_auth::{Attributes, Authorizer, UserInfo, authz::{Chain, PrivilegedGroups}};
//! use std::sync::Arc;
//!
//! let authz = Chain(vec![Arc::new(PrivilegedGroups::default())]);
//! let alice = UserInfo::new("alice", ["system:authenticated"]);
//! let list = Attributes::resource("list", "", "pods", "demo");
//! let decision = authz.authorize(&alice, &list);
//! assert!(!decision.allowed());
//! let forbidden = listwatch_auth::authz::forbidden_status(&alice, &list, decision.reason());
//! assert_eq!(
//!     forbidden.message,
//!     r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "demo""#
//! );
//! ```

pub mod authn;
pub mod authz;
pub mod rbac;
pub mod review;
pub mod token_review;
pub mod user;

pub use authn::{Authentication, AuthnError, Credentials};
pub use authz::{Attributes, Authorizer, Decision};
pub use user::UserInfo;
