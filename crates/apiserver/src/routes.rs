//! The server's route table: every route [`crate::router`] serves, as data — for tests
//! that must meet each route once (the authorization matrix, `tests/authz_matrix/`), so
//! that a route added to the server without an expectation there fails the test.
//!
//! Invariants: the table is read from the same sources the routers are built from — the
//! resources served (each with its collection and object routes and
//! [`ResourceInfo::subresources`]), the review routes' table ([`security::reviews::paths`])
//! and the endpoints' non-resource table ([`listwatch_endpoints::non_resource_paths`],
//! [`listwatch_endpoints::DISCOVERY_PATHS`]) — never a copy of them.
//!
//! [`security::reviews::paths`]: crate::security::reviews::paths

use listwatch_endpoints::ResourceInfo;

/// One route (or family of routes) the server serves.
#[derive(Debug, Clone)]
pub enum Route {
    /// A resource's collection and object routes (and `/watch/` legacy paths).
    Resource(ResourceInfo),
    /// A subresource the endpoints serve for a resource (`status`, `scale`).
    Subresource(ResourceInfo, &'static str),
    /// A route of the security layer (the review APIs, TokenRequest), as an axum path.
    Security(&'static str),
    /// A path outside the resources: health, version, metrics, OpenAPI, discovery (axum
    /// syntax: `{group}` a segment, `{*path}` any tail).
    NonResource(&'static str),
}

/// The routes of a server serving `resources` (see [`crate::all_resources`]).
pub fn table(resources: &[ResourceInfo]) -> Vec<Route> {
    let mut out = Vec::new();
    for info in resources {
        out.push(Route::Resource(info.clone()));
        for sub in info.subresources() {
            out.push(Route::Subresource(info.clone(), sub));
        }
    }
    out.extend(crate::security::reviews::paths().map(Route::Security));
    out.extend(listwatch_endpoints::non_resource_paths().map(Route::NonResource));
    out.extend(
        listwatch_endpoints::DISCOVERY_PATHS
            .iter()
            .copied()
            .map(Route::NonResource),
    );
    out
}
