//! Jobs (`batch/v1`): upstream's v1 defaults (pkg/apis/batch/v1/defaults.go: `completions`
//! and `parallelism` 1 when both are unset, `parallelism` 1, `backoffLimit` 6,
//! `completionMode: NonIndexed`, `suspend: false`, `podReplacementPolicy`, the template's
//! labels as the job's when it has none), the strategy's generated selector
//! (pkg/registry/batch/job/strategy.go: unless `manualSelector` is true, the selector is the
//! job's uid under `batch.kubernetes.io/controller-uid`, and the template carries
//! `batch.kubernetes.io/controller-uid`, `controller-uid`, `batch.kubernetes.io/job-name`
//! and `job-name` labels), the status reset on create, orphaning dependents by default,
//! `status.successful` as a selectable field, and the printer (NAME STATUS COMPLETIONS
//! DURATION AGE, and CONTAINERS IMAGES SELECTOR for `-o wide`). A selector given without
//! `manualSelector` keeps its labels, gains the uid, and is refused as upstream refuses it
//! (`` `selector` not auto-generated ``).

use serde_json::{Map, Value, json};

use crate::builtin::podspec::{self, workload};
use crate::builtin::print;
use crate::strategy::{Invalid, KindStrategy, TableColumn, Times, set_default};
use crate::{FieldLabels, GcPolicy, KindSpec};

/// The label keys of a generated selector and template.
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_JOB_NAME: &str = "job-name";

/// What a DELETE of jobs without a propagation policy is warned (upstream's job storage
/// says it in these words; clients and their tests match on it).
pub const ORPHANS_BY_DEFAULT: &str = "child pods are preserved by default when jobs are deleted; \
     set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to \
     suppress this warning";

/// `batch/v1` jobs.
pub fn spec(base: KindSpec) -> KindSpec {
    // `strconv.Itoa(int(job.Status.Succeeded))`: an unset count reads as `0`.
    base.field_labels(FieldLabels::Job)
        .field_reads("status.successful", &["status.succeeded"])
        .field_default("status.successful", "0")
        .gc_policy(GcPolicy::OrphanDependents)
        .delete_warning(ORPHANS_BY_DEFAULT)
        .strategy(JobStrategy)
}

/// The job strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobStrategy;

impl JobStrategy {
    /// The rules this kind's objects must keep, on create and update.
    fn broken(&self, obj: &Value) -> Vec<crate::FieldError> {
        validate_spec(&obj["spec"], "spec")
    }
}

impl KindStrategy for JobStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if obj["spec"]["manualSelector"].as_bool() != Some(true) {
            generate_selector(obj);
        }
        // Upstream copies the template's labels at every decode (its defaulting runs on
        // reads from storage too), so a job shows the generated ones: copied after them.
        template_labels_as_job_labels(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = self.broken(obj);
        out.extend(generated_selector(obj));
        out
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = self.broken(new);
        // The stored job defaulted as upstream defaults what it reads: one stored before a
        // default existed compares equal to its defaulted self.
        let mut old = old.clone();
        defaults(&mut old);
        out.extend(validate_update(&new["spec"], &old["spec"], &old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut v = vec![
            print::name_column(),
            print::col("Status", "string", "Status of the job."),
            print::col(
                "Completions",
                "string",
                "The successful completions of the job over the desired ones.",
            ),
            print::col("Duration", "string", "Time required to complete the job."),
            print::age_column(),
        ];
        v.extend(print::containers_images_selector(true));
        Some(v)
    }

    fn table_cells_at(
        &self,
        obj: &Value,
        name: &str,
        age: &str,
        times: &dyn Times,
    ) -> Option<Vec<Value>> {
        Some(cells(obj, name, age, times))
    }
}

/// The restart policies a job's pods may have (upstream's `ValidateJobSpec`).
const RESTART_POLICIES: &[&str] = &["OnFailure", "Never"];

/// Upstream's job spec rules clients meet first (pkg/apis/batch/validation): a pod template
/// with containers and a restart policy of `OnFailure` or `Never` (unset is the pod
/// default `Always`, refused), non-negative counts, and a selector its template's labels
/// match. `path` is where the spec is (`spec`, or a cron job's
/// `spec.jobTemplate.spec`).
pub fn validate_spec(spec: &Value, path: &str) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let pod = &spec["template"]["spec"];
    let policy = pod["restartPolicy"].as_str().unwrap_or("Always");
    if !RESTART_POLICIES.contains(&policy) {
        out.push(Invalid::NotSupported {
            field: format!("{path}.template.spec.restartPolicy"),
            value: policy.to_owned(),
            supported: RESTART_POLICIES,
        });
    } else if policy != "Never" {
        let needs_never = ["podFailurePolicy", "backoffLimitPerIndex"]
            .into_iter()
            .find(|f| !spec[*f].is_null());
        if let Some(f) = needs_never {
            out.push(Invalid::Value {
                field: format!("{path}.template.spec.restartPolicy"),
                value: policy.to_owned(),
                detail: format!("only \"Never\" is supported when {f} is specified"),
            });
        }
    }
    let mut counts = Vec::new();
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ] {
        // Shown as the number it is (`Invalid value: -1`), as upstream's int64.
        if spec[field].as_i64().is_some_and(|n| n < 0) {
            counts.push(crate::FieldError::invalid(
                &format!("{path}.{field}"),
                &spec[field],
                "must be greater than or equal to 0",
            ));
        }
    }
    let mut out = crate::strategy::rules(out);
    out.append(&mut counts);
    let indexed = spec["completionMode"] == "Indexed";
    if indexed && spec["completions"].is_null() {
        out.push(crate::FieldError::required(
            &format!("{path}.completions"),
            "when completion mode is Indexed",
        ));
    }
    for field in ["backoffLimitPerIndex", "successPolicy"] {
        if !indexed && !spec[field].is_null() {
            out.push(crate::FieldError::invalid(
                &format!("{path}.{field}"),
                &spec[field],
                "requires indexed completion mode",
            ));
        }
    }
    let labels = &spec["template"]["metadata"]["labels"];
    if workload::matches(&spec["selector"], labels) == Some(false) {
        out.push(crate::FieldError::new(
            crate::field::ErrorType::Invalid,
            &format!("{path}.template.metadata.labels"),
            Some(podspec::go_string_map(labels)),
            workload::NOT_MATCHING,
        ));
    }
    let mut pod_errors = workload::template(&spec["template"], &format!("{path}.template"), None);
    // The restart policy's rule above is the job's own (upstream's order: the pod spec's
    // errors come first, then the job's).
    pod_errors.append(&mut out);
    pod_errors
}

