//! The test etcd helper itself: it answers once started, and its process is gone after the
//! server is dropped — also when a test panics while holding it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use listwatch_etcd::testing::EtcdServer;

fn alive(pid: u32) -> bool {
    // A killed child is reaped by `Drop`; an orphan may linger as a zombie until its new parent
    // reaps it, which is dead all the same.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_dropped_server_leaves_no_etcd_behind() {
    let server = EtcdServer::start().await.unwrap();
    server.client().health().await.unwrap();
    let pid = server.pid().unwrap();
    assert!(alive(pid));
    drop(server);
    assert!(!alive(pid), "etcd {pid} outlived its server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_panicking_test_still_kills_its_etcd() {
    let server = EtcdServer::start().await.unwrap();
    let pid = server.pid().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = server;
        panic!("a failing test");
    }));
    assert!(outcome.is_err());
    assert!(!alive(pid), "etcd {pid} outlived a panicking test");
}

#[tokio::test]
async fn a_missing_binary_says_what_to_install() {
    let err = EtcdServer::builder()
        .binary("/nonexistent/etcd")
        .start()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("apt-get install etcd-server"),
        "{err}"
    );
}

/// Set in the child process of the watchdog test.
const CHILD: &str = "LISTWATCH_ETCD_WATCHDOG_CHILD";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn an_etcd_outliving_a_crashed_test_process_is_killed_and_tidied_by_the_watchdog() {
    if std::env::var_os(CHILD).is_some() {
        // The child: start etcd, say where it is, and die without running any destructor.
        let server = EtcdServer::start().await.unwrap();
        println!(
            "ETCD {} {}",
            server.pid().unwrap(),
            server.dir().unwrap().display()
        );
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_etcd_outliving_a_crashed_test_process_is_killed_and_tidied_by_the_watchdog",
            "--include-ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ETCD "))
        .unwrap_or_else(|| panic!("child said: {stdout}"));
    let (pid, dir) = line.split_once(' ').unwrap();
    let (pid, dir): (u32, PathBuf) = (pid.parse().unwrap(), dir.into());
    // Bounded wait: the watchdog polls every second.
    for _ in 0..300 {
        if !alive(pid) && !dir.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "etcd {pid} or its directory {} outlived the crashed test process",
        dir.display()
    );
}
