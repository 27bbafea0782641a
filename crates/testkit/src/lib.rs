//! Test-only helpers shared by the workspace's tests (a dev-dependency, never shipped).
//!
//! - [`Balancer`]: a round-robin TCP load balancer in front of several servers (replicas of
//!   listwatch-apiserver), the kind of thing a cluster puts in front of its kube-apiservers,
//!   that a test can tell to stop sending new connections to a backend ([`Balancer::drain`]) or
//!   to kill it outright, resetting every connection it carries ([`Balancer::kill`]), and that
//!   can check its backends' `/readyz` as such a balancer does ([`Balancer::with_health_check`],
//!   [`HealthCheck`]).
//! - `router` (feature `router`): requests to an in-process `Router`, a namespace created
//!   through it, and `eventually` (polling with a deadline).
//! - `storage` (feature `storage`): `Hooked`, a storage forwarding every call to another,
//!   with a test's `Hooks` around some of them (faults on cue, counting).

mod balancer;
pub mod health;
#[cfg(feature = "router")]
pub mod router;
#[cfg(feature = "storage")]
pub mod storage;

pub use balancer::{Balancer, RotationChange};
pub use health::HealthCheck;
