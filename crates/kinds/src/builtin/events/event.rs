//! `events.k8s.io/v1` Events: upstream serves them from the same storage as core `v1`
//! Events (pkg/registry/core/event, one storage for both groups), converting through the
//! internal Event (pkg/apis/events/v1/conversion.go). Here the spec's storage is core
//! events' (`storage_resource` `events`) and [`EventsV1`] converts each object crossing it:
//!
//! | `events.k8s.io/v1`          | `v1`              |
//! |-----------------------------|-------------------|
//! | `regarding`                 | `involvedObject`  |
//! | `note`                      | `message`         |
//! | `reportingController`       | `reportingComponent` |
//! | `deprecatedSource`          | `source`          |
//! | `deprecatedFirstTimestamp`  | `firstTimestamp`  |
//! | `deprecatedLastTimestamp`   | `lastTimestamp`   |
//! | `deprecatedCount`           | `count`           |
//!
//! and every other field (`eventTime`, `series`, `related`, `reportingInstance`, `action`,
//! `reason`, `type`, metadata) is the same. Field selectors name the new fields
//! (`regarding.*`, `reportingController`, `reason`, `type`, `source`: upstream's
//! `events.k8s.io` field label conversion) and are read as their core names.
//!
//! A create through this group is validated as upstream's `ValidateEventCreate` does for
//! `events.k8s.io/v1`: `eventTime` is required, and with it `reportingController`,
//! `reportingInstance`, `action` and `reason`; `type` is `Normal` or `Warning`; the
//! deprecated fields must be unset; `reportingController` is a qualified name;
//! `reportingInstance`, `action` and `reason` are at most 128 bytes and `note` at most 1024;
//! a `series` has a `count` of at least 2 and a `lastObservedTime`; an empty
//! `regarding.namespace` is allowed only in `default` and `kube-system`.
//!
//! An update through this group is upstream's `ValidateEventUpdate`: the new object passes
//! the same legacy rules (lengths, required fields), a changed `series` is checked again,
//! and every other field (`regarding`, `reason`, `note`, `type`, `action`, `eventTime` to the
//! microsecond, `related`, `reportingController`, `reportingInstance` and the deprecated
//! fields) is immutable (422 `field is immutable`). Error paths name the internal (`v1`)
//! fields, as upstream's do.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::conversion::{Conversion, rename};
use crate::strategy::{Invalid, KindStrategy, TableColumn, Times};
use crate::{GcPolicy, Generation, KindSpec, NameValidation};

/// `(events.k8s.io/v1 name, v1 name)` of the renamed top-level fields.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The field selector labels of `events.k8s.io/v1` Events (upstream's
/// `EventToSelectableFields` over the new names); each reads the core field of
/// [`EventsV1::stored_field`].
pub const EVENTS_V1_FIELDS: [&str; 11] = [
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "source",
    "type",
];

/// The conversion between `events.k8s.io/v1` and stored (`v1`) Events.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventsV1;

impl Conversion for EventsV1 {
    fn served(&self) -> &str {
        "events.k8s.io/v1"
    }

    fn stored(&self) -> &str {
        "v1"
    }

    fn to_served(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.served()));
        let back: Vec<(&str, &str)> = RENAMED.iter().map(|(new, old)| (*old, *new)).collect();
        rename(obj, &back);
    }

    fn to_stored(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.stored()));
        rename(obj, &RENAMED);
    }

    fn stored_field<'a>(&self, field: &'a str) -> Cow<'a, str> {
        if let Some(rest) = field.strip_prefix("regarding.") {
            return Cow::Owned(format!("involvedObject.{rest}"));
        }
        match field {
            "reportingController" => Cow::Borrowed("reportingComponent"),
            other => Cow::Borrowed(other),
        }
    }
}

/// `events.k8s.io/v1` events, over core events' storage.
pub fn spec() -> KindSpec {
    KindSpec::new("events.k8s.io", "v1", "events", "Event")
        .short_names(["ev"])
        .selectable_fields(EVENTS_V1_FIELDS)
        .generation(Generation::None)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
        .gc_policy(GcPolicy::Unsupported)
        .storage_resource("events")
        .strategy(EventsV1Strategy)
        .converted(EventsV1)
}

/// The strategy of `events.k8s.io/v1` events: upstream's create and update validation for
/// the group.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventsV1Strategy;

/// Upstream's limits (pkg/apis/core/validation/events.go), in bytes.
const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn empty(obj: &Value, field: &str) -> bool {
    obj.get(field).is_none_or(blank)
}

/// A JSON value Go would decode to its zero value.
fn blank(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Object(m) => m.values().all(blank),
        _ => false,
    }
}

fn text<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

