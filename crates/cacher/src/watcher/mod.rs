//! One watcher, from registration to its end: what it asks for (`spec`), its state machine
//! (`state`), its buffer (`queue`), its filter (`filter`) and its stream (`stream`).
//!
//! The parts below the stream depend only on the leaf `event` module (and `state`), so the
//! dispatcher and the registry can hold a watcher's buffer and spec without depending on the
//! stream; the stream depends on the registry to register itself. The module graph inside
//! this crate has no cycle apart from the crate root (`import_graph` test below).
//!
//! Invariants (each kept by the module named): a registration leaves `Active` once and never
//! returns (`state`); nothing is queued to a registration that is not active, and a consumer
//! that finds its buffer empty and the state not active has seen everything queued
//! (`queue`); a watcher's selectors run on its own task, never on the dispatcher's
//! (`filter`); every change is delivered once, in order, or the watch ends with an error
//! that makes the client relist (`stream`).

pub(crate) mod filter;
pub(crate) mod queue;
pub(crate) mod spec;
pub(crate) mod state;
pub(crate) mod stream;

pub(crate) use spec::{Spec, Start, scope_of};
pub(crate) use stream::open;

#[cfg(test)]
mod queue_model;
