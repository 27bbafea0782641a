//! Test support (feature `test-util`): a throwaway etcd server and a TCP fault proxy.
//!
//! [`EtcdServer`] runs Debian's `etcd` (the `etcd-server` package; `$LISTWATCH_ETCD_BIN`
//! overrides the binary) on free loopback ports with a data directory in a temporary
//! directory (on `/dev/shm` when there is one, so fsync costs nothing), waits until it answers,
//! and kills it by PID when dropped — also when a test panics. A small watchdog process kills
//! it too if the test process dies without unwinding, so no etcd outlives its test run.
//!
//! [`EtcdCluster`] runs several such members as one cluster, to lose members and quorum.
//!
//! [`FaultProxy`] sits between a client and etcd and can stall or cut every connection, to
//! test what happens to lists and watches when the network misbehaves.

use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{EtcdClient, EtcdConfig};
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{StatusRequest, StatusResponse};

/// Why a test server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestingError {
    /// There is no etcd binary.
    #[error(
        "etcd binary {binary:?} not found: install Debian's etcd-server (`apt-get install etcd-server`) \
         or set LISTWATCH_ETCD_BIN"
    )]
    NotInstalled {
        /// The binary that was looked for.
        binary: String,
    },
    /// Spawning a process or making a directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// etcd started but never became healthy.
    #[error("etcd did not become healthy: {log_tail}")]
    NotHealthy {
        /// The end of etcd's log.
        log_tail: String,
    },
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> TestingError {
    move |source| TestingError::Io { what, source }
}

/// etcd flags a test may change; everything else is etcd's default.
#[derive(Debug, Clone, Default)]
struct MemberOptions {
    progress_notify_interval: Option<Duration>,
    quota_backend_bytes: Option<u64>,
}

impl MemberOptions {
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(i) = self.progress_notify_interval {
            args.push(format!(
                "--experimental-watch-progress-notify-interval={}ms",
                i.as_millis()
            ));
        }
        if let Some(q) = self.quota_backend_bytes {
            args.push(format!("--quota-backend-bytes={q}"));
        }
        args
    }
}

/// Options of a test etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdServerBuilder {
    options: MemberOptions,
    binary: Option<String>,
    client_port: Option<u16>,
}

impl EtcdServerBuilder {
    /// Sets etcd's periodic watch progress notification interval (default: etcd's 10 minutes).
    #[must_use]
    pub fn progress_notify_interval(mut self, d: Duration) -> Self {
        self.options.progress_notify_interval = Some(d);
        self
    }

    /// Sets etcd's backend quota (`--quota-backend-bytes`), to run it out of space.
    #[must_use]
    pub fn quota_backend_bytes(mut self, bytes: u64) -> Self {
        self.options.quota_backend_bytes = Some(bytes);
        self
    }

    /// Serves clients on this loopback port (default: a free one), e.g. one a server was
    /// told about before etcd started. Not retried on another port when taken.
    #[must_use]
    pub fn client_port(mut self, port: u16) -> Self {
        self.client_port = Some(port);
        self
    }

