//! The `autoscaling` group.

pub mod horizontalpodautoscaler;
pub mod v1;
