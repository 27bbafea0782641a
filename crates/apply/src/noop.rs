//! A write that changes nothing but its managers' times is no write (upstream's
//! `IgnoreManagedFieldsTimestampsTransformer`, which the generic store runs on every update
//! after the strategy's `PrepareForUpdate`).
//!
//! The field manager stamps a manager's `time` when its apply or update changes the object
//! as the field manager sees it. The strategy may then undo that change: an apply to the
//! object itself whose configuration carries `status` (manifests exported from a cluster,
//! CRD manifests with controller-gen's `status:` stanza), or one through `/status` that
//! carries another `spec`, has those reset fields put back from the stored object. What is
//! left differs from the stored object only in that time, and storing it would bump the
//! resourceVersion and send every watcher a MODIFIED event on each identical re-apply.
//! [`keep_times_if_unchanged`] puts the stored times back in that case, so the write stores
//! the same bytes and the storage layer skips it.
//!
//! Invariants:
//! - pure: no clock, no I/O; only `new`'s `metadata.managedFields` is ever changed, and only
//!   to the stored object's own list;
//! - the times are put back only when everything else is unchanged: the object outside
//!   `metadata.managedFields` and `metadata.resourceVersion` (which storage sets itself), and
//!   every managedFields entry apart from its `time` (same managers, operations, versions,
//!   subresources and field sets). A change of ownership alone is a change, as upstream;
//! - cost: one comparison of the two objects and a sort of the entries (as many as the
//!   already-decoded objects hold); nothing is copied unless the times are put back.

use serde_json::{Map, Value};

/// `metadata` members the comparison leaves out: the list whose times are at stake, and the
/// resourceVersion (the stored object's, or none for an unconditional update; storage sets
/// it either way).
const SKIPPED_META: &[&str] = &["managedFields", "resourceVersion"];

/// Puts `old`'s `metadata.managedFields` back into `new` when the two objects differ in
/// nothing but the entries' `time` (see the module doc). Returns whether it did.
pub fn keep_times_if_unchanged(new: &mut Value, old: &Value) -> bool {
    let Some(old_entries) = entries(old) else {
        return false;
    };
    if !only_times_differ(new, old, old_entries) {
        return false;
    }
    match new
        .get_mut("metadata")
        .and_then(|m| m.get_mut("managedFields"))
    {
        Some(slot) => {
            *slot = Value::Array(old_entries.to_vec());
            true
        }
        None => false,
    }
}

/// Whether `new` is `old` (whose managedFields are `old_entries`) but for some entries'
/// times.
fn only_times_differ(new: &Value, old: &Value, old_entries: &[Value]) -> bool {
    let Some(new_entries) = entries(new) else {
        return false;
    };
    if new_entries == old_entries || !same_but_times(new_entries, old_entries) {
        // Either nothing to put back, or ownership itself changed.
        return false;
    }
    let (Value::Object(n), Value::Object(o)) = (new, old) else {
        return false;
    };
    let empty = Map::new();
    let (nm, om) = (meta_of(n).unwrap_or(&empty), meta_of(o).unwrap_or(&empty));
    equal_except(n, o, &["metadata"]) && equal_except(nm, om, SKIPPED_META)
}