    /// Runs this binary (default: `$LISTWATCH_ETCD_BIN`, else `etcd` on `PATH`).
    #[must_use]
    pub fn binary(mut self, path: impl Into<String>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the server and waits until it is healthy.
    pub async fn start(self) -> Result<EtcdServer, TestingError> {
        let binary = resolve_binary(self.binary)?;
        let mut dir = temp_dir()?;
        let mut last = None;
        // A free port can be taken by someone else between probing and etcd binding it: retry.
        for _ in 0..3 {
            let ports = free_ports(2)?;
            let client = self.client_port.unwrap_or(ports[0]);
            let mut server = EtcdServer::new(
                binary.clone(),
                dir,
                "test",
                (client, ports[1], ports[1]),
                None,
                self.options.clone(),
            );
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.kill();
                    dir = server.dir.take().ok_or_else(|| TestingError::NotHealthy {
                        log_tail: "lost data dir".into(),
                    })?;
                    let _ = std::fs::remove_dir_all(dir.path().join("data"));
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(TestingError::NotHealthy {
            log_tail: String::new(),
        }))
    }
}

fn resolve_binary(explicit: Option<String>) -> Result<String, TestingError> {
    let binary = match explicit {
        Some(b) => b,
        None => std::env::var("LISTWATCH_ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned()),
    };
    if binary_exists(&binary) {
        Ok(binary)
    } else {
        Err(TestingError::NotInstalled { binary })
    }
}

/// A temporary directory on tmpfs when there is one (fsync is free there).
fn temp_dir() -> Result<tempfile::TempDir, TestingError> {
    let shm = Path::new("/dev/shm");
    let mut b = tempfile::Builder::new();
    b.prefix("listwatch-etcd-");
    if shm.is_dir() {
        b.tempdir_in(shm).or_else(|_| b.tempdir())
    } else {
        b.tempdir()
    }
    .map_err(io("creating etcd's temporary directory"))
}

/// A throwaway etcd cluster of several members on loopback; every member is killed when the
/// cluster is dropped.
///
/// Each member's peer traffic reaches it through a [`FaultProxy`] (the URL the other members
/// dial), so a test can cut a member off from its peers ([`EtcdCluster::isolate`]) while its
/// clients still reach it: the minority side of a partition. Members run with `--pre-vote`
/// (etcd 3.5's default), so an isolated member does not disrupt the majority when it returns.
/// etcd's election timeout (1 s) and heartbeat (100 ms) are left at their defaults.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
    /// Member `i`'s inbound peer proxy.
    peer_proxies: Vec<FaultProxy>,
}

/// Options of a test cluster.
#[derive(Debug, Clone, Default)]
pub struct EtcdClusterBuilder {
    options: MemberOptions,
}

impl EtcdClusterBuilder {
    /// Sets every member's periodic watch progress notification interval.
    #[must_use]
    pub fn progress_notify_interval(mut self, d: Duration) -> Self {
        self.options.progress_notify_interval = Some(d);
        self
    }

    /// Starts `n` members and waits until each is healthy.
    pub async fn start(self, n: usize) -> Result<EtcdCluster, TestingError> {
        let binary = resolve_binary(None)?;
        let mut last = None;
        // A free port can be taken by someone else (another test's etcd or server) between
        // probing and a member binding it, which fails that member's start: start the whole
        // cluster again on fresh ports, as `EtcdServerBuilder::start` does for one server.
        for _ in 0..3 {
            match self.try_start(&binary, n).await {
                Ok(cluster) => return Ok(cluster),
                // The members started so far are killed as `cluster` drops inside.
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(TestingError::NotHealthy {
            log_tail: String::new(),
        }))
    }

    async fn try_start(&self, binary: &str, n: usize) -> Result<EtcdCluster, TestingError> {
        let ports = free_ports(2 * n)?;
        let mut peer_proxies = Vec::with_capacity(n);
        for p in ports.chunks(2) {
            let peer = p.get(1).copied().unwrap_or(0);
            peer_proxies.push(FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], peer))).await?);
        }
        let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let initial = names
            .iter()
            .zip(&peer_proxies)
            .map(|(name, proxy)| format!("{name}={}", proxy.endpoint()))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::with_capacity(n);
        for ((name, p), proxy) in names.iter().zip(ports.chunks(2)).zip(&peer_proxies) {
            let (Some(&client), Some(&peer)) = (p.first(), p.get(1)) else {
                break;
            };
            let mut m = EtcdServer::new(
                binary.to_owned(),
                temp_dir()?,
                name,
                (client, peer, proxy.addr().port()),
                Some(initial.clone()),
                self.options.clone(),
            );
            m.pre_vote = true;
            members.push(m);
        }
        let mut cluster = EtcdCluster {
            members,
            peer_proxies,
        };
        // Members need each other for a quorum: start them all, then wait.
        for m in &mut cluster.members {
            m.spawn()?;
        }
        for m in &mut cluster.members {
            m.wait_healthy().await?;
        }
        Ok(cluster)
    }
}

impl EtcdCluster {
    /// Starts `n` members with default options and waits until each is healthy.
    pub async fn start(n: usize) -> Result<Self, TestingError> {
        EtcdClusterBuilder::default().start(n).await
    }

