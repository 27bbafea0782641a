//! `/healthz`, `/livez` and `/readyz`, as upstream's `k8s.io/apiserver/pkg/server/healthz`:
//! a root endpoint per kind, public (anonymous callers may read it), and one endpoint per
//! check (`/readyz/storage`), which needs its own permission.
//!
//! The root endpoints never say why a check fails: a failing check is the line
//! `[-]NAME failed: reason withheld`, every check is listed on failure or with `?verbose`,
//! and `?exclude=NAME` (repeatable) skips a check. The reason is served only by the check's
//! own path (`internal server error: REASON`, 500) — upstream's "if someone wants more
//! detail they should have explicit permission to the detailed checks" — and logged at
//! debug level.
//!
//! Checks: `/readyz` — `ping`, `shutdown` (fails once a drain or shutdown began), `start-up`
//! (fails while start-up waits, [`crate::Api::set_waiting_for`]), `storage` (fails while a
//! resource's storage is not ready), then `poststarthook/<name>` for each post-start hook the
//! embedder added ([`crate::Api::add_post_start_hook`]: fails until the hook is done);
//! `/livez` and `/healthz` — `ping` (the process is
//! alive; a server waiting for its storage is alive and retrying, so a supervisor must not
//! restart it).
//!
//! Invariant: no response of a root endpoint carries a check's failure reason.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::ErrorResponse;
use crate::Shared;
use crate::error::ApiError;

/// Which endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `/healthz`.
    Healthz,
    /// `/livez`.
    Livez,
    /// `/readyz`.
    Readyz,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Healthz => "healthz",
            Kind::Livez => "livez",
            Kind::Readyz => "readyz",
        }
    }

    fn fixed_checks(self) -> &'static [&'static str] {
        match self {
            Kind::Healthz | Kind::Livez => &["ping"],
            Kind::Readyz => &["ping", "shutdown", "start-up", "storage"],
        }
    }

    /// The fixed checks, then (for `/readyz`) `poststarthook/<name>` for each post-start
    /// hook in the order added.
    fn checks(self, shared: &Shared) -> Vec<String> {
        let mut out: Vec<String> = self
            .fixed_checks()
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        if self == Kind::Readyz {
            let hooks = shared
                .post_start
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            out.extend(hooks.iter().map(|(n, _)| format!("{POST_START_PREFIX}{n}")));
        }
        out
    }
}

/// The prefix of a post-start hook's check.
const POST_START_PREFIX: &str = "poststarthook/";

/// Runs one check: `Err(reason)` when it fails.
async fn run(shared: &Shared, check: &str) -> Result<(), String> {
    match check {
        "shutdown" => {
            if shared.shutting_down() || shared.draining.load(std::sync::atomic::Ordering::Relaxed)
            {
                Err("shutting down".into())
            } else {
                Ok(())
            }
        }
        "start-up" => match shared.waiting_for.borrow().as_ref() {
            Some(reason) => Err(format!("start-up is waiting: {reason}")),
            None => Ok(()),
        },
        "storage" => {
            for r in shared.kinds().iter() {
                if let Err(e) = r.storage.readiness().await {
                    return Err(format!("{}: {e}", r.info.qualified_resource()));
                }
            }
            Ok(())
        }
        other => match other.strip_prefix(POST_START_PREFIX) {
            Some(hook) => {
                let done = shared
                    .post_start
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .find(|(n, _)| n == hook)
                    .is_some_and(|(_, rx)| *rx.borrow());
                if done {
                    Ok(())
                } else {
                    Err("not finished".into())
                }
            }
            None => Ok(()),
        },
    }
}

fn text(code: StatusCode, body: String) -> Response {
    let mut resp = (code, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// The root endpoint of `kind`.
pub(crate) async fn root(shared: &Shared, kind: Kind, query: Option<&str>) -> Response {
    let mut excluded: Vec<String> = Vec::new();
    let mut verbose = false;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "verbose" => verbose = true,
            // Bounded by the request line; each name is compared, never stored beyond it.
            "exclude" => excluded.push(v.trim().to_owned()),
            _ => {}
        }
    }
    let mut out = String::new();
    let mut failed: Vec<String> = Vec::new();
    for check in kind.checks(shared) {
        let check = check.as_str();
        if let Some(i) = excluded.iter().position(|e| e == check) {
            excluded.swap_remove(i);
            let _ = writeln!(out, "[+]{check} excluded: ok");
            continue;
        }
        match run(shared, check).await {
            Ok(()) => {
                let _ = writeln!(out, "[+]{check} ok");
            }
            Err(reason) => {
                // Never in the response: the root endpoints are public.
                tracing::debug!(endpoint = kind.name(), check, %reason, "health check failed");
                let _ = writeln!(out, "[-]{check} failed: reason withheld");
                failed.push(check.to_owned());
            }
        }
    }
    excluded.retain(|e| !e.is_empty());
    if !excluded.is_empty() {
        excluded.sort();
        excluded.dedup();
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        let _ = writeln!(
            out,
            "warn: some health checks cannot be excluded: no matches for {}",
            names.join(",")
        );
    }
    let name = kind.name();
    if !failed.is_empty() {
        let _ = write!(out, "{name} check failed");
        return text(StatusCode::INTERNAL_SERVER_ERROR, out);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    let _ = writeln!(out, "{name} check passed");
    text(StatusCode::OK, out)
}

/// One check's own endpoint: `ok`, or 500 with the reason; 404 for an unknown check.
pub(crate) async fn single(shared: &Shared, kind: Kind, check: &str) -> Response {
    if !kind.checks(shared).iter().any(|c| c == check) {
        return ApiError::path_not_found().into_response();
    }
    match run(shared, check).await {
        Ok(()) => text(StatusCode::OK, "ok".to_owned()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}"),
        ),
    }
}

pub(crate) async fn healthz(State(s): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    root(&s, Kind::Healthz, q.as_deref()).await
}

pub(crate) async fn livez(State(s): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    root(&s, Kind::Livez, q.as_deref()).await
}

pub(crate) async fn readyz(State(s): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    root(&s, Kind::Readyz, q.as_deref()).await
}

pub(crate) async fn healthz_check(State(s): State<Arc<Shared>>, Path(c): Path<String>) -> Response {
    single(&s, Kind::Healthz, &c).await
}

pub(crate) async fn livez_check(State(s): State<Arc<Shared>>, Path(c): Path<String>) -> Response {
    single(&s, Kind::Livez, &c).await
}

pub(crate) async fn readyz_check(State(s): State<Arc<Shared>>, Path(c): Path<String>) -> Response {
    single(&s, Kind::Readyz, &c).await
}

pub(crate) async fn readyz_hook(State(s): State<Arc<Shared>>, Path(h): Path<String>) -> Response {
    single(&s, Kind::Readyz, &format!("{POST_START_PREFIX}{h}")).await
}
