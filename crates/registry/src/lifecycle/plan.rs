//! What one DELETE does to one stored object: a pure function of the object, the
//! `DeleteOptions` and the time, as upstream decides it in `rest.BeforeDelete`, the pod
//! strategy's `CheckGracefulDelete`, `deletionFinalizersForGarbageCollection` and the registry
//! store's `updateForGracefulDeletionAndFinalizers` (and, for a namespace's first DELETE, the
//! namespace registry). The caller ([`super::delete`]) turns the [`Plan`] into storage writes.
//!
//! The rules:
//! - **grace** (resources with [`GracefulDeletion::Pod`]): a first DELETE sets
//!   `deletionTimestamp` to now + the period and `deletionGracePeriodSeconds` to it (and bumps
//!   `generation`); the period is the option's, else `spec.terminationGracePeriodSeconds`,
//!   else 30, and 0 for a pod not scheduled (`spec.nodeName` empty) or terminated (phase
//!   `Succeeded`/`Failed`); a negative period counts as 1. A period of 0 (without finalizers)
//!   removes the object after that write, so watchers see MODIFIED then DELETED. A later
//!   DELETE may only shorten a pending period (the timestamp moves back by the difference);
//!   anything else leaves the object as it is (and its finalizers too);
//! - **garbage-collector finalizers**: `orphan` when the options ask to orphan
//!   (`orphanDependents: true`, `propagationPolicy: Orphan`), else when the object already
//!   has it, else when the resource's [`GcPolicy`] orphans by default; `foregroundDeletion`
//!   when the options ask for `Foreground`, else when the object already has it. A resource
//!   whose policy is [`GcPolicy::Unsupported`] gets neither (and loses them). A namespace's
//!   first DELETE follows the namespace registry's variant (`orphanDependents: false` means
//!   foreground there);
//! - **finalizers hold**: an object with finalizers after that is marked
//!   (`deletionTimestamp` now unless already set earlier, `deletionGracePeriodSeconds: 0`,
//!   `generation` bumped once: upstream's `markAsDeleting`) and kept; one without, and not
//!   kept for a grace period, is removed;
//! - a namespace's first DELETE marks it (phase `Terminating`) and keeps it; a later DELETE
//!   changes nothing while its `spec.finalizers` are not empty (upstream's namespace
//!   registry answers the namespace as it is), and is the generic store's once they are
//!   empty (garbage-collector finalizers per the options, removed when none hold it).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN, is_namespaces, obj_entry};
use crate::clock;
use crate::options::{DeleteRequest, Propagation};
use listwatch_kinds::{GcPolicy, GracefulDeletion, KindSpec};

/// Pods' grace period when neither the DELETE nor the pod gives one (upstream's default of
/// `spec.terminationGracePeriodSeconds`).
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// The latest time an RFC 3339 timestamp with a four-digit year can say
/// (9999-12-31T23:59:59Z): a huge grace period ends there.
const MAX_TIMESTAMP: i64 = 253_402_300_799;

/// What a DELETE does to the object it found.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Remove the object as it is, writing nothing first.
    Remove,
    /// Write this state first; then remove it (`then_remove`) or keep it.
    Write {
        /// The object to write (JSON, its `resourceVersion` still the current one).
        object: Value,
        /// Whether the object goes once written (grace 0 and no finalizers).
        then_remove: bool,
    },
    /// A graceful deletion is pending and this DELETE does not shorten it: nothing changes.
    Pending,
}

