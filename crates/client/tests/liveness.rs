//! Liveness of the HTTP reflector: no wait without a deadline. A watch whose server goes
//! silent, stalls mid-frame, or whose connection a proxy drops without a word is abandoned
//! after its idle deadline and reopened from the last version; a list that stalls fails at
//! its deadline and is retried. All under tokio's paused clock, so the deadlines pass in
//! virtual time; the fake server and proxy run in the test's runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake_api;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_api::{FakeApi, Misbehave, SilentDropProxy};
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_client::{Config, HttpConfig, HttpListerWatcher, Store, Writer, reflector, watcher};
use tokio::time::Instant;

/// Watches ask for a 60 s server timeout (the random draw is in [60, 120)); the idle
/// deadline is that plus the 30 s default margin.
fn config() -> Config {
    Config::default().min_watch_timeout(Duration::from_secs(60))
}

type Errors = Arc<Mutex<Vec<listwatch_client::Error>>>;

fn spawn(url: &str, config: Config) -> (Store<Object>, Errors) {
    let lw = HttpListerWatcher::new(HttpConfig::new(url).unwrap(), "/api/v1/pods").unwrap();
    let writer = Writer::default();
    let store = writer.store();
    let errors: Errors = Arc::default();
    let errs = Arc::clone(&errors);
    tokio::spawn(reflector(writer, watcher(lw, config)).for_each(move |d| {
        if let Err(e) = d {
            errs.lock().unwrap().push(e);
        }
        async {}
    }));
    (store, errors)
}

/// Waits in virtual time until `f` holds (a silent hang fails the test after 1 h).
async fn until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !f() {
        assert!(Instant::now() < deadline, "condition not reached in 1 h");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn has(store: &Store<Object>, name: &str) -> bool {
    store.get_by_name(Some("ns"), name).is_some()
}

fn idle_errors(errors: &Errors) -> usize {
    errors
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, listwatch_client::Error::WatchIdle(_)))
        .count()
}

/// The first watch's deadline: its requested server timeout plus the margin.
fn deadline_of(w: &fake_api::Seen, margin: Duration) -> Instant {
    let t: u64 = w.param("timeoutSeconds").unwrap().parse().unwrap();
    w.at + Duration::from_secs(t) + margin
}

#[tokio::test(start_paused = true)]
async fn a_watch_whose_server_goes_silent_after_the_headers_is_reopened_at_its_deadline() {
    let api = FakeApi::start(10).await;
    let first = api.put("p0");
    api.fail_watches([Misbehave::SilentAfterHeaders]);
    let (store, errors) = spawn(&api.url(), config());
    until(|| has(&store, "p0")).await;
    let later = api.put("p1");
    until(|| has(&store, "p1")).await;

    let w = api.watches();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[1].at >= deadline_of(&w[0], Duration::from_secs(30)),
        "re-watched before the idle deadline"
    );
    assert_eq!(
        w[1].param("resourceVersion"),
        Some(first.to_string()),
        "re-watch from the last version"
    );
    assert_eq!(api.lists().len(), 1, "no relist");
    assert_eq!(idle_errors(&errors), 1);
    assert_eq!(store.resource_version(), later.to_string());
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_stalls_mid_frame_is_reopened_and_the_half_frame_is_never_applied() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    api.fail_watches([Misbehave::StallMidFrame]);
    let (store, errors) = spawn(&api.url(), config());
    until(|| store.has_synced()).await;
    // The first watch sends half of this event's frame, then nothing.
    let rv = api.put("p1");
    until(|| has(&store, "p1")).await;
    let w = api.watches();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[1].at >= deadline_of(&w[0], Duration::from_secs(30)));
    assert_eq!(idle_errors(&errors), 1);
    assert_eq!(store.resource_version(), rv.to_string());
    assert_eq!(api.lists().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_connection_a_proxy_drops_silently_is_detected_and_the_watch_resumes_through_a_new_one() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    let proxy = SilentDropProxy::start(api.addr).await;
    let margin = Duration::from_secs(5);
    let (store, errors) = spawn(&proxy.url(), config().watch_idle_margin(margin));
    until(|| store.has_synced() && api.watches().len() == 1).await;
    let p1 = api.put("p1");
    until(|| has(&store, "p1")).await;

    // The proxy loses the connection's state: the server's next event goes nowhere, and
    // nothing tells the client.
    proxy.drop_open_connections_silently();
    let dropped_at = Instant::now();
    let p2 = api.put("p2");
    until(|| has(&store, "p2")).await;

    let w = api.watches();
    assert_eq!(w.len(), 2, "{w:?}");
    // The deadline counts from the last event the client received (p1's).
    assert!(w[1].at > dropped_at);
    assert_eq!(w[1].param("resourceVersion"), Some(p1.to_string()));
    assert_eq!(idle_errors(&errors), 1);
    assert_eq!(store.resource_version(), p2.to_string());
    assert_eq!(api.lists().len(), 1, "a re-watch, not a relist");
}

#[tokio::test(start_paused = true)]
async fn a_busy_watch_is_never_taken_for_an_idle_one() {
    let api = FakeApi::start(10).await;
    let (store, errors) = spawn(
        &api.url(),
        config().watch_idle_margin(Duration::from_secs(1)),
    );
    until(|| store.has_synced()).await;
    // An event every 30 s for 20 minutes: far longer than the idle limit (61..121 s) in
    // total, but never that long between two events. The server never ends the watch.
    let mut last = 0;
    for i in 0..40 {
        tokio::time::sleep(Duration::from_secs(30)).await;
        last = api.put(&format!("p{i}"));
    }
    until(|| store.resource_version() == last.to_string()).await;
    assert_eq!(api.watches().len(), 1);
    assert_eq!(idle_errors(&errors), 0);
}

#[tokio::test(start_paused = true)]
async fn a_list_that_stalls_fails_at_its_deadline_and_is_retried_after_a_backoff() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    api.fail_lists([Misbehave::StallMidFrame, Misbehave::SilentAfterHeaders]);
    let lw = HttpListerWatcher::new(
        HttpConfig::new(api.url())
            .unwrap()
            .request_timeout(Duration::from_secs(20)),
        "/api/v1/pods",
    )
    .unwrap();
    let writer = Writer::default();
    let store = writer.store();
    let errors: Errors = Arc::default();
    let errs = Arc::clone(&errors);
    tokio::spawn(reflector(writer, watcher(lw, config())).for_each(move |d| {
        if let Err(e) = d {
            errs.lock().unwrap().push(e);
        }
        async {}
    }));
    until(|| has(&store, "p0")).await;
    let l = api.lists();
    assert_eq!(l.len(), 3);
    for pair in l.windows(2) {
        // the 20 s deadline, then a backoff of at least 800 ms
        assert!(pair[1].at >= pair[0].at + Duration::from_millis(20_800));
    }
    let errors = errors.lock().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().all(|e| e.to_string().contains("20s")),
        "{errors:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_configuration_bounds_every_list() {
    let api = FakeApi::start(10).await;
    api.put("p0");
    api.fail_lists([Misbehave::SilentAfterHeaders]);
    let (store, errors) = spawn(&api.url(), config());
    until(|| has(&store, "p0")).await;
    assert_eq!(api.lists().len(), 2);
    assert_eq!(errors.lock().unwrap().len(), 1);
    assert_eq!(
        HttpConfig::default().request_timeout,
        Some(Duration::from_secs(60))
    );
}
