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
use listwatch_kinds::KindSpec;

/// How many bytes of a User-Agent name a manager (upstream's `FieldManagerMaxLength`).
const MAX_MANAGER_BYTES: usize = 128;

/// Bounds on the managedFields read from a request or the store: as deep as any object
/// may nest, and no more paths per manager than any document this server reads can hold
/// (a path takes at least 8 bytes of FieldsV1, `"f:a":{}`, so 4 Mi paths is past every
/// body, 3 MiB, and every stored object): what bounds the sets read is the already-decoded
/// document they come from. A smaller cap would refuse managedFields this server wrote
/// itself (an apply of a 3 MiB configuration owns ~400 000 paths), and an apply over
/// managedFields that do not decode is a 500, as upstream.
const LIMITS: FieldsLimits = FieldsLimits {
    max_depth: crate::MAX_DEPTH,
    max_entries: 4 << 20,
};

/// The manager of a non-apply write: the `fieldManager` parameter, else the User-Agent up
/// to its first `/`, its unprintable characters left out, cut at 128 bytes on a character
/// boundary (upstream's `managerOrUserAgent` and `prefixFromUserAgent`); empty without
/// either (upstream records such a write with no `manager`).
pub fn update_manager(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    let prefix = user_agent.and_then(|ua| ua.split('/').next()).unwrap_or("");
    let mut name = String::new();
    for c in prefix.chars().filter(|c| is_printable(*c)) {
        if name.len() + c.len_utf8() > MAX_MANAGER_BYTES {
            break;
        }
        name.push(c);
    }
    name
}

/// Go's `unicode.IsPrint` (letters, marks, numbers, punctuation, symbols and U+0020): no
/// control characters, no space but U+0020, no format characters (category Cf: bidi
/// overrides, zero-width spaces, the BOM...) and no private-use ones (Co). Unassigned code
/// points (Cn), which Go also leaves out, are kept: std has no table of them.
pub fn is_printable(c: char) -> bool {
    const FORMAT_OR_PRIVATE: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xE000, 0xF8FF),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
        (0xF0000, 0x10FFFF),
    ];
    let u = u32::from(c);
    !c.is_control()
        && (c == ' ' || !c.is_whitespace())
        && !FORMAT_OR_PRIVATE
            .iter()
            .any(|(lo, hi)| (*lo..=*hi).contains(&u))
}

/// The manager the server's own writes at start are recorded under: upstream's loopback
/// client sends `kube-apiserver/<version> ...`, so its bootstrap objects name this.
pub const SERVER_MANAGER: &str = "kube-apiserver";

/// Records the create of `obj` (a built-in kind, prepared by
/// [`prepare_create`](crate::validation::prepare_create)) by `manager` in its managedFields,
/// as a create through the API would: for objects the server writes to storage itself
/// (the bootstrap namespaces and RBAC policy), which upstream creates through its loopback
/// client. Without it they would have no managers, and updates of them would not be
/// tracked until an apply.
pub fn record_create(info: &KindSpec, obj: &mut Value, manager: &str) {
    let catalog = Catalog::builtin();
    FieldManager::new(info, "", &catalog).update(None, obj, manager);
}

/// The field manager of writes to `info` through `subresource` (`""`, `status`, `scale`).
pub struct FieldManager<'a> {
    info: &'a KindSpec,
    subresource: &'a str,
    api_version: String,
    catalog: &'a Catalog,
    now: String,
}

impl<'a> FieldManager<'a> {
    /// The field manager of `info`'s objects (or their `subresource`), with the field types
    /// of `catalog`.
    pub fn new(info: &'a KindSpec, subresource: &'a str, catalog: &'a Catalog) -> Self {
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
            "status" | "approval" => {
                ignored.insert(&field_path(&["spec"]));
                ignored.insert(&field_path(&["metadata"]));
            }
            // Upstream's `podEphemeralContainersStrategy.GetResetFields`: through
            // `/ephemeralcontainers` only `spec.ephemeralContainers` is ever owned.
            "ephemeralcontainers" => {
                ignored.insert(&field_path(&["metadata"]));
                ignored.insert(&field_path(&["status"]));
                let spec = self
                    .catalog
                    .lookup(&info.group, &info.version, &info.kind, &["spec"]);
                for f in spec.iter().flat_map(|n| n.field_names()) {
                    if f != "ephemeralContainers" {
                        ignored.insert(&field_path(&["spec", f]));
                    }
                }
            }
            _ => {
                if info.status_subresource {
                    ignored.insert(&field_path(&["status"]));
                }
                // A kind whose ephemeral containers change only through their
                // subresource (pods) never has them owned through the object itself.
                if info.ephemeral_containers_subresource {
                    ignored.insert(&field_path(&["spec", "ephemeralContainers"]));
                }
            }
        }
        let scope = Scope {
            types: &types,
            api_version: &self.api_version,
            kind: &info.kind,
            subresource: self.subresource,
            ignored,
            now: &self.now,
            limits: LIMITS,
        };
        f(&scope)
    }

    /// Records a create (`live` is `None`), update or non-apply patch by `manager`.
    pub fn update(&self, live: Option<&Value>, new: &mut Value, manager: &str) {
        self.with_scope(|s| s.update(live, new, manager));
    }

    /// Records an update or non-apply patch by `manager` of the stored object `live`, which
    /// is read in place (its managedFields taken out for the walk and put back: `live` ends
    /// as it began, and is not copied).
    pub fn update_live(&self, live: &mut Value, new: &mut Value, manager: &str) {
        self.with_scope(|s| s.update_live(live, new, manager));
    }

    /// Applies `config` by `manager` over `live` (`None`: the apply creates the object).
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> ApiResult<Value> {
        self.with_scope(|s| s.apply(live, config, manager, force))
            .map_err(|e| match &e {
                ApplyError::Conflicts(c) => {
                    let mut status = Status::failure(409, reason::CONFLICT, c.message());
                    for (message, field) in c.causes() {
                        status = status.with_cause("FieldManagerConflict", &message, &field);
                    }
                    ApiError::from_status(status)
                }
                ApplyError::Decode(_) => ApiError::internal(e.to_string()),
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
        // Upstream: no User-Agent (or nothing before its `/`) is no manager at all.
        assert_eq!(update_manager(None, None), "");
        assert_eq!(update_manager(None, Some("/x")), "");
        let long = "a".repeat(10_000);
        assert_eq!(update_manager(None, Some(&long)).len(), MAX_MANAGER_BYTES);
        // Cut at 128 bytes on a character boundary; unprintable characters left out.
        let wide = "é".repeat(100);
        assert_eq!(update_manager(None, Some(&wide)), "é".repeat(64));
        assert_eq!(update_manager(None, Some("a\tb\u{7f}c d/1")), "abc d");
        // Format characters (bidi override, zero-width space) as Go's IsPrint.
        assert_eq!(update_manager(None, Some("\u{202e}rtl\u{200b}/1")), "rtl");
    }
}
