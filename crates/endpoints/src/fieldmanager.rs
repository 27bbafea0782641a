//! Field ownership for the write handlers: the adapter between one request (its resource,
//! subresource, `fieldManager` or User-Agent, `force`) and `listwatch-apply`, which owns
//! the semantics (see that crate's doc).
//!
//! Invariants:
//! - every write that stores an object records its manager in `metadata.managedFields`:
//!   creates, updates and non-apply patches as an `Update` (upstream's `UpdateNoErrors`:
//!   never failing the write), server-side applies as an `Apply`;
//! - list and map semantics come from the kind's schema (the server's catalog: built-in
//!   definitions and custom resources' declared schemas); the reset
//!   fields of the endpoint (`status` on a resource with a status subresource, everything
//!   but `status` on `/status`) are never owned through it;
//! - a conflict is a 409 Conflict Status with upstream's message and one
//!   `FieldManagerConflict` cause per field.

use listwatch_api::Status;
use listwatch_api::status::reason;
use listwatch_apply::fieldmanager::field_path;
use listwatch_apply::{ApplyError, FieldSet, FieldsLimits, SchemaTypes, Scope};
use listwatch_schema::Catalog;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::resource::ResourceInfo;

/// How many characters of a User-Agent name a manager (upstream takes the part before
/// the first `/` whole; a `fieldManager` is at most 128 characters, and so is this).
const MAX_MANAGER_CHARS: usize = 128;

/// Bounds on the managedFields read from a request or the store: as deep as any object
/// may nest, and at most 100 000 paths per manager (a 3 MiB body holds at most about
/// 500 000 minimal paths; real objects own a few hundred).
const LIMITS: FieldsLimits = FieldsLimits {
    max_depth: crate::limits::MAX_DEPTH,
    max_entries: 100_000,
};

/// The manager of a non-apply write: the `fieldManager` parameter, else the User-Agent up
/// to its first `/` (upstream's `managerOrUserAgent`), else `unknown`.
pub(crate) fn update_manager(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    let name = match field_manager.filter(|m| !m.is_empty()) {
        Some(m) => m.to_owned(),
        None => user_agent
            .and_then(|ua| ua.split('/').next())
            .unwrap_or("")
            .chars()
            .take(MAX_MANAGER_CHARS)
            .collect(),
    };
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// The field manager of writes to `info` through `subresource` (`""`, `status`, `scale`).
pub(crate) struct FieldManager<'a> {
    info: &'a ResourceInfo,
    subresource: &'a str,
    api_version: String,
    catalog: &'a Catalog,
    now: String,
}

impl<'a> FieldManager<'a> {
    pub(crate) fn new(info: &'a ResourceInfo, subresource: &'a str, catalog: &'a Catalog) -> Self {
        let api_version = if info.group.is_empty() {
            info.version.clone()
        } else {
            format!("{}/{}", info.group, info.version)
        };
        Self {
            info,
            subresource,
            api_version,
            catalog,
            now: crate::clock::format_rfc3339(crate::clock::now_unix()),
        }
    }

    fn with_scope<T>(&self, f: impl FnOnce(&Scope<'_>) -> T) -> T {
        let info = self.info;
        let types = SchemaTypes::new(self.catalog, &info.group, &info.version, &info.kind);
        let mut ignored = FieldSet::new();
        match self.subresource {
            "status" => {
                ignored.insert(&field_path(&["spec"]));
                ignored.insert(&field_path(&["metadata"]));
            }
            _ if info.status_subresource => ignored.insert(&field_path(&["status"])),
            _ => {}
        }
        let scope = Scope {
            types: &types,
            api_version: &self.api_version,
            subresource: self.subresource,
            ignored,
            now: &self.now,
            limits: LIMITS,
        };
        f(&scope)
    }

    /// Records a create (`live` is `None`), update or non-apply patch by `manager`.
    pub(crate) fn update(&self, live: Option<&Value>, new: &mut Value, manager: &str) {
        self.with_scope(|s| s.update(live, new, manager));
    }

    /// Applies `config` by `manager` over `live` (`None`: the apply creates the object).
    pub(crate) fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> ApiResult<Value> {
        self.with_scope(|s| s.apply(live, config, manager, force))
            .map_err(|e| match e {
                ApplyError::Conflicts(c) => {
                    let mut status = Status::failure(409, reason::CONFLICT, c.message());
                    for (message, field) in c.causes() {
                        status = status.with_cause("FieldManagerConflict", &message, &field);
                    }
                    ApiError::from_status(status)
                }
                other => ApiError::bad_request(other.to_string()),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managers_come_from_the_parameter_or_the_user_agent() {
        assert_eq!(update_manager(Some("ctl"), Some("kubectl/v1.33")), "ctl");
        assert_eq!(
            update_manager(None, Some("kubectl/v1.33.0 (linux/amd64) kubernetes/abc")),
            "kubectl"
        );
        assert_eq!(update_manager(Some(""), Some("python")), "python");
        assert_eq!(update_manager(None, None), "unknown");
        assert_eq!(update_manager(None, Some("/x")), "unknown");
        let long = "a".repeat(10_000);
        assert_eq!(update_manager(None, Some(&long)).len(), MAX_MANAGER_CHARS);
    }
}
