//! Chaos: replicas of listwatch-apiserver over a 3-member etcd cluster, run as
//! docs/deployment.md says, behind the testkit balancer health-checking their `/readyz`;
//! 200 watchers with random selectors, a writer at a steady rate, and faults one after
//! another — a replica killed with SIGKILL and restarted, the etcd leader killed and
//! restarted, every replica rolled by the doc's rolling-upgrade procedure. Issue 18 item 4.
//!
//! The deployment (docs/deployment.md, quoted where it is followed):
//! - etcd members with `--pre-vote` and `--experimental-watch-progress-notify-interval 1s`
//!   (the testing cluster's members always pre-vote; the interval is set here);
//! - replicas with the unit's flags that matter here — every member in `--etcd-servers`,
//!   `--etcd-prefix /registry`, `--etcd-compaction-interval 300`,
//!   `--shutdown-delay-duration 10`, `--shutdown-grace-period 30` — less TLS,
//!   authentication and RBAC (plain HTTP, anonymous clients: other tests cover those), all
//!   with the same flags ("Flags that must agree across replicas");
//! - the balancer checks `GET /readyz` every second, out after 2 failures, back after 2
//!   successes ("Load-balancer health checks").
//!
//! The faults, each as the doc describes its handling:
//! - kill -9 a replica: nothing tells the balancer; its health check takes the replica out,
//!   its clients' connections break and they re-watch elsewhere; started again, the
//!   balancer brings it back once `/readyz` passes;
//! - kill -9 the etcd leader, then restart it: the replicas ride through (no restart), and
//!   are all in rotation again afterwards;
//! - the rolling upgrade, one replica at a time: SIGTERM → `/readyz` fails at once while
//!   everything is still served → the balancer's check takes it out (checked: still serving
//!   then) → when the delay is over open watches end cleanly (a watch opened on the replica
//!   itself ends with the chunked terminator) → the process exits 0 → started again → the
//!   balancer brings it back when `/readyz` passes (and `/readyz` is 200 on it) → the next
//!   one. Exactly one replica leads the controllers afterwards.
//!
//! What must hold at the end, for every watcher (`watchers::check`): every list it made
//! returned the truth's state at that list's version; its events after each list are
//! exactly those the writes imply from there (ADDED/MODIFIED as `Apply` with the written
//! `data.seq`, DELETED with the last state, an object leaving the selection as a delete),
//! once each, in order, with the resource version each acknowledged write returned — all
//! of them after its last list, a prefix before a relist; and a relist only after a 410
//! Expired. No acknowledged write is lost: a consistent list equals the writer's model.
//!
//! Watchers: three in four go through the balancer (round-robin over the replicas in
//! rotation), one in four uses listwatch-client's own failover (every replica's URL, in a
//! rotated order).
//!
//! Seeded: the seed is printed; `LISTWATCH_CHAOS_SEED=N` runs that seed again. Recovery
//! times are printed per fault. Bounded: every wait has a deadline, and the whole test
//! [`DEADLINE`] (about 50 s of wall time on two loaded cores in a debug build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
mod model;
mod watchers;
mod writer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::replicas::PROGRESS_NOTIFY_INTERVAL;
use common::{PATIENCE, Server};
use listwatch_client::{HttpClient, HttpConfig};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_testkit::{Balancer, HealthCheck};
use model::{Key, NAMESPACES, Selection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use watchers::{ErrorTally, Seen, spawn_watcher};
use writer::{Truth, writer};

const REPLICAS: usize = 2;
const WATCHERS: usize = 200;
/// The whole test's deadline: past it the test fails, naming the step it was at.
const DEADLINE: Duration = Duration::from_secs(300);
/// docs/deployment.md's replica unit: `--shutdown-delay-duration 10`, "set N above the
/// balancer's detection time (interval × failures + a margin; 10 s for the values above)".
const SHUTDOWN_DELAY: &str = "10";

/// The replicas' flags: docs/deployment.md's unit, less TLS, authentication and RBAC.
fn flags(etcd: &[String]) -> Vec<String> {
    [
        "--storage",
        "etcd",
        // "Every replica names every etcd member."
        "--etcd-servers",
        &etcd.join(","),
        "--etcd-prefix",
        "/registry",
        "--etcd-compaction-interval",
        "300",
        // "SIGTERM starts the drain": /readyz fails for this long while all is served.
        "--shutdown-delay-duration",
        SHUTDOWN_DELAY,
        "--shutdown-grace-period",
        "30",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// What the test is doing, for the deadline's message and the watchers' relist records.
#[derive(Clone, Default)]
struct Step(Arc<Mutex<String>>);

impl Step {
    fn set(&self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("chaos: {what}");
        *self.0.lock().unwrap() = what;
    }

    fn get(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn replicas_etcd_and_watchers_survive_kills_and_rolls_with_nothing_lost_or_repeated() {
    let seed: u64 = std::env::var("LISTWATCH_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("chaos seed {seed} (LISTWATCH_CHAOS_SEED={seed} runs it again)");
    let step = Step::default();
    // The run is a task of its own so that the deadline fires whatever it waits on.
    let run = tokio::spawn(chaos(seed, step.clone()));
    let abort = run.abort_handle();
    match tokio::time::timeout(DEADLINE, run).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
        Err(_) => {
            abort.abort();
            panic!(
                "chaos seed {seed}: not done within the test's deadline of {DEADLINE:?}; \
                 it was at: {}",
                step.get()
            );
        }
    }
}

/// A replica's address as the balancer dials it.
fn sock(bind: &str) -> std::net::SocketAddr {
    bind.parse().unwrap()
}

/// One plain GET on a fresh connection to `addr`, bounded: the status and body, or why
/// there is none.
fn try_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let r = common::parse_response(&raw);
    Ok((r.status, String::from_utf8_lossy(&r.body).into_owned()))
}

async fn get(addr: &str, path: &'static str) -> Result<(u16, String), String> {
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || try_get(&addr, path))
        .await
        .unwrap()
}

/// Starts replica `bind` (without waiting) and waits until the balancer has it in rotation
/// ("wait until `GET /readyz` is 200 on that replica (the balancer's own check does the
/// same)"); then `/readyz` is 200 on it and it has announced that it serves. Returns it
/// and the time from the start to its return to rotation.
async fn start_and_wait_in_rotation(
    lb: &Balancer,
    i: usize,
    bind: &str,
    flags: &[String],
) -> (Server, Duration) {
    let f: Vec<&str> = flags.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut server = Server::spawn_at(bind, &f);
    let deadline = Instant::now() + PATIENCE;
    while !lb
        .wait_in_rotation(i, true, Duration::from_millis(200))
        .await
    {
        if let Some(status) = server.exited() {
            panic!("replica {i} exited ({status}) while starting");
        }
        assert!(
            Instant::now() < deadline,
            "the balancer never brought replica {i} back into rotation"
        );
    }
    let back = started.elapsed();
    let readyz = get(bind, "/readyz").await;
    assert!(
        matches!(readyz, Ok((200, _))),
        "replica {i} is in rotation, so its /readyz passes: {readyz:?}"
    );
    let server = tokio::task::spawn_blocking(move || {
        let line = server.wait_announced();
        assert!(line.contains("http://"), "{line:?}");
        server
    })
    .await
    .unwrap();
    (server, back)
}

/// Waits until every backend is in rotation.
async fn wait_all_in_rotation(lb: &Balancer, what: String) {
    for i in 0..REPLICAS {
        assert!(
            lb.wait_in_rotation(i, true, PATIENCE).await,
            "replica {i} not back in rotation {what}; rotation {:?}",
            lb.in_rotation()
        );
    }
}

/// Which replicas say they lead the controllers (`leader_election_master_status` 1).
async fn leaders(binds: &[String]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, b) in binds.iter().enumerate() {
        if let Ok((200, body)) = get(b, "/metrics").await
            && body
                .lines()
                .any(|l| l == "leader_election_master_status{name=\"listwatch-controllers\"} 1")
        {
            out.push(i);
        }
    }
    out
}

async fn wait_for_one_leader(binds: &[String], what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let l = leaders(binds).await;
        if l.len() == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not exactly one replica leads the controllers {what}: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The test itself (see the module doc).
async fn chaos(seed: u64, step: Step) {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);

    step.set("starting etcd");
    // docs/deployment.md: "Hence `--experimental-watch-progress-notify-interval 1s`"
    // (etcd 3.4.23 answers progress requests early); the members pre-vote (`--pre-vote`).
    let mut etcd = EtcdCluster::builder()
        .progress_notify_interval(PROGRESS_NOTIFY_INTERVAL)
        .start(3)
        .await
        .expect("etcd cluster");
    let flags = flags(&etcd.endpoints());

    step.set("starting the replicas");
    let mut replicas: Vec<Option<Server>> = Vec::new();
    for _ in 0..REPLICAS {
        let f = flags.clone();
        let server = tokio::task::spawn_blocking(move || {
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            Server::start_at("127.0.0.1:0", &f)
        })
        .await
        .unwrap();
        replicas.push(Some(server));
    }
    // Restarts reuse each replica's address, as a unit on its machine does.
    let binds: Vec<String> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().addr.clone())
        .collect();
    let urls: Vec<String> = binds.iter().map(|b| format!("http://{b}")).collect();
    // docs/deployment.md: "Check `GET /readyz` (HTTP 200 = send traffic; anything else = take
    // the replica out), every 1–2 s, out after 2 failures, back after 2 successes."
    let lb = Balancer::with_health_check(
        &binds.iter().map(|b| sock(b)).collect::<Vec<_>>(),
        HealthCheck::readyz(),
    )
    .await
    .unwrap();
    wait_all_in_rotation(&lb, "after the first start".into()).await;
    let writes_client = HttpClient::new(HttpConfig::with_servers(urls.clone()).unwrap()).unwrap();
    for ns in 0..NAMESPACES {
        writes_client
            .create(
                "/api/v1/namespaces",
                &json!({"metadata": {"name": format!("ns-{ns}")}}),
            )
            .await
            .unwrap();
    }

    // Watchers, all synced (on an empty collection) before the first write.
    step.set("syncing the watchers");
    let sels: Vec<Selection> = (0..WATCHERS).map(|_| Selection::random(&mut rng)).collect();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..WATCHERS).map(|_| Arc::default()).collect();
    let tally = ErrorTally::default();
    for (i, (sel, s)) in sels.iter().zip(&seen).enumerate() {
        let config = if i % 4 == 0 {
            let mut rotated = urls.clone();
            rotated.rotate_left(i / 4 % REPLICAS);
            HttpConfig::with_servers(rotated).unwrap()
        } else {
            HttpConfig::new(lb.url()).unwrap()
        };
        spawn_watcher(
            HttpClient::new(config).unwrap(),
            sel,
            Arc::clone(s),
            Arc::clone(&step.0),
            Arc::clone(&tally),
        );
    }
    let deadline = Instant::now() + PATIENCE;
    while !seen.iter().all(|s| s.lock().unwrap().synced) {
        assert!(Instant::now() < deadline, "watchers never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{WATCHERS} watchers synced after {:.1?}; balancer connections {:?}",
        started.elapsed(),
        lb.connections()
    );

    let truth: Arc<Mutex<Truth>> = Arc::default();
    truth.lock().unwrap().step = step.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(
        writes_client.clone(),
        Arc::clone(&truth),
        Arc::clone(&stop),
        seed,
    ));
    let mut recoveries: Vec<String> = Vec::new();
    // From a fault: the first write sent after it acknowledged, and every watcher having
    // every event up to that write.
    let recover = async |what: String, at: Instant| -> String {
        let deadline = Instant::now() + PATIENCE;
        let (k, acked) = loop {
            let found = truth.lock().unwrap().first_sent_after(at);
            if let Some(found) = found {
                break found;
            }
            assert!(
                Instant::now() < deadline,
                "no write acknowledged after {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        loop {
            let writes = truth.lock().unwrap().landed();
            let behind = sels
                .iter()
                .zip(&seen)
                .filter(|(sel, s)| !watchers::caught_up(sel, &s.lock().unwrap(), &writes, k))
                .count();
            if behind == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{behind} watchers never caught up after {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let relisted = seen.iter().filter(|s| s.lock().unwrap().relisted()).count();
        let line = format!(
            "{what}: writes recovered in {} ms, every watcher in {} ms ({relisted} watchers \
             relisted so far)",
            (acked - at).as_millis(),
            at.elapsed().as_millis()
        );
        eprintln!("  {line}");
        line
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. A replica dies (SIGKILL): nothing tells the balancer; its health check takes the
    //    replica out ("The balancer's `/readyz` check removes it").
    let victim = rng.random_range(0..REPLICAS);
    step.set(format!("kill -9 replica {victim}"));
    let at = Instant::now();
    drop(replicas[victim].take());
    let (line, out) = tokio::join!(recover(format!("kill -9 replica {victim}"), at), async {
        assert!(
            lb.wait_in_rotation(victim, false, PATIENCE).await,
            "the balancer's health check never took the killed replica {victim} out"
        );
        at.elapsed()
    });
    recoveries.push(format!("{line}; out of rotation in {} ms", out.as_millis()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    step.set(format!("restart replica {victim}"));
    let at = Instant::now();
    let (line, (server, back)) = tokio::join!(
        recover(format!("restart replica {victim}"), at),
        start_and_wait_in_rotation(&lb, victim, &binds[victim], &flags)
    );
    replicas[victim] = Some(server);
    recoveries.push(format!(
        "{line}; back in rotation in {} ms",
        back.as_millis()
    ));

    // 2. The etcd leader dies, and comes back ("An etcd member dies": the replicas ride
    //    through, without a restart).
    let leader = etcd
        .wait_for_leader(PATIENCE)
        .await
        .expect("an etcd leader");
    step.set(format!("kill -9 etcd leader m{leader}"));
    let changes_before = lb.rotation_changes().len();
    let at = Instant::now();
    etcd.member(leader).unwrap().kill();
    recoveries.push(recover(format!("kill -9 etcd leader m{leader}"), at).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    step.set(format!("restart etcd m{leader}"));
    etcd.member(leader)
        .unwrap()
        .restart()
        .await
        .expect("etcd restart");
    let at = Instant::now();
    let (line, ()) = tokio::join!(
        recover(format!("restart etcd m{leader}"), at),
        wait_all_in_rotation(&lb, format!("after etcd m{leader} came back"))
    );
    let left = lb.rotation_changes()[changes_before..]
        .iter()
        .filter(|c| !c.healthy)
        .count();
    recoveries.push(format!(
        "{line}; {left} replicas left rotation during the etcd faults"
    ));

    // 3. The rolling upgrade, as docs/deployment.md's "Rolling upgrade" says: one replica at
    //    a time, SIGTERM, out of rotation through /readyz, exit 0, start, back in rotation.
    for i in 0..REPLICAS {
        wait_all_in_rotation(&lb, "before a roll (at least N−1 serve throughout)".into()).await;
        wait_for_one_leader(&binds, &format!("before rolling replica {i}")).await;
        step.set(format!("roll replica {i}: SIGTERM"));
        // A watch open on the replica itself: how open watches end.
        let (mut open_watch, status) =
            common::open_stream(&binds[i], "/api/v1/configmaps?watch=1&resourceVersion=0");
        assert_eq!(status, 200);
        let watch_end = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut rest = Vec::new();
            let r = open_watch.read_to_end(&mut rest).map(|_| rest);
            (r, Instant::now())
        });
        let at = Instant::now();
        replicas[i].as_ref().unwrap().sigterm();
        // "`/readyz` fails at once (`[-]shutdown failed: reason withheld`) while
        // *everything* is still served".
        let deadline = Instant::now() + PATIENCE;
        loop {
            match get(&binds[i], "/readyz").await {
                Ok((200, _)) => {}
                Ok((500, body)) if body.contains("[-]shutdown failed") => break,
                other => panic!("replica {i}'s /readyz after SIGTERM: {other:?}"),
            }
            assert!(
                Instant::now() < deadline,
                "replica {i}'s /readyz kept passing after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        step.set(format!("roll replica {i}: waiting for the balancer"));
        assert!(
            lb.wait_in_rotation(i, false, PATIENCE).await,
            "the balancer's health check never took draining replica {i} out"
        );
        let out = at.elapsed();
        // Taken out before anything is refused: the replica still serves.
        let served = get(&binds[i], "/api/v1/namespaces").await;
        assert!(
            matches!(served, Ok((200, _))),
            "replica {i} stopped serving before the balancer took it out ({out:?} after \
             SIGTERM; --shutdown-delay-duration {SHUTDOWN_DELAY}): {served:?}"
        );
        step.set(format!(
            "roll replica {i}: waiting for the end of its watches"
        ));
        // "Then the shutdown: open watches end with a clean end of stream".
        let (rest, ended) = watch_end.await.unwrap();
        let rest = rest.expect("the open watch ends");
        assert!(
            rest.ends_with(b"0\r\n\r\n"),
            "replica {i}'s open watch ended without the chunked terminator: {:?}",
            String::from_utf8_lossy(&rest[rest.len().saturating_sub(200)..])
        );
        // From the end of its watches: the watchers move to the other replica. Meanwhile
        // "then the process exits 0", and the start.
        step.set(format!("roll replica {i}: exit and start"));
        let old = replicas[i].take().unwrap();
        let (line, (exited, server, back)) = tokio::join!(
            recover(
                format!("roll replica {i} (from the end of its watches)"),
                ended
            ),
            async {
                let clean = tokio::task::spawn_blocking(move || old.wait_exit())
                    .await
                    .unwrap();
                assert!(clean, "replica {i} did not exit with success on SIGTERM");
                let exited = at.elapsed();
                let (server, back) = start_and_wait_in_rotation(&lb, i, &binds[i], &flags).await;
                (exited, server, back)
            }
        );
        replicas[i] = Some(server);
        recoveries.push(format!(
            "{line}; out of rotation {} ms after SIGTERM, watches ended after {} ms, exited 0 \
             after {} ms, back in rotation {} ms after its start",
            out.as_millis(),
            (ended - at).as_millis(),
            exited.as_millis(),
            back.as_millis()
        ));
    }
    wait_for_one_leader(&binds, "after the roll").await;

    step.set("stopping the writer");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(PATIENCE, writing)
        .await
        .expect("the writer stops")
        .unwrap();

    // Every watcher reaches the end; then the comparison, exact.
    step.set("checking every watcher");
    let all = truth.lock().unwrap().landed();
    let deadline = Instant::now() + PATIENCE;
    while !sels
        .iter()
        .zip(&seen)
        .all(|(sel, s)| watchers::check(sel, &s.lock().unwrap(), &all).is_ok())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut events_checked = 0;
    let mut relists: Vec<String> = Vec::new();
    let mut causes: std::collections::BTreeMap<String, usize> = Default::default();
    for (i, (sel, s)) in sels.iter().zip(&seen).enumerate() {
        let s = s.lock().unwrap();
        match watchers::check(sel, &s, &all) {
            Ok(n) => events_checked += n,
            Err(why) => panic!("watcher {i} {sel:?} (seed {seed}): {why}"),
        }
        for l in s.lists.iter().skip(1) {
            relists.push(l.phase.clone());
            let first: String = l
                .cause
                .first()
                .map_or("", |c| c.as_str())
                .chars()
                .take(90)
                .collect();
            *causes.entry(first).or_default() += 1;
        }
    }

    // No acknowledged write lost: a consistent list on a replica is the writer's model.
    let model: std::collections::BTreeMap<Key, u64> = truth
        .lock()
        .unwrap()
        .model
        .iter()
        .map(|(k, (_, seq, _))| (*k, *seq))
        .collect();
    let listed = writes_client.lister_watcher("/api/v1/configmaps").unwrap();
    let page = listwatch_client::ListerWatcher::list(&listed, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        watchers::parse_list(&page.items),
        model,
        "the stored state is the acknowledged writes' (seed {seed})"
    );

    let relisted = seen.iter().filter(|s| s.lock().unwrap().relisted()).count();
    let mut by_step: std::collections::BTreeMap<String, usize> = Default::default();
    for r in relists {
        *by_step.entry(r).or_default() += 1;
    }
    let t = truth.lock().unwrap();
    eprintln!(
        "chaos seed {seed}: {} writes landed ({} with an unknown outcome resolved, {} found late, \
         {} refused), {events_checked} events checked over {WATCHERS} watchers ({relisted} \
         relisted, each after a 410; relists by step: {by_step:?}), {} faults, {:.1?} in all",
        t.writes.len(),
        t.ambiguous,
        t.late,
        t.failed,
        recoveries.len(),
        started.elapsed()
    );
    for line in &recoveries {
        eprintln!("  {line}");
    }
    eprintln!("  relists by first cause: {causes:?}");
    eprintln!(
        "  watcher errors by step and kind: {:?}",
        tally.lock().unwrap()
    );
    eprintln!("  writer errors by step and kind: {:?}", t.errors);
}
