//! The status conditions of a terminating namespace, as upstream's namespace controller
//! writes them (`pkg/controller/namespace/deletion/status_condition_utils.go`): five
//! condition types, each `True` with a reason and message saying what is wrong, or `False`
//! with its "all is well" reason and message.
//!
//! Pure: [`Report`] is what one pass over the namespace's content found; [`merge`] folds it
//! into the conditions the namespace has, and says whether anything changed (a condition's
//! `lastTransitionTime` moves only when its status flips, as upstream).
//!
//! Invariant: the messages are bounded whatever the namespace holds — at most
//! [`MAX_LISTED`] resources, finalizers and errors are named in one message (upstream
//! names all; a namespace's content is not bounded, its status object must be).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// `NamespaceDeletionDiscoveryFailure`: never true here (the served resources are known
/// in-process), written with its "all is well" variant as upstream.
pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
/// `NamespaceDeletionGroupVersionParsingFailure`: never true here either.
pub const GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
/// `NamespaceDeletionContentFailure`: deleting some resource failed.
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
/// `NamespaceContentRemaining`: objects are left after a pass.
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
/// `NamespaceFinalizersRemaining`: objects left are held by these finalizers.
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// The condition types, in the order upstream adds them.
const TYPES: [&str; 5] = [
    DISCOVERY_FAILURE,
    GV_PARSING_FAILURE,
    CONTENT_FAILURE,
    CONTENT_REMAINING,
    FINALIZERS_REMAINING,
];

/// How many resources, finalizers or errors one message names at most.
pub const MAX_LISTED: usize = 100;

/// Upstream's `okReasons` and `okMessages`: a condition that is not true.
fn ok(t: &str) -> (&'static str, &'static str) {
    match t {
        DISCOVERY_FAILURE => (
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        GV_PARSING_FAILURE => (
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        CONTENT_FAILURE => (
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        _ => ("ContentRemoved", "All content successfully removed"),
    }
}

/// What one pass over a namespace's content found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Objects left per resource, keyed `{plural}.{group}` (upstream's `gvr.Resource + "."
    /// + gvr.Group`, so `configmaps.` for a core resource).
    pub remaining: BTreeMap<String, usize>,
    /// Objects left per finalizer they carry (at most [`MAX_LISTED`] finalizers counted).
    pub finalizers: BTreeMap<String, usize>,
    /// Why deleting some resources failed, one message per resource.
    pub errors: Vec<String>,
}

impl Report {
    /// Counts one object left in `resource`, carrying `finalizers`.
    pub fn left(&mut self, resource: &str, finalizers: &[&str]) {
        *self.remaining.entry(resource.to_owned()).or_default() += 1;
        for f in finalizers {
            if let Some(n) = self.finalizers.get_mut(*f) {
                *n += 1;
            } else if self.finalizers.len() < MAX_LISTED {
                self.finalizers.insert((*f).to_owned(), 1);
            }
        }
    }

    /// Objects left in all.
    pub fn total_remaining(&self) -> usize {
        self.remaining.values().sum()
    }

    /// The true conditions this report makes, as `(type, reason, message)`.
    fn failing(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut out = Vec::new();
        if !self.errors.is_empty() {
            let mut msgs: Vec<&str> = self.errors.iter().map(String::as_str).collect();
            msgs.sort_unstable();
            msgs.truncate(MAX_LISTED);
            out.push((
                CONTENT_FAILURE,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    self.errors.len(),
                    msgs.join(", ")
                ),
            ));
        }
        let listed = |m: &BTreeMap<String, usize>, f: &dyn Fn(&str, usize) -> String| {
            let mut v: Vec<String> = m
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| f(k, *n))
                .collect();
            v.sort();
            v.truncate(MAX_LISTED);
            v.join(", ")
        };
        if self.remaining.values().any(|n| *n > 0) {
            let list = listed(&self.remaining, &|r, n| {
                format!("{r} has {n} resource instances")
            });
            out.push((
                CONTENT_REMAINING,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {list}"),
            ));
        }
        if self.finalizers.values().any(|n| *n > 0) {
            let list = listed(&self.finalizers, &|f, n| {
                format!("{f} in {n} resource instances")
            });
            out.push((
                FINALIZERS_REMAINING,
                "SomeFinalizerRemain",
                format!("Some finalizers are remaining: {list}"),
            ));
        }
        out
    }
}

