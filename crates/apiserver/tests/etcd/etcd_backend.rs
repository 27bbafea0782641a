//! The binary over a real etcd (`--storage etcd`): clients see the same API, data outlives
//! the server, and a reflector converges. Needs Debian's `etcd-server`; `cargo xtask test`
//! provisions it and runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector as reflect};
use kube::{Client, ResourceExt};
use listwatch_etcd::testing::EtcdServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn start_on(etcd: &EtcdServer, extra: &[&str]) -> Server {
    let endpoint = etcd.endpoint();
    let mut args = vec!["--storage", "etcd", "--etcd-servers", endpoint.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn etcd_backed_server_serves_crud_lists_and_watches_and_keeps_data_across_restarts() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let server = start_on(&etcd, &[]);
    let addr = server.addr.clone();
    let watch_frames = tokio::task::spawn_blocking(move || {
        assert_eq!(
            http(
                &addr,
                "POST",
                "/api/v1/namespaces",
                &[JSON],
                br#"{"metadata":{"name":"e"}}"#
            )
            .status,
            201
        );
        let rv = http(&addr, "GET", "/api/v1/namespaces/e/configmaps", &[], b"").json()["metadata"]
            ["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        for i in 0..5 {
            let body =
                json!({"metadata":{"name":format!("c{i}")},"data":{"i":i.to_string()}}).to_string();
            assert_eq!(
                http(
                    &addr,
                    "POST",
                    "/api/v1/namespaces/e/configmaps",
                    &[JSON],
                    body.as_bytes()
                )
                .status,
                201
            );
        }
        let page = http(
            &addr,
            "GET",
            "/api/v1/namespaces/e/configmaps?limit=2",
            &[],
            b"",
        )
        .json();
        assert_eq!(page["items"].as_array().unwrap().len(), 2);
        let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
        let next = http(
            &addr,
            "GET",
            &format!("/api/v1/namespaces/e/configmaps?limit=10&continue={token}"),
            &[],
            b"",
        )
        .json();
        assert_eq!(next["items"].as_array().unwrap().len(), 3);
        let deleted = http(
            &addr,
            "DELETE",
            "/api/v1/namespaces/e/configmaps/c0",
            &[],
            b"",
        );
        assert_eq!(deleted.status, 200);
        http(
            &addr,
            "GET",
            &format!(
                "/api/v1/namespaces/e/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2"
            ),
            &[],
            b"",
        )
        .lines()
    })
    .await
    .unwrap();
    let types: Vec<&str> = watch_frames
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["ADDED", "ADDED", "ADDED", "ADDED", "ADDED", "DELETED"]
    );

    // A new server on the same etcd sees everything.
    assert!(server.terminate());
    let again = start_on(&etcd, &[]);
    let addr = again.addr.clone();
    let names = tokio::task::spawn_blocking(move || {
        http(&addr, "GET", "/api/v1/namespaces/e/configmaps", &[], b"").json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(names, ["c1", "c2", "c3", "c4"]);
}

fn snapshot(store: &Store<Pod>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn kube_rs_reflector_converges_over_etcd() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let server = start_on(&etcd, &[]);
    let client = Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap();
    let ns = serde_json::from_value(json!({"metadata":{"name":"e"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "e");
    let (store, writer) = reflector::store();
    let driver = tokio::spawn(
        reflect(
            writer,
            watcher(pods.clone(), watcher::Config::default().streaming_lists()),
        )
        .applied_objects()
        .for_each(|_| async {}),
    );
    store.wait_until_ready().await.unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    for i in 0..300 {
        let name = format!("p{}", rng.random_range(0..20));
        let pod: Pod = serde_json::from_value(
            json!({"metadata":{"name":name},"spec":{"containers":[{"name":"c","image":"x"}]}}),
        )
        .unwrap();
        let r = match rng.random_range(0..3) {
            0 => pods.create(&PostParams::default(), &pod).await.map(drop),
            1 => pods
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata":{"labels":{"i":i.to_string()}}})),
                )
                .await
                .map(drop),
            _ => pods.delete(&name, &DeleteParams::default()).await.map(drop),
        };
        match r {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    let want: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .collect();
    let deadline = Instant::now() + PATIENCE;
    while snapshot(&store) != want {
        assert!(Instant::now() < deadline, "store never converged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn kubectl_applies_and_watches_over_etcd() {
    common::require("kubectl");
    let etcd = EtcdServer::start().await.expect("etcd");
    let server = start_on(&etcd, &[]);
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let k = || server.kubectl(dir.path());
        common::run_ok(k().args(["create", "namespace", "e"]));
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: e}\n\
                   spec: {containers: [{name: c, image: nginx:1.26}]}\n";
        let f = dir.path().join("pod.yaml");
        std::fs::write(&f, pod).unwrap();
        common::run_ok(k().arg("apply").arg("-f").arg(&f));
        let (mut watch, rx) = common::spawn_lines(k().args([
            "get",
            "pods",
            "-n",
            "e",
            "-w",
            "--output-watch-events",
        ]));
        let mut seen = Vec::new();
        common::expect_line(&rx, &["ADDED", "web"], &mut seen);
        std::fs::write(&f, pod.replace("nginx:1.26", "nginx:1.27")).unwrap();
        assert!(common::run_ok(k().arg("apply").arg("-f").arg(&f)).contains("configured"));
        common::expect_line(&rx, &["MODIFIED", "web"], &mut seen);
        common::run_ok(k().args(["delete", "pod", "web", "-n", "e"]));
        common::expect_line(&rx, &["DELETED", "web"], &mut seen);
        let left = common::run_ok(k().args(["get", "pods", "-n", "e", "-o", "name"]));
        assert_eq!(left.trim(), "");
        let _ = watch.kill();
        let _ = watch.wait();
    })
    .await
    .unwrap();
}

/// A loopback port reserved for a process this test starts later: a socket bound to it
/// (`SO_REUSEADDR`, never listening) is held until that process listens. While it is held
/// the kernel hands the port to no one else (another test's `127.0.0.1:0` bind, a free-port
/// probe), a connect to it is refused (nothing listens), and the process it is meant for
/// still binds it: etcd (Go) and the server (tokio) set `SO_REUSEADDR` on their listeners,
/// and Linux lets such sockets share a port with a bound socket that does not listen.
/// A port probed and released instead could be taken in between (it was: the server under
/// test reached another test's HTTP server instead of etcd).
pub(crate) fn reserved_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// Started before etcd, as a service manager starting both at once may do: the server must
/// not exit ("creating namespace default: storage backend unreachable" did, before). It
/// listens at once, /readyz fails (/readyz/start-up says what start-up waits for) and
/// /livez answers 200, and it keeps retrying with backoff; once etcd is up it becomes ready and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_server_started_before_etcd_waits_for_it_and_becomes_ready() {
    // Both held until what they are for listens (see `reserved_port`).
    let (port_hold, port) = reserved_port();
    let (etcd_port_hold, etcd_port) = reserved_port();
    let bind = format!("127.0.0.1:{port}");
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    // Server::start_at returns once the server announces itself, i.e. once it is ready.
    let (tx, started) = std::sync::mpsc::channel();
    let starter = {
        let bind = bind.clone();
        std::thread::spawn(move || {
            let server =
                Server::start_at(&bind, &["--storage", "etcd", "--etcd-servers", &etcd_url]);
            let _ = tx.send(server);
        })
    };
    let addr = bind.clone();
    let server_listens = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "the server never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        addr
    })
    .await
    .unwrap();
    drop(port_hold);
    tokio::task::spawn_blocking(move || {
        let addr = server_listens;
        // Several backoff rounds (100 ms, 200 ms, ... ) pass without etcd.
        std::thread::sleep(Duration::from_secs(3));
        let ready = http(&addr, "GET", "/readyz", &[], b"");
        let lines = String::from_utf8_lossy(&ready.body).into_owned();
        eprintln!("/readyz without etcd: {} {lines}", ready.status);
        assert_ne!(ready.status, 200, "{lines}");
        assert!(
            lines.contains("[-]start-up failed: reason withheld"),
            "{lines}"
        );
        // The reason is on the check's own path.
        let check = http(&addr, "GET", "/readyz/start-up", &[], b"");
        let why = String::from_utf8_lossy(&check.body).into_owned();
        assert_eq!(check.status, 500, "{why}");
        assert!(why.contains("creating namespace default"), "{why}");
        assert!(why.contains("unreachable"), "{why}");
        let live = http(&addr, "GET", "/livez", &[], b"");
        let why = String::from_utf8_lossy(&live.body).into_owned();
        eprintln!("/livez without etcd: {} {why}", live.status);
        assert_eq!(live.status, 200, "{why}");
    })
    .await
    .unwrap();
    assert!(
        !starter.is_finished(),
        "the server exited or announced itself without etcd"
    );

    let etcd = EtcdServer::builder()
        .client_port(etcd_port)
        .start()
        .await
        .expect("etcd");
    // etcd listens on it now.
    drop(etcd_port_hold);
    let etcd_up = Instant::now();
    let server = tokio::task::spawn_blocking(move || {
        started
            .recv_timeout(PATIENCE)
            .expect("the server did not become ready once etcd was up")
    })
    .await
    .unwrap();
    eprintln!("ready {:?} after etcd became healthy", etcd_up.elapsed());
    starter.join().unwrap();
    assert_eq!(server.addr, bind);
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        assert_eq!(http(&addr, "GET", "/readyz", &[], b"").status, 200);
        let live = http(&addr, "GET", "/livez", &[], b"");
        assert_eq!((live.status, live.body.as_slice()), (200, b"ok".as_slice()));
        let ns = http(&addr, "GET", "/api/v1/namespaces/default", &[], b"");
        assert_eq!(ns.status, 200);
    })
    .await
    .unwrap();
    drop(etcd);
}