    /// Options for a cluster.
    pub fn builder() -> EtcdClusterBuilder {
        EtcdClusterBuilder::default()
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// A test configuration with every member as an endpoint.
    pub fn config(&self) -> EtcdConfig {
        let mut c = test_config(String::new());
        c.endpoints = self.endpoints();
        c
    }

    /// Member `i` (to kill or restart it).
    pub fn member(&mut self, i: usize) -> Option<&mut EtcdServer> {
        self.members.get_mut(i)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Cuts member `i` off from its peers in both directions while its clients still reach
    /// it: the minority side of a partition. Peer connections *to* it (its proxy) are held;
    /// connections it opens to the others (etcd's rafthttp streams carry messages both
    /// ways, and every request names its sender in `X-Server-From`) are refused by their
    /// proxies. It loses its leader after an election timeout.
    pub async fn isolate(&self, i: usize) -> Result<(), TestingError> {
        let member = self
            .members
            .get(i)
            .ok_or_else(|| TestingError::NotHealthy {
                log_tail: format!("no member {i}"),
            })?;
        let id = member
            .status()
            .await
            .ok()
            .and_then(|s| s.header)
            .map(|h| h.member_id)
            .ok_or_else(|| TestingError::NotHealthy {
                log_tail: format!("member {i} did not say its id"),
            })?;
        let marker = format!("X-Server-From: {id:x}");
        for (j, p) in self.peer_proxies.iter().enumerate() {
            if j == i {
                p.stall();
            } else {
                p.refuse_from(Some(marker.as_bytes()));
            }
            p.cut();
        }
        Ok(())
    }

    /// Ends every [`EtcdCluster::isolate`].
    pub fn heal(&self) {
        for p in &self.peer_proxies {
            p.refuse_from(None);
            p.resume();
            p.cut();
        }
    }

    /// The index of the member that is the leader, as the running members see it; `None`
    /// while there is none (bounded by the client's health timeout per member).
    pub async fn leader(&self) -> Option<usize> {
        for m in &self.members {
            if m.child.is_none() {
                continue;
            }
            let Ok(status) = m.status().await else {
                continue;
            };
            if status.leader == 0 {
                continue;
            }
            let mut ids = Vec::with_capacity(self.members.len());
            for other in &self.members {
                let id = match other.status().await {
                    Ok(s) => s.header.map_or(0, |h| h.member_id),
                    Err(_) => 0,
                };
                ids.push(id);
            }
            return ids.iter().position(|id| *id == status.leader);
        }
        None
    }

    /// Waits (bounded by `within`) until some member is leader; returns its index.
    pub async fn wait_for_leader(&self, within: Duration) -> Option<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(l) = self.leader().await {
                return Some(l);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A running throwaway etcd; killed (SIGKILL, by PID) when dropped.
#[derive(Debug)]
pub struct EtcdServer {
    binary: String,
    /// The member name.
    name: String,
    /// `--initial-cluster`; `None` for a single member.
    initial_cluster: Option<String>,
    /// Holds etcd's data directory and log; removed on drop after etcd is dead.
    dir: Option<tempfile::TempDir>,
    client_port: u16,
    /// Where etcd listens for peers.
    peer_port: u16,
    /// The peer URL other members dial (a cluster's peer proxy; else `peer_port`).
    advertised_peer_port: u16,
    options: MemberOptions,
    /// `--pre-vote` (cluster members).
    pre_vote: bool,
    /// The etcd process while it runs.
    child: Option<Child>,
    /// Kills etcd if this process dies without running `Drop`.
    watchdog: Option<Child>,
}

impl EtcdServer {
    /// Starts a server with default options.
    pub async fn start() -> Result<Self, TestingError> {
        EtcdServerBuilder::default().start().await
    }

    /// Options for a server.
    pub fn builder() -> EtcdServerBuilder {
        EtcdServerBuilder::default()
    }

    /// The client URL, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// The temporary directory holding etcd's data and log.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(tempfile::TempDir::path)
    }

    /// The etcd process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A configuration for this server with timeouts short enough for tests.
    pub fn config(&self) -> EtcdConfig {
        test_config(self.endpoint())
    }

    /// A client for this server (see [`EtcdServer::config`]).
    pub fn client(&self) -> EtcdClient {
        // A URL built from a port always parses.
        #[allow(clippy::expect_used)]
        EtcdClient::new(self.config()).expect("a loopback endpoint is valid")
    }

    /// Kills etcd with SIGKILL (no clean shutdown) and waits for it to die.
    pub fn kill(&mut self) {
        // The watchdog first, so that it never sees etcd gone and tidies up a data directory
        // that a restart will use.
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts etcd again on the same ports and data (after [`EtcdServer::kill`]).
    pub async fn restart(&mut self) -> Result<(), TestingError> {
        self.kill();
        self.launch().await
    }

    /// `ports`: client, peer (listened on), peer (advertised).
    fn new(
        binary: String,
        dir: tempfile::TempDir,
        name: &str,
        ports: (u16, u16, u16),
        initial_cluster: Option<String>,
        options: MemberOptions,
    ) -> Self {
        let (client_port, peer_port, advertised_peer_port) = ports;
        Self {
            binary,
            name: name.to_owned(),
            initial_cluster,
            dir: Some(dir),
            client_port,
            peer_port,
            advertised_peer_port,
            options,
            pre_vote: false,
            child: None,
            watchdog: None,
        }
    }

    /// Whether the etcd process runs (it was not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// This member's Maintenance Status, asked of it alone (bounded by the test health
    /// timeout).
    pub async fn status(&self) -> Result<StatusResponse, tonic::Status> {
        let channel = tonic::transport::Endpoint::from_shared(self.endpoint())
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
            .connect_timeout(Duration::from_secs(1));
        let call = async {
            let channel = channel
                .connect()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            MaintenanceClient::new(channel)
                .status(StatusRequest {})
                .await
        };
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded("status timed out")),
        }
    }

    fn log_path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().join("etcd.log"))
    }

