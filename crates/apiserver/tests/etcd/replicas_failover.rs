//! Clients failing over between replicas of listwatch-apiserver over one etcd: the replica
//! under a watch is killed (SIGKILL) and the watch resumes on another from its last resource
//! version, every change delivered once, in order, no relist. With listwatch-client (several
//! server URLs), and with kube-rs and the Python client through the test harness's TCP
//! balancer (`listwatch_testkit::Balancer`). Needs Debian's `etcd-server` (and the Python
//! `kubernetes` client); `cargo xtask test` provisions both and runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use futures::StreamExt;
use listwatch_etcd::testing::EtcdServer;
use listwatch_testkit::Balancer;
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn replica(etcd: &EtcdServer) -> Server {
    let endpoint = etcd.endpoint();
    Server::start(&["--storage", "etcd", "--etcd-servers", endpoint.as_str()])
}

fn addr(s: &Server) -> std::net::SocketAddr {
    s.addr.parse().unwrap()
}

/// Creates namespace `ns` on `server`.
fn namespace(server: &Server, ns: &str) {
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces",
        &[JSON],
        json!({"metadata": {"name": ns}}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Creates ConfigMap `name` in `ns` on `server`; its resource version.
fn configmap(server: &Server, ns: &str, name: &str) -> String {
    let r = http(
        &server.addr,
        "POST",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &[JSON],
        json!({"metadata": {"name": name}}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn listwatch_client_resumes_its_watch_on_another_replica_when_one_is_killed() {
    use listwatch_client::{Config, Event, HttpClient, HttpConfig, watcher};

    let etcd = EtcdServer::start().await.expect("etcd");
    let r0 = replica(&etcd);
    let r1 = replica(&etcd);
    namespace(&r0, "lw");
    configmap(&r0, "lw", "c0");
    let client = HttpClient::new(HttpConfig::with_servers([&r0.url, &r1.url]).unwrap()).unwrap();
    let lw = client
        .lister_watcher("/api/v1/namespaces/lw/configmaps")
        .unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = Arc::clone(&log);
    let task = tokio::spawn(watcher(lw, Config::default()).for_each(move |e| {
        let line = match e {
            Ok(Event::Init) => Some("Init".to_owned()),
            Ok(Event::InitApply(o)) => Some(format!("InitApply {}", o.name())),
            Ok(Event::InitDone { .. }) => Some("InitDone".to_owned()),
            Ok(Event::Apply(o)) => Some(format!("Apply {}@{}", o.name(), o.resource_version())),
            Ok(Event::Delete(o)) => Some(format!("Delete {}", o.name())),
            Ok(Event::Bookmark { .. }) | Err(_) => None,
        };
        l.lock().unwrap().extend(line);
        async {}
    }));
    let has = |line: String| {
        let log = Arc::clone(&log);
        move || log.lock().unwrap().contains(&line)
    };
    until("synced", has("InitDone".into())).await;
    let rv1 = configmap(&r1, "lw", "c1");
    until("c1", has(format!("Apply c1@{rv1}"))).await;
    assert_eq!(client.current_server(), r0.url);

    drop(r0); // SIGKILL: the watch's connection dies with the process.
    let rv2 = configmap(&r1, "lw", "c2");
    let rv3 = configmap(&r1, "lw", "c3");
    until("c3", has(format!("Apply c3@{rv3}"))).await;
    assert_eq!(client.current_server(), r1.url);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "Init".to_owned(),
            "InitApply c0".to_owned(),
            "InitDone".to_owned(),
            format!("Apply c1@{rv1}"),
            format!("Apply c2@{rv2}"),
            format!("Apply c3@{rv3}"),
        ],
        "every change once, in order, no relist"
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn kube_rs_watch_through_the_balancer_resumes_on_the_other_replica() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::{self, Event, watcher};
    use kube::{Api, Client, ResourceExt};

    let etcd = EtcdServer::start().await.expect("etcd");
    let r0 = replica(&etcd);
    let r1 = replica(&etcd);
    namespace(&r0, "kr");
    configmap(&r0, "kr", "c0");
    let lb = Balancer::start(&[addr(&r0), addr(&r1)]).await.unwrap();
    // Everything the client opens now goes to r0.
    lb.drain(1);
    let client = Client::try_from(kube::Config::new(lb.url().parse().unwrap())).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "kr");
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = Arc::clone(&log);
    let task = tokio::spawn(watcher(cms, watcher::Config::default()).for_each(move |e| {
        let line = match e {
            Ok(Event::Init) => Some("Init".to_owned()),
            Ok(Event::InitApply(o)) => Some(format!("InitApply {}", o.name_any())),
            Ok(Event::InitDone) => Some("InitDone".to_owned()),
            Ok(Event::Apply(o)) => Some(format!(
                "Apply {}@{}",
                o.name_any(),
                o.resource_version().unwrap_or_default()
            )),
            Ok(Event::Delete(o)) => Some(format!("Delete {}", o.name_any())),
            Err(_) => None,
        };
        l.lock().unwrap().extend(line);
        async {}
    }));
    let has = |line: String| {
        let log = Arc::clone(&log);
        move || log.lock().unwrap().contains(&line)
    };
    until("synced", has("InitDone".into())).await;
    let rv1 = configmap(&r1, "kr", "c1");
    until("c1", has(format!("Apply c1@{rv1}"))).await;

    // r0 dies; the balancer resets its connections and sends new ones to r1.
    lb.revive(1, None);
    lb.kill(0);
    drop(r0);
    let rv2 = configmap(&r1, "kr", "c2");
    let rv3 = configmap(&r1, "kr", "c3");
    until("c3", has(format!("Apply c3@{rv3}"))).await;
    assert!(lb.connections()[1] >= 1, "{:?}", lb.connections());
    assert_eq!(
        *log.lock().unwrap(),
        [
            "Init".to_owned(),
            "InitApply c0".to_owned(),
            "InitDone".to_owned(),
            format!("Apply c1@{rv1}"),
            format!("Apply c2@{rv2}"),
            format!("Apply c3@{rv3}"),
        ],
        "every change once, in order, no relist"
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd and the Python kubernetes client"]
async fn python_watch_through_the_balancer_resumes_on_the_other_replica() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let r0 = replica(&etcd);
    let r1 = replica(&etcd);
    namespace(&r0, "py");
    configmap(&r0, "py", "c0");
    let lb = Balancer::start(&[addr(&r0), addr(&r1)]).await.unwrap();
    lb.drain(1);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/replica_failover.py"
    );
    let mut child = Command::new(common::python::python())
        .args([script, &lb.url(), "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let next = |prefix: &str, lines: &mut Vec<String>| -> String {
        loop {
            let line = rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no {prefix:?} line; saw {lines:#?}"));
            lines.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
    };
    next("listed", &mut lines);
    // The watch opens after the list; give it an event so that it is surely open on r0.
    let rv1 = configmap(&r1, "py", "c1");
    assert_eq!(next("event", &mut lines), format!("event ADDED c1 {rv1}"));

    lb.revive(1, None);
    lb.kill(0);
    drop(r0);
    let rv2 = configmap(&r1, "py", "c2");
    let rv3 = configmap(&r1, "py", "c3");
    next("done", &mut lines);
    let status = child.wait().unwrap();
    assert!(status.success(), "{lines:#?}");
    let events: Vec<&String> = lines.iter().filter(|l| l.starts_with("event")).collect();
    assert_eq!(
        events,
        [
            &format!("event ADDED c1 {rv1}"),
            &format!("event ADDED c2 {rv2}"),
            &format!("event ADDED c3 {rv3}"),
        ],
        "every change once, in order: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("rewatch {rv1}"))),
        "the watch was cut and resumed from its last version: {lines:#?}"
    );
}