/// The plan of a DELETE with `opts` of `cur` (the stored object as JSON) at `now` (Unix
/// seconds). See the module doc.
pub fn plan(info: &KindSpec, cur: &Value, opts: &DeleteRequest, now: i64) -> Plan {
    let mut v = cur.clone();
    let namespace = is_namespaces(info);
    // A kind's own first DELETE (a CRD's cleanup finalizer and `Terminating` condition).
    if v.pointer("/metadata/deletionTimestamp")
        .is_none_or(Value::is_null)
    {
        info.strategy.prepare_for_delete(&mut v);
    }
    let Some(obj) = v.as_object_mut() else {
        return Plan::Remove;
    };
    let spec_finalizers = obj
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let pod_like = !namespace && info.graceful_deletion == GracefulDeletion::Pod;
    let period = pod_like.then(|| pod_grace_period(obj, opts.grace_period_seconds));
    let Some(meta) = obj_entry(obj, "metadata") else {
        return Plan::Remove;
    };
    let deleting = meta.get("deletionTimestamp").is_some_and(|t| !t.is_null());
    if namespace && deleting && spec_finalizers {
        // The namespace registry's later DELETE while `spec.finalizers` hold it: the
        // namespace is answered as it is, and nothing (its finalizers neither) changes.
        return Plan::Pending;
    }
    let requested = opts.grace_period_seconds.map(|g| if g < 0 { 1 } else { g });
    let pending_grace = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .map(|g| if g < 0 { 1 } else { g });

    // Grace (`BeforeDelete`).
    let mut graceful = None;
    if let Some(period) = period {
        if deleting {
            match pending_grace {
                None | Some(0) => {}
                Some(pending) => match requested {
                    Some(g) if g < pending => {
                        let ts = meta
                            .get("deletionTimestamp")
                            .and_then(Value::as_str)
                            .and_then(clock::parse_rfc3339)
                            .unwrap_or(now);
                        // The grace period began at `ts - pending`; a mark clamped to
                        // year 9999 no longer says when, so it began at the latest now.
                        let began = if ts >= MAX_TIMESTAMP {
                            now
                        } else {
                            ts.saturating_sub(pending)
                        };
                        let moved = began.saturating_add(g);
                        meta.insert("deletionTimestamp".into(), timestamp(moved));
                        meta.insert("deletionGracePeriodSeconds".into(), Value::from(g));
                        graceful = Some(g);
                    }
                    _ => return Plan::Pending,
                },
            }
        } else {
            meta.insert(
                "deletionTimestamp".into(),
                timestamp(now.saturating_add(period)),
            );
            meta.insert("deletionGracePeriodSeconds".into(), Value::from(period));
            bump_generation(meta);
            graceful = Some(period);
        }
    }

    // The garbage collector's finalizers.
    let current: Vec<Value> = meta
        .get("finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has = |f: &str| current.iter().any(|x| x.as_str() == Some(f));
    let (orphan, foreground) = if namespace && !deleting {
        namespace_gc_finalizers(opts, has(FINALIZER_ORPHAN), has(FINALIZER_FOREGROUND))
    } else {
        gc_finalizers(info.gc_policy, opts, &current)
    };
    let mut wanted: Vec<Value> = current
        .iter()
        .filter(|x| !matches!(x.as_str(), Some(FINALIZER_ORPHAN | FINALIZER_FOREGROUND)))
        .cloned()
        .collect();
    if orphan {
        wanted.push(Value::from(FINALIZER_ORPHAN));
    }
    if foreground {
        wanted.push(Value::from(FINALIZER_FOREGROUND));
    }
    if !same_set(&current, &wanted) {
        if wanted.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), Value::Array(wanted.clone()));
        }
    } else {
        wanted = current;
    }
    let finalizers = !wanted.is_empty();

    match graceful {
        Some(g) => Plan::Write {
            object: v,
            then_remove: !finalizers && g == 0,
        },
        // A first DELETE marks a namespace; a later one (its `spec.finalizers` empty) is
        // the generic store's, as for any other object.
        None if namespace && !deleting => {
            mark_namespace(&mut v, now);
            Plan::Write {
                object: v,
                then_remove: false,
            }
        }
        None if finalizers => {
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                mark_as_deleting(meta, now);
            }
            Plan::Write {
                object: v,
                then_remove: false,
            }
        }
        None => Plan::Remove,
    }
}

/// Pods' `CheckGracefulDelete`: the grace period a DELETE gives the pod `obj`.
fn pod_grace_period(obj: &Map<String, Value>, requested: Option<i64>) -> i64 {
    let spec = obj.get("spec");
    let mut period = requested
        .map(|g| if g < 0 { 1 } else { g })
        .or_else(|| {
            spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
                .and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
    let scheduled = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = obj
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str);
    if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
        period = 0;
    }
    if period < 0 { 1 } else { period }
}

