//! The `flowcontrol.apiserver.k8s.io` group: stored only (the server's own fairness is
//! `--max-requests-inflight`'s).

pub mod flowschema;
pub mod prioritylevelconfiguration;
