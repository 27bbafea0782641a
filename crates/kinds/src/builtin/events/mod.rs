//! `events.k8s.io`: the new Event API, served from core `v1` Events' storage.

pub mod event;