/// `(orphan, foreground)` as upstream's `shouldOrphanDependents` and `shouldDeleteDependents`:
/// the options first, then the finalizers the object has (the first of the two found), then
/// the resource's default.
fn gc_finalizers(policy: GcPolicy, opts: &DeleteRequest, current: &[Value]) -> (bool, bool) {
    if policy == GcPolicy::Unsupported {
        return (false, false);
    }
    if let Some(o) = opts.orphan_dependents {
        return (o, false);
    }
    match opts.propagation {
        Some(Propagation::Orphan) => return (true, false),
        Some(Propagation::Background) => return (false, false),
        Some(Propagation::Foreground) => return (false, true),
        None => {}
    }
    for f in current.iter().filter_map(Value::as_str) {
        match f {
            FINALIZER_ORPHAN => return (true, false),
            FINALIZER_FOREGROUND => return (false, true),
            _ => {}
        }
    }
    (policy == GcPolicy::OrphanDependents, false)
}

/// The namespace registry's first DELETE: `shouldHaveOrphanFinalizer` and
/// `shouldHaveDeleteDependentsFinalizer`.
fn namespace_gc_finalizers(opts: &DeleteRequest, orphan: bool, foreground: bool) -> (bool, bool) {
    if let Some(o) = opts.orphan_dependents {
        return (o, !o);
    }
    match opts.propagation {
        Some(p) => (p == Propagation::Orphan, p == Propagation::Foreground),
        None => (orphan, foreground),
    }
}

/// Whether two finalizer lists hold the same set (upstream's `shouldUpdateFinalizers`).
/// Hashes both sides: a request controls how many finalizers there are, and a pairwise
/// `contains` made each DELETE quadratic in them.
fn same_set(a: &[Value], b: &[Value]) -> bool {
    let set = |l: &[Value]| -> HashSet<String> { l.iter().map(Value::to_string).collect() };
    set(a) == set(b)
}

fn timestamp(unix: i64) -> Value {
    Value::String(clock::format_rfc3339(unix.clamp(0, MAX_TIMESTAMP)))
}

fn bump_generation(meta: &mut Map<String, Value>) {
    if let Some(g) = meta
        .get("generation")
        .and_then(Value::as_i64)
        .filter(|g| *g > 0)
    {
        meta.insert("generation".into(), Value::from(g.saturating_add(1)));
    }
}

/// Upstream's `markAsDeleting`: `generation` bumped on the first mark, `deletionTimestamp`
/// now unless already set no later than now, `deletionGracePeriodSeconds: 0`.
fn mark_as_deleting(meta: &mut Map<String, Value>, now: i64) {
    let existing = meta
        .get("deletionTimestamp")
        .filter(|t| !t.is_null())
        .map(|t| t.as_str().and_then(clock::parse_rfc3339));
    if existing.is_none() {
        bump_generation(meta);
    }
    // Unset, unreadable or in the future: now.
    let later = existing.flatten().is_none_or(|t| t > now);
    if later {
        meta.insert("deletionTimestamp".into(), timestamp(now));
    }
    meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
}