    async fn launch(&mut self) -> Result<(), TestingError> {
        self.spawn()?;
        self.wait_healthy().await
    }

    fn spawn(&mut self) -> Result<(), TestingError> {
        let dir = self
            .dir
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .ok_or_else(|| TestingError::NotHealthy {
                log_tail: "no data directory".into(),
            })?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .map_err(io("opening etcd's log"))?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let advertised = format!("http://127.0.0.1:{}", self.advertised_peer_port);
        let mut cmd = Command::new(&self.binary);
        let name = &self.name;
        let initial = self
            .initial_cluster
            .clone()
            .unwrap_or_else(|| format!("{name}={advertised}"));
        cmd.arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={advertised}"))
            .arg(format!("--initial-cluster={initial}"))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .arg("--log-level=warn")
            .args(self.options.args());
        if self.pre_vote {
            cmd.arg("--pre-vote=true");
        }
        let stderr = log.try_clone().map_err(io("opening etcd's log"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(io("spawning etcd"))?;
        let pid = child.id();
        self.child = Some(child);
        self.watchdog = spawn_watchdog(pid, &dir);
        Ok(())
    }

    async fn wait_healthy(&mut self) -> Result<(), TestingError> {
        let client = self.client();
        for _ in 0..200 {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(TestingError::NotHealthy {
                    log_tail: format!("etcd exited ({status}): {}", self.log_tail()),
                });
            }
            if client.health().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(TestingError::NotHealthy {
            log_tail: self.log_tail(),
        })
    }

    fn log_tail(&self) -> String {
        let text = self
            .log_path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let start = text.len().saturating_sub(2000);
        text.get(start..).unwrap_or_default().to_owned()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Test timeouts: dialing, requests and health probes fail within seconds, not minutes.
/// Keepalive stays at the production values ([`EtcdConfig::default`]): etcd answers pings
/// more often than its `--grpc-keepalive-min-time` (5 s) with GOAWAY after three of them,
/// which would end every connection of a test after a few seconds — a lifecycle production
/// never sees. A test that needs a silent connection detected sooner sets the shortest
/// interval etcd permits ([`MIN_KEEPALIVE_INTERVAL`]).
pub fn test_config(endpoint: String) -> EtcdConfig {
    EtcdConfig::new([endpoint])
        .dial_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(5))
        .health_timeout(Duration::from_secs(1))
}

/// etcd's default `--grpc-keepalive-min-time`: the shortest keepalive interval it tolerates.
pub const MIN_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

fn binary_exists(binary: &str) -> bool {
    if binary.contains('/') {
        return Path::new(binary).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(binary).is_file()))
}

/// `n` distinct free ports (all held while probing, so they cannot repeat).
fn free_ports(n: usize) -> Result<Vec<u16>, TestingError> {
    let listeners = (0..n)
        .map(|_| StdTcpListener::bind("127.0.0.1:0").map_err(io("finding a free port")))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(io("finding a free port"))
        })
        .collect()
}

