//! The `admissionregistration.k8s.io` group: stored only (the server enforces no admission
//! webhook or policy); each kind's file holds its upstream printer.

pub mod validatingadmissionpolicy;
pub mod validatingadmissionpolicybinding;
pub mod webhookconfiguration;
