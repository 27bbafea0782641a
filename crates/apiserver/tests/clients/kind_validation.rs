//! The workload and network kinds' own rules clients rely on (red team rt3 finding 6),
//! through the binary: kubectl's generators (`create deployment/job/cronjob/ingress/pdb`,
//! `autoscale`) still create; then each refused write a cluster refuses is a 422 here, by
//! `kubectl patch` of those objects and `kubectl create --dry-run=server`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common;

use common::{Server, run_err, run_ok};

const NS: &str = "kv";

fn kubectl(server: &Server, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = server.kubectl(dir);
    c.args(args);
    c
}

/// `kubectl create [--dry-run=server] -f -` of `json`: its stdout, or its stderr when it
/// fails.
fn create(server: &Server, dir: &std::path::Path, json: &str, dry: bool) -> Result<String, String> {
    let mut child = server
        .kubectl(dir)
        .args(["create", "-n", NS, "-f", "-"])
        .args(dry.then_some("--dry-run=server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `kubectl create --dry-run=server -f -` of `json`, which must be refused: its stderr.
fn dry_run_refused(server: &Server, dir: &std::path::Path, json: &str) -> String {
    create(server, dir, json, true).expect_err(json)
}

/// `kubectl patch` of a merge patch, which must be refused: its stderr.
fn patch_refused(server: &Server, dir: &std::path::Path, what: &str, patch: &str) -> String {
    run_err(&mut kubectl(
        server,
        dir,
        &["patch", "-n", NS, what, "--type=merge", "-p", patch],
    ))
}

#[track_caller]
fn says(err: &str, want: &[&str]) {
    for w in want {
        assert!(err.contains(w), "{w:?} not in {err}");
    }
}

/// Before: every write below was created or patched.
#[test]
#[ignore = "needs kubectl"]
fn kubectl_generators_pass_and_invalid_writes_are_422() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let k = |args: &[&str]| run_ok(&mut kubectl(&server, dir, args));
    k(&["create", "namespace", NS]);
    k(&["create", "-n", NS, "deployment", "web", "--image=nginx"]);
    k(&["create", "-n", NS, "job", "once", "--image=busybox"]);
    k(&[
        "create",
        "-n",
        NS,
        "cronjob",
        "tick",
        "--image=busybox",
        "--schedule=*/5 * * * *",
    ]);
    k(&[
        "create",
        "-n",
        NS,
        "ingress",
        "web",
        "--rule=example.com/api*=web:80",
        "--rule=example.com/exact=web:80",
    ]);
    k(&[
        "create",
        "-n",
        NS,
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=1",
    ]);
    k(&[
        "autoscale",
        "-n",
        NS,
        "deployment",
        "web",
        "--min=2",
        "--max=5",
    ]);

    let invalid = "is invalid";
    says(
        &patch_refused(
            &server,
            dir,
            "deployment/web",
            r#"{"spec":{"strategy":{"rollingUpdate":{"maxSurge":0,"maxUnavailable":0}}}}"#,
        ),
        &[
            invalid,
            "spec.strategy.rollingUpdate.maxUnavailable",
            "may not be 0 when `maxSurge` is 0",
        ],
    );
    says(
        &patch_refused(
            &server,
            dir,
            "deployment/web",
            r#"{"spec":{"minReadySeconds":700}}"#,
        ),
        &[
            "spec.progressDeadlineSeconds",
            "must be greater than minReadySeconds",
        ],
    );
    says(
        &patch_refused(&server, dir, "hpa/web", r#"{"spec":{"minReplicas":20}}"#),
        &[
            "spec.maxReplicas",
            "must be greater than or equal to `minReplicas`",
        ],
    );
    says(
        &patch_refused(&server, dir, "pdb/web", r#"{"spec":{"maxUnavailable":1}}"#),
        &["minAvailable and maxUnavailable cannot be both set"],
    );
    let ingress = |path: &str| {
        format!(
            r#"{{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{{"name":"bad"}},
            "spec":{{"rules":[{{"http":{{"paths":[{{{path}"backend":{{"service":{{"name":"s","port":{{"number":80}}}}}}}}]}}}}]}}}}"#
        )
    };
    says(
        &dry_run_refused(&server, dir, &ingress(r#""path":"/","#)),
        &["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"],
    );
    says(
        &dry_run_refused(
            &server,
            dir,
            &ingress(r#""path":"nope","pathType":"Prefix","#),
        ),
        &["spec.rules[0].http.paths[0].path: Invalid value: \"nope\": must be an absolute path"],
    );
    says(
        &dry_run_refused(
            &server,
            dir,
            r#"{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"bad"},
            "spec":{"podSelector":{},"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/33"}}]}]}}"#,
        ),
        &[
            "spec.ingress[0].from[0].ipBlock.cidr",
            "must be a valid CIDR value",
        ],
    );
    let pod = r#""template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}"#;
    says(
        &dry_run_refused(
            &server,
            dir,
            &format!(
                r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"j"}},
                "spec":{{"completionMode":"Indexed","parallelism":2,"ttlSecondsAfterFinished":-5,{pod}}}}}"#
            ),
        ),
        &[
            "spec.completions: Required value: when completion mode is Indexed",
            "spec.ttlSecondsAfterFinished: Invalid value: -5: must be greater than or equal to 0",
        ],
    );
    says(
        &dry_run_refused(
            &server,
            dir,
            &format!(
                r#"{{"apiVersion":"batch/v1","kind":"CronJob","metadata":{{"name":"c"}},
                "spec":{{"schedule":"@hourly","timeZone":"Mars/Olympus","jobTemplate":{{"spec":{{{pod}}}}}}}}}"#
            ),
        ),
        &["spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus"],
    );
    // A claim's spec is immutable while unbound (but for its volume name).
    create(
        &server,
        dir,
        r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"data"},
        "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}}}}"#,
        false,
    )
    .unwrap();
    let immutable = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";
    for patch in [
        r#"{"spec":{"accessModes":["ReadWriteMany"]}}"#,
        r#"{"spec":{"storageClassName":"fast"}}"#,
        r#"{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}"#,
    ] {
        says(
            &patch_refused(&server, dir, "pvc/data", patch),
            &[immutable],
        );
    }
    k(&[
        "patch",
        "-n",
        NS,
        "pvc/data",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumeName":"pv-1"}}"#,
    ]);
    k(&["label", "-n", NS, "pvc/data", "a=b"]);
}
