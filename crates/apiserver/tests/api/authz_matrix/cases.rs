//! The requests: per route, what is sent, the authorization checks upstream makes for
//! it (`RequestInfoFactory`'s verb, the `create` check of a creating write), the answer
//! when they pass, and what a 403 must leave unwritten. This file holds the `Case` itself,
//! the paths and bodies, and every request on a resource of its own
//! ([`resource_cases`]); the requests outside the resources' own are in `other_cases`.

use super::*;

/// What a 403 must have left alone.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One object (its path).
    Object(String),
    /// The objects of a collection with the user's label (its path and query).
    Collection(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) label: String,
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
    /// Every check must be allowed.
    pub(crate) checks: Vec<Attr>,
    /// Refused even when the checks pass: an RBAC write granting what no matrix user
    /// holds, or a request whose effective user may do nothing.
    pub(crate) refused: bool,
    /// The bearer token goes in the websocket subprotocol, not in `Authorization`.
    pub(crate) token_in_protocol: bool,
    /// The answer when allowed.
    pub(crate) ok: u16,
    pub(crate) write: Option<Target>,
    /// A watch: only the response head is read.
    pub(crate) stream: bool,
}

impl Case {
    pub(crate) fn new(
        label: String,
        method: &'static str,
        path: String,
        checks: Vec<Attr>,
        ok: u16,
    ) -> Self {
        Self {
            label,
            method,
            path,
            headers: Vec::new(),
            body: Vec::new(),
            checks,
            refused: false,
            token_in_protocol: false,
            ok,
            write: None,
            stream: false,
        }
    }

    pub(crate) fn body(mut self, content_type: &str, v: &Value) -> Self {
        self.headers.push(("Content-Type", content_type.to_owned()));
        self.body = v.to_string().into_bytes();
        self
    }

    pub(crate) fn writes(mut self, t: Target) -> Self {
        self.write = Some(t);
        self
    }

    pub(crate) fn streams(mut self) -> Self {
        self.stream = true;
        self
    }

    pub(crate) fn expected(&self, perm: &Perm) -> u16 {
        if self.checks.iter().all(|a| perm.allows(a)) && !self.refused {
            self.ok
        } else {
            403
        }
    }
}

pub(crate) fn prefix(info: &KindSpec) -> String {
    if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    }
}

/// The collection path of `info` in `ns` (`None`: cluster-scoped, or all namespaces).
pub(crate) fn collection(info: &KindSpec, ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("{}/namespaces/{ns}/{}", prefix(info), info.plural),
        None => format!("{}/{}", prefix(info), info.plural),
    }
}

pub(crate) fn legacy_watch(info: &KindSpec, ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("{}/watch/namespaces/{ns}/{}", prefix(info), info.plural),
        None => format!("{}/watch/{}", prefix(info), info.plural),
    }
}

/// The signer of the matrix's CertificateSigningRequests.
pub(crate) const MATRIX_SIGNER: &str = "matrix.example.com/signer";

/// Upstream's certificate admission: a write of a CertificateSigningRequest's `approval`
/// needs `approve` on its signer besides the request's own permission (no matrix user
/// holds it, so every such write by a user is refused).
fn signer_checks(info: &KindSpec, sub: &str, verb: &str) -> Vec<Attr> {
    if info.group == "certificates.k8s.io" && sub == "approval" && verb != "get" {
        vec![plain_attr(
            "approve",
            "certificates.k8s.io",
            "signers",
            "",
            MATRIX_SIGNER,
        )]
    } else {
        Vec::new()
    }
}

/// Whether `info` serves `verb` (a kind may serve only some, e.g. componentstatuses).
pub(crate) fn serves(info: &KindSpec, verb: &str) -> bool {
    info.verbs.is_none_or(|v| v.contains(&verb))
}

/// A kind serving only some verbs: a request for another is 405 once authorized (upstream
/// authorizes before it routes), and a GET finds no object (none can be created).
fn only_served_verbs(info: &KindSpec, cases: &mut [Case]) {
    if info.verbs.is_none() {
        return;
    }
    for c in cases {
        let Some(Attr::Resource { verb, .. }) = c.checks.first() else {
            continue;
        };
        if !serves(info, verb) {
            // The create check of a PUT or apply that creates is the handler's, and no
            // handler serves the verb: only the request's own verb is authorized.
            c.checks.truncate(1);
            c.ok = 405;
            c.stream = false;
        } else if verb == "get" {
            c.ok = 404;
        }
    }
}

