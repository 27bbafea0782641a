//! The bare baseline of the write path (scenario W2 of docs/benchmarks.md): the simplest
//! program that does a pod write's I/O — hyper reads the request, serde_json parses it, a
//! map keeps the object with a revision, the object is written back — and nothing else (no
//! validation, defaulting, managedFields, admission, watch cache, flow control, metrics).
//!
//! It answers `POST /api/v1/namespaces/NS/pods` (201), `GET` and merge `PATCH` (RFC 7386) of
//! `/api/v1/namespaces/NS/pods/NAME` (200; 404 when missing, 409 on a taken name) and
//! `/readyz`. It is started as the load generator starts the apiserver (`--bind ADDR`; every
//! other flag is ignored) and prints `listening on http://ADDR` once it listens. Not a server
//! to run: it trusts its one client, bounds nothing and keeps every object forever.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// The stored objects by `NS/NAME`: the object and its encoding as last written.
#[derive(Default)]
struct State {
    objects: Mutex<HashMap<String, (Value, Bytes)>>,
    revision: AtomicU64,
}

fn answer(code: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    answer(code, Bytes::new())
}

/// RFC 7386: `patch` merged into `target`.
fn merge(target: &mut Value, patch: Value) {
    let Value::Object(p) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(&k);
            } else {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
    }
}

/// Sets the object's `metadata.resourceVersion` to the next revision and encodes it.
fn stamp(state: &State, obj: &mut Value) -> Option<Bytes> {
    let rev = state.revision.fetch_add(1, Ordering::Relaxed) + 1;
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    meta.insert("resourceVersion".into(), Value::String(rev.to_string()));
    serde_json::to_vec(obj).ok().map(Bytes::from)
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    if path == "/readyz" {
        return Ok(answer(StatusCode::OK, Bytes::from_static(b"ok")));
    }
    let Some(rest) = path.strip_prefix("/api/v1/namespaces/") else {
        return Ok(status(StatusCode::NOT_FOUND));
    };
    let mut parts = rest.split('/');
    let (ns, pods, name) = (parts.next(), parts.next(), parts.next());
    if pods != Some("pods") {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    let method = req.method().clone();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let ns = ns.unwrap_or_default();
    Ok(match (method, name) {
        (Method::POST, None) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
                return Ok(status(StatusCode::UNPROCESSABLE_ENTITY));
            };
            let key = format!("{ns}/{name}");
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            if objects.contains_key(&key) {
                return Ok(status(StatusCode::CONFLICT));
            }
            let Some(bytes) = stamp(&state, &mut obj) else {
                return Ok(status(StatusCode::UNPROCESSABLE_ENTITY));
            };
            objects.insert(key, (obj, bytes.clone()));
            answer(StatusCode::CREATED, bytes)
        }
        (Method::GET, Some(name)) => {
            let objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            match objects.get(&format!("{ns}/{name}")) {
                Some((_, bytes)) => answer(StatusCode::OK, bytes.clone()),
                None => status(StatusCode::NOT_FOUND),
            }
        }
        (Method::PATCH, Some(name)) => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            let Some((obj, bytes)) = objects.get_mut(&format!("{ns}/{name}")) else {
                return Ok(status(StatusCode::NOT_FOUND));
            };
            merge(obj, patch);
            let Some(b) = stamp(&state, obj) else {
                return Ok(status(StatusCode::UNPROCESSABLE_ENTITY));
            };
            *bytes = b.clone();
            answer(StatusCode::OK, b)
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED),
    })
}

fn main() -> std::io::Result<()> {
    let mut bind = "127.0.0.1:0".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bind" => bind = args.next().unwrap_or(bind),
            "-h" | "--help" => {
                println!("usage: write-bare [--bind ADDR]  (other flags are ignored)");
                return Ok(());
            }
            _ => {}
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&bind).await?;
        println!("listening on http://{}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let state = Arc::new(State::default());
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(Arc::clone(&state), req));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}
