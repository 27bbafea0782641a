//! Custom resources: upstream's custom resource strategy
//! (apiextensions-apiserver pkg/registry/customresource/strategy.go), the parts that are code.
//!
//! With a `/status` subresource a create cannot set the status (it is dropped); without one
//! the object is kept as sent. Printing is the spec's [`Printer`](crate::Printer) columns (a
//! CRD's `additionalPrinterColumns`). The rest of a custom resource's rules are data on its
//! [`KindSpec`](crate::KindSpec) (`custom_resource`, its schema, the generation bumped on
//! spec changes).

use serde_json::Value;

use crate::strategy::KindStrategy;

/// The custom resource strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CustomResourceStrategy {
    /// Whether the resource has a `/status` subresource.
    pub status_subresource: bool,
}

impl CustomResourceStrategy {
    /// The strategy of a custom resource with or without `/status`.
    pub fn new(status_subresource: bool) -> Self {
        Self { status_subresource }
    }
}

impl KindStrategy for CustomResourceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_create_sets_the_status_only_without_a_status_subresource() {
        let mut cr = json!({"status": {"x": 1}});
        CustomResourceStrategy::new(true).prepare_for_create(&mut cr);
        assert!(cr.get("status").is_none());
        let mut cr = json!({"status": {"x": 1}});
        CustomResourceStrategy::new(false).prepare_for_create(&mut cr);
        assert_eq!(cr["status"], json!({"x": 1}));
    }
}