/// A namespace's mark: `deletionTimestamp` once, phase `Terminating`.
fn mark_namespace(v: &mut Value, now: i64) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    if let Some(status) = obj_entry(obj, "status") {
        status.insert("phase".into(), Value::String("Terminating".into()));
    }
    if let Some(meta) = obj_entry(obj, "metadata")
        && meta.get("deletionTimestamp").is_none_or(Value::is_null)
    {
        meta.insert("deletionTimestamp".into(), timestamp(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn pods() -> KindSpec {
        KindSpec::new("", "v1", "pods", "Pod").graceful_deletion(GracefulDeletion::Pod)
    }

    fn cm() -> KindSpec {
        KindSpec::new("", "v1", "configmaps", "ConfigMap")
    }

    fn opts(grace: Option<i64>, p: Option<Propagation>, orphan: Option<bool>) -> DeleteRequest {
        DeleteRequest {
            grace_period_seconds: grace,
            propagation: p,
            orphan_dependents: orphan,
            ..DeleteRequest::default()
        }
    }

    fn written(p: Plan) -> (Value, bool) {
        match p {
            Plan::Write {
                object,
                then_remove,
            } => (object, then_remove),
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn ts(unix: i64) -> Value {
        Value::String(clock::format_rfc3339(unix))
    }

    #[test]
    fn a_scheduled_pod_waits_its_grace_period_and_only_shorter_ones_apply() {
        let pod = json!({"metadata":{"name":"p","generation":1},"spec":{"nodeName":"n1","terminationGracePeriodSeconds":45},"status":{"phase":"Running"}});
        let (v, remove) = written(plan(&pods(), &pod, &opts(None, None, None), NOW));
        assert!(!remove);
        assert_eq!(v["metadata"]["deletionTimestamp"], ts(NOW + 45));
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 45);
        assert_eq!(v["metadata"]["generation"], 2);
        // The option wins over the spec; neither: 30.
        let (v2, _) = written(plan(&pods(), &pod, &opts(Some(10), None, None), NOW));
        assert_eq!(v2["metadata"]["deletionGracePeriodSeconds"], 10);
        let mut bare = pod.clone();
        bare["spec"]
            .as_object_mut()
            .unwrap()
            .remove("terminationGracePeriodSeconds");
        let (v3, _) = written(plan(&pods(), &bare, &opts(None, None, None), NOW));
        assert_eq!(v3["metadata"]["deletionGracePeriodSeconds"], 30);

        // Pending: a longer or equal or absent grace changes nothing, a shorter one moves
        // the timestamp back by the difference, 0 removes.
        for g in [None, Some(45), Some(100)] {
            assert_eq!(
                plan(&pods(), &v, &opts(g, None, None), NOW + 5),
                Plan::Pending
            );
        }
        let (short, remove) = written(plan(&pods(), &v, &opts(Some(5), None, None), NOW + 1));
        assert!(!remove);
        assert_eq!(short["metadata"]["deletionTimestamp"], ts(NOW + 5));
        assert_eq!(short["metadata"]["deletionGracePeriodSeconds"], 5);
        assert_eq!(short["metadata"]["generation"], 2, "bumped once");
        let (now, remove) = written(plan(&pods(), &v, &opts(Some(0), None, None), NOW + 1));
        assert!(remove);
        assert_eq!(now["metadata"]["deletionTimestamp"], ts(NOW));
        assert_eq!(now["metadata"]["deletionGracePeriodSeconds"], 0);
        // A negative grace counts as 1.
        let (neg, _) = written(plan(&pods(), &v, &opts(Some(-7), None, None), NOW + 1));
        assert_eq!(neg["metadata"]["deletionGracePeriodSeconds"], 1);
        // Finalizers stay as they are while a grace period is pending.
        assert_eq!(
            plan(
                &pods(),
                &v,
                &opts(None, Some(Propagation::Orphan), None),
                NOW
            ),
            Plan::Pending
        );
    }

    #[test]
    fn unscheduled_and_terminated_pods_are_written_then_removed() {
        let unscheduled =
            json!({"metadata":{"name":"p"},"spec":{"terminationGracePeriodSeconds":45}});
        let (v, remove) = written(plan(&pods(), &unscheduled, &opts(None, None, None), NOW));
        assert!(remove);
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(v["metadata"]["deletionTimestamp"], ts(NOW));
        for phase in ["Succeeded", "Failed"] {
            let done =
                json!({"metadata":{"name":"p"},"spec":{"nodeName":"n"},"status":{"phase":phase}});
            assert!(written(plan(&pods(), &done, &opts(Some(60), None, None), NOW)).1);
        }
        // With a finalizer: marked with grace 0 and kept.
        let held = json!({"metadata":{"name":"p","finalizers":["a.io/b"]}});
        let (v, remove) = written(plan(&pods(), &held, &opts(None, None, None), NOW));
        assert!(!remove);
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
        // A huge grace ends in year 9999, not in an unreadable timestamp.
        let running = json!({"metadata":{"name":"p"},"spec":{"nodeName":"n"}});
        let (v, _) = written(plan(
            &pods(),
            &running,
            &opts(Some(i64::MAX), None, None),
            NOW,
        ));
        assert_eq!(v["metadata"]["deletionTimestamp"], "9999-12-31T23:59:59Z");
        // Shortening that clamped mark ends the new period counted from now, not from a
        // start computed out of the clamp (which read 1970).
        let (v, _) = written(plan(&pods(), &v, &opts(Some(0), None, None), NOW));
        assert_eq!(v["metadata"]["deletionTimestamp"], ts(NOW));
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
    }

    #[test]
    fn other_resources_go_at_once_unless_finalizers_hold_them() {
        let free = json!({"metadata":{"name":"c"}});
        assert_eq!(
            plan(&cm(), &free, &opts(Some(30), None, None), NOW),
            Plan::Remove
        );
        assert_eq!(
            plan(
                &cm(),
                &free,
                &opts(None, Some(Propagation::Background), None),
                NOW
            ),
            Plan::Remove
        );
        let held = json!({"metadata":{"name":"c","generation":3,"finalizers":["a.io/b"]}});
        let (v, remove) = written(plan(&cm(), &held, &opts(Some(30), None, None), NOW));
        assert!(!remove);
        assert_eq!(v["metadata"]["deletionTimestamp"], ts(NOW));
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(v["metadata"]["generation"], 4);
        // Marked again later: unchanged (the timestamp is not in the future).
        let (again, _) = written(plan(&cm(), &v, &opts(None, None, None), NOW + 100));
        assert_eq!(again, v);
    }

    #[test]
    fn propagation_policies_set_and_replace_the_garbage_collector_finalizers() {
        let free = json!({"metadata":{"name":"c","finalizers":["a.io/b"]}});
        let fins = |p: Plan| written(p).0["metadata"]["finalizers"].clone();
        let o = |p, orphan| opts(None, p, orphan);
        assert_eq!(
            fins(plan(&cm(), &free, &o(Some(Propagation::Orphan), None), NOW)),
            json!(["a.io/b", "orphan"])
        );
        assert_eq!(
            fins(plan(
                &cm(),
                &free,
                &o(Some(Propagation::Foreground), None),
                NOW
            )),
            json!(["a.io/b", "foregroundDeletion"])
        );
        assert_eq!(
            fins(plan(&cm(), &free, &o(None, Some(true)), NOW)),
            json!(["a.io/b", "orphan"])
        );
        assert_eq!(
            fins(plan(&cm(), &free, &o(None, Some(false)), NOW)),
            json!(["a.io/b"])
        );
        // Without finalizers of its own, an orphaning DELETE keeps the object for the
        // garbage collector.
        let bare = json!({"metadata":{"name":"c"}});
        let (v, remove) = written(plan(&cm(), &bare, &o(Some(Propagation::Orphan), None), NOW));
        assert!(!remove);
        assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
        assert!(v["metadata"]["deletionTimestamp"].is_string());
        // An existing GC finalizer is kept without options and replaced by an explicit
        // policy; Background drops it (and with nothing left, the object goes).
        let orphaning =
            json!({"metadata":{"name":"c","finalizers":["orphan"],"deletionTimestamp":ts(NOW)}});
        assert_eq!(
            fins(plan(&cm(), &orphaning, &o(None, None), NOW)),
            json!(["orphan"])
        );
        assert_eq!(
            fins(plan(
                &cm(),
                &orphaning,
                &o(Some(Propagation::Foreground), None),
                NOW
            )),
            json!(["foregroundDeletion"])
        );
        assert_eq!(
            plan(
                &cm(),
                &orphaning,
                &o(Some(Propagation::Background), None),
                NOW
            ),
            Plan::Remove
        );
        // Legacy kinds orphan by default; unsupported ones never get (and lose) them.
        let legacy = cm().gc_policy(GcPolicy::OrphanDependents);
        assert_eq!(
            fins(plan(&legacy, &bare, &o(None, None), NOW)),
            json!(["orphan"])
        );
        assert_eq!(
            plan(&legacy, &bare, &o(Some(Propagation::Background), None), NOW),
            Plan::Remove
        );
        let events = cm().gc_policy(GcPolicy::Unsupported);
        assert_eq!(
            plan(&events, &bare, &o(Some(Propagation::Orphan), None), NOW),
            Plan::Remove
        );
        assert_eq!(plan(&events, &orphaning, &o(None, None), NOW), Plan::Remove);
    }

    #[test]
    fn namespaces_are_marked_with_their_registry_rules() {
        let ns = KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false);
        let live = json!({"metadata":{"name":"n"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}});
        let (v, remove) = written(plan(&ns, &live, &opts(None, None, Some(false)), NOW));
        assert!(!remove);
        assert_eq!(v["status"]["phase"], "Terminating");
        assert_eq!(v["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        assert!(v["metadata"].get("deletionGracePeriodSeconds").is_none());
        let mut done = v.clone();
        done["spec"]["finalizers"] = json!([]);
        done["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        assert_eq!(plan(&ns, &done, &opts(None, None, None), NOW), Plan::Remove);
        // A later DELETE while `spec.finalizers` hold it changes nothing, whatever it asks.
        for asked in [
            opts(None, Some(Propagation::Orphan), None),
            opts(None, Some(Propagation::Background), None),
            opts(None, None, Some(true)),
            opts(Some(0), None, None),
        ] {
            assert_eq!(plan(&ns, &v, &asked, NOW), Plan::Pending);
        }
        // Once they are empty, a later DELETE is the generic store's: it may still set the
        // collector's finalizers, and marks the namespace as any object.
        let mut free = v.clone();
        free["spec"]["finalizers"] = json!([]);
        let (w, remove) = written(plan(
            &ns,
            &free,
            &opts(None, Some(Propagation::Orphan), None),
            NOW,
        ));
        assert!(!remove);
        assert_eq!(w["metadata"]["finalizers"], json!(["orphan"]));
        assert_eq!(
            plan(
                &ns,
                &free,
                &opts(None, Some(Propagation::Background), None),
                NOW
            ),
            Plan::Remove
        );
    }

    fn ts_of(v: &Value) -> Option<i64> {
        v.pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(clock::parse_rfc3339)
    }

    proptest::proptest! {
        /// Whatever the stored object and the options: no panic; a write keeps the identity,
        /// has a readable deletionTimestamp no later than one it had, never both collector
        /// finalizers, and removes only objects without finalizers.
        #[test]
        fn plans_never_panic_and_keep_the_deletion_rules(
            pod in proptest::bool::ANY,
            ts in proptest::option::of(proptest::prop_oneof![
                (0i64..4_000_000_000).prop_map(|t| json!(clock::format_rfc3339(t))),
                proptest::strategy::Just(json!("garbage")),
                proptest::strategy::Just(json!(7)),
            ]),
            grace in proptest::option::of(proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(Value::from),
                proptest::strategy::Just(json!("30")),
            ]),
            fins in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(json!("orphan")),
                proptest::strategy::Just(json!("foregroundDeletion")),
                proptest::strategy::Just(json!("a.io/x")),
                proptest::strategy::Just(json!(5)),
            ], 0..4),
            node in proptest::option::of("[a-zé]{0,3}"),
            phase in proptest::option::of(proptest::prop_oneof![
                proptest::strategy::Just("Running"), proptest::strategy::Just("Succeeded")]),
            term in proptest::option::of(proptest::num::i64::ANY),
            opt_grace in proptest::option::of(proptest::num::i64::ANY),
            policy in 0u8..4,
            orphan in proptest::option::of(proptest::bool::ANY),
            now in 0i64..4_000_000_000,
        ) {
            use proptest::prelude::*;
            let mut meta = json!({"name": "x", "uid": "u", "generation": 1, "finalizers": fins});
            if let Some(t) = ts { meta["deletionTimestamp"] = t; }
            if let Some(g) = grace { meta["deletionGracePeriodSeconds"] = g; }
            let cur = json!({"metadata": meta,
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": term},
                "status": {"phase": phase}});
            let info = if pod { pods() } else { cm() };
            let propagation = [None, Some(Propagation::Orphan), Some(Propagation::Background),
                Some(Propagation::Foreground)][usize::from(policy)];
            let o = DeleteRequest {
                grace_period_seconds: opt_grace,
                propagation: if orphan.is_some() { None } else { propagation },
                orphan_dependents: orphan,
                ..DeleteRequest::default()
            };
            if let Plan::Write { object, then_remove } = plan(&info, &cur, &o, now) {
                prop_assert_eq!(&object["metadata"]["name"], "x");
                prop_assert_eq!(&object["metadata"]["uid"], "u");
                let new_ts = ts_of(&object);
                prop_assert!(new_ts.is_some(), "{}", object);
                if let (Some(old), Some(new)) = (ts_of(&cur), new_ts) {
                    prop_assert!(new <= old, "moved later: {} -> {}", old, new);
                }
                let f = object["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
                prop_assert!(!(f.contains(&json!("orphan")) && f.contains(&json!("foregroundDeletion"))));
                if then_remove {
                    prop_assert!(f.is_empty(), "{}", object);
                }
            }
        }
    }
}
