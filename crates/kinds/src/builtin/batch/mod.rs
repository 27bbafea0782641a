//! The `batch` group.

pub mod cronjob;
pub mod job;
pub mod timezone;