/// Upstream's `ValidateJobSpecUpdate` rules: `selector`, `completionMode`,
/// `podFailurePolicy`, `backoffLimitPerIndex`, `managedBy` and `successPolicy` immutable;
/// `completions` too, but for an indexed job changing it with `parallelism`; and the pod
/// template immutable, but for its node selector, tolerations, labels, annotations and
/// scheduling gates while the job is suspended and never started (`old` is the stored job).
fn validate_update(spec: &Value, old_spec: &Value, old: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let json = |v: &Value| crate::field::shown(v);
    let indexed = spec["completionMode"] == "Indexed";
    let elastic =
        indexed && !spec["completions"].is_null() && spec["completions"] == spec["parallelism"];
    if !elastic {
        out.extend(workload::immutable(
            &spec["completions"],
            &old_spec["completions"],
            "spec.completions",
            json,
        ));
    }
    out.extend(workload::immutable(
        &spec["selector"],
        &old_spec["selector"],
        "spec.selector",
        workload::go_label_selector,
    ));
    let mut old_template = old_spec["template"].clone();
    let suspended_unstarted = spec["suspend"] == true && old["status"]["startTime"].is_null();
    if suspended_unstarted && old_template.is_object() {
        let new_template = &spec["template"];
        for (parent, field) in [
            ("spec", "nodeSelector"),
            ("spec", "tolerations"),
            ("spec", "schedulingGates"),
            ("spec", "affinity"),
            ("metadata", "labels"),
            ("metadata", "annotations"),
        ] {
            if !old_template[parent].is_object() {
                old_template[parent] = Value::Object(Map::new());
            }
            old_template[parent][field] = new_template[parent][field].clone();
        }
    }
    out.extend(workload::immutable(
        &spec["template"],
        &old_template,
        "spec.template",
        json,
    ));
    for field in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
        "successPolicy",
    ] {
        out.extend(workload::immutable(
            &spec[field],
            &old_spec[field],
            &format!("spec.{field}"),
            json,
        ));
    }
    out
}

fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
    let spec = &obj["spec"];
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        set_default(obj, &["spec", "completions"], json!(1));
    }
    set_default(obj, &["spec", "parallelism"], json!(1));
    let backoff = if obj["spec"]["backoffLimitPerIndex"].is_null() {
        6
    } else {
        i64::from(i32::MAX)
    };
    set_default(obj, &["spec", "backoffLimit"], json!(backoff));
    set_default(obj, &["spec", "completionMode"], json!("NonIndexed"));
    set_default(obj, &["spec", "suspend"], json!(false));
    let replacement = if obj["spec"]["podFailurePolicy"].is_null() {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    set_default(obj, &["spec", "podReplacementPolicy"], json!(replacement));
}

