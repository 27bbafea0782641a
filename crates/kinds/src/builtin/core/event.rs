//! Events (`v1`): upstream's event selectable fields, create on PUT, no part in garbage
//! collection, and upstream's printer (LAST SEEN TYPE REASON OBJECT MESSAGE, and SUBOBJECT
//! SOURCE FIRST SEEN COUNT NAME for `-o wide`; no NAME or AGE in the default view), which
//! `events.k8s.io/v1` events share.

use serde_json::Value;

use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, Times};
use crate::{FieldError, GcPolicy, Generation, KindSpec, NameValidation};

/// Event fields a field selector may name (upstream's `event.ToSelectableFields` and core/v1's
/// event field label function, whose `source` — declared with how it is read in [`spec`] —
/// is `source.component`, else `reportingComponent`; `source.component` itself is not a
/// label the function accepts).
pub const EVENT_FIELDS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "type",
];

/// `v1` events.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "events", "Event")
        .short_names(["ev"])
        .selectable_fields(EVENT_FIELDS)
        .field_reads("source", &["source.component", "reportingComponent"])
        .generation(Generation::None)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
        // Upstream: events take no part in garbage collection.
        .gc_policy(GcPolicy::Unsupported)
        .strategy(EventStrategy)
}

/// Upstream's rule (core validation's `legacyValidateEvent`) that an event lives beside what
/// it is about: an event without `eventTime` (a core recorder's) whose involved object has a
/// namespace must be in that namespace, and one about a cluster-scoped object in `default`
/// (or no namespace); an event with `eventTime` about a cluster-scoped object must be in
/// `default` or `kube-system`.
fn namespace_errors(obj: &Value) -> Option<FieldError> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let involved = obj["involvedObject"]["namespace"].as_str().unwrap_or("");
    let legacy = obj.get("eventTime").is_none_or(Value::is_null);
    let fits = match (legacy, involved) {
        (true, "") => matches!(ns, "" | "default"),
        (true, theirs) => theirs == ns,
        (false, "") => matches!(ns, "default" | "kube-system"),
        (false, _) => true,
    };
    (!fits).then(|| {
        FieldError::invalid_str(
            "involvedObject.namespace",
            involved,
            "does not match event.namespace",
        )
    })
}

/// The strategy of `v1` events: their printer and the namespace rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventStrategy;

impl KindStrategy for EventStrategy {
    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        namespace_errors(obj).into_iter().collect()
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        namespace_errors(new).into_iter().collect()
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(columns())
    }

    fn table_cells_at(
        &self,
        obj: &Value,
        name: &str,
        _age: &str,
        times: &dyn Times,
    ) -> Option<Vec<Value>> {
        Some(cells(obj, name, times))
    }
}

/// The event columns (printers.go's, in its order).
pub fn columns() -> Vec<TableColumn> {
    let mut name = print::name_column();
    name.priority = 1;
    vec![
        print::col("Last Seen", "string", "The time the event was last seen."),
        print::col("Type", "string", "Type of this event (Normal, Warning)."),
        print::col("Reason", "string", "Why the action was taken."),
        print::col("Object", "string", "The object this event is about."),
        print::wide(
            "Subobject",
            "string",
            "The part of the object the event is about.",
        ),
        print::wide(
            "Source",
            "string",
            "The component (and host) reporting the event.",
        ),
        print::col(
            "Message",
            "string",
            "A human-readable description of the event.",
        ),
        print::wide("First Seen", "string", "The time the event was first seen."),
        print::wide("Count", "string", "The number of times the event occurred."),
        name,
    ]
}

