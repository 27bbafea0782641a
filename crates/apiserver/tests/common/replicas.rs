//! Several `listwatch-apiserver` replicas over one three-member etcd cluster (issue 18): the
//! replicas share nothing but etcd. Every replica gets every member as `--etcd-servers`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use listwatch_etcd::testing::EtcdCluster;

use super::Server;

/// etcd's `--experimental-watch-progress-notify-interval` when a test asks for it (the chaos
/// test follows docs/deployment.md's optional recommendation).
pub const PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_secs(1);

/// The progress interval of [`Replicas::start`]'s cluster: etcd's default (none: nothing
/// requires it, issue 26), or `$LISTWATCH_ETCD_PROGRESS_NOTIFY_MS` milliseconds, to run the
/// same tests with periodic progress notifications.
pub fn progress_notify_interval() -> Option<Duration> {
    std::env::var("LISTWATCH_ETCD_PROGRESS_NOTIFY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

/// A three-member etcd cluster and the replicas started over it.
pub struct Replicas {
    /// The replicas, in start order (dropping one kills it with SIGKILL).
    pub servers: Vec<Option<Server>>,
    /// The etcd cluster (members can be killed and restarted).
    pub etcd: EtcdCluster,
}

impl Replicas {
    /// Starts a three-member etcd cluster and `n` replicas on it, all at once (concurrent
    /// start-ups), each with `extra` flags. The members run etcd's default flags (no periodic
    /// watch progress) unless [`progress_notify_interval`] says otherwise: a watch from a
    /// version another replica handed out (a consistent list's, etcd's current revision)
    /// is accepted at once either way.
    pub async fn start(n: usize, extra: &[&str]) -> Self {
        let mut builder = EtcdCluster::builder();
        if let Some(every) = progress_notify_interval() {
            builder = builder.progress_notify_interval(every);
        }
        let etcd = builder.start(3).await.expect("a three-member etcd cluster");
        let mut replicas = Self {
            servers: Vec::new(),
            etcd,
        };
        let started = replicas.start_replicas(n, extra).await;
        replicas.servers = started.into_iter().map(Some).collect();
        replicas
    }

    /// The flags that point a replica at this cluster.
    pub fn etcd_flags(&self) -> Vec<String> {
        vec![
            "--storage".into(),
            "etcd".into(),
            "--etcd-servers".into(),
            self.etcd.endpoints().join(","),
        ]
    }

    /// Starts `n` more replicas at once (each in its own thread, so that their start-ups,
    /// bootstrap included, overlap) and returns them once each announced its address.
    pub async fn start_replicas(&self, n: usize, extra: &[&str]) -> Vec<Server> {
        let mut args = self.etcd_flags();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let args = args.clone();
                std::thread::spawn(move || {
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    Server::start(&refs)
                })
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            handles
                .into_iter()
                .map(|h| h.join().expect("a replica started"))
                .collect()
        })
        .await
        .unwrap()
    }

    /// Replica `i` (panics if it was killed).
    pub fn replica(&self, i: usize) -> &Server {
        self.servers[i].as_ref().expect("a running replica")
    }

    /// Kills replica `i` with SIGKILL and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        drop(self.servers[i].take());
    }
}