/// `--etcd-max-request-bytes` tells the adapter the etcd servers' request limit: an object
/// that would not fit is refused with 413 before it is sent (etcd itself would take it here:
/// the test's etcd runs with its default 1.5 MiB limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_etcd_request_limit_is_a_flag() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let server = start_on(&etcd, &["--etcd-max-request-bytes", "16384"]);
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        let cms = "/api/v1/namespaces/default/configmaps";
        let cm = |name: &str, bytes: usize| {
            json!({"metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}}).to_string()
        };
        let r = http(&addr, "POST", cms, &[JSON], cm("small", 4096).as_bytes());
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let r = http(&addr, "POST", cms, &[JSON], cm("big", 20_000).as_bytes());
        assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
        let r = http(&addr, "GET", &format!("{cms}/big"), &[], b"");
        assert_eq!(r.status, 404, "nothing was written");
    })
    .await
    .unwrap();
}

/// Issue 30 item 1: `--etcd-servers` alone (no `--storage`) stores in etcd, as
/// kube-apiserver does: what was written survives a restart. Before, it selected the
/// in-memory store and the object was gone after the restart (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn etcd_servers_alone_store_in_etcd_and_keep_data_across_restarts() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let endpoint = etcd.endpoint();
    tokio::task::spawn_blocking(move || {
        let cm = "/api/v1/namespaces/default/configmaps";
        let server = Server::start(&["--etcd-servers", &endpoint]);
        let body = br#"{"metadata":{"name":"kept"},"data":{"k":"v"}}"#;
        let r = http(&server.addr, "POST", cm, &[JSON], body);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        drop(server);
        let server = Server::start(&["--etcd-servers", &endpoint]);
        let r = http(&server.addr, "GET", &format!("{cm}/kept"), &[], b"");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["data"]["k"], "v");
    })
    .await
    .unwrap();
}