/// `v` with its zero-valued members dropped (how Go compares the decoded structs).
fn normalized(v: Option<&Value>) -> Value {
    match v {
        None => Value::Null,
        Some(v) if blank(v) => Value::Null,
        Some(Value::Object(m)) => Value::Object(
            m.iter()
                .filter(|(_, v)| !blank(v))
                .map(|(k, v)| (k.clone(), normalized(Some(v))))
                .collect(),
        ),
        Some(other) => other.clone(),
    }
}

/// An RFC 3339 UTC time truncated to the microsecond, for comparison (other forms as given).
fn micro(v: Option<&Value>) -> String {
    let s = v.and_then(Value::as_str).unwrap_or("");
    let Some(body) = s.strip_suffix('Z') else {
        return s.to_owned();
    };
    let (secs, frac) = body.split_once('.').unwrap_or((body, ""));
    let mut digits: String = frac.chars().take(6).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return s.to_owned();
    }
    while digits.len() < 6 {
        digits.push('0');
    }
    format!("{secs}.{digits}Z")
}

fn too_long(field: &str, limit: usize) -> Invalid {
    Invalid::Value {
        field: field.into(),
        value: String::new(),
        detail: format!("can have at most {limit} characters"),
    }
}

/// Upstream's `legacyValidateEvent` for an event with an `eventTime` (one without is refused
/// by the strict rules before this matters).
fn legacy(obj: &Value, out: &mut Vec<Invalid>) {
    if empty(obj, "eventTime") {
        return;
    }
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let regarding_ns = obj
        .pointer("/regarding/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if regarding_ns.is_empty() && ns != "default" && ns != "kube-system" {
        out.push(Invalid::Value {
            field: "involvedObject.namespace".into(),
            value: String::new(),
            detail: "does not match event.namespace".into(),
        });
    }
    let controller = text(obj, "reportingController");
    if controller.is_empty() {
        out.push(Invalid::Required {
            field: "reportingController".into(),
        });
    }
    for m in listwatch_api::labels::qualified_name_errors(controller) {
        out.push(Invalid::Value {
            field: "reportingController".into(),
            value: listwatch_api::echo::echo(controller).into_owned(),
            detail: m,
        });
    }
    for (field, limit) in [
        ("reportingInstance", REPORTING_INSTANCE_LIMIT),
        ("action", ACTION_LIMIT),
        ("reason", REASON_LIMIT),
    ] {
        let v = text(obj, field);
        if v.is_empty() {
            out.push(Invalid::Required {
                field: field.into(),
            });
        } else if v.len() > limit {
            out.push(too_long(field, limit));
        }
    }
    if text(obj, "note").len() > NOTE_LIMIT {
        out.push(too_long("message", NOTE_LIMIT));
    }
}

/// Upstream's `validateV1EventSeries`: a present `series` (even `{}`) has `count` >= 2 and a
/// `lastObservedTime`.
fn series(obj: &Value, out: &mut Vec<Invalid>) {
    let Some(series) = obj.get("series").filter(|s| !s.is_null()) else {
        return;
    };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        out.push(Invalid::Value {
            field: "series.count".into(),
            value: String::new(),
            detail: "should be at least 2".into(),
        });
    }
    if empty(series, "lastObservedTime") {
        out.push(Invalid::Required {
            field: "series.lastObservedTime".into(),
        });
    }
}

