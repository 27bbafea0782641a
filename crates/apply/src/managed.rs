//! `metadata.managedFields`: who owns which fields, read from and written to an object as
//! upstream encodes it (one entry per manager, operation, API version for updates, and
//! subresource; field sets in FieldsV1).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::path::Path;
use crate::set::{FieldSet, FieldsLimits};

/// How a manager came to own its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, non-apply patch).
    Update,
}

impl Operation {
    /// The name managedFields uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// A manager as upstream identifies it (`BuildManagerIdentifier`): name, operation,
/// subresource, and for updates the API version (an applier is one manager whatever
/// version it applies with).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagerId {
    /// The `fieldManager` (or what stands for it).
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The group/version of an Update; empty for Apply.
    pub api_version: String,
    /// `""`, `status`, `scale`.
    pub subresource: String,
}

impl ManagerId {
    /// The identity of `manager` doing `operation` at `api_version` on `subresource`.
    pub fn new(manager: &str, operation: Operation, api_version: &str, subresource: &str) -> Self {
        ManagerId {
            manager: manager.to_owned(),
            operation,
            api_version: match operation {
                Operation::Apply => String::new(),
                Operation::Update => api_version.to_owned(),
            },
            subresource: subresource.to_owned(),
        }
    }

    /// How upstream names it in conflict messages (`printManager`):
    /// `"m"`, `"m" with subresource "status"`, `"m" using v1`.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The fields one manager owns, and the version it owns them at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedSet {
    /// The owned paths.
    pub set: FieldSet,
    /// The group/version the paths are in.
    pub api_version: String,
    /// Whether an apply made them (as opposed to an update).
    pub applied: bool,
}

/// Every manager's fields.
pub type Managers = BTreeMap<ManagerId, VersionedSet>;

/// An object's managedFields, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Managed {
    /// Fields by manager.
    pub fields: Managers,
    /// When each manager last changed the object (RFC 3339), if known.
    pub times: BTreeMap<ManagerId, String>,
}

