//! A cache that (re)initializes over etcd never begins its window above a version a client
//! was given: the lists the server answers from etcd while its caches list, and the lists and
//! watches from before an etcd restart, can be watched from; and the server turns ready
//! within seconds of etcd. Before, a server started before etcd gave its own informers (RBAC,
//! garbage collector) etcd's early revisions, the caches then listed later ones and refused
//! the informers' watches with 410 "too old resource version", again and again after backoffs
//! of up to 30 s: `/readyz` took 16–104 s after etcd's start. Needs Debian's `etcd-server`;
//! `cargo xtask test` provisions it and runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::etcd_backend::reserved_port;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, WatchEvents, http, open_stream};
use listwatch_etcd::testing::EtcdServer;

const JSON: (&str, &str) = ("Content-Type", "application/json");

/// A collection the test lists while the caches list, and the object it then creates in it.
struct Probe {
    list: &'static str,
    create: &'static str,
    body: &'static str,
}

const PROBES: [Probe; 4] = [
    Probe {
        list: "/api/v1/namespaces",
        create: "/api/v1/namespaces",
        body: r#"{"metadata":{"name":"late-probe"}}"#,
    },
    Probe {
        list: "/api/v1/configmaps",
        create: "/api/v1/namespaces/default/configmaps",
        body: r#"{"metadata":{"name":"late-probe"},"data":{"k":"v"}}"#,
    },
    Probe {
        list: "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        create: "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        body: r#"{"metadata":{"name":"late-probe"},"rules":[]}"#,
    },
    Probe {
        list: "/apis/scheduling.k8s.io/v1/priorityclasses",
        create: "/apis/scheduling.k8s.io/v1/priorityclasses",
        body: r#"{"metadata":{"name":"late-probe"},"value":1000}"#,
    },
];

/// A list the server answered: its version, and whether the resource's cache was still
/// listing after a write that followed it (so the cache's own list reads a later version).
struct Listed {
    rv: String,
    cache_behind: bool,
}

