//! The watch cache's consistency check in the running binary, over either backend: the
//! binary the tests run is built with the cacher's `fault-injection` feature, and told by
//! `LISTWATCH_FAULT_CACHE_MISS_EVENTS` to make the configmaps cache miss the events of
//! `e2e/lost`. kubectl creates it; a check finds the cache wrong
//! (`apiserver_storage_consistency_checks_total{status="failure"}`, read with curl from
//! `/metrics`); kubectl (a consistent list, paged by `--chunk-size`) and curl (at
//! `resourceVersion=0`, with a limit) read it from the backend; once it is deleted the
//! cache agrees again and reads come from the cache again.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Instant;

use super::{PATIENCE, Server, run_ok};

/// `LISTWATCH_FAULT_CACHE_MISS_EVENTS` (listwatch-cacher's `fault::ENV`).
pub const MISS_EVENTS: &str = "LISTWATCH_FAULT_CACHE_MISS_EVENTS";

fn curl(url: &str) -> String {
    run_ok(Command::new("curl").args(["-sS", "--fail", "--max-time", "30", url]))
}

fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

fn checks(server: &Server, status: &str) -> f64 {
    let series = format!(
        "apiserver_storage_consistency_checks_total{{resource=\"configmaps\",status=\"{status}\"}} "
    );
    sample(&curl(&format!("{}/metrics", server.url)), &series)
}

fn inconsistent(server: &Server) -> f64 {
    sample(
        &curl(&format!("{}/metrics", server.url)),
        "listwatch_cacher_inconsistent{resource=\"configmaps\"} ",
    )
}

fn fallen_back(server: &Server) -> f64 {
    sample(
        &curl(&format!("{}/metrics", server.url)),
        "listwatch_cacher_inconsistent_reads_from_backend_total{resource=\"configmaps\"} ",
    )
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < end, "not within {PATIENCE:?}: {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The names of the items of a list body.
fn names(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The scenario of the module docs on a server started with `flags` (the backend's) and a
/// one-second check period. `first_check_finds_it`: the first check after the corruption
/// detects it (at most one check already under way passes) — true where the check can bring
/// the cache up to the backend's revision (the embedded store; etcd before 3.4.31 answers
/// progress requests early, so there a check compares at the version the cache has, until
/// etcd's periodic progress notification moves it past the missed event).
pub fn missed_events_are_found_and_reads_fall_back(flags: &[&str], first_check_finds_it: bool) {
    let mut args = vec!["--watch-cache-consistency-check-period", "1s"];
    args.extend_from_slice(flags);
    let server = Server::start_with_env(&args, &[(MISS_EVENTS, "configmaps/e2e/lost")]);
    let cache = tempfile::tempdir().unwrap();
    let kubectl = |args: &[&str]| run_ok(server.kubectl(cache.path()).args(args));
    kubectl(&["create", "namespace", "e2e"]);
    kubectl(&["create", "configmap", "kept", "-n", "e2e"]);
    eventually("a first check passes", || checks(&server, "success") >= 1.0);
    assert_eq!(inconsistent(&server), 0.0);

    let passed = checks(&server, "success");
    kubectl(&["create", "configmap", "lost", "-n", "e2e"]);
    eventually("a check finds the cache wrong", || {
        checks(&server, "failure") >= 1.0
    });
    if first_check_finds_it {
        assert!(checks(&server, "success") <= passed + 1.0);
    }
    assert_eq!(inconsistent(&server), 1.0);

    // kubectl's list: no resourceVersion, a limit of 500; and in pages of one.
    let listed = kubectl(&["get", "configmaps", "-n", "e2e", "-o", "name"]);
    assert!(listed.contains("configmap/lost"), "{listed}");
    let paged = kubectl(&[
        "get",
        "configmaps",
        "-n",
        "e2e",
        "-o",
        "name",
        "--chunk-size",
        "1",
    ]);
    assert!(paged.contains("configmap/lost"), "{paged}");
    let path = format!("{}/api/v1/namespaces/e2e/configmaps", server.url);
    let any = names(&curl(&format!("{path}?resourceVersion=0")));
    assert!(any.contains(&"lost".to_owned()), "{any:?}");
    let first_page = names(&curl(&format!("{path}?limit=1")));
    assert_eq!(
        first_page,
        ["kept"],
        "keys in order: kept, kube-root-ca.crt, lost"
    );
    let single = curl(&format!("{path}/lost?resourceVersion=0"));
    assert!(single.contains("\"name\":\"lost\""), "{single}");
    assert!(fallen_back(&server) >= 4.0);

    // Deleted (an event the cache misses too): the cache, which never had it, agrees again.
    kubectl(&["delete", "configmap", "lost", "-n", "e2e"]);
    eventually("a check agrees again", || inconsistent(&server) == 0.0);
    let before = fallen_back(&server);
    let any = names(&curl(&format!("{path}?resourceVersion=0")));
    assert!(!any.contains(&"lost".to_owned()), "{any:?}");
    let listed = kubectl(&["get", "configmaps", "-n", "e2e", "-o", "name"]);
    assert!(listed.contains("configmap/kept"), "{listed}");
    assert_eq!(
        fallen_back(&server),
        before,
        "reads come from the cache again"
    );
}
