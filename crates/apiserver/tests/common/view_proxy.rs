//! An HTTP/1.1 proxy that perturbs what a controller sees of the server, in the style of Sieve
//! (OSDI'22, "Automatic Reliability Testing for Cluster Management Controllers"): it relays
//! every request of the controller to the server and, on command,
//!
//! - serves a **stale view** of one object ([`ViewProxy::freeze`]): a GET of it answers the
//!   copy it was given, a LIST of its resource carries that copy in its place (or adds it),
//!   and watch events of it are dropped, as a second, lagging server would serve it — on the
//!   reads such a server may answer from its cache: those naming a `resourceVersion` (`0`
//!   is "any") and watches. A consistent read (GET or LIST without `resourceVersion`, a
//!   streaming list with `sendInitialEvents=true` and no `resourceVersion`) is served
//!   fresh, as kube-apiserver serves it from etcd or from a cache it first brings up to
//!   date;
//!   [`ViewProxy::thaw`] then points the controller at the fresh server: every watch is
//!   ended and the next watch of each resource answered 410 Gone, so the reflectors relist;
//! - **pauses** one object's watch events ([`ViewProxy::pause`]): they are dropped until
//!   [`ViewProxy::deliver_next`], after which the next event of it passes, so the controller
//!   sees only the later state;
//! - **withholds the answer of the controller's k-th write** ([`ViewProxy::kill_after_write`]):
//!   the write reaches the server, the proxy reports it ([`ViewProxy::killed`]) and the
//!   controller never gets the answer (the test then aborts it: a crash right after the write).
//!
//! It keeps the controller's **write history** ([`ViewProxy::writes`]): every request other
//! than GET (Lease writes excluded: they are leader election's, not the controller's), with its
//! JSON body and the status the server answered.
//!
//! Invariants: the controller's requests reach the server unchanged except `Accept-Encoding`
//! (dropped, so that bodies can be read); request bodies are read up to [`MAX_BODY`], list
//! bodies too, watch lines up to [`MAX_BODY`] each; every wait is bounded by
//! [`super::PATIENCE`]; dropping the proxy stops it and every relayed connection. Needs a
//! tokio runtime. Plain HTTP only (what the tests' servers speak).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use super::PATIENCE;

/// The largest request or list body, and the longest watch line, the proxy reads.
pub const MAX_BODY: usize = 16 << 20;

type Body = BoxBody<Bytes, hyper::Error>;

/// One object: its resource (plural), namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(resource: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn matches(&self, resource: &str, object: &Value) -> bool {
        resource == self.resource
            && object["metadata"]["name"].as_str() == Some(self.name.as_str())
            && object["metadata"]["namespace"].as_str() == self.namespace.as_deref()
    }
}

/// One write of the controller, as the server answered it.
#[derive(Clone, Debug)]
pub struct Write {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The request body (JSON), or `Null`.
    pub body: Value,
    pub status: u16,
}