/// Issue 30 item 7: on etcd without a progress-notify interval, a read at a resource version
/// an idle resource's cache has not heard of is answered 504 "Too large resource version";
/// the server's warning names the resource and what to do (etcd's flag).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_stale_cache_warning_names_the_resource_and_etcds_flag() {
    let etcd = EtcdServer::start().await.expect("etcd");
    let endpoint = etcd.endpoint();
    let (server, logs) = Server::start_logged("127.0.0.1:0", &["--etcd-servers", &endpoint]);
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        let r = http(
            &addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[JSON],
            br#"{"metadata":{"name":"bump"}}"#,
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let rv = r.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        // Secrets saw no event at that revision: their cache waits, then answers 504.
        let r = http(
            &addr,
            "GET",
            &format!("/api/v1/secrets?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
            &[],
            b"",
        );
        assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
        let deadline = Instant::now() + PATIENCE;
        loop {
            let lines = logs.stderr();
            if lines.iter().any(|l| {
                l.contains("the watch cache of secrets is behind")
                    && l.contains("--experimental-watch-progress-notify-interval")
            }) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no warning naming secrets: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
}

/// `componentstatuses` on etcd list one `etcd-N` per `--etcd-servers` member, in order:
/// a live member Healthy with etcd's `/health` answer, a dead one Unhealthy with its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn component_statuses_probe_each_etcd_member() {
    let etcd = EtcdServer::start().await.expect("etcd");
    // Port 1 (tcpmux) is never an etcd: connection refused.
    let servers = format!("{},http://127.0.0.1:1", etcd.endpoint());
    let server = Server::start(&["--storage", "etcd", "--etcd-servers", &servers]);
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        let list = http(&addr, "GET", "/api/v1/componentstatuses", &[], b"").json();
        let items = list["items"].as_array().unwrap();
        let names: Vec<&str> = items
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["controller-manager", "etcd-0", "etcd-1", "scheduler"],
            "{list}"
        );
        let healthy = &items[1]["conditions"][0];
        assert_eq!(healthy["status"], "True", "{list}");
        assert_eq!(healthy["message"], r#"{"health":"true"}"#, "{list}");
        let dead = &items[2]["conditions"][0];
        assert_eq!(dead["status"], "False", "{list}");
        assert!(
            dead["error"].as_str().unwrap().contains("127.0.0.1:1"),
            "{list}"
        );
        let one = http(&addr, "GET", "/api/v1/componentstatuses/etcd-0", &[], b"");
        assert_eq!(one.status, 200);
        assert_eq!(one.json()["conditions"][0]["status"], "True");
        let none = http(&addr, "GET", "/api/v1/componentstatuses/etcd-2", &[], b"");
        assert_eq!(none.status, 404);
    })
    .await
    .unwrap();
}
