//! The etcd v3 gRPC messages and clients, generated at build time from `proto/` (etcd's
//! published field numbers, only the part listwatch uses).
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

/// etcd's `etcdserverpb` package: requests, responses and the KV, Watch, Lease and
/// Maintenance clients.
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

/// etcd's `mvccpb` package: stored key-values and watch events.
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}
