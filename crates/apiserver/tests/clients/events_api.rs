//! `events.k8s.io/v1` Events (issue 28 item 2): served from core `v1` Events' storage with
//! upstream's field conversion, so an Event written through one group is read, listed
//! with field selectors and watched through the other, each with its own `apiVersion` and
//! field names; kubectl's `get events.v1.events.k8s.io` and `kubectl events` work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, run_ok};
use serde_json::Value;

const NEW_EVENT: &str = "apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: bound, namespace: default}
eventTime: \"2026-12-07T01:00:00.000000Z\"
reportingController: example.com/scheduler
reportingInstance: scheduler-1
action: Binding
reason: Scheduled
type: Normal
note: pod bound to node-1
regarding: {apiVersion: v1, kind: Pod, name: web-1, namespace: default}
related: {apiVersion: v1, kind: Node, name: node-1}
series: {count: 2, lastObservedTime: \"2026-12-07T01:00:05.000000Z\"}
";

/// Creates a core event with the Python client, then reads it, selects it and watches its
/// creation through `events.k8s.io/v1`.
const PY: &str = r#"
import sys, datetime
from kubernetes import client, watch
c = client.Configuration()
c.host = sys.argv[1]
api = client.ApiClient(c)
core = client.CoreV1Api(api)
ev = client.EventsV1Api(api)
start = ev.list_namespaced_event("default").metadata.resource_version
# MicroTime needs its microseconds (upstream parses RFC3339Micro).
t = datetime.datetime(2026, 12, 7, 1, 0, 0, 500000, tzinfo=datetime.timezone.utc)
core.create_namespaced_event("default", client.CoreV1Event(
    metadata=client.V1ObjectMeta(name="pulled"),
    involved_object=client.V1ObjectReference(kind="Pod", name="web-2", namespace="default"),
    message="image pulled", reason="Pulled", type="Normal", count=3,
    first_timestamp=t, last_timestamp=t, event_time=t,
    source=client.V1EventSource(component="kubelet"),
    reporting_component="kubelet", reporting_instance="node-2", action="Pull"))
e = ev.read_namespaced_event("pulled", "default")
print("read", e.note, e.regarding.name, e.reporting_controller, e.deprecated_count,
      e.deprecated_source.component)
sel = ev.list_namespaced_event("default", field_selector="regarding.name=web-2")
print("selected", [i.metadata.name for i in sel.items])
sel = ev.list_namespaced_event("default", field_selector="reportingController=example.com/scheduler")
print("by controller", [i.metadata.name for i in sel.items])
w = watch.Watch()
for item in w.stream(ev.list_namespaced_event, "default", resource_version=start, timeout_seconds=30):
    raw = item["raw_object"]
    print("watched", item["type"], raw["apiVersion"], raw["metadata"]["name"], raw.get("note"),
          "message" in raw)
    w.stop()
"#;

#[test]
#[ignore = "needs kubectl and the Python kubernetes client"]
fn an_event_of_either_group_is_read_selected_and_watched_through_the_other() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let file = dir.path().join("event.yaml");
    std::fs::write(&file, NEW_EVENT).unwrap();

    let resources = run_ok(k().args(["api-resources", "--api-group=events.k8s.io"]));
    assert!(
        resources.lines().any(|l| l.starts_with("events")
            && l.contains("events.k8s.io/v1")
            && l.contains("Event")),
        "{resources}"
    );
    assert!(
        run_ok(k().arg("create").arg("-f").arg(&file))
            .contains("event.events.k8s.io/bound created")
    );
    // The new group's event through the core group: upstream's field conversion.
    let core: Value =
        serde_json::from_str(&run_ok(k().args(["get", "events", "bound", "-o", "json"]))).unwrap();
    assert_eq!(core["apiVersion"], "v1", "{core}");
    assert_eq!(core["message"], "pod bound to node-1", "{core}");
    assert_eq!(core["involvedObject"]["name"], "web-1", "{core}");
    assert_eq!(
        core["reportingComponent"], "example.com/scheduler",
        "{core}"
    );
    assert_eq!(core["related"]["name"], "node-1", "{core}");
    assert_eq!(core["series"]["count"], 2, "{core}");
    assert!(
        core.get("note").is_none() && core.get("regarding").is_none(),
        "{core}"
    );
    // Upstream's one event printer for both groups: LAST SEEN TYPE REASON OBJECT MESSAGE
    // (the name only with `-o wide`).
    let table = run_ok(k().args(["get", "events.v1.events.k8s.io"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.contains("Scheduled")
            && l.contains("pod/web-1")
            && l.contains("pod bound to node-1")),
        "{table}"
    );

    // The core group's event through the new group, with the Python client.
    let text = common::python::python_ok(PY, &[&server.url]);
    assert!(
        text.contains("read image pulled web-2 kubelet 3 kubelet"),
        "{text}"
    );
    assert!(text.contains("selected ['pulled']"), "{text}");
    assert!(text.contains("by controller ['bound']"), "{text}");
    assert!(
        text.contains("watched ADDED events.k8s.io/v1 pulled image pulled False"),
        "{text}"
    );

    // `kubectl events` lists both.
    let events = run_ok(k().args(["events"]));
    for want in [
        "Pod/web-1",
        "pod bound to node-1",
        "Pod/web-2",
        "image pulled",
    ] {
        assert!(events.contains(want), "{want} not in:\n{events}");
    }
    // A create through the new group is validated as upstream's for the group.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: bad}\n\
         eventTime: \"2026-12-07T01:00:00.000000Z\"\ntype: Normal\nreason: R\n",
    )
    .unwrap();
    let err = common::run_err(k().arg("create").arg("-f").arg(&bad));
    assert!(
        err.contains("reportingController: Required value")
            && err.contains("action: Required value"),
        "{err}"
    );
}

