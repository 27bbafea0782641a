//! Client failover: an [`HttpClient`] with several servers of one cluster moves to the next
//! on a connection failure, and the reflector's watch resumes there from its last version:
//! no relist, every event exactly once. The "replicas" are proxies in front of one fake
//! server (one store, one version sequence, as replicas over one etcd): a
//! [`Balancer`](listwatch_testkit::Balancer) per replica, whose `kill` refuses new
//! connections and resets the open ones, and a [`SilentDropProxy`] for a replica whose
//! connections go silent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake_api;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_api::{FakeApi, SilentDropProxy};
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_client::{Config, Event, HttpClient, HttpConfig, watcher};
use listwatch_testkit::Balancer;
use tokio::time::Instant;

/// What the watcher yielded, in order: `Init`, `InitApply name`, `InitDone`, `Apply name@rv`.
type Log = Arc<Mutex<Vec<String>>>;

fn spawn(client: &HttpClient, config: Config) -> Log {
    let lw = client.lister_watcher("/api/v1/pods").unwrap();
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    tokio::spawn(watcher(lw, config).for_each(move |e| {
        let line = Some(match e {
            Ok(Event::Init) => "Init".to_owned(),
            Ok(Event::InitApply(o)) => format!("InitApply {}", name(&o)),
            Ok(Event::InitDone { resource_version }) => format!("InitDone {resource_version}"),
            Ok(Event::Apply(o)) => format!("Apply {}@{}", name(&o), o.resource_version()),
            Ok(Event::Delete(o)) => format!("Delete {}", name(&o)),
            Ok(Event::Bookmark { .. }) => String::new(),
            Err(e) => format!("error {e}"),
        })
        .filter(|l| !l.is_empty());
        l.lock().unwrap().extend(line);
        async {}
    }));
    log
}

fn name(o: &Object) -> String {
    o.name().to_owned()
}

fn events(log: &Log) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|l| !l.starts_with("error"))
        .cloned()
        .collect()
}

