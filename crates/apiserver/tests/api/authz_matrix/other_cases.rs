//! The requests outside the resources' own: one per route of the route table
//! ([`route_cases`]: the non-resource paths and the security endpoints), the requests that
//! are no route of their own ([`extra_cases`]: impersonation, a path upstream authorizes
//! but this server does not serve), and the sentinel reads ([`sentinel_cases`]).

use super::*;

/// The cases of a route outside the resources' own (the rule per route: a route without one
/// fails the test).
pub(crate) fn route_cases(route: &Route) -> Vec<Case> {
    match route {
        // Sent by the users of the resource (resource_cases); every user reads them too.
        Route::Resource(_) | Route::Subresource(..) => Vec::new(),
        Route::Security(path) => security_cases(path),
        Route::NonResource(pattern) => {
            let path = match *pattern {
                "/openapi/v3/{*path}" => "/openapi/v3/api/v1",
                "/api/{version}" => "/api/v1",
                "/apis/{group}" => "/apis/apps",
                "/apis/{group}/{version}" => "/apis/apps/v1",
                // One check's own path: not public upstream (the bootstrap grants name
                // `/healthz`, `/livez` and `/readyz` exactly), so it needs its own rule.
                "/healthz/{check}" => "/healthz/ping",
                "/livez/{check}" => "/livez/ping",
                "/readyz/{check}" => "/readyz/ping",
                "/readyz/poststarthook/{*hook}" => "/readyz/poststarthook/bootstrap-controller",
                p if !p.contains('{') => p,
                other => {
                    panic!("no rule for the non-resource route {other}: add one to the matrix")
                }
            };
            vec![Case::new(
                format!("GET {path}"),
                "GET",
                path.to_owned(),
                vec![Attr::NonResource {
                    verb: "get".into(),
                    path: path.into(),
                }],
                200,
            )]
        }
    }
}

pub(crate) fn security_cases(path: &str) -> Vec<Case> {
    let authz = "authorization.k8s.io";
    let review = |kind: &str, ns: Option<&str>, spec: Value| {
        let mut v = json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec});
        if let Some(ns) = ns {
            v["metadata"] = json!({"namespace": ns});
        }
        v
    };
    let attrs = json!({"verb": "get", "resource": "pods", "namespace": NS});
    match path {
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" => vec![
            Case::new("create selfsubjectaccessreview".into(), "POST", path.into(), vec![plain_attr("create", authz, "selfsubjectaccessreviews", "", "")], 201)
                .body(JSON, &review("SelfSubjectAccessReview", None, json!({"resourceAttributes": attrs}))),
        ],
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews" => vec![
            Case::new("create selfsubjectrulesreview".into(), "POST", path.into(), vec![plain_attr("create", authz, "selfsubjectrulesreviews", "", "")], 201)
                .body(JSON, &review("SelfSubjectRulesReview", None, json!({"namespace": NS}))),
        ],
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => vec![
            Case::new("create subjectaccessreview".into(), "POST", path.into(), vec![plain_attr("create", authz, "subjectaccessreviews", "", "")], 201)
                .body(JSON, &review("SubjectAccessReview", None, json!({"user": "someone", "resourceAttributes": attrs}))),
        ],
        "/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews" => [NS, OTHER]
            .into_iter()
            .map(|ns| {
                let attrs = json!({"verb": "get", "resource": "pods", "namespace": ns});
                Case::new(
                    format!("create localsubjectaccessreview in {ns}"),
                    "POST",
                    format!("/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews"),
                    vec![plain_attr("create", authz, "localsubjectaccessreviews", ns, "")],
                    201,
                )
                .body(JSON, &review("LocalSubjectAccessReview", Some(ns), json!({"user": "someone", "resourceAttributes": attrs})))
            })
            .collect(),
        "/apis/authentication.k8s.io/v1/selfsubjectreviews" => vec![
            Case::new("create selfsubjectreview".into(), "POST", path.into(), vec![plain_attr("create", "authentication.k8s.io", "selfsubjectreviews", "", "")], 201)
                .body(JSON, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
        ],
        "/apis/authentication.k8s.io/v1/tokenreviews" => vec![
            Case::new("create tokenreview".into(), "POST", path.into(), vec![plain_attr("create", "authentication.k8s.io", "tokenreviews", "", "")], 201)
                .body(JSON, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-token"}})),
        ],
        "/api/v1/namespaces/{ns}/serviceaccounts/{name}/token" => [NS, OTHER]
            .into_iter()
            .map(|ns| {
                Case::new(
                    format!("create serviceaccounts/token in {ns}"),
                    "POST",
                    format!("/api/v1/namespaces/{ns}/serviceaccounts/{SA}/token"),
                    vec![plain_attr("create", "", "serviceaccounts/token", ns, SA)],
                    201,
                )
                .body(JSON, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}}))
            })
            .collect(),
        // Binding: `create` on `pods/binding` or `bindings`; a pod that does not exist, so
        // every allowed request answers the same (404), whoever sent it first.
        "/api/v1/namespaces/{ns}/pods/{name}/binding" => [NS, OTHER]
            .into_iter()
            .map(|ns| {
                Case::new(
                    format!("create pods/binding in {ns}"),
                    "POST",
                    format!("/api/v1/namespaces/{ns}/pods/no-such-pod/binding"),
                    vec![plain_attr("create", "", "pods/binding", ns, "no-such-pod")],
                    404,
                )
                .body(JSON, &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "no-such-pod"}, "target": {"name": "node-1"}}))
            })
            .collect(),
        // Eviction: `create` on `pods/eviction`; a pod that does not exist (404 for every
        // allowed request).
        "/api/v1/namespaces/{ns}/pods/{name}/eviction" => [NS, OTHER]
            .into_iter()
            .map(|ns| {
                Case::new(
                    format!("create pods/eviction in {ns}"),
                    "POST",
                    format!("/api/v1/namespaces/{ns}/pods/no-such-pod/eviction"),
                    vec![plain_attr("create", "", "pods/eviction", ns, "no-such-pod")],
                    404,
                )
                .body(JSON, &json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "no-such-pod"}}))
            })
            .collect(),
        "/api/v1/namespaces/{ns}/bindings" => [NS, OTHER]
            .into_iter()
            .map(|ns| {
                Case::new(
                    format!("create bindings in {ns}"),
                    "POST",
                    format!("/api/v1/namespaces/{ns}/bindings"),
                    vec![plain_attr("create", "", "bindings", ns, "")],
                    404,
                )
                .body(JSON, &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "no-such-pod"}, "target": {"name": "node-1"}}))
            })
            .collect(),
        other => panic!("no rule for the security route {other}: add one to the matrix"),
    }
}

