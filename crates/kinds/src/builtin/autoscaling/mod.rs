//! The `autoscaling` group.

pub mod horizontalpodautoscaler;