/// The cells of a `v1`-shaped event, as upstream's `printEvent`: LAST SEEN from
/// `lastTimestamp`, else FIRST SEEN (`firstTimestamp`, else `eventTime`), or from
/// `series.lastObservedTime` with the series' count; a count of 0 prints 1; OBJECT as
/// `kind/name` in lower case; SOURCE as `component[, host]` (`reportingComponent` and
/// `reportingInstance` when the source's are empty); the message trimmed.
pub fn cells(obj: &Value, name: &str, times: &dyn Times) -> Vec<Value> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    fn set(v: &Value) -> Option<&str> {
        v.as_str().filter(|s| !s.is_empty())
    }
    let since = |v: &Value| set(v).map(|t| times.since(t));
    let first = since(&obj["firstTimestamp"])
        .or_else(|| since(&obj["eventTime"]))
        .unwrap_or_else(|| "<unknown>".to_owned());
    let mut last = since(&obj["lastTimestamp"]).unwrap_or_else(|| first.clone());
    let mut count = obj["count"].as_i64().unwrap_or(0);
    let series = &obj["series"];
    if series.is_object() {
        last = since(&series["lastObservedTime"]).unwrap_or_else(|| "<unknown>".to_owned());
        count = series["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &obj["involvedObject"];
    let kind = text(&involved["kind"]).to_lowercase();
    let target = match set(&involved["name"]) {
        Some(n) => format!("{kind}/{n}"),
        None => kind,
    };
    let component = set(&obj["source"]["component"])
        .or_else(|| set(&obj["reportingComponent"]))
        .unwrap_or("");
    let source = match set(&obj["source"]["host"]).or_else(|| set(&obj["reportingInstance"])) {
        Some(host) => format!("{component}, {host}"),
        None => component.to_owned(),
    };
    vec![
        Value::String(last),
        Value::String(text(&obj["type"])),
        Value::String(text(&obj["reason"])),
        Value::String(target),
        Value::String(text(&involved["fieldPath"])),
        Value::String(source),
        Value::String(text(&obj["message"]).trim().to_owned()),
        Value::String(first),
        Value::from(count),
        Value::String(name.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Clock;

    impl Times for Clock {
        fn since(&self, t: &str) -> String {
            format!("since {t}")
        }
        fn between(&self, _: &str, _: &str) -> Option<String> {
            None
        }
        fn human(&self, s: u64) -> String {
            s.to_string()
        }
    }

    /// rt3: an event in one namespace about an object of another was accepted.
    #[test]
    fn an_event_lives_beside_what_it_is_about() {
        let ev = |ns: &str, involved: Option<&str>, time: bool| {
            let mut e = json!({"metadata": {"name": "e", "namespace": ns},
                "involvedObject": {"kind": "Pod", "name": "p"}});
            if let Some(i) = involved {
                e["involvedObject"]["namespace"] = json!(i);
            }
            if time {
                e["eventTime"] = json!("2026-12-07T00:00:00.000000Z");
            }
            namespace_errors(&e).map(|e| format!("{}: {}", e.field, e.body()))
        };
        assert_eq!(ev("a", Some("a"), false), None);
        assert_eq!(
            ev("a", Some("b"), false).as_deref(),
            Some("involvedObject.namespace: Invalid value: \"b\": does not match event.namespace")
        );
        assert_eq!(ev("default", None, false), None);
        assert!(ev("a", None, false).is_some());
        assert_eq!(ev("kube-system", None, true), None);
        assert!(ev("a", None, true).is_some());
        assert_eq!(ev("a", Some("b"), true), None);
    }

    #[test]
    fn rows_print_as_upstreams_event_printer() {
        let e = json!({"firstTimestamp": "t1", "lastTimestamp": "t2", "count": 0,
            "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
            "type": "Normal", "reason": "Pulled", "message": " done\n",
            "source": {"component": "", "host": "n1"}, "reportingComponent": "kubelet"});
        let c = cells(&e, "p.1", &Clock);
        assert_eq!(c.len(), columns().len());
        assert_eq!(
            c,
            [
                json!("since t2"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/p"),
                json!("spec.containers{c}"),
                json!("kubelet, n1"),
                json!("done"),
                json!("since t1"),
                json!(1),
                json!("p.1")
            ]
        );
        let s = json!({"eventTime": "t0", "series": {"count": 4, "lastObservedTime": "t3"},
            "involvedObject": {"kind": "Node"}});
        let c = cells(&s, "n.1", &Clock);
        assert_eq!(
            (&c[0], &c[3], &c[7], &c[8]),
            (
                &json!("since t3"),
                &json!("node"),
                &json!("since t0"),
                &json!(4)
            )
        );
    }
}
