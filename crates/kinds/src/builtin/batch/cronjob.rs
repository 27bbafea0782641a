//! Cron jobs (`batch/v1`): upstream's v1 defaults (pkg/apis/batch/v1/defaults.go:
//! `concurrencyPolicy: Allow`, `suspend: false`, `successfulJobsHistoryLimit: 3`,
//! `failedJobsHistoryLimit: 1`), the status reset on create and the printer (NAME SCHEDULE
//! TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE, and CONTAINERS IMAGES SELECTOR for `-o wide`).
//! Validation: a schedule (its cron syntax is not checked), a known `timeZone`
//! ([`super::timezone`]), the job template's rules, and on create a name of at most 52
//! characters (upstream's `ValidateCronJobCreate`: the 63 of a DNS-1035 label less the 11 of
//! a job's `-<timestamp>` suffix).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::podspec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, Times, set_default};

/// `batch/v1` cron jobs.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(CronJobStrategy)
}

/// The longest name a cron job may have on create (a DNS-1035 label's 63 less 11).
const MAX_NAME: usize = 52;

/// The cron job strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct CronJobStrategy;

impl CronJobStrategy {
    /// The rules this kind's objects must keep, on create and update.
    fn broken(&self, obj: &Value) -> Vec<crate::FieldError> {
        let spec = &obj["spec"];
        let mut out = Vec::new();
        if spec["schedule"].as_str().is_none_or(str::is_empty) {
            out.push(crate::FieldError::required("spec.schedule", ""));
        }
        out.extend(super::timezone::validate(
            &spec["timeZone"],
            "spec.timeZone",
        ));
        out.extend(super::job::validate_spec(
            &spec["jobTemplate"]["spec"],
            "spec.jobTemplate.spec",
        ));
        out
    }
}

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    podspec::defaults::template(obj.pointer_mut("/spec/jobTemplate/spec/template"));
    set_default(obj, &["spec", "concurrencyPolicy"], json!("Allow"));
    set_default(obj, &["spec", "suspend"], json!(false));
    set_default(obj, &["spec", "successfulJobsHistoryLimit"], json!(3));
    set_default(obj, &["spec", "failedJobsHistoryLimit"], json!(1));
}

impl KindStrategy for CronJobStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    /// A schedule (its cron syntax is not checked here), a known time zone, a valid job
    /// template and a name that leaves room for the jobs' suffix.
    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = Vec::new();
        let name = &obj["metadata"]["name"];
        if name.as_str().is_some_and(|n| n.len() > MAX_NAME) {
            out.push(crate::FieldError::invalid(
                "metadata.name",
                name,
                format!("must be no more than {MAX_NAME} characters"),
            ));
        }
        out.extend(self.broken(obj));
        out
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        self.broken(new)
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut v = vec![
            print::name_column(),
            print::col("Schedule", "string", "The schedule in Cron format."),
            print::col("Timezone", "string", "The time zone of the schedule."),
            print::col("Suspend", "boolean", "Whether the cron job is suspended."),
            print::col("Active", "integer", "The number of running jobs."),
            print::col(
                "Last Schedule",
                "string",
                "When the job was last scheduled.",
            ),
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
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let job = &spec["jobTemplate"]["spec"];
        let [containers, images] = print::containers_and_images(&job["template"]);
        let last = status["lastScheduleTime"]
            .as_str()
            .map_or_else(|| "<none>".to_owned(), |t| times.since(t));
        Some(vec![
            Value::String(name.into()),
            Value::String(spec["schedule"].as_str().unwrap_or("").into()),
            print::or_none(&spec["timeZone"]),
            print::bool_text(&spec["suspend"]),
            Value::from(status["active"].as_array().map_or(0, Vec::len)),
            Value::String(last),
            Value::String(age.into()),
            containers,
            images,
            Value::String(print::format_label_selector(&job["selector"])),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_a_jobs_suffix_and_zones_are_known() {
        let cj = |name: &str, tz: Value| {
            let mut c = json!({"metadata": {"name": name}, "spec": {"schedule": "@daily",
                "timeZone": tz, "jobTemplate": {"spec": {"template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}});
            CronJobStrategy.prepare_for_create(&mut c);
            c
        };
        let bodies = |c: &Value| -> Vec<String> {
            CronJobStrategy
                .validate_create(c)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            bodies(&cj(&"c".repeat(52), json!("Europe/Berlin"))),
            Vec::<String>::new()
        );
        let long = "c".repeat(53);
        assert_eq!(
            bodies(&cj(&long, Value::Null)),
            [format!(
                "metadata.name: Invalid value: \"{long}\": must be no more than 52 characters"
            )]
        );
        let mars = cj("c", json!("Mars/Olympus"));
        let want =
            ["spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus"];
        assert_eq!(bodies(&mars), want);
        // The zone on update too; the name rule only on create.
        let mut renamed = mars.clone();
        renamed["metadata"]["name"] = json!(long);
        let upd: Vec<String> = CronJobStrategy
            .validate_update(&renamed, &mars)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(upd, want);
    }

    #[test]
    fn create_defaults_policy_and_limits() {
        let mut cj = json!({"spec": {"schedule": "*/1 * * * *"}, "status": {"active": [{}]}});
        CronJobStrategy.prepare_for_create(&mut cj);
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 1);
        assert_eq!(cj["spec"]["suspend"], false);
        assert_eq!(cj["status"], json!({}));
    }
}