/// `(served field, upstream's error path)` of the fields an update may not change (besides
/// `eventTime`, compared to the microsecond).
const IMMUTABLE: [(&str, &str); 12] = [
    ("regarding", "involvedObject"),
    ("reason", "reason"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("type", "type"),
    ("action", "action"),
    ("related", "related"),
    ("reportingController", "reportingController"),
    ("reportingInstance", "reportingInstance"),
];

fn immutable(field: &str, new: Option<&Value>) -> Invalid {
    Invalid::Value {
        field: field.into(),
        // Upstream shows a string as itself and a struct in Go's form; JSON here.
        value: match new {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => listwatch_api::echo::echo(s).into_owned(),
            Some(other) => listwatch_api::echo::echo_json(other),
        },
        detail: "field is immutable".into(),
    }
}

impl KindStrategy for EventsV1Strategy {
    /// Upstream prints both groups' events with the one internal-event printer: the core
    /// event printer, on the object under its `v1` names.
    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(crate::builtin::core::event::columns())
    }

    fn table_cells_at(
        &self,
        obj: &Value,
        name: &str,
        _age: &str,
        times: &dyn Times,
    ) -> Option<Vec<Value>> {
        let mut stored = obj.as_object().cloned().unwrap_or_default();
        EventsV1.to_stored(&mut stored);
        Some(crate::builtin::core::event::cells(
            &Value::Object(stored),
            name,
            times,
        ))
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = Vec::new();
        legacy(obj, &mut out);
        series(obj, &mut out);
        if empty(obj, "eventTime") {
            out.push(Invalid::Required {
                field: "eventTime".into(),
            });
        }
        let ty = text(obj, "type");
        if ty != "Normal" && ty != "Warning" {
            out.push(Invalid::Value {
                field: "type".into(),
                value: String::new(),
                detail: format!("has invalid value: {}", listwatch_api::echo::echo(ty)),
            });
        }
        for (served, internal) in [
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
            ("deprecatedCount", "count"),
            ("deprecatedSource", "source"),
        ] {
            if !empty(obj, served) {
                out.push(Invalid::Value {
                    field: internal.into(),
                    value: String::new(),
                    detail: "needs to be unset".into(),
                });
            }
        }
        crate::strategy::rules(out)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = Vec::new();
        legacy(new, &mut out);
        // Go compares the pointers' targets: `series: {}` differs from no series.
        let series_of = |v: &Value| {
            v.get("series")
                .filter(|s| !s.is_null())
                .map(|s| normalized(Some(s)))
        };
        if series_of(new) != series_of(old) {
            series(new, &mut out);
        }
        for (served, path) in IMMUTABLE {
            if normalized(new.get(served)) != normalized(old.get(served)) {
                out.push(immutable(path, new.get(served)));
            }
        }
        if micro(new.get("eventTime")) != micro(old.get("eventTime")) {
            out.push(immutable("eventTime", new.get("eventTime")));
        }
        crate::strategy::rules(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_conversion_renames_both_ways_and_keeps_the_rest() {
        let mut stored = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "hello", "reportingComponent": "ctl", "reportingInstance": "i",
            "source": {"component": "c"}, "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": null, "count": 3, "series": {"count": 2},
            "eventTime": "2026-01-01T00:00:00.000000Z", "related": {"kind": "Node"},
            "reason": "R", "type": "Normal", "action": "A",
        });
        let orig = stored.clone();
        let m = stored.as_object_mut().unwrap();
        EventsV1.to_served(m);
        assert_eq!(stored["apiVersion"], "events.k8s.io/v1");
        assert_eq!(stored["regarding"]["name"], "p");
        assert_eq!(stored["note"], "hello");
        assert_eq!(stored["reportingController"], "ctl");
        assert_eq!(stored["deprecatedSource"]["component"], "c");
        assert_eq!(stored["deprecatedCount"], 3);
        assert_eq!(stored["series"]["count"], 2);
        assert!(stored.get("involvedObject").is_none() && stored.get("message").is_none());
        EventsV1.to_stored(stored.as_object_mut().unwrap());
        assert_eq!(stored, orig);
        assert_eq!(
            EventsV1.stored_field("regarding.name"),
            "involvedObject.name"
        );
        assert_eq!(
            EventsV1.stored_field("reportingController"),
            "reportingComponent"
        );
        assert_eq!(EventsV1.stored_field("reason"), "reason");
    }

    #[test]
    fn a_create_needs_upstreams_new_event_fields() {
        let e = EventsV1Strategy.validate_create(&json!({"type": "Normal",
            "eventTime": "2026-01-01T00:00:00.000000Z", "deprecatedCount": 2}));
        let bodies: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert!(
            bodies
                .iter()
                .any(|b| b.starts_with("reportingController: Required")),
            "{bodies:?}"
        );
        assert!(
            bodies.iter().any(|b| b.starts_with("count: Invalid")),
            "{bodies:?}"
        );
        let ok = EventsV1Strategy.validate_create(&json!({"type": "Warning",
            "metadata": {"namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c",
            "reportingInstance": "i", "action": "a", "reason": "r"}));
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn an_update_keeps_upstreams_immutable_fields_and_limits() {
        let old = json!({"type": "Normal", "metadata": {"namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c",
            "reportingInstance": "i", "action": "a", "reason": "r", "note": "n"});
        let mut same = old.clone();
        same["eventTime"] = json!("2026-01-01T00:00:00.0000001Z");
        same["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"});
        assert!(EventsV1Strategy.validate_update(&same, &old).is_empty());
        let mut evil = old.clone();
        evil["type"] = json!("Evil");
        evil["note"] = json!("x".repeat(1025));
        evil["series"] = json!({});
        let bodies: Vec<String> = EventsV1Strategy
            .validate_update(&evil, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        for want in [
            "type: Invalid value: \"Evil\": field is immutable",
            "message: Invalid value: \"\": can have at most 1024 characters",
            "series.count: Invalid value: \"\": should be at least 2",
            "series.lastObservedTime: Required value",
        ] {
            assert!(
                bodies.iter().any(|b| b.starts_with(want)),
                "{want}: {bodies:?}"
            );
        }
    }
}