/// Whether [`object`] has a rule written for `info` itself (not a generic one).
pub(crate) fn has_object_rule(info: &KindSpec) -> bool {
    matches!(
        (info.group.as_str(), info.plural.as_str()),
        (
            "",
            "namespaces"
                | "nodes"
                | "serviceaccounts"
                | "pods"
                | "configmaps"
                | "secrets"
                | "services"
                | "endpoints"
                | "events"
        ) | ("coordination.k8s.io", "leases")
            | ("apps", "deployments")
    ) || info.group == "rbac.authorization.k8s.io"
        || info.group == crate::authz_matrix::CUSTOM_GROUP
}

/// The body of an object of `info` (the rule per resource: a resource without one fails
/// the test).
pub(crate) fn object(
    info: &KindSpec,
    name: &str,
    ns: Option<&str>,
    owner: &str,
    rules: bool,
) -> Value {
    let mut meta = json!({"name": name, "labels": {"matrix": owner}});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    let api_version = if info.group.is_empty() {
        info.version.clone()
    } else {
        format!("{}/{}", info.group, info.version)
    };
    let mut v = json!({"apiVersion": api_version, "kind": info.kind, "metadata": meta});
    let containers = json!([{"name": "c", "image": "busybox"}]);
    let rbac_group = "rbac.authorization.k8s.io";
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces" | "nodes" | "serviceaccounts") => {}
        // Read-only (get and list): never created, the body is never accepted.
        ("", "componentstatuses") => {}
        ("admissionregistration.k8s.io", _) => {}
        ("certificates.k8s.io", "certificatesigningrequests") => {
            v["spec"] = json!({"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIcU1JR1NBZ0VBTURBeEZ6QVZCZ05WQkFNTURuTjVjM1JsYlRwdWIyUmxPbTR4TVJVd0V3WURWUVFLREF4egplWE4wWlcwNmJtOWtaWE13V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVRQRDhIWUU0cDI5V25LCmN1dDBBRi95QXo4WTA3MzZOTC9RMTRxN0xHMVkrMjhyaVVmL3V6UkVRSHlmTTRKU1JVSmxCR2s0UlhrS2QwOFoKNkVIdkh2eUdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnU3pzQ0RZUVFyZDlBQzZQRHAxeXhVOGRZVlNKYgpFMFNXYXNZbUdEelJuS2NDSUgvUjlsdmp0Wm5NVTZudXJva2R6U3NrMHQxRlJsK2hVNzJ2QXVOL3Rzc1cKLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==",
                "signerName": MATRIX_SIGNER, "usages": ["digital signature"]});
        }
        // The service account the create defaults (upstream's ServiceAccount admission),
        // so that a PUT of this body changes nothing a pod update may not change.
        ("", "pods") => {
            v["spec"] = json!({"containers": containers, "serviceAccountName": "default"});
        }
        ("", "configmaps") => v["data"] = json!({"k": "v"}),
        // The representative of (namespaced, /status) since pods' shape gained
        // `/ephemeralcontainers`.
        ("", "persistentvolumeclaims") => {
            v["spec"] = json!({"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}});
        }
        ("", "secrets") => v["data"] = json!({"k": "dg=="}),
        ("", "services") => v["spec"] = json!({"ports": [{"port": 80}]}),
        ("", "endpoints") => v["subsets"] = json!([]),
        ("", "events") => {
            v["involvedObject"] =
                json!({"kind": "Pod", "name": "p", "namespace": ns.unwrap_or("default")});
            v["reason"] = json!("Matrix");
            v["message"] = json!("m");
        }
        // The matrix's custom resource (status and scale at `.spec.replicas`).
        (g, _) if g == crate::authz_matrix::CUSTOM_GROUP => v["spec"] = json!({"replicas": 1}),
        ("coordination.k8s.io", "leases") => v["spec"] = json!({"holderIdentity": owner}),
        ("apps", "deployments") => {
            v["spec"] = json!({"replicas": 1, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}}});
        }
        (g, "roles" | "clusterroles") if g == rbac_group => {
            v["rules"] = if rules {
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
            } else {
                json!([])
            };
        }
        (g, "rolebindings" | "clusterrolebindings") if g == rbac_group => {
            let role = if rules { SECRETS_ROLE } else { EMPTY_ROLE };
            v["roleRef"] = json!({"apiGroup": rbac_group, "kind": "ClusterRole", "name": role});
            v["subjects"] = json!([{"apiGroup": rbac_group, "kind": "User", "name": owner}]);
        }
        _ => panic!(
            "no object rule for resource {} (group {:?}): add one to the matrix",
            info.plural, info.group
        ),
    }
    v
}