/// A shell loop that, once this process is gone without running `Drop` (a crash, a signal),
/// kills etcd and removes its temporary directory.
fn spawn_watchdog(etcd_pid: u32, dir: &Path) -> Option<Child> {
    const SCRIPT: &str = r#"
        while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
        if ! kill -0 "$1" 2>/dev/null; then
            kill -9 "$2" 2>/dev/null
            sleep 1
            rm -rf "$3"
        fi
    "#;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("watchdog")
        .arg(std::process::id().to_string())
        .arg(etcd_pid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProxyState {
    /// Bytes are held, not forwarded.
    stalled: bool,
    /// Bumped to cut every open connection.
    generation: u64,
    /// When set, server-to-client bytes still let through before everything stalls.
    response_budget: Option<u64>,
    /// Connections whose first client bytes contain this are closed at once.
    refused: Option<Arc<[u8]>>,
}

/// A TCP proxy that can stall or cut connections (see the module docs).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<ProxyState>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self, TestingError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("binding the proxy"))?;
        let addr = listener.local_addr().map_err(io("binding the proxy"))?;
        let (tx, _) = watch::channel(ProxyState {
            stalled: false,
            generation: 0,
            response_budget: None,
            refused: None,
        });
        let state = Arc::new(tx);
        let st = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let generation = st.borrow().generation;
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    let a = pump(ri, wo, Arc::clone(&st), generation, false);
                    let b = pump(ro, wi, st, generation, true);
                    // When either direction ends, drop both: the connection is cut.
                    tokio::select! {
                        () = a => {}
                        () = b => {}
                    }
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Holds every byte in flight until [`FaultProxy::resume`] (a silent network).
    pub fn stall(&self) {
        self.state.send_modify(|s| s.stalled = true);
    }

    /// Lets `bytes` more of the server's answers through, then stalls everything: a stall in
    /// the middle of a response.
    pub fn stall_responses_after(&self, bytes: u64) {
        self.state.send_modify(|s| s.response_budget = Some(bytes));
    }

    /// Forwards again.
    pub fn resume(&self) {
        self.state.send_modify(|s| {
            s.stalled = false;
            s.response_budget = None;
        });
    }

    /// Closes, from now on, every connection whose first bytes from the client contain
    /// `marker` (e.g. an HTTP header naming the sender); `None` accepts all again. Open
    /// connections are not affected until [`FaultProxy::cut`].
    pub fn refuse_from(&self, marker: Option<&[u8]>) {
        self.state
            .send_modify(|s| s.refused = marker.map(Arc::from));
    }

    /// Closes every open connection (new ones are accepted).
    pub fn cut(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

async fn pump<R, W>(
    mut from: R,
    mut to: W,
    state: Arc<watch::Sender<ProxyState>>,
    generation: u64,
    responses: bool,
) where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut rx = state.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    let mut first = !responses;
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = cut(&mut rx, generation) => return,
        };
        if std::mem::take(&mut first) {
            let refused = state.borrow().refused.clone();
            if let (Some(marker), Some(read)) = (refused, buf.get(..n))
                && !marker.is_empty()
                && read.windows(marker.len()).any(|w| w == &marker[..])
            {
                return;
            }
        }
        let mut sent = 0;
        if responses {
            // Spend the response budget, if any; running out stalls the proxy.
            let mut allowed = n;
            state.send_if_modified(|s| match s.response_budget {
                Some(b) => {
                    allowed = n.min(usize::try_from(b).unwrap_or(usize::MAX));
                    let left = b.saturating_sub(allowed as u64);
                    if allowed < n || left == 0 {
                        s.response_budget = None;
                        s.stalled = true;
                    } else {
                        s.response_budget = Some(left);
                    }
                    true
                }
                None => false,
            });
            if allowed < n {
                if to.write_all(&buf[..allowed]).await.is_err() {
                    return;
                }
                sent = allowed;
            }
        }
        loop {
            let (gen_now, stalled) = {
                let s = rx.borrow_and_update();
                (s.generation, s.stalled)
            };
            if gen_now != generation {
                return;
            }
            if !stalled {
                break;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[sent..n]).await.is_err() {
            return;
        }
    }
}

async fn cut(rx: &mut watch::Receiver<ProxyState>, generation: u64) {
    loop {
        if rx.borrow_and_update().generation != generation {
            return;
        }
        if rx.changed().await.is_err() {
            // The proxy is gone: end the connection.
            return;
        }
    }
}