/// The template's labels become the job's when it has none (v1 defaulting).
fn template_labels_as_job_labels(obj: &mut Value) {
    let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    if labels.is_object()
        && obj["metadata"].is_object()
        && obj["metadata"]["labels"]
            .as_object()
            .is_none_or(Map::is_empty)
    {
        obj["metadata"]["labels"] = labels;
    }
}

/// Upstream's `generateSelector`: the job's uid selects its pods.
fn generate_selector(obj: &mut Value) {
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if !obj["spec"].is_object() {
        return;
    }
    set_default(obj, &["spec", "template", "metadata", "labels"], json!({}));
    // `pointer_mut`, not indexing: a template of the wrong type is left as it is (upstream's
    // validation refuses it), never a panic.
    if let Some(labels) = obj
        .pointer_mut("/spec/template/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        for (k, v) in [
            (CONTROLLER_UID, &uid),
            (LEGACY_CONTROLLER_UID, &uid),
            (JOB_NAME, &name),
            (LEGACY_JOB_NAME, &name),
        ] {
            labels.insert(k.into(), Value::String(v.clone()));
        }
    }
    // A selector the client gave keeps its terms (validation refuses it: not generated).
    if !obj["spec"]["selector"].is_object() {
        obj["spec"]["selector"] = json!({});
    }
    if !obj["spec"]["selector"]["matchLabels"].is_object() {
        obj["spec"]["selector"]["matchLabels"] = json!({});
    }
    if let Some(m) = obj
        .pointer_mut("/spec/selector/matchLabels")
        .and_then(Value::as_object_mut)
    {
        m.entry(CONTROLLER_UID).or_insert(Value::String(uid));
    }
}

/// Upstream's `validateGeneratedSelector` on create: without `manualSelector`, the selector
/// is exactly the generated one.
fn generated_selector(obj: &Value) -> Option<crate::FieldError> {
    let spec = &obj["spec"];
    if spec["manualSelector"].as_bool() == Some(true) || spec["selector"].is_null() {
        return None;
    }
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("");
    let expected = json!({"matchLabels": {CONTROLLER_UID: uid}});
    (spec["selector"] != expected).then(|| {
        crate::FieldError::invalid(
            "spec.selector",
            &spec["selector"],
            "`selector` not auto-generated",
        )
    })
}

