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
//! deprecated fields must be unset. Updates are not checked beyond the generic rules.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::conversion::{Conversion, rename};
use crate::strategy::{Invalid, KindStrategy};
use crate::{GcPolicy, Generation, KindSpec, NameValidation, Printer, PrinterColumn};

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
    let col = PrinterColumn::new;
    KindSpec::new("events.k8s.io", "v1", "events", "Event")
        .short_names(["ev"])
        .selectable_fields(EVENTS_V1_FIELDS)
        .generation(Generation::None)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
        .gc_policy(GcPolicy::Unsupported)
        .storage_resource("events")
        .strategy(EventsV1Strategy)
        .printer(Printer::Columns(vec![
            col("Type", "string", ".type"),
            col("Reason", "string", ".reason"),
            col("Object", "string", ".regarding.name"),
            col("Message", "string", ".note"),
        ]))
        .converted(EventsV1)
}

/// The strategy of `events.k8s.io/v1` events: upstream's create validation for the group.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventsV1Strategy;

fn empty(obj: &Value, field: &str) -> bool {
    match obj.get(field) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(Value::Object(m)) => m.values().all(|v| v.is_null() || v == ""),
        Some(_) => false,
    }
}

impl KindStrategy for EventsV1Strategy {
    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = Vec::new();
        if empty(obj, "eventTime") {
            out.push(Invalid::Required {
                field: "eventTime".into(),
            });
        } else {
            for field in [
                "reportingController",
                "reportingInstance",
                "action",
                "reason",
            ] {
                if empty(obj, field) {
                    out.push(Invalid::Required {
                        field: field.into(),
                    });
                }
            }
        }
        let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
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
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c",
            "reportingInstance": "i", "action": "a", "reason": "r"}));
        assert!(ok.is_empty(), "{ok:?}");
    }
}