/// Lists `probe.list` with a limit (answered by etcd while its cache lists, KEP-4568), then
/// writes (a namespace: etcd's revision moves on) and asks for the whole list, which a cache
/// still listing refuses with 429.
fn list_once(addr: &str, probe: &Probe, n: usize) -> Option<Listed> {
    let page = http(addr, "GET", &format!("{}?limit=500", probe.list), &[], b"");
    if page.status != 200 {
        return None;
    }
    let rv = page.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let ns = format!(r#"{{"metadata":{{"name":"late-{n}"}}}}"#);
    let _ = http(addr, "POST", "/api/v1/namespaces", &[JSON], ns.as_bytes());
    let whole = http(addr, "GET", probe.list, &[], b"");
    Some(Listed {
        rv,
        cache_behind: whole.status == 429,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn lists_answered_before_the_caches_are_ready_can_be_watched_from() {
    // Both held until what they are for listens (see `reserved_port`).
    let (port_hold, port) = reserved_port();
    let (etcd_port_hold, etcd_port) = reserved_port();
    let bind = format!("127.0.0.1:{port}");
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    // Server::start_logged returns once the server announces itself, i.e. once it is ready.
    let (tx, started) = std::sync::mpsc::channel();
    let starter = {
        let bind = bind.clone();
        std::thread::spawn(move || {
            let started = Server::start_logged(&bind, &["--etcd-servers", &etcd_url]);
            let _ = tx.send(started);
        })
    };
    let addr = bind.clone();
    let addr = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "the server never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its caches and informers fail and back off for a while without etcd.
        std::thread::sleep(Duration::from_secs(3));
        addr
    })
    .await
    .unwrap();
    drop(port_hold);

    let etcd = EtcdServer::builder()
        .client_port(etcd_port)
        .start()
        .await
        .expect("etcd");
    drop(etcd_port_hold);
    let etcd_up = Instant::now();
    let probing = addr.clone();
    let listed = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + PATIENCE;
        let mut listed: Vec<Option<Listed>> = PROBES.iter().map(|_| None).collect();
        let mut n = 0;
        while listed.iter().any(Option::is_none) {
            assert!(Instant::now() < deadline, "lists never answered");
            for (probe, slot) in PROBES.iter().zip(listed.iter_mut()) {
                if slot.is_none() {
                    n += 1;
                    *slot = list_once(&probing, probe, n);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        listed.into_iter().map(Option::unwrap).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let behind = listed.iter().filter(|l| l.cache_behind).count();
    eprintln!(
        "{behind} of {} lists answered by etcd while their cache was listing",
        listed.len()
    );
    assert!(
        behind > 0,
        "every cache was ready before the first list: nothing was tested"
    );

    let (server, logs) = tokio::task::spawn_blocking(move || {
        started
            .recv_timeout(PATIENCE)
            .expect("the server did not become ready once etcd was up")
    })
    .await
    .unwrap();
    eprintln!("ready {:?} after etcd became healthy", etcd_up.elapsed());
    starter.join().unwrap();

    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        for (probe, l) in PROBES.iter().zip(&listed) {
            let created = http(&addr, "POST", probe.create, &[JSON], probe.body.as_bytes());
            assert_eq!(
                created.status,
                201,
                "{}",
                String::from_utf8_lossy(&created.body)
            );
            // The watch from the list's version delivers everything after it, up to the
            // object created now; never "too old resource version".
            let path = format!("{}?watch=1&resourceVersion={}", probe.list, l.rv);
            let (stream, status) = open_stream(&addr, &path);
            assert_eq!(status, 200, "{path}");
            let mut events = WatchEvents::new(stream);
            loop {
                let ev = events
                    .next()
                    .unwrap_or_else(|| panic!("{path}: the watch ended before late-probe"));
                assert_ne!(ev["type"], "ERROR", "{path}: {ev}");
                if ev["object"]["metadata"]["name"] == "late-probe" {
                    assert_eq!(ev["type"], "ADDED", "{ev}");
                    break;
                }
            }
        }
    })
    .await
    .unwrap();
    // The server's own informers were never refused either.
    let refused: Vec<String> = logs
        .stderr()
        .into_iter()
        .filter(|l| l.contains("too old resource version"))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    drop(server);
    drop(etcd);
}

/// etcd killed and started again on the same data under a running server: the caches' etcd
/// watches resume from their last revision (no relist), so a watch from a version a list
/// gave before the restart gets what was written after it, and the server's own informers
/// see no 410. (A storage watch that fails without a 410 — etcd without a leader — relists
/// at the cache's last version: `init_window` in listwatch-cacher's tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn after_an_etcd_restart_versions_given_before_it_can_be_watched_from() {
    let mut etcd = EtcdServer::start().await.expect("etcd");
    let endpoint = etcd.endpoint();
    let (server, logs) = tokio::task::spawn_blocking(move || {
        Server::start_logged("127.0.0.1:0", &["--etcd-servers", &endpoint])
    })
    .await
    .unwrap();
    let addr = server.addr.clone();
    let cms = "/api/v1/namespaces/default/configmaps";
    let probe = addr.clone();
    let before = tokio::task::spawn_blocking(move || {
        let body = br#"{"metadata":{"name":"before"},"data":{"k":"v"}}"#;
        assert_eq!(http(&probe, "POST", cms, &[JSON], body).status, 201);
        let list = http(&probe, "GET", cms, &[], b"");
        assert_eq!(list.status, 200);
        list.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    })
    .await
    .unwrap();
    let logged_before = logs.stderr().len();

    etcd.kill();
    // Down for a moment: the server's requests and watches to it fail meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    etcd.restart().await.expect("etcd again");
    let probe = addr.clone();
    tokio::task::spawn_blocking(move || {
        // Written as soon as etcd answers again: after the version listed before.
        let deadline = Instant::now() + PATIENCE;
        let body = br#"{"metadata":{"name":"after"},"data":{"k":"v"}}"#;
        loop {
            let r = http(&probe, "POST", cms, &[JSON], body);
            if r.status == 201 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}",
                String::from_utf8_lossy(&r.body)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        while http(&probe, "GET", "/readyz", &[], b"").status != 200 {
            assert!(
                Instant::now() < deadline,
                "not ready again after etcd's restart"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();

    let probe = addr.clone();
    tokio::task::spawn_blocking(move || {
        let path = format!("{cms}?watch=1&resourceVersion={before}");
        let (stream, status) = open_stream(&probe, &path);
        assert_eq!(status, 200, "{path}");
        let mut events = WatchEvents::new(stream);
        loop {
            let ev = events
                .next()
                .unwrap_or_else(|| panic!("{path}: the watch ended before \"after\""));
            assert_ne!(ev["type"], "ERROR", "{path}: {ev}");
            if ev["object"]["metadata"]["name"] == "after" {
                assert_eq!(ev["type"], "ADDED", "{ev}");
                break;
            }
        }
    })
    .await
    .unwrap();
    let refused: Vec<String> = logs.stderr()[logged_before..]
        .iter()
        .filter(|l| l.contains("too old resource version"))
        .cloned()
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    drop(server);
    drop(etcd);
}
