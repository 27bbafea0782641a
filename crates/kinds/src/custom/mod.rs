//! Custom resources: upstream's custom resource strategy
//! (apiextensions-apiserver pkg/registry/customresource/strategy.go), the parts that are code.
//!
//! With a `/status` subresource a create cannot set the status (it is dropped); without one
//! the object is kept as sent. Printing is the spec's [`Printer`](crate::Printer) columns (a
//! CRD's `additionalPrinterColumns`). The rest of a custom resource's rules are data on its
//! [`KindSpec`](crate::KindSpec) (`custom_resource`, its schema, the generation bumped on
//! spec changes).
//!
//! With a structural schema ([`schema::Structural`], built from the CRD version's
//! `openAPIV3Schema`), every create and update is pruned, defaulted and then validated
//! against it, as upstream's decoder and strategy do: [`KindStrategy::prepare_for_create`]
//! and [`KindStrategy::prepare_for_update`] prune and default,
//! [`KindStrategy::validate_create`] and [`KindStrategy::validate_update`] (with upstream's
//! ratcheting) report the schema's errors (the registry answers them as a 422 Invalid).
//!
//! Every create and update first has its integral floats made integers
//! ([`numbers::normalize`]), as upstream's unstructured decoding and encoding leave them.

pub mod numbers;
pub mod schema;

use std::sync::Arc;

use serde_json::Value;

use crate::field::FieldError;
use crate::strategy::KindStrategy;
use schema::Structural;

/// The custom resource strategy.
#[derive(Debug, Clone, Default)]
pub struct CustomResourceStrategy {
    /// Whether the resource has a `/status` subresource.
    pub status_subresource: bool,
    /// The compiled schema (`None`: every field is kept and nothing is validated).
    pub schema: Option<Arc<Structural>>,
}

impl CustomResourceStrategy {
    /// The strategy of a custom resource with or without `/status`, without a schema.
    pub fn new(status_subresource: bool) -> Self {
        Self {
            status_subresource,
            schema: None,
        }
    }

    /// The strategy of a custom resource whose version declares `open_api_v3_schema`
    /// (`None`: none), or the schema's errors when it is not a structural schema this
    /// server supports ([`Structural::new`]).
    pub fn with_schema(
        status_subresource: bool,
        open_api_v3_schema: Option<&Value>,
    ) -> Result<Self, Vec<FieldError>> {
        let schema = match open_api_v3_schema {
            Some(s) => Some(Arc::new(Structural::new(s)?)),
            None => None,
        };
        Ok(Self {
            status_subresource,
            schema,
        })
    }

    /// Normalises the numbers of `obj`, prunes and defaults it (upstream's decoder does all
    /// three before the strategy runs).
    fn prune_and_default(&self, obj: &mut Value) {
        numbers::normalize(obj);
        if let Some(s) = &self.schema {
            s.prune(obj);
            s.default(obj);
        }
    }
}

impl KindStrategy for CustomResourceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        self.prune_and_default(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        self.prune_and_default(new);
    }

    fn prune_unknown(&self, obj: &mut Value) -> Option<Vec<String>> {
        self.schema.as_ref().map(|s| s.prune(obj))
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        match &self.schema {
            Some(s) => s.validate(obj),
            None => Vec::new(),
        }
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        match &self.schema {
            Some(s) => s.validate_update(new, old),
            None => Vec::new(),
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