/// A subresource's PUT body and the expectation rule of the subresource (a subresource
/// without one fails the test).
pub(crate) fn subresource_body(
    info: &KindSpec,
    sub: &str,
    name: &str,
    ns: Option<&str>,
    owner: &str,
) -> Value {
    match sub {
        "status" => object(info, name, ns, owner, false),
        // Upstream's `ApprovalREST`: the approval conditions are what an approver writes.
        "approval" => {
            let mut v = object(info, name, ns, owner, false);
            v["status"] = json!({"conditions": [{"type": "Approved", "status": "True",
                "reason": "Matrix", "message": "approved by the matrix"}]});
            v
        }
        // Upstream's `FinalizeREST`: PUT only, authorized as `update` of
        // `namespaces/finalize`; the body keeps the namespace's finalizer.
        "finalize" => {
            let mut v = object(info, name, ns, owner, false);
            v["spec"] = json!({"finalizers": ["kubernetes"]});
            v
        }
        // Upstream's `EphemeralContainersREST` (pods): the write adds an ephemeral container
        // (the same one each time, so a repeated PUT changes nothing and is allowed).
        "ephemeralcontainers" => {
            let mut v = object(info, name, ns, owner, false);
            v["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "busybox"}]);
            v
        }
        "scale" => {
            let mut meta = json!({"name": name});
            if let Some(ns) = ns {
                meta["namespace"] = json!(ns);
            }
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta, "spec": {"replicas": 2}})
        }
        other => panic!(
            "no rule for subresource {}/{other}: add its verbs and expectations to the matrix",
            info.plural
        ),
    }
}

pub(crate) const MERGE: &str = "application/merge-patch+json";
pub(crate) const JSON_PATCH: &str = "application/json-patch+json";
pub(crate) const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub(crate) const APPLY: &str = "application/apply-patch+yaml";
pub(crate) const JSON: &str = "application/json";

pub(crate) fn is_rbac_role_kind(info: &KindSpec) -> bool {
    info.group == "rbac.authorization.k8s.io"
}

