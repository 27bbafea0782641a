//! The server's route table: every route [`crate::router`] serves, as data — for tests
//! that must meet each route once (the authorization matrix, `tests/api/authz_matrix/`), so
//! that a route added to the server without an expectation there fails the test.
//!
//! Invariants: the table is read from the same sources the routers are built from — the
//! resources served (each with its collection and object routes and
//! [`KindSpec::subresources`]), the review routes' table ([`security::reviews::paths`])
//! and the endpoints' non-resource table ([`listwatch_endpoints::non_resource_paths`],
//! [`listwatch_endpoints::DISCOVERY_PATHS`]) — never a copy of them.
//!
//! [`security::reviews::paths`]: crate::security::reviews::paths

use listwatch_endpoints::KindSpec;

/// The paths answered with a trailing slash as without: go-restful serves `/version/`
/// (upstream's RBAC names it, and the Python client's `VersionApi` requests it); upstream's
/// health checks are exact paths of its mux (`/healthz/` is a 404 there), served here with
/// the slash too, since this server trims trailing slashes elsewhere.
pub const TRIMMED_PATHS: &[&str] = &["/version", "/healthz", "/livez", "/readyz"];

/// Rewrites `/version/` (and the other [`TRIMMED_PATHS`] with trailing slashes) to the
/// path without them, keeping the query, before routing and authorization: what is
/// authorized, audited and served is the path without the slash.
pub fn trim_trailing_slash<B>(req: &mut axum::http::Request<B>) {
    let path = req.uri().path();
    if !path.ends_with('/') {
        return;
    }
    let Some(trimmed) = TRIMMED_PATHS
        .iter()
        .find(|p| path.trim_end_matches('/') == **p)
    else {
        return;
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{trimmed}?{q}"),
        None => (*trimmed).to_owned(),
    };
    let mut parts = req.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => return,
    }
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
}

/// One route (or family of routes) the server serves.
#[derive(Debug, Clone)]
pub enum Route {
    /// A resource's collection and object routes (and `/watch/` legacy paths).
    Resource(KindSpec),
    /// A subresource the endpoints serve for a resource (`status`, `scale`).
    Subresource(KindSpec, &'static str),
    /// A create-only route the server routes itself (the review APIs, TokenRequest,
    /// Binding), as an axum path.
    Security(&'static str),
    /// A path outside the resources: health, version, metrics, OpenAPI, discovery (axum
    /// syntax: `{group}` a segment, `{*path}` any tail).
    NonResource(&'static str),
}

/// The routes of a server serving `resources` (see [`crate::all_resources`]).
pub fn table(resources: &[KindSpec]) -> Vec<Route> {
    let mut out = Vec::new();
    for info in resources {
        out.push(Route::Resource(info.clone()));
        for sub in info.subresources() {
            out.push(Route::Subresource(info.clone(), sub));
        }
    }
    out.extend(crate::security::reviews::paths().map(Route::Security));
    out.extend(crate::binding::PATHS.into_iter().map(Route::Security));
    out.extend(crate::eviction::PATHS.into_iter().map(Route::Security));
    out.extend(listwatch_endpoints::non_resource_paths().map(Route::NonResource));
    out.extend(
        listwatch_endpoints::DISCOVERY_PATHS
            .iter()
            .copied()
            .map(Route::NonResource),
    );
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_the_listed_paths_lose_their_slash() {
        for (from, to) in [
            ("/version/", "/version"),
            ("/healthz//?verbose", "/healthz?verbose"),
            ("/readyz/", "/readyz"),
            ("/livez/?exclude=x", "/livez?exclude=x"),
            ("/healthz/ping/", "/healthz/ping/"),
            ("/api/v1/", "/api/v1/"),
            ("/", "/"),
            ("/version", "/version"),
        ] {
            let mut req = axum::http::Request::get(from).body(()).unwrap();
            trim_trailing_slash(&mut req);
            assert_eq!(req.uri().to_string(), to, "{from}");
        }
    }
}