#[derive(Default)]
struct State {
    target: String,
    frozen: HashMap<ObjectRef, Value>,
    /// Resources whose next watch is answered 410 Gone.
    expire_next_watch: HashSet<String>,
    paused: HashMap<ObjectRef, Pause>,
    /// Watch events dropped by a pause.
    dropped: u64,
    writes: Vec<Write>,
    /// Successful writes so far, and the one whose answer is withheld.
    successful: u64,
    kill_after: Option<u64>,
    killed: bool,
    /// How many items the last LIST of each resource carried, as answered.
    listed: HashMap<String, usize>,
    /// Raised by a thaw: every open watch ends.
    thaws: Option<tokio::sync::watch::Sender<u64>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pause {
    Dropping,
    DeliverNext,
}

/// See the module doc. Dropping it stops listening and ends every relayed connection.
pub struct ViewProxy {
    port: u16,
    state: Arc<Mutex<State>>,
    killed: Arc<Notify>,
    accept: tokio::task::JoinHandle<()>,
}

impl ViewProxy {
    /// A proxy to `target` (`host:port`) that perturbs nothing yet.
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            target: target.to_owned(),
            thaws: Some(tokio::sync::watch::Sender::new(0)),
            ..State::default()
        }));
        let killed = Arc::new(Notify::new());
        let upstream: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let (s, k) = (Arc::clone(&state), Arc::clone(&killed));
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while connections.try_join_next().is_some() {}
                let (s, k, upstream) = (Arc::clone(&s), Arc::clone(&k), upstream.clone());
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        relay(Arc::clone(&s), Arc::clone(&k), upstream.clone(), req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            port,
            state,
            killed,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Serves `stale` as `object` (see the module doc) until [`thaw`](Self::thaw).
    pub fn freeze(&self, object: ObjectRef, stale: Value) {
        let mut st = self.state.lock().unwrap();
        st.listed.remove(&object.resource);
        st.frozen.insert(object, stale);
    }

    /// How many items the last LIST of `resource` answered carried (since the last
    /// [`freeze`](Self::freeze) of one of its objects).
    pub fn listed(&self, resource: &str) -> Option<usize> {
        self.state.lock().unwrap().listed.get(resource).copied()
    }

    /// Serves every object fresh again: ends every watch and answers the next watch of each
    /// frozen object's resource 410 Gone, so the controller relists from the server.
    pub fn thaw(&self) {
        let mut st = self.state.lock().unwrap();
        let resources: Vec<String> = st.frozen.keys().map(|o| o.resource.clone()).collect();
        st.frozen.clear();
        st.expire_next_watch.extend(resources);
        if let Some(t) = &st.thaws {
            t.send_modify(|n| *n += 1);
        }
    }

    /// Drops the watch events of `object` until [`deliver_next`](Self::deliver_next).
    pub fn pause(&self, object: ObjectRef) {
        self.state
            .lock()
            .unwrap()
            .paused
            .insert(object, Pause::Dropping);
    }

    /// Lets the next watch event of `object` pass, and every one after it.
    pub fn deliver_next(&self, object: &ObjectRef) {
        if let Some(p) = self.state.lock().unwrap().paused.get_mut(object) {
            *p = Pause::DeliverNext;
        }
    }

    /// How many watch events pauses dropped.
    pub fn dropped(&self) -> u64 {
        self.state.lock().unwrap().dropped
    }

    /// Withholds the answer of the `k`-th successful write (1-based) from the controller.
    pub fn kill_after_write(&self, k: u64) {
        self.state.lock().unwrap().kill_after = Some(k);
    }

    /// Waits until the write of [`kill_after_write`](Self::kill_after_write) reached the
    /// server; `false` when the controller made fewer writes within [`PATIENCE`].
    pub async fn killed(&self) -> bool {
        let notified = self.killed.notified();
        if self.state.lock().unwrap().killed {
            return true;
        }
        tokio::time::timeout(PATIENCE, notified).await.is_ok()
    }

    /// Whether the write of [`kill_after_write`](Self::kill_after_write) came.
    pub fn hit(&self) -> bool {
        self.state.lock().unwrap().killed
    }

    /// Every write of the controller so far, in the order the server answered them.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// How many writes the server accepted (2xx).
    pub fn successful_writes(&self) -> u64 {
        self.state.lock().unwrap().successful
    }
}

impl Drop for ViewProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Ends every relayed watch.
        self.state.lock().unwrap().thaws = None;
    }
}

/// The resource (plural) a path names, and the object's name when it names one:
/// `/api/v1/namespaces/ns/configmaps/x` → (`configmaps`, `Some(x)`).
fn resource_of(path: &str) -> Option<(String, Option<String>)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first().copied() {
        Some("api") => segments.get(2..)?,
        Some("apis") => segments.get(3..)?,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [resource] => Some(((*resource).to_owned(), None)),
        [resource, name, ..] => Some(((*resource).to_owned(), Some((*name).to_owned()))),
        [] => None,
    }
}

fn full(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut res = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}

/// The value of query parameter `key`, if present.
fn param<'q>(query: &'q str, key: &str) -> Option<&'q str> {
    query.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

fn is_watch(query: &str) -> bool {
    matches!(param(query, "watch"), Some("true" | "1"))
}

/// Whether a read must be served fresh (see the module doc).
fn is_consistent(query: &str) -> bool {
    let no_version = param(query, "resourceVersion").is_none_or(str::is_empty);
    if is_watch(query) {
        no_version && param(query, "sendInitialEvents") == Some("true")
    } else {
        no_version
    }
}