fn has_condition(status: &Value, type_: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

fn cells(obj: &Value, name: &str, age: &str, times: &dyn Times) -> Vec<Value> {
    let (spec, status) = (&obj["spec"], &obj["status"]);
    let succeeded = status["succeeded"].as_i64().unwrap_or(0);
    let completions = match spec["completions"].as_i64() {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec["parallelism"].as_i64().unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let state = if has_condition(status, "Complete") {
        "Complete"
    } else if has_condition(status, "Failed") {
        "Failed"
    } else if obj["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has_condition(status, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(status, "Suspended") {
        "Suspended"
    } else if has_condition(status, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let duration = match (
        status["startTime"].as_str(),
        status["completionTime"].as_str(),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => times.since(start),
        (Some(start), Some(end)) => times.between(start, end).unwrap_or_default(),
    };
    let [containers, images] = print::containers_and_images(&spec["template"]);
    vec![
        Value::String(name.into()),
        Value::String(state.into()),
        Value::String(completions),
        Value::String(duration),
        Value::String(age.into()),
        containers,
        images,
        Value::String(print::format_label_selector(&spec["selector"])),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_errors(spec: Value) -> Vec<String> {
        let mut j = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": spec});
        JobStrategy.prepare_for_create(&mut j);
        JobStrategy
            .validate_create(&j)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn job_rules_clients_rely_on() {
        let pod = |policy: &str| json!({"spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "busybox"}]}});
        let ok = job_errors(json!({"completionMode": "Indexed", "completions": 3,
            "backoffLimitPerIndex": 1, "successPolicy": {"rules": [{"succeededCount": 1}]},
            "podFailurePolicy": {"rules": []}, "ttlSecondsAfterFinished": 0, "template": pod("Never")}));
        assert_eq!(ok, Vec::<String>::new());
        let cases = [
            (
                // (Without `parallelism` either, both default to 1, as upstream's.)
                json!({"completionMode": "Indexed", "parallelism": 2, "template": pod("Never")}),
                "spec.completions: Required value: when completion mode is Indexed",
            ),
            (
                json!({"podFailurePolicy": {"rules": []}, "template": pod("OnFailure")}),
                "spec.template.spec.restartPolicy: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified",
            ),
            (
                json!({"backoffLimitPerIndex": 1, "template": pod("Never")}),
                "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
            ),
            (
                json!({"successPolicy": {"rules": []}, "template": pod("Never")}),
                "spec.successPolicy: Invalid value: {\"rules\":[]}: requires indexed completion mode",
            ),
            (
                json!({"ttlSecondsAfterFinished": -5, "template": pod("Never")}),
                "spec.ttlSecondsAfterFinished: Invalid value: -5: must be greater than or equal to 0",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(job_errors(spec), [want]);
        }
        // A selector without manualSelector is not the generated one.
        let mut tpl = pod("Never");
        tpl["metadata"] = json!({"labels": {"a": "b"}});
        let errs = job_errors(json!({"selector": {"matchLabels": {"a": "b"}}, "template": tpl}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("spec.selector: Invalid value: "),
            "{errs:?}"
        );
        assert!(
            errs[0].ends_with(": `selector` not auto-generated"),
            "{errs:?}"
        );
        let manual = json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}, "template": tpl});
        assert_eq!(job_errors(manual), Vec::<String>::new());
    }

    struct Fixed;
    impl Times for Fixed {
        fn since(&self, _: &str) -> String {
            "5m".into()
        }
        fn between(&self, _: &str, _: &str) -> Option<String> {
            Some("10s".into())
        }
        fn human(&self, s: u64) -> String {
            format!("{s}s")
        }
    }

    #[test]
    fn create_defaults_and_generates_the_selector() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}},
            "status": {"succeeded": 3}});
        JobStrategy.prepare_for_create(&mut job);
        let spec = &job["spec"];
        assert_eq!(
            (spec["completions"].as_i64(), spec["parallelism"].as_i64()),
            (Some(1), Some(1))
        );
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {CONTROLLER_UID: "u-1"}})
        );
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels[JOB_NAME], "pi");
        assert_eq!(labels[LEGACY_CONTROLLER_UID], "u-1");
        assert_eq!(job["metadata"]["labels"][JOB_NAME], "pi");
        assert_eq!(job["status"], json!({}));
    }

    #[test]
    fn a_template_of_the_wrong_type_is_not_a_panic() {
        for template in [
            json!("x"),
            json!({"metadata": 7}),
            json!({"metadata": {"labels": []}}),
        ] {
            let mut job =
                json!({"metadata": {"name": "pi", "uid": "u"}, "spec": {"template": template}});
            JobStrategy.prepare_for_create(&mut job);
            assert_eq!(job["spec"]["selector"]["matchLabels"][CONTROLLER_UID], "u");
        }
        for spec in [json!("x"), json!(null), json!([1])] {
            let mut job = json!({"metadata": {"name": "pi"}, "spec": spec});
            JobStrategy.prepare_for_create(&mut job);
        }
    }

    #[test]
    fn jobs_need_containers_a_restart_policy_and_a_matching_selector() {
        let s = JobStrategy;
        let mut ok = json!({"metadata": {"name": "pi", "uid": "u"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        s.prepare_for_create(&mut ok);
        assert_eq!(s.broken(&ok), []);
        let mut bad = json!({"metadata": {"name": "pi", "uid": "u"}, "spec": {"backoffLimit": -1,
            "manualSelector": true, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {}}}});
        s.prepare_for_create(&mut bad);
        let fields: Vec<String> = s.broken(&bad).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.containers",
                "spec.template.spec.restartPolicy",
                "spec.backoffLimit",
                "spec.template.metadata.labels"
            ]
        );
    }

    #[test]
    fn a_job_stored_without_template_defaults_may_be_updated() {
        let old = json!({"metadata": {"name": "pi", "uid": "u"}, "spec": {
            "selector": {"matchLabels": {CONTROLLER_UID: "u"}},
            "template": {"metadata": {"labels": {CONTROLLER_UID: "u"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        let mut new = old.clone();
        JobStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(JobStrategy.validate_update(&new, &old), []);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
        let errs = JobStrategy.validate_update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template");
    }

    #[test]
    fn a_manual_selector_is_kept() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u"},
            "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}});
        JobStrategy.prepare_for_create(&mut job);
        assert_eq!(job["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
    }

    #[test]
    fn rows_print_status_completions_and_duration() {
        let job = json!({"spec": {"completions": 2, "parallelism": 1},
            "status": {"succeeded": 2, "startTime": "2026-01-01T00:00:00Z",
                       "completionTime": "2026-01-01T00:00:10Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}});
        let c = JobStrategy
            .table_cells_at(&job, "pi", "1m", &Fixed)
            .unwrap();
        assert_eq!(c.len(), JobStrategy.table_columns().unwrap().len());
        assert_eq!(
            c[..5],
            [
                json!("pi"),
                json!("Complete"),
                json!("2/2"),
                json!("10s"),
                json!("1m")
            ]
        );
    }
}
