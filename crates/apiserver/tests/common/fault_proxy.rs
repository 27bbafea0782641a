//! A TCP proxy for fault injection between a client and a server: it listens on one
//! loopback port for its whole life, relays each connection to the current target, and on
//! command cuts every relayed connection ([`FaultProxy::cut`]: watches end mid-stream),
//! refuses new ones ([`FaultProxy::partition`]: the client is cut off from the server until
//! [`FaultProxy::heal`]), or moves to another target ([`FaultProxy::retarget`]: a server
//! restarted on another port). Needs a tokio runtime.

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

#[derive(Default)]
struct State {
    target: String,
    open: bool,
    connections: JoinSet<()>,
    cuts: u64,
}

/// See the module doc. Dropping it stops listening and cuts every connection.
pub struct FaultProxy {
    port: u16,
    state: Arc<Mutex<State>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy to `target` (`host:port`), open.
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            target: target.to_owned(),
            open: true,
            ..State::default()
        }));
        let s = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let (open, target) = {
                    let st = s.lock().unwrap();
                    (st.open, st.target.clone())
                };
                if !open {
                    // Partitioned: the connection is closed at once.
                    drop(down);
                    continue;
                }
                let mut st = s.lock().unwrap();
                // Reap finished relays so the set does not grow.
                while st.connections.try_join_next().is_some() {}
                st.connections.spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        });
        Self {
            port,
            state,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Cuts every relayed connection (new ones are relayed again).
    pub fn cut(&self) {
        let mut st = self.state.lock().unwrap();
        st.connections.abort_all();
        st.cuts += 1;
    }

    /// How many times [`cut`](Self::cut) ran.
    pub fn cuts(&self) -> u64 {
        self.state.lock().unwrap().cuts
    }

    /// Cuts every connection and closes new ones at once until [`heal`](Self::heal).
    pub fn partition(&self) {
        self.state.lock().unwrap().open = false;
        self.cut();
    }

    /// Relays new connections again.
    pub fn heal(&self) {
        self.state.lock().unwrap().open = true;
    }

    /// Relays new connections to `target` from now on (and cuts the old ones).
    pub fn retarget(&self, target: &str) {
        target.clone_into(&mut self.state.lock().unwrap().target);
        self.cut();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.state.lock().unwrap().connections.abort_all();
    }
}
