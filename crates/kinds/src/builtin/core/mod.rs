//! The core group (`""`, served under `/api/v1`).

pub mod binding;
pub mod componentstatus;
pub mod configmap;
pub mod data_keys;
pub mod endpoints;
pub mod event;
pub mod limitrange;
pub mod namespace;
pub mod node;
pub mod persistentvolume;
pub mod persistentvolumeclaim;
pub mod pod;
pub mod pod_ephemeral;
pub mod podtemplate;
pub mod replicationcontroller;
pub mod resourcequota;
pub mod secret;
pub mod secret_type;
pub mod service;
pub mod service_validate;
pub mod serviceaccount;
