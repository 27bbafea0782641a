//! Shared pieces of the etcd adapter's integration tests.

pub(crate) mod fake;