fn meta_of(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// The managedFields entries of `obj`, when it has a list of them.
fn entries(obj: &Value) -> Option<&[Value]> {
    match obj.get("metadata")?.get("managedFields")? {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// Whether the two lists hold the same entries apart from their `time`s, in any order (the
/// encoding sorts entries by time, so a new time may move an entry).
fn same_but_times(new: &[Value], old: &[Value]) -> bool {
    if new.len() != old.len() {
        return false;
    }
    let (new, old) = (sorted(new), sorted(old));
    new.iter()
        .zip(old.iter())
        .all(|((_, n), (_, o))| match (n, o) {
            (Value::Object(n), Value::Object(o)) => equal_except(n, o, &["time"]),
            _ => n == o,
        })
}

/// `list`'s entries sorted by what identifies them.
fn sorted(list: &[Value]) -> Vec<(EntryKey<'_>, &Value)> {
    let mut v: Vec<(EntryKey<'_>, &Value)> = list.iter().map(|e| (key(e), e)).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// What identifies an entry: manager, operation, apiVersion, subresource.
type EntryKey<'a> = [&'a str; 4];

fn key(entry: &Value) -> EntryKey<'_> {
    let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
    [
        text("manager"),
        text("operation"),
        text("apiVersion"),
        text("subresource"),
    ]
}

/// Whether `a` and `b` have the same members apart from those named in `skip`.
fn equal_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &[&str]) -> bool {
    let kept = |k: &String| !skip.contains(&k.as_str());
    a.keys().filter(|k| kept(k)).count() == b.keys().filter(|k| kept(k)).count()
        && a.iter()
            .filter(|(k, _)| kept(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, op: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": op, "apiVersion": "batch/v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    fn job(rv: &str, status: Value, entries: Vec<Value>) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "pi", "resourceVersion": rv, "managedFields": entries},
               "spec": {"backoffLimit": 4}, "status": status})
    }

    fn spec_fields() -> Value {
        json!({"f:spec": {"f:backoffLimit": {}}})
    }

    #[test]
    fn only_a_newer_time_puts_the_stored_times_back() {
        let old = job(
            "7",
            json!({}),
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:00Z",
                spec_fields(),
            )],
        );
        let mut new = job(
            "7",
            json!({}),
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:05Z",
                spec_fields(),
            )],
        );
        assert!(keep_times_if_unchanged(&mut new, &old));
        assert_eq!(new, old);
        // Nothing to put back: false, unchanged.
        assert!(!keep_times_if_unchanged(&mut new, &old));
        assert_eq!(new, old);
        // The resourceVersion (set by storage) does not count; a missing one neither.
        let mut new = job(
            "",
            json!({}),
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:05Z",
                spec_fields(),
            )],
        );
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        assert!(keep_times_if_unchanged(&mut new, &old));
        assert_eq!(
            new["metadata"]["managedFields"],
            old["metadata"]["managedFields"]
        );
    }

    #[test]
    fn any_other_change_keeps_the_new_times() {
        let old = job(
            "7",
            json!({"active": 1}),
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:00Z",
                spec_fields(),
            )],
        );
        let newer = || {
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:05Z",
                spec_fields(),
            )]
        };
        // The status changed (a write through /status, or no reset).
        let mut new = job("7", json!({"active": 2}), newer());
        let before = new.clone();
        assert!(!keep_times_if_unchanged(&mut new, &old));
        assert_eq!(new, before);
        // A label added.
        let mut new = job("7", json!({"active": 1}), newer());
        new["metadata"]["labels"] = json!({"a": "b"});
        assert!(!keep_times_if_unchanged(&mut new, &old));
        // A member removed.
        let mut new = job("7", json!({"active": 1}), newer());
        if let Some(m) = new.as_object_mut() {
            m.remove("spec");
        }
        assert!(!keep_times_if_unchanged(&mut new, &old));
        // Ownership changed: another field set, another manager, another entry.
        let mut new = job(
            "7",
            json!({"active": 1}),
            vec![entry(
                "kubectl",
                "Apply",
                "2026-12-07T11:00:05Z",
                json!({"f:spec": {}}),
            )],
        );
        assert!(!keep_times_if_unchanged(&mut new, &old));
        let mut new = job(
            "7",
            json!({"active": 1}),
            vec![entry(
                "flux",
                "Apply",
                "2026-12-07T11:00:05Z",
                spec_fields(),
            )],
        );
        assert!(!keep_times_if_unchanged(&mut new, &old));
        let mut two = newer();
        two.push(entry(
            "ctl",
            "Update",
            "2026-12-07T11:00:05Z",
            json!({"f:status": {}}),
        ));
        let mut new = job("7", json!({"active": 1}), two);
        assert!(!keep_times_if_unchanged(&mut new, &old));
        // No managedFields on either side: nothing to do.
        let mut bare = json!({"metadata": {"name": "a"}});
        assert!(!keep_times_if_unchanged(
            &mut bare,
            &json!({"metadata": {"name": "a"}})
        ));
    }

    #[test]
    fn entries_reordered_by_their_new_times_still_match() {
        let a_old = entry("a", "Apply", "2026-12-07T11:00:00Z", spec_fields());
        let b = entry(
            "b",
            "Apply",
            "2026-12-07T11:00:02Z",
            json!({"f:metadata": {}}),
        );
        let old = job("7", json!({}), vec![a_old, b.clone()]);
        // a's new time sorts it after b.
        let a_new = entry("a", "Apply", "2026-12-07T11:00:09Z", spec_fields());
        let mut new = job("7", json!({}), vec![b, a_new]);
        assert!(keep_times_if_unchanged(&mut new, &old));
        assert_eq!(new, old);
    }
}