/// Waits until `f` holds (a hang fails the test after 1 h of virtual or 60 s of real time).
async fn until(paused: bool, mut f: impl FnMut() -> bool) {
    let limit = if paused { 3600 } else { 60 };
    let deadline = Instant::now() + Duration::from_secs(limit);
    while !f() {
        assert!(Instant::now() < deadline, "condition not reached");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn applied(log: &Log, name: &str, rv: u64) -> bool {
    events(log).contains(&format!("Apply {name}@{rv}"))
}

fn fast() -> Config {
    Config::default().backoff(
        Duration::from_millis(50),
        Duration::from_millis(200),
        Duration::from_secs(60),
        0.5,
    )
}

#[tokio::test]
async fn a_killed_replica_moves_the_watch_to_the_next_from_its_last_version() {
    let api = FakeApi::start(10).await;
    let p0 = api.put("p0");
    let (a, b) = (
        Balancer::start(&[api.addr]).await.unwrap(),
        Balancer::start(&[api.addr]).await.unwrap(),
    );
    let client = HttpClient::new(HttpConfig::with_servers([a.url(), b.url()]).unwrap()).unwrap();
    let log = spawn(&client, fast());
    until(false, || api.watches().len() == 1).await;
    let p1 = api.put("p1");
    until(false, || applied(&log, "p1", p1)).await;
    assert_eq!(
        b.connections(),
        [0],
        "everything on the first server so far"
    );

    // Replica A dies: its open watch is reset, new connections to it fail.
    a.kill(0);
    let p2 = api.put("p2");
    until(false, || applied(&log, "p2", p2)).await;
    assert_eq!(client.current_server(), b.url());
    let w = api.watches();
    assert_eq!(
        w.last().unwrap().param("resourceVersion"),
        Some(p1.to_string()),
        "the watch resumed from the last version it saw"
    );
    assert_eq!(api.lists().len(), 1, "no relist");
    let p3 = api.put("p3");
    until(false, || applied(&log, "p3", p3)).await;
    assert_eq!(
        events(&log),
        [
            "Init".to_owned(),
            "InitApply p0".to_owned(),
            format!("InitDone {p0}"),
            format!("Apply p1@{p1}"),
            format!("Apply p2@{p2}"),
            format!("Apply p3@{p3}"),
        ],
        "every change once, in order"
    );
}

#[tokio::test]
async fn with_every_replica_down_the_reflector_backs_off_and_resumes_on_the_first_back() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    let (a, b) = (
        Balancer::start(&[api.addr]).await.unwrap(),
        Balancer::start(&[api.addr]).await.unwrap(),
    );
    let client = HttpClient::new(HttpConfig::with_servers([a.url(), b.url()]).unwrap()).unwrap();
    let log = spawn(&client, fast());
    until(false, || api.watches().len() == 1).await;
    let p1 = api.put("p1");
    until(false, || applied(&log, "p1", p1)).await;

    a.kill(0);
    b.kill(0);
    let p2 = api.put("p2");
    // Rounds over both servers fail and are reported, with backoff between them.
    until(false, || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("error connection failed"))
            .count()
            >= 2
    })
    .await;
    b.revive(0, None);
    until(false, || applied(&log, "p2", p2)).await;
    assert_eq!(client.current_server(), b.url());
    assert_eq!(api.lists().len(), 1, "no relist");
    assert_eq!(
        api.watches().last().unwrap().param("resourceVersion"),
        Some(p1.to_string())
    );
    assert_eq!(
        events(&log)
            .iter()
            .filter(|e| e.starts_with("Apply"))
            .count(),
        2,
        "{:?}",
        events(&log)
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_idle_past_its_deadline_blames_its_server_and_resumes_on_the_next() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    let silent = SilentDropProxy::start(api.addr).await;
    let b = Balancer::start(&[api.addr]).await.unwrap();
    let client =
        HttpClient::new(HttpConfig::with_servers([silent.url(), b.url()]).unwrap()).unwrap();
    let config = fast()
        .min_watch_timeout(Duration::from_secs(60))
        .watch_idle_margin(Duration::from_secs(5));
    let log = spawn(&client, config);
    until(true, || api.watches().len() == 1).await;
    let p1 = api.put("p1");
    until(true, || applied(&log, "p1", p1)).await;

    // The first replica's connection goes silent; new connections to it would still work,
    // so only the idle deadline can tell, and it must move the client off that server.
    silent.drop_open_connections_silently();
    let p2 = api.put("p2");
    until(true, || applied(&log, "p2", p2)).await;
    assert_eq!(
        b.connections(),
        [1],
        "the re-watch went to the other server"
    );
    assert_eq!(client.current_server(), b.url());
    assert_eq!(api.lists().len(), 1, "no relist");
    assert_eq!(
        api.watches().last().unwrap().param("resourceVersion"),
        Some(p1.to_string())
    );
    assert_eq!(
        events(&log)
            .iter()
            .filter(|e| e.starts_with("Apply"))
            .count(),
        2
    );
}

#[tokio::test]
async fn a_refused_get_goes_to_the_next_server_at_once() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let b = Balancer::start(&[api.addr]).await.unwrap();
    let client = HttpClient::new(HttpConfig::with_servers([dead, b.url()]).unwrap()).unwrap();
    // A refused connection: the GET goes to the next server at once.
    let got = client.get("/api/v1/namespaces/ns/pods/p0").await.unwrap();
    assert!(got.is_some());
    assert_eq!(client.current_server(), b.url());
}

#[tokio::test]
async fn a_server_that_never_answers_is_left_for_the_next_within_the_request_timeout() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    // Accepts connections and reads nothing, answers nothing (a hung replica).
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("http://{}", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hung.accept().await {
            conns.push(c);
        }
    });
    let b = Balancer::start(&[api.addr]).await.unwrap();
    let config = HttpConfig::with_servers([hung_url, b.url()])
        .unwrap()
        .request_timeout(Duration::from_millis(300));
    let client = HttpClient::new(config).unwrap();
    // The object call and the list each get their headers deadline per server: the hung
    // one is abandoned at its deadline and the next answers.
    assert!(
        client
            .get("/api/v1/namespaces/ns/pods/p0")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(client.current_server(), b.url());
    held.abort();
}