/// Requests that are no route of their own: impersonation, and a path upstream authorizes
/// that this server does not serve.
pub(crate) fn extra_cases() -> Vec<Case> {
    let imp =
        |verb: &str, resource: &str, ns: &str, name: &str| plain_attr(verb, "", resource, ns, name);
    let api = || Attr::NonResource {
        verb: "get".into(),
        path: "/api".into(),
    };
    let mut user = Case::new(
        "impersonate a user".into(),
        "GET",
        "/api".into(),
        vec![imp("impersonate", "users", "", "someone"), api()],
        200,
    );
    user.headers.push(("Impersonate-User", "someone".into()));
    let sa_name = format!("system:serviceaccount:{NS}:{SA}");
    let mut sa = Case::new(
        "impersonate a ServiceAccount".into(),
        "GET",
        "/api".into(),
        vec![imp("impersonate", "serviceaccounts", NS, SA), api()],
        200,
    );
    sa.headers.push(("Impersonate-User", sa_name));
    let mut group = Case::new(
        "impersonate a user and a group".into(),
        "GET",
        "/api".into(),
        vec![
            imp("impersonate", "users", "", "someone"),
            imp("impersonate", "groups", "", "system:masters"),
            api(),
        ],
        200,
    );
    group.headers.push(("Impersonate-User", "someone".into()));
    group
        .headers
        .push(("Impersonate-Group", "system:masters".into()));
    let v2 = Case::new(
        "GET /openapi/v2".into(),
        "GET",
        "/openapi/v2".into(),
        vec![Attr::NonResource {
            verb: "get".into(),
            path: "/openapi/v2".into(),
        }],
        200,
    );
    // Upstream decodes header values as they are (UTF-8 here): the request runs as that user
    // once impersonating it is allowed, never as the requester.
    let mut non_ascii = Case::new(
        "impersonate a non-ASCII user".into(),
        "GET",
        "/api".into(),
        vec![imp("impersonate", "users", "", "jos\u{e9}"), api()],
        200,
    );
    non_ascii
        .headers
        .push(("Impersonate-User", "jos\u{e9}".into()));
    // system:anonymous impersonated is unauthenticated: no discovery for it.
    let mut anonymous = Case::new(
        "impersonate system:anonymous".into(),
        "GET",
        "/api".into(),
        vec![imp("impersonate", "users", "", "system:anonymous"), api()],
        200,
    );
    anonymous.refused = true;
    anonymous
        .headers
        .push(("Impersonate-User", "system:anonymous".into()));
    vec![user, sa, group, v2, non_ascii, anonymous]
}

/// A read of every resource's shared object in `ma` (or at the cluster scope), which only
/// `get` on that resource allows.
pub(crate) fn sentinel_cases(resources: &[KindSpec]) -> Vec<Case> {
    resources
        .iter()
        .map(|info| {
            let (path, ns, name) = if info.namespaced {
                (
                    format!("{}/matrix-shared", collection(info, Some(NS))),
                    NS,
                    "matrix-shared",
                )
            } else if info.group.is_empty() && info.plural == "namespaces" {
                (format!("{}/{NS}", collection(info, None)), "", NS)
            } else {
                (
                    format!("{}/matrix-shared", collection(info, None)),
                    "",
                    "matrix-shared",
                )
            };
            Case::new(
                format!("get shared {}", info.plural),
                "GET",
                path,
                vec![res_attr("get", info, "", ns, name)],
                // A kind that cannot be created has no shared object to find.
                if serves(info, "create") { 200 } else { 404 },
            )
        })
        .collect()
}