/// Why managedFields could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedFieldsError {
    /// Not a list of objects.
    #[error("managedFields must be a list of objects")]
    Shape,
    /// An entry upstream would refuse.
    #[error("managed fields entry {index}: {reason}")]
    Entry {
        /// Position in the list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The name upstream gives the bucket old update managers are merged into.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// At most this many Update entries are kept (upstream's `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

impl Managed {
    /// Reads `metadata.managedFields` (absent or null: no managers). Entries are checked
    /// as upstream's `DecodeManagedFields` checks them; a later entry for the same manager
    /// replaces an earlier one.
    ///
    /// There is no cap on the number of entries (upstream has none: appliers are never
    /// capped, and a client may send any number in an update). What bounds the work is the
    /// document itself: `entries` is already decoded, within the request body limit or the
    /// stored object's size, and every entry costs at least ~60 bytes of it; the sets read
    /// are bounded per entry by `limits` and in all by the document's size.
    pub fn decode(
        entries: Option<&Value>,
        limits: FieldsLimits,
    ) -> Result<Self, ManagedFieldsError> {
        let entries = match entries {
            None | Some(Value::Null) => return Ok(Managed::default()),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(ManagedFieldsError::Shape),
        };
        let mut out = Managed::default();
        for (index, e) in entries.iter().enumerate() {
            let bad = |reason: &str| ManagedFieldsError::Entry {
                index,
                reason: reason.to_owned(),
            };
            let Value::Object(e) = e else {
                return Err(ManagedFieldsError::Shape);
            };
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
            let operation = match text("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err(bad("operation must be `Apply` or `Update`")),
            };
            let api_version = text("apiVersion");
            if api_version.is_empty() {
                return Err(bad("apiVersion must not be empty"));
            }
            match text("fieldsType") {
                "FieldsV1" => {}
                "" => return Err(bad("missing fieldsType")),
                other => return Err(bad(&format!("invalid fieldsType {other:?}"))),
            }
            let set = match e.get("fieldsV1") {
                None | Some(Value::Null) => FieldSet::new(),
                Some(v) => FieldSet::from_fields_v1(v, limits).map_err(|e| bad(&e.to_string()))?,
            };
            let id = ManagerId::new(text("manager"), operation, api_version, text("subresource"));
            match e.get("time").and_then(Value::as_str) {
                Some(t) => out.times.insert(id.clone(), t.to_owned()),
                None => out.times.remove(&id),
            };
            out.fields.insert(
                id,
                VersionedSet {
                    set,
                    api_version: api_version.to_owned(),
                    applied: operation == Operation::Apply,
                },
            );
        }
        Ok(out)
    }

    /// The managedFields list, in upstream's order (operation, time, manager, version,
    /// subresource); managers owning nothing are left out.
    pub fn encode(&self) -> Vec<Value> {
        let mut entries: Vec<(&ManagerId, &VersionedSet, Option<&String>)> = self
            .fields
            .iter()
            .filter(|(_, vs)| !vs.set.is_empty())
            .map(|(id, vs)| (id, vs, self.times.get(id)))
            .collect();
        entries.sort_by(|a, b| {
            (
                a.0.operation,
                a.2,
                &a.0.manager,
                &a.1.api_version,
                &a.0.subresource,
            )
                .cmp(&(
                    b.0.operation,
                    b.2,
                    &b.0.manager,
                    &b.1.api_version,
                    &b.0.subresource,
                ))
        });
        entries
            .into_iter()
            .map(|(id, vs, time)| {
                let mut m = Map::new();
                if !id.manager.is_empty() {
                    m.insert("manager".into(), Value::String(id.manager.clone()));
                }
                m.insert(
                    "operation".into(),
                    Value::String(id.operation.as_str().into()),
                );
                m.insert("apiVersion".into(), Value::String(vs.api_version.clone()));
                if let Some(t) = time {
                    m.insert("time".into(), Value::String(t.clone()));
                }
                m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
                m.insert("fieldsV1".into(), vs.set.to_fields_v1());
                if !id.subresource.is_empty() {
                    m.insert("subresource".into(), Value::String(id.subresource.clone()));
                }
                Value::Object(m)
            })
            .collect()
    }

    /// Keeps at most [`MAX_UPDATE_MANAGERS`] Update entries: the oldest are merged, per
    /// API version, into an [`ANCIENT_CHANGES`] entry (upstream's `capManagersManager`).
    pub fn cap_update_managers(&mut self) {
        let mut updaters: Vec<ManagerId> = self
            .fields
            .iter()
            .filter(|(_, vs)| !vs.applied)
            .map(|(id, _)| id.clone())
            .collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        // Oldest first; entries without a time count as oldest.
        updaters.sort_by(|a, b| self.times.get(a).cmp(&self.times.get(b)));
        let mut count = updaters.len();
        let mut first_by_version: BTreeMap<String, ManagerId> = BTreeMap::new();
        for id in updaters {
            if count <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(vs) = self.fields.get(&id).cloned() else {
                continue;
            };
            let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, &vs.api_version, "");
            let Some(first) = first_by_version.get(&vs.api_version).cloned() else {
                first_by_version.insert(vs.api_version.clone(), id);
                continue;
            };
            if !self.fields.contains_key(&bucket)
                && let Some(s) = self.fields.remove(&first)
            {
                self.times.remove(&first);
                self.fields.insert(bucket.clone(), s);
            }
            if let Some(b) = self.fields.get_mut(&bucket) {
                b.set.union_with(&vs.set);
            }
            self.fields.remove(&id);
            match self.times.remove(&id) {
                Some(t) => self.times.insert(bucket, t),
                None => self.times.remove(&bucket),
            };
            count -= 1;
        }
    }
}

/// The text of the conflicts one answer lists together, at most (each path once in the
/// message and once in the causes): past it the rest are counted, not listed. Upstream
/// lists every conflict, so a small apply over many deep fields with long names answered
/// with a message thousands of times its size (a 160 KB apply: a 578 MB 409).
pub const MAX_CONFLICT_REPORT_BYTES: usize = 256 * 1024;

/// Fields another manager owns that an apply would change: the first ones as paths (in
/// order, by manager, within [`MAX_CONFLICT_REPORT_BYTES`] of text, always at least one),
/// and how many there are in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<(ManagerId, Path)>, pub usize);

