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

/// Options of a test etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdServerBuilder {
    progress_notify_interval: Option<Duration>,
    binary: Option<String>,
}

impl EtcdServerBuilder {
    /// Sets etcd's periodic watch progress notification interval (default: etcd's 10 minutes).
    #[must_use]
    pub fn progress_notify_interval(mut self, d: Duration) -> Self {
        self.progress_notify_interval = Some(d);
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
            let mut server = EtcdServer::new(
                binary.clone(),
                dir,
                "test",
                ports[0],
                ports[1],
                None,
                self.progress_notify_interval,
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
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `n` members and waits until each is healthy.
    pub async fn start(n: usize) -> Result<Self, TestingError> {
        let binary = resolve_binary(None)?;
        let ports = free_ports(2 * n)?;
        let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let initial = names
            .iter()
            .zip(ports.chunks(2))
            .map(|(name, p)| format!("{name}=http://127.0.0.1:{}", p.get(1).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::with_capacity(n);
        for (name, p) in names.iter().zip(ports.chunks(2)) {
            let (Some(&client), Some(&peer)) = (p.first(), p.get(1)) else {
                break;
            };
            members.push(EtcdServer::new(
                binary.clone(),
                temp_dir()?,
                name,
                client,
                peer,
                Some(initial.clone()),
                None,
            ));
        }
        let mut cluster = Self { members };
        // Members need each other for a quorum: start them all, then wait.
        for m in &mut cluster.members {
            m.spawn()?;
        }
        for m in &mut cluster.members {
            m.wait_healthy().await?;
        }
        Ok(cluster)
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
    peer_port: u16,
    progress_notify_interval: Option<Duration>,
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

    fn new(
        binary: String,
        dir: tempfile::TempDir,
        name: &str,
        client_port: u16,
        peer_port: u16,
        initial_cluster: Option<String>,
        progress_notify_interval: Option<Duration>,
    ) -> Self {
        Self {
            binary,
            name: name.to_owned(),
            initial_cluster,
            dir: Some(dir),
            client_port,
            peer_port,
            progress_notify_interval,
            child: None,
            watchdog: None,
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
        let mut cmd = Command::new(&self.binary);
        let name = &self.name;
        let initial = self
            .initial_cluster
            .clone()
            .unwrap_or_else(|| format!("{name}={peer}"));
        cmd.arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={initial}"))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .arg("--log-level=warn");
        if let Some(i) = self.progress_notify_interval {
            cmd.arg(format!(
                "--experimental-watch-progress-notify-interval={}ms",
                i.as_millis()
            ));
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

/// Test timeouts: fail within seconds, not minutes.
pub fn test_config(endpoint: String) -> EtcdConfig {
    EtcdConfig::new([endpoint])
        .dial_timeout(Duration::from_secs(2))
        .keepalive(Duration::from_secs(1), Duration::from_secs(2))
        .request_timeout(Duration::from_secs(5))
        .health_timeout(Duration::from_secs(1))
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProxyState {
    /// Bytes are held, not forwarded.
    stalled: bool,
    /// Bumped to cut every open connection.
    generation: u64,
    /// When set, server-to-client bytes still let through before everything stalls.
    response_budget: Option<u64>,
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
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = cut(&mut rx, generation) => return,
        };
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
            let s = *rx.borrow_and_update();
            if s.generation != generation {
                return;
            }
            if !s.stalled {
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