async fn relay(
    state: Arc<Mutex<State>>,
    killed: Arc<Notify>,
    upstream: Client<HttpConnector, Full<Bytes>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let resource = resource_of(&path);
    let watch = is_watch(&query);
    let consistent = is_consistent(&query);
    let method = parts.method.as_str().to_owned();
    // A stale view: GET of the frozen object, 410 for the first watch after a thaw.
    {
        let mut st = state.lock().unwrap();
        if let (Some((res, name)), "GET") = (&resource, method.as_str()) {
            if watch && st.expire_next_watch.remove(res) {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Expired", "code": 410, "message": "too old resource version (view proxy)"});
                return Ok(full(410, status.to_string().into_bytes()));
            }
            if let (Some(name), false) = (name, consistent) {
                let stale = st.frozen.iter().find(|(o, _)| {
                    &o.resource == res
                        && &o.name == name
                        && path.contains(&format!(
                            "/namespaces/{}/",
                            o.namespace.as_deref().unwrap_or_default()
                        ))
                });
                if let Some((_, stale)) = stale {
                    return Ok(full(200, stale.to_string().into_bytes()));
                }
            }
        }
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(full(413, Vec::new())),
    };
    let target = state.lock().unwrap().target.clone();
    let Ok(uri) = format!("http://{target}{}", parts.uri).parse::<hyper::Uri>() else {
        return Ok(full(400, Vec::new()));
    };
    parts.uri = uri;
    parts.headers.remove(hyper::header::ACCEPT_ENCODING);
    parts.headers.remove(hyper::header::HOST);
    let request_body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let res = match tokio::time::timeout(
        PATIENCE,
        upstream.request(Request::from_parts(parts, Full::new(body))),
    )
    .await
    {
        Ok(Ok(res)) => res,
        _ => return Ok(full(502, Vec::new())),
    };
    let status = res.status().as_u16();
    if method != "GET" && !path.contains("/leases") {
        let withhold = {
            let mut st = state.lock().unwrap();
            st.writes.push(Write {
                method: method.clone(),
                path: path.clone(),
                body: request_body,
                status,
            });
            if status < 300 {
                st.successful += 1;
            }
            let hit = status < 300 && st.kill_after == Some(st.successful);
            if hit {
                st.killed = true;
            }
            hit
        };
        if withhold {
            killed.notify_waiters();
            // The controller is aborted now; its answer never comes.
            tokio::time::sleep(PATIENCE).await;
            return Ok(full(503, Vec::new()));
        }
    }
    let (parts, body) = res.into_parts();
    match resource {
        Some((res, None)) if method == "GET" && watch && status == 200 => {
            let stale = !consistent;
            Ok(Response::from_parts(
                parts,
                watch_body(state, res, stale, body),
            ))
        }
        Some((res, None)) if method == "GET" && status == 200 => {
            let Ok(list) = Limited::new(body, MAX_BODY).collect().await else {
                return Ok(full(502, Vec::new()));
            };
            let list = list.to_bytes();
            let out = (!consistent)
                .then(|| stale_list(&state, &res, &list))
                .flatten()
                .unwrap_or_else(|| list.to_vec());
            let items = serde_json::from_slice::<Value>(&out)
                .ok()
                .and_then(|l| l["items"].as_array().map(Vec::len));
            if let Some(n) = items {
                state.lock().unwrap().listed.insert(res.clone(), n);
            }
            let mut r = full(200, out);
            *r.headers_mut() = parts.headers;
            r.headers_mut().remove(hyper::header::CONTENT_LENGTH);
            Ok(r)
        }
        _ => Ok(Response::from_parts(parts, body.boxed())),
    }
}

/// `list` with the frozen objects of `resource` in place of the server's copies, or `None`
/// when nothing of it is frozen (or it is not a JSON list).
fn stale_list(state: &Mutex<State>, resource: &str, list: &[u8]) -> Option<Vec<u8>> {
    let frozen: Vec<(ObjectRef, Value)> = state
        .lock()
        .unwrap()
        .frozen
        .iter()
        .filter(|(o, _)| o.resource == resource)
        .map(|(o, v)| (o.clone(), v.clone()))
        .collect();
    if frozen.is_empty() {
        return None;
    }
    let mut list: Value = serde_json::from_slice(list).ok()?;
    let items = list["items"].as_array_mut()?;
    for (object, stale) in frozen {
        match items.iter_mut().find(|i| object.matches(resource, i)) {
            Some(item) => *item = stale,
            None => items.push(stale),
        }
    }
    Some(list.to_string().into_bytes())
}

/// Relays a watch body line by line, dropping the lines of frozen or paused objects; ends
/// when the server's body ends, a thaw ends every watch, or the proxy is dropped.
fn watch_body(state: Arc<Mutex<State>>, resource: String, stale: bool, body: Incoming) -> Body {
    let (tx, mut rx) = mpsc::channel::<Frame<Bytes>>(64);
    let thaws = state.lock().unwrap().thaws.as_ref().map(|t| t.subscribe());
    tokio::spawn(async move {
        let Some(mut thaws) = thaws else { return };
        let mut body = body;
        let mut line = Vec::new();
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = thaws.changed() => return,
            };
            let Some(Ok(frame)) = frame else { return };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for chunk in data.split_inclusive(|b| *b == b'\n') {
                line.extend_from_slice(chunk);
                if line.len() > MAX_BODY {
                    return;
                }
                if !line.ends_with(b"\n") {
                    continue;
                }
                let keep = keep_event(&state, &resource, stale, &line);
                let out = std::mem::take(&mut line);
                if keep && tx.send(Frame::data(Bytes::from(out))).await.is_err() {
                    return;
                }
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|f| f.map(Ok)));
    StreamBody::new(stream).boxed()
}

/// Whether a watch event line of `resource` reaches the controller (`stale`: the watch may
/// lag, so frozen objects' events are dropped).
fn keep_event(state: &Mutex<State>, resource: &str, stale: bool, line: &[u8]) -> bool {
    let Ok(event) = serde_json::from_slice::<Value>(line) else {
        return true;
    };
    let object = &event["object"];
    let mut st = state.lock().unwrap();
    if stale && st.frozen.keys().any(|o| o.matches(resource, object)) {
        return false;
    }
    let paused = st
        .paused
        .iter()
        .find(|(o, _)| o.matches(resource, object))
        .map(|(o, p)| (o.clone(), *p));
    match paused {
        Some((_, Pause::Dropping)) => {
            st.dropped += 1;
            false
        }
        Some((o, Pause::DeliverNext)) => {
            st.paused.remove(&o);
            true
        }
        None => true,
    }
}
