//! A request's path and verb, resolved once (upstream's `RequestInfo`, built by its
//! `RequestInfoFactory` in the filter chain and read by authorization, audit and the
//! handlers): the embedding server's security filter builds a [`RequestInfo`] and puts it
//! in the request's extensions; the handlers read the resolved path from there instead of
//! parsing it again.
//!
//! Invariants:
//! - [`RequestInfo::new`] is the one reading of a path and method into authorization
//!   attributes, and its [`RequestInfo::api_path`] is exactly what [`path::parse`] answers
//!   for the path: the verb authorized is the verb the handlers serve (a `watch=1` GET of a
//!   collection is a `watch`; a named GET with `watch=1` is a `get`, as upstream);
//! - a handler uses a `RequestInfo` from the extensions only when it was built for the
//!   request's own path ([`RequestInfo::for_path`]); otherwise (an API embedded without
//!   the filter, or a path rewritten in between) it parses the path itself.

use axum::http::{Extensions, Method, Uri};

use crate::path::{self, ApiPath, PathError};
use crate::query::Query;

/// What one request asks for, as upstream's `RequestInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The path as received (percent-encoded).
    pub path: String,
    /// What the path names, or why it names nothing ([`path::parse`]).
    pub api_path: Result<ApiPath, PathError>,
    /// `get list watch create update patch delete deletecollection` for a resource
    /// request; the lower-case HTTP method for other paths (`get` for a HEAD).
    pub verb: String,
    /// Whether this is a request for an API resource (else a non-resource path).
    pub resource_request: bool,
    /// The namespace, `""` for a cluster-scoped request (a namespace named in the path is
    /// in its own namespace, as upstream).
    pub namespace: String,
    /// The API group, `""` for the core group.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The object name, when the request names one (a collection list or watch: the one
    /// its field selector requires by `metadata.name`, as upstream).
    pub name: String,
    /// For a non-resource request, the path as authorized: percent-decoded when it decodes
    /// (Go's `URL.Path`), else as sent.
    pub non_resource_path: String,
}

fn method_verb(m: &Method) -> String {
    m.as_str().to_ascii_lowercase()
}

impl RequestInfo {
    /// Resolves a request's method and URI.
    pub fn new(method: &Method, uri: &Uri) -> Self {
        let path = uri.path();
        let api_path = path::parse(path);
        let Ok(ApiPath::Resource(t)) = &api_path else {
            // Discovery documents and everything outside /api and /apis are paths, matched
            // on the decoded path as upstream's RequestInfo (Go's `URL.Path`): `/%6detrics`
            // is `/metrics`, `/healthz%2F..` is `/healthz/..`. A path that does not decode
            // is authorized as sent; no route serves it (400 or 404).
            let verb = if *method == Method::HEAD {
                "get".to_owned()
            } else {
                method_verb(method)
            };
            let decoded = path::decode(path);
            let non_resource_path = decoded.as_deref().unwrap_or(path).to_owned();
            return Self {
                path: path.to_owned(),
                api_path,
                verb,
                resource_request: false,
                namespace: String::new(),
                api_group: String::new(),
                api_version: String::new(),
                resource: String::new(),
                subresource: String::new(),
                name: String::new(),
                non_resource_path,
            };
        };
        let query = Query::parse(uri.query());
        // A malformed watch flag is a 400 in the handler; authorizing it as a watch is the
        // stricter reading.
        let named = t.name.is_some();
        // Upstream's RequestInfoFactory: only a collection GET becomes a watch by its query
        // (a named GET with `watch` is a get, served as one); `/watch/` paths are watches,
        // named or not.
        let watch = t.legacy_watch || (!named && query.is_watch().unwrap_or(true));
        let verb = match *method {
            Method::GET | Method::HEAD if t.subresource.is_some() => "get".to_owned(),
            Method::GET | Method::HEAD if watch => "watch".to_owned(),
            Method::GET | Method::HEAD if named => "get".to_owned(),
            Method::GET | Method::HEAD => "list".to_owned(),
            Method::POST => "create".to_owned(),
            Method::PUT => "update".to_owned(),
            Method::PATCH => "patch".to_owned(),
            Method::DELETE if named => "delete".to_owned(),
            Method::DELETE => "deletecollection".to_owned(),
            ref other => method_verb(other),
        };
        let mut name = t.name.clone().unwrap_or_default();
        let mut namespace = t.namespace.clone().unwrap_or_default();
        if t.group.is_empty() && t.resource == "namespaces" && namespace.is_empty() {
            // Upstream: a namespace named in the path is in its own namespace. A collection
            // request stays cluster-wide whatever its field selector names.
            namespace.clone_from(&name);
        }
        // Upstream's RequestInfoFactory names a collection list or watch by its field
        // selector (not a legacy `/watch/` one: its verb is settled by the path) — when
        // every list option decodes, and the name is a valid path segment.
        if name.is_empty()
            && !t.legacy_watch
            && (verb == "list" || verb == "watch")
            && let Some(n) = selector_name(&query)
        {
            name = n;
        }
        Self {
            path: path.to_owned(),
            verb,
            resource_request: true,
            namespace,
            api_group: t.group.clone(),
            api_version: t.version.clone(),
            resource: t.resource.clone(),
            subresource: t.subresource.clone().unwrap_or_default(),
            name,
            non_resource_path: String::new(),
            api_path,
        }
    }

    /// The `RequestInfo` in `extensions` when it was built for `path`.
    pub fn for_path<'a>(extensions: &'a Extensions, path: &str) -> Option<&'a Self> {
        extensions.get::<Self>().filter(|i| i.path == path)
    }
}

/// The name a collection request's `fieldSelector` requires (`metadata.name=<n>`), as
/// upstream's RequestInfoFactory takes it: only when the query decodes as list options
/// (selectors parse, integer options are integers; a boolean option never fails upstream)
/// and `<n>` is a valid path segment name (not `.` or `..`, no `/` or `%`).
fn selector_name(query: &Query) -> Option<String> {
    if let Some(l) = query.get("labelSelector")
        && listwatch_api::LabelSelector::parse(l).is_err()
    {
        return None;
    }
    for int in ["timeoutSeconds", "limit"] {
        if let Some(v) = query.get(int)
            && v.parse::<i64>().is_err()
        {
            return None;
        }
    }
    let selector = listwatch_api::FieldSelector::parse(query.get("fieldSelector")?).ok()?;
    let n = selector.exact_match("metadata.name")?;
    let valid = !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '%']);
    valid.then(|| n.to_owned())
}