impl Conflicts {
    /// The conflicts of `sets` (each manager's conflicting fields), listed within the
    /// bound. Costs the size of the sets plus the bound, whatever their paths' lengths.
    pub fn from_sets(sets: &[(ManagerId, FieldSet)]) -> Self {
        let total = sets.iter().map(|(_, s)| s.len()).sum();
        let mut listed = Vec::new();
        let mut budget = MAX_CONFLICT_REPORT_BYTES;
        for (id, set) in sets {
            set.visit_paths(&mut |p| {
                let len: usize = p.iter().map(|pe| pe.to_string().len() + 1).sum();
                if !listed.is_empty() && len > budget {
                    budget = 0;
                    return false;
                }
                budget = budget.saturating_sub(len);
                listed.push((id.clone(), Path(p.to_vec())));
                true
            });
            if budget == 0 {
                break;
            }
        }
        Conflicts(listed, total)
    }

    /// How many conflicts there are (listed or not).
    pub fn total(&self) -> usize {
        self.1.max(self.0.len())
    }

    /// Upstream's message: `Apply failed with 1 conflict: conflict with "m": .a`, or
    /// per manager (sorted) a list of its paths; then `- ... and N more` when not every
    /// conflict is listed.
    pub fn message(&self) -> String {
        if let [(m, p)] = self.0.as_slice()
            && self.total() == 1
        {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                m.describe(),
                shown(p)
            );
        }
        let mut by: BTreeMap<String, Vec<&Path>> = BTreeMap::new();
        for (m, p) in &self.0 {
            by.entry(m.describe()).or_default().push(p);
        }
        let mut lines = Vec::new();
        for (m, paths) in by {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.iter().map(|p| format!("- {}", shown(p))));
        }
        let unlisted = self.total() - self.0.len();
        if unlisted > 0 {
            lines.push(format!("- ... and {unlisted} more"));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.total(),
            lines.join("\n")
        )
    }

    /// One `(message, field)` per conflict, for the Status causes of type
    /// `FieldManagerConflict`.
    pub fn causes(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|(m, p)| (format!("conflict with {}", m.describe()), shown(p)))
            .collect()
    }
}