/// Folds `report` into `conditions` (a namespace's `status.conditions`, any JSON): every
/// type gets its true variant from the report or its "all is well" one; an existing
/// condition is updated in place (its `lastTransitionTime` set to `now` only when its
/// status changes), a missing one appended. Returns the new list and whether it differs.
pub fn merge(conditions: Option<&Value>, report: &Report, now: &str) -> (Vec<Value>, bool) {
    let mut list: Vec<Value> = conditions
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let failing = report.failing();
    let mut changed = false;
    for t in TYPES {
        let (status, reason, message) = match failing.iter().find(|(ft, _, _)| *ft == t) {
            Some((_, reason, message)) => ("True", *reason, message.clone()),
            None => {
                let (reason, message) = ok(t);
                ("False", reason, message.to_owned())
            }
        };
        let existing = list
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t));
        match existing {
            None => {
                list.push(json!({
                    "type": t,
                    "status": status,
                    "lastTransitionTime": now,
                    "reason": reason,
                    "message": message,
                }));
                changed = true;
            }
            Some(c) => {
                let same = |c: &Map<String, Value>, k: &str, v: &str| {
                    c.get(k).and_then(Value::as_str) == Some(v)
                };
                if same(c, "status", status)
                    && same(c, "reason", reason)
                    && same(c, "message", &message)
                {
                    continue;
                }
                if !same(c, "status", status) {
                    c.insert("lastTransitionTime".into(), Value::from(now));
                }
                c.insert("status".into(), Value::from(status));
                c.insert("reason".into(), Value::from(reason));
                c.insert("message".into(), Value::from(message));
                changed = true;
            }
        }
    }
    (list, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_content_makes_upstreams_conditions() {
        let mut r = Report::default();
        r.left("configmaps.", &["example.com/hold"]);
        r.left("configmaps.", &["example.com/hold", "b.io/x"]);
        r.left("widgets.example.com", &[]);
        let (list, changed) = merge(None, &r, "2026-01-01T00:00:00Z");
        assert!(changed);
        let types: Vec<&str> = list.iter().filter_map(|c| c["type"].as_str()).collect();
        assert_eq!(types, TYPES);
        assert_eq!(list[0]["status"], "False");
        assert_eq!(list[0]["reason"], "ResourcesDiscovered");
        assert_eq!(
            list[2]["message"],
            "All content successfully deleted, may be waiting on finalization"
        );
        assert_eq!(list[3]["status"], "True");
        assert_eq!(list[3]["reason"], "SomeResourcesRemain");
        assert_eq!(
            list[3]["message"],
            "Some resources are remaining: configmaps. has 2 resource instances, widgets.example.com has 1 resource instances"
        );
        assert_eq!(list[4]["reason"], "SomeFinalizerRemain");
        assert_eq!(
            list[4]["message"],
            "Some finalizers are remaining: b.io/x in 1 resource instances, example.com/hold in 2 resource instances"
        );
        // The same report again changes nothing; an empty one flips the two and moves
        // only their transition times.
        let prior = Value::Array(list);
        let (again, changed) = merge(Some(&prior), &r, "2026-01-01T00:00:09Z");
        assert!(!changed);
        let (done, changed) = merge(Some(&Value::Array(again)), &Report::default(), "T2");
        assert!(changed);
        assert_eq!(done[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(done[3]["lastTransitionTime"], "T2");
        assert_eq!(done[3]["status"], "False");
        assert_eq!(done[4]["message"], "All content successfully removed");
    }

    #[test]
    fn errors_and_listings_are_bounded() {
        let mut r = Report::default();
        for i in 0..(MAX_LISTED * 3) {
            let f = format!("f.io/{i}");
            r.left("configmaps.", &[f.as_str()]);
            r.errors.push(format!("e{i}"));
        }
        assert_eq!(r.finalizers.len(), MAX_LISTED);
        let (list, _) = merge(None, &r, "t");
        let msg = list[2]["message"].as_str().unwrap_or_default();
        assert!(msg.starts_with(&format!(
            "Failed to delete all resource types, {} remaining: ",
            MAX_LISTED * 3
        )));
        let listed = msg.split_once(" remaining: ").map_or("", |(_, l)| l);
        assert_eq!(listed.matches(", ").count(), MAX_LISTED - 1);
    }
}