/// Every request a user sends on its own resource `info` (and its subresources), in the
/// namespaces `ma` and `mb` (or at the cluster scope), on objects named after it.
pub(crate) fn resource_cases(info: &KindSpec, owner: &str) -> Vec<Case> {
    let mut out = Vec::new();
    let scopes: Vec<Option<&str>> = if info.namespaced {
        vec![Some(NS), Some(OTHER)]
    } else {
        vec![None]
    };
    let sel = format!("labelSelector=matrix%3D{owner}");
    for ns in scopes {
        let n = ns.unwrap_or("");
        let at = ns.unwrap_or("cluster");
        let base = collection(info, ns);
        let obj = |name: &str| format!("{base}/{owner}-{name}");
        let name = |s: &str| format!("{owner}-{s}");
        let a = name("a");
        let label = |what: &str| format!("{what} {} in {at}", info.plural);
        let attr = |verb: &str, sub: &str, nm: &str| res_attr(verb, info, sub, n, nm);
        let coll = Target::Collection(format!("{base}?{sel}"));
        out.push(Case::new(
            label("get"),
            "GET",
            obj("a"),
            vec![attr("get", "", &a)],
            200,
        ));
        out.push(Case::new(
            label("list"),
            "GET",
            format!("{base}?{sel}"),
            vec![attr("list", "", "")],
            200,
        ));
        out.push(
            Case::new(
                label("watch"),
                "GET",
                format!("{base}?watch=1&{sel}"),
                vec![attr("watch", "", "")],
                200,
            )
            .streams(),
        );
        out.push(
            Case::new(
                label("watch /watch/"),
                "GET",
                format!("{}?{sel}", legacy_watch(info, ns)),
                vec![attr("watch", "", "")],
                200,
            )
            .streams(),
        );
        // Upstream: a named GET is a get whatever `watch` says; `/watch/` with a name is a
        // watch of that name.
        out.push(Case::new(
            label("get with watch=1"),
            "GET",
            format!("{}?watch=1", obj("a")),
            vec![attr("get", "", &a)],
            200,
        ));
        out.push(
            Case::new(
                label("watch named /watch/"),
                "GET",
                format!("{}/{a}", legacy_watch(info, ns)),
                vec![attr("watch", "", &a)],
                200,
            )
            .streams(),
        );
        // Upstream: the selector names the request, but a collection of namespaces stays
        // cluster-wide (only a namespace named in the path is in its own namespace).
        let mut by_name = attr("watch", "", &a);
        if let Attr::Resource { namespace, .. } = &mut by_name
            && info.group.is_empty()
            && info.plural == "namespaces"
        {
            namespace.clear();
        }
        out.push(
            Case::new(
                label("watch by metadata.name"),
                "GET",
                format!("{base}?watch=1&fieldSelector=metadata.name%3D{a}"),
                vec![by_name],
                200,
            )
            .streams(),
        );
        let mut ws = Case::new(
            label("websocket watch"),
            "GET",
            format!("{base}?watch=1&{sel}"),
            vec![attr("watch", "", "")],
            101,
        )
        .streams();
        ws.headers.extend([
            ("Connection", "Upgrade".to_owned()),
            ("Upgrade", "websocket".to_owned()),
            ("Sec-WebSocket-Version", "13".to_owned()),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==".to_owned()),
        ]);
        let mut in_protocol = ws.clone();
        in_protocol.label = label("websocket watch, token in the subprotocol");
        in_protocol.token_in_protocol = true;
        out.push(ws);
        out.push(in_protocol);
        out.push(
            Case::new(
                label("create"),
                "POST",
                base.clone(),
                vec![attr("create", "", "")],
                201,
            )
            .body(JSON, &object(info, &name("post"), ns, owner, false))
            .writes(Target::Object(obj("post"))),
        );
        let mut updated = object(info, &a, ns, owner, false);
        updated["metadata"]["labels"]["updated"] = json!("yes");
        out.push(
            Case::new(
                label("update"),
                "PUT",
                obj("a"),
                vec![attr("update", "", &a)],
                200,
            )
            .body(JSON, &updated)
            .writes(Target::Object(obj("a"))),
        );
        let putc = name("putc");
        let (checks, ok) = if info.allow_create_on_update {
            (
                vec![attr("update", "", &putc), attr("create", "", &putc)],
                201,
            )
        } else {
            (vec![attr("update", "", &putc)], 404)
        };
        out.push(
            Case::new(label("PUT-create"), "PUT", obj("putc"), checks, ok)
                .body(JSON, &object(info, &putc, ns, owner, false))
                .writes(Target::Object(obj("putc"))),
        );
        let merge = json!({"metadata": {"labels": {"merged": "yes"}}});
        out.push(
            Case::new(
                label("merge patch"),
                "PATCH",
                obj("a"),
                vec![attr("patch", "", &a)],
                200,
            )
            .body(MERGE, &merge)
            .writes(Target::Object(obj("a"))),
        );
        out.push(
            Case::new(
                label("json patch"),
                "PATCH",
                obj("a"),
                vec![attr("patch", "", &a)],
                200,
            )
            .body(
                JSON_PATCH,
                &json!([{"op": "add", "path": "/metadata/annotations", "value": {"j": "1"}}]),
            )
            .writes(Target::Object(obj("a"))),
        );
        if !info.custom_resource {
            out.push(
                Case::new(
                    label("strategic merge patch"),
                    "PATCH",
                    obj("a"),
                    vec![attr("patch", "", &a)],
                    200,
                )
                .body(
                    STRATEGIC,
                    &json!({"metadata": {"labels": {"strategic": "yes"}}}),
                )
                .writes(Target::Object(obj("a"))),
            );
        }
        out.push(
            Case::new(
                label("apply"),
                "PATCH",
                format!("{}?fieldManager=matrix&force=true", obj("a")),
                vec![attr("patch", "", &a)],
                200,
            )
            .body(APPLY, &object(info, &a, ns, owner, false))
            .writes(Target::Object(obj("a"))),
        );
        let applyc = name("applyc");
        out.push(
            Case::new(
                label("apply-create"),
                "PATCH",
                format!("{}?fieldManager=matrix&force=true", obj("applyc")),
                vec![attr("patch", "", &applyc), attr("create", "", &applyc)],
                201,
            )
            .body(APPLY, &object(info, &applyc, ns, owner, false))
            .writes(Target::Object(obj("applyc"))),
        );
        // A dry run that would create needs `create` as much as the create does.
        let dry = name("dry");
        out.push(
            Case::new(
                label("create, dry run"),
                "POST",
                format!("{base}?dryRun=All"),
                vec![attr("create", "", "")],
                201,
            )
            .body(JSON, &object(info, &dry, ns, owner, false))
            .writes(Target::Object(obj("dry"))),
        );
        let (checks, ok) = if info.allow_create_on_update {
            (
                vec![attr("update", "", &dry), attr("create", "", &dry)],
                201,
            )
        } else {
            (vec![attr("update", "", &dry)], 404)
        };
        out.push(
            Case::new(
                label("PUT-create, dry run"),
                "PUT",
                format!("{}?dryRun=All", obj("dry")),
                checks,
                ok,
            )
            .body(JSON, &object(info, &dry, ns, owner, false))
            .writes(Target::Object(obj("dry"))),
        );
        out.push(
            Case::new(
                label("apply-create, dry run"),
                "PATCH",
                format!("{}?fieldManager=matrix&force=true&dryRun=All", obj("dry")),
                vec![attr("patch", "", &dry), attr("create", "", &dry)],
                201,
            )
            .body(APPLY, &object(info, &dry, ns, owner, false))
            .writes(Target::Object(obj("dry"))),
        );
        if info.plural == "roles" || info.plural == "clusterroles" {
            // Escalation by update: a rule the writer lacks added to its role.
            let mut c = Case::new(
                label("update escalating"),
                "PUT",
                obj("a"),
                vec![attr("update", "", &a)],
                200,
            )
            .body(JSON, &object(info, &a, ns, owner, true))
            .writes(Target::Object(obj("a")));
            c.refused = true;
            out.push(c);
            let rules =
                json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
            let mut c = Case::new(
                label("merge patch escalating"),
                "PATCH",
                obj("a"),
                vec![attr("patch", "", &a)],
                200,
            )
            .body(MERGE, &rules)
            .writes(Target::Object(obj("a")));
            c.refused = true;
            out.push(c);
        }
        if info.plural == "clusterroles" {
            // Upstream: an aggregationRule (on the new or the old object) needs full
            // authority or `escalate`, whatever the rules.
            let aggregation =
                json!({"clusterRoleSelectors": [{"matchLabels": {"matrix-aggregate": owner}}]});
            let mut body = object(info, &name("agg"), ns, owner, false);
            body["aggregationRule"] = aggregation.clone();
            let mut c = Case::new(
                label("create with an aggregationRule"),
                "POST",
                base.clone(),
                vec![attr("create", "", "")],
                201,
            )
            .body(JSON, &body)
            .writes(Target::Object(obj("agg")));
            c.refused = true;
            out.push(c);
            let mut c = Case::new(
                label("merge patch adding an aggregationRule"),
                "PATCH",
                obj("a"),
                vec![attr("patch", "", &a)],
                200,
            )
            .body(MERGE, &json!({"aggregationRule": aggregation}))
            .writes(Target::Object(obj("a")));
            c.refused = true;
            out.push(c);
        }
        if is_rbac_role_kind(info) {
            // Escalation: a role with a rule, or a binding to a role, the writer lacks.
            let mut c = Case::new(
                label("create escalating"),
                "POST",
                base.clone(),
                vec![attr("create", "", "")],
                201,
            )
            .body(JSON, &object(info, &name("esc"), ns, owner, true))
            .writes(Target::Object(obj("esc")));
            c.refused = true;
            out.push(c);
            let esca = name("esca");
            let mut c = Case::new(
                label("apply-create escalating"),
                "PATCH",
                format!("{}?fieldManager=matrix&force=true", obj("esca")),
                vec![attr("patch", "", &esca), attr("create", "", &esca)],
                201,
            )
            .body(APPLY, &object(info, &esca, ns, owner, true))
            .writes(Target::Object(obj("esca")));
            c.refused = true;
            out.push(c);
        }
        for sub in info.subresources() {
            let body = subresource_body(info, sub, &a, ns, owner);
            let path = format!("{}/{sub}", obj("a"));
            let verbs = KindSpec::subresource_verbs(sub);
            if verbs.contains(&"get") {
                out.push(Case::new(
                    label(&format!("get {sub}")),
                    "GET",
                    path.clone(),
                    vec![attr("get", sub, &a)],
                    200,
                ));
            }
            out.push(
                Case::new(
                    label(&format!("update {sub}")),
                    "PUT",
                    path.clone(),
                    [
                        vec![attr("update", sub, &a)],
                        signer_checks(info, sub, "update"),
                    ]
                    .concat(),
                    200,
                )
                .body(JSON, &body)
                .writes(Target::Object(obj("a"))),
            );
            if !verbs.contains(&"patch") {
                continue;
            }
            let patch = if sub == "scale" {
                json!({"spec": {"replicas": 3}})
            } else {
                json!({"metadata": {"labels": {"via": sub}}})
            };
            out.push(
                Case::new(
                    label(&format!("merge patch {sub}")),
                    "PATCH",
                    path,
                    [
                        vec![attr("patch", sub, &a)],
                        signer_checks(info, sub, "patch"),
                    ]
                    .concat(),
                    200,
                )
                .body(MERGE, &patch)
                .writes(Target::Object(obj("a"))),
            );
        }
        let d = name("d");
        out.push(
            Case::new(
                label("delete"),
                "DELETE",
                obj("d"),
                vec![attr("delete", "", &d)],
                200,
            )
            .writes(Target::Object(obj("d"))),
        );
        // Upstream's namespace registry serves no collection delete (405 once allowed).
        let dc_ok = if info.group.is_empty() && info.plural == "namespaces" {
            405
        } else {
            200
        };
        out.push(
            Case::new(
                label("deletecollection"),
                "DELETE",
                format!("{base}?{sel}"),
                vec![attr("deletecollection", "", "")],
                dc_ok,
            )
            .writes(coll),
        );
    }
    if info.namespaced {
        // All namespaces: list and watch; no create or collection delete there (405).
        let base = collection(info, None);
        let attr = |verb: &str| res_attr(verb, info, "", "", "");
        let label = |what: &str| format!("{what} {} in all namespaces", info.plural);
        out.push(Case::new(
            label("list"),
            "GET",
            format!("{base}?{sel}"),
            vec![attr("list")],
            200,
        ));
        out.push(
            Case::new(
                label("watch"),
                "GET",
                format!("{base}?watch=1&{sel}"),
                vec![attr("watch")],
                200,
            )
            .streams(),
        );
        out.push(
            Case::new(
                label("watch /watch/"),
                "GET",
                format!("{}?{sel}", legacy_watch(info, None)),
                vec![attr("watch")],
                200,
            )
            .streams(),
        );
        out.push(
            Case::new(
                label("create"),
                "POST",
                base.clone(),
                vec![attr("create")],
                405,
            )
            .body(
                JSON,
                &object(info, &format!("{owner}-postall"), Some(NS), owner, false),
            )
            .writes(Target::Object(format!(
                "{}/{owner}-postall",
                collection(info, Some(NS))
            ))),
        );
        out.push(
            Case::new(
                label("deletecollection"),
                "DELETE",
                format!("{base}?{sel}"),
                vec![attr("deletecollection")],
                405,
            )
            .writes(Target::Collection(format!("{base}?{sel}"))),
        );
    }
    only_served_verbs(info, &mut out);
    out
}