/// An `events.k8s.io/v1` event that breaks one of upstream's create limits.
fn breaking(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: {name}, namespace: default}}\n\
         eventTime: \"2026-12-07T01:00:00.000000Z\"\nreportingController: example.com/c\n\
         reportingInstance: i\nreason: R\ntype: Normal\n\
         regarding: {{kind: Pod, name: p, namespace: default}}\n{extra}"
    )
}

#[test]
#[ignore = "needs kubectl"]
fn events_v1_updates_keep_upstreams_immutable_fields_and_creates_its_limits() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let file = dir.path().join("event.yaml");
    std::fs::write(&file, NEW_EVENT).unwrap();
    run_ok(k().arg("create").arg("-f").arg(&file));
    let kind = "events.v1.events.k8s.io";

    // The red team's patch: every field it touches is immutable (upstream's
    // `ValidateEventUpdate`), and nothing is written.
    let err = common::run_err(k().args([
        "patch",
        kind,
        "bound",
        "--type=merge",
        "-p",
        r#"{"type":"Evil","reason":"","action":"","eventTime":null}"#,
    ]));
    for want in [
        "type: Invalid value: \"Evil\": field is immutable",
        "reason: Invalid value: \"\": field is immutable",
        "action: Invalid value: \"\": field is immutable",
        "eventTime: Invalid value: \"\": field is immutable",
    ] {
        assert!(err.contains(want), "{want} not in: {err}");
    }
    let kept: Value =
        serde_json::from_str(&run_ok(k().args(["get", kind, "bound", "-o", "json"]))).unwrap();
    assert_eq!(kept["type"], "Normal", "{kept}");
    assert_eq!(kept["action"], "Binding", "{kept}");
    // A note or a regarding object may not change either; the series may, when valid.
    let err = common::run_err(k().args([
        "patch",
        kind,
        "bound",
        "--type=merge",
        "-p",
        r#"{"note":"rewritten","regarding":{"name":"other"}}"#,
    ]));
    assert!(
        err.contains("message: Invalid value") && err.contains("involvedObject: Invalid value"),
        "{err}"
    );
    let err = common::run_err(k().args([
        "patch",
        kind,
        "bound",
        "--type=merge",
        "-p",
        r#"{"series":{"count":1}}"#,
    ]));
    assert!(err.contains("series.count: Invalid value"), "{err}");
    run_ok(k().args([
        "patch",
        kind,
        "bound",
        "--type=merge",
        "-p",
        r#"{"series":{"count":3,"lastObservedTime":"2026-12-07T01:00:09.000000Z"}}"#,
    ]));

    // Upstream's create limits (`legacyValidateEvent`, `validateV1EventSeries`).
    for (name, extra, want) in [
        (
            "long-note",
            format!("action: A\nnote: {}\n", "n".repeat(1025)),
            "message: Invalid value: \"\": can have at most 1024 characters",
        ),
        (
            "long-action",
            format!("action: {}\n", "a".repeat(129)),
            "action: Invalid value: \"\": can have at most 128 characters",
        ),
        (
            "one-count",
            "action: A\nseries: {count: 1, lastObservedTime: \"2026-12-07T01:00:05.000000Z\"}\n"
                .to_owned(),
            "series.count: Invalid value: \"\": should be at least 2",
        ),
        (
            "empty-series",
            "action: A\nseries: {}\n".to_owned(),
            "series.lastObservedTime: Required value",
        ),
    ] {
        let bad = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&bad, breaking(name, &extra)).unwrap();
        let err = common::run_err(k().arg("create").arg("-f").arg(&bad));
        assert!(err.contains(want), "{name}: {want} not in: {err}");
    }
    // At the limits, a create is accepted.
    let fine = dir.path().join("fine.yaml");
    std::fs::write(
        &fine,
        breaking(
            "fine",
            &format!("action: {}\nnote: {}\n", "a".repeat(128), "n".repeat(1024)),
        ),
    )
    .unwrap();
    run_ok(k().arg("create").arg("-f").arg(&fine));
}