/// A conflicting path as a message shows it: cut by `listwatch_api::echo` (a path holds
/// the request's keys, which may be as long as its body).
fn shown(p: &Path) -> String {
    listwatch_api::echo::echo(&p.to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: FieldsLimits = FieldsLimits {
        max_depth: 100,
        max_entries: 10_000,
    };

    #[test]
    fn entries_round_trip_in_upstream_order() {
        let entries = json!([
            {"manager":"b","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:02Z",
             "fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:b":{}}}},
            {"manager":"a","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:01Z",
             "fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:a":{}}},"subresource":"status"},
            {"manager":"z","operation":"Apply","apiVersion":"v1","time":"2026-01-01T00:00:09Z",
             "fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:z":{}}}}
        ]);
        let m = Managed::decode(Some(&entries), LIMITS).unwrap();
        let out = Value::Array(m.encode());
        let names: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["z", "a", "b"]);
        assert_eq!(out[0], entries[2]);
        assert_eq!(out[1], entries[1]);
    }

    #[test]
    fn bad_entries_are_refused_as_upstream_refuses_them() {
        for e in [
            json!([{"manager":"a","operation":"Patch","apiVersion":"v1","fieldsType":"FieldsV1"}]),
            json!([{"manager":"a","operation":"Apply","fieldsType":"FieldsV1"}]),
            json!([{"manager":"a","operation":"Apply","apiVersion":"v1"}]),
            json!([{"manager":"a","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV2"}]),
            json!([{"manager":"a","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"q:1":{}}}]),
            json!({"manager":"a"}),
            json!([1]),
        ] {
            assert!(Managed::decode(Some(&e), LIMITS).is_err(), "{e}");
        }
        // No cap on the number of entries (upstream has none): 5 000 appliers are read.
        let many = Value::Array(
            (0..5_000)
                .map(|i| {
                    json!({"manager": format!("m{i}"), "operation": "Apply",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {format!("f:k{i}"): {}}}})
                })
                .collect(),
        );
        let decoded = Managed::decode(Some(&many), LIMITS).unwrap();
        assert_eq!(decoded.fields.len(), 5_000);
        assert_eq!(decoded.encode().len(), 5_000);
    }

    #[test]
    fn encoded_fields_v1_keys_are_stored_in_upstreams_order() {
        // Ports 8080 then 9 and indices 10 then 2 as text; upstream writes them by value.
        let mut set = FieldSet::new();
        for port in [8080, 9] {
            let Value::Object(key) = json!({"containerPort": port, "protocol": "TCP"}) else {
                unreachable!()
            };
            let mut p = Path::fields(&["spec", "ports"]).0;
            p.push(crate::PathElement::key(key));
            set.insert(&p);
        }
        for i in [10, 2] {
            let mut p = Path::fields(&["spec", "list"]).0;
            p.push(crate::PathElement::Index(i));
            set.insert(&p);
        }
        let mut m = Managed::default();
        m.fields.insert(
            ManagerId::new("a", Operation::Apply, "v1", ""),
            VersionedSet {
                set,
                api_version: "v1".into(),
                applied: true,
            },
        );
        let obj = json!({"metadata": {"name": "x", "managedFields": m.encode()}});
        let obj = listwatch_api::Object::from_value(obj, &listwatch_api::SelectableFields::none())
            .unwrap();
        let text = String::from_utf8(obj.to_json_bytes().to_vec()).unwrap();
        let at = |s: &str| text.find(s).unwrap_or_else(|| panic!("{s} in {text}"));
        assert!(
            at(r#"containerPort\":9,"#) < at(r#"containerPort\":8080,"#),
            "{text}"
        );
        assert!(at(r#""i:2""#) < at(r#""i:10""#), "{text}");
    }

    #[test]
    fn conflict_messages_are_upstreams() {
        let a = ManagerId::new("kubectl", Operation::Apply, "v1", "");
        let u = ManagerId::new("ctl", Operation::Update, "apps/v1", "status");
        let one = Conflicts(vec![(a.clone(), Path::fields(&["data", "k"]))], 1);
        assert_eq!(
            one.message(),
            r#"Apply failed with 1 conflict: conflict with "kubectl": .data.k"#
        );
        let two = Conflicts(
            vec![
                (u.clone(), Path::fields(&["spec", "replicas"])),
                (a, Path::fields(&["data", "k"])),
                (u.clone(), Path::fields(&["spec", "paused"])),
            ],
            3,
        );
        assert_eq!(
            two.message(),
            "Apply failed with 3 conflicts: conflicts with \"ctl\" with subresource \"status\" using apps/v1:\n\
             - .spec.replicas\n- .spec.paused\nconflicts with \"kubectl\":\n- .data.k"
        );
        assert_eq!(
            two.causes()[0],
            (
                "conflict with \"ctl\" with subresource \"status\" using apps/v1".to_owned(),
                ".spec.replicas".to_owned()
            )
        );
    }

    #[test]
    fn conflicts_are_listed_within_their_bound() {
        let u = ManagerId::new("ctl", Operation::Update, "v1", "");
        let long = "k".repeat(100_000);
        let mut set = FieldSet::new();
        for i in 0..50 {
            set.insert(&Path::fields(&["data", &long, &format!("f{i}")]).0);
        }
        let c = Conflicts::from_sets(&[(u.clone(), set)]);
        assert_eq!(c.total(), 50);
        // 100 kB a path: two fit in 256 KiB.
        assert_eq!(c.0.len(), 2);
        let m = c.message();
        assert!(
            m.starts_with("Apply failed with 50 conflicts: "),
            "{}",
            &m[..60]
        );
        assert!(m.ends_with("- ... and 48 more"));
        assert!(m.len() < MAX_CONFLICT_REPORT_BYTES + 1024);
        // One path longer than the bound is still listed.
        let mut one = FieldSet::new();
        one.insert(&Path::fields(&[&"x".repeat(300_000)]).0);
        let c = Conflicts::from_sets(&[(u, one)]);
        assert_eq!((c.0.len(), c.total()), (1, 1));
    }

    #[test]
    fn update_managers_are_capped_into_ancient_changes() {
        let mut m = Managed::default();
        for i in 0..13 {
            let id = ManagerId::new(&format!("m{i:02}"), Operation::Update, "v1", "");
            let mut set = FieldSet::new();
            set.insert(&Path::fields(&["data", &format!("k{i}")]).0);
            m.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: "v1".into(),
                    applied: false,
                },
            );
            m.times.insert(id, format!("2026-01-01T00:00:{i:02}Z"));
        }
        m.cap_update_managers();
        assert_eq!(m.fields.len(), MAX_UPDATE_MANAGERS);
        let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, "v1", "");
        assert_eq!(m.fields[&bucket].set.len(), 4);
        assert_eq!(m.times[&bucket], "2026-01-01T00:00:03Z");
        assert!(
            !m.fields
                .keys()
                .any(|id| id.manager == "m00" || id.manager == "m03")
        );
    }
}
