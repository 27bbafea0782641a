//! The model: one permission per user, and what upstream's authorizer answers for
//! it (RBAC matching plus the bootstrap grants); the users, made from the route table.

use super::*;

/// Where a permission holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A RoleBinding in this namespace.
    Ns(&'static str),
    /// A ClusterRoleBinding.
    Cluster,
}

/// The one permission a user holds.
#[derive(Debug, Clone)]
pub(crate) enum Perm {
    Resource {
        verb: String,
        group: String,
        /// `plural` or `plural/subresource`.
        resource: String,
        scope: Scope,
        /// `resourceNames` (empty: every name).
        names: Vec<String>,
    },
    NonResource {
        verb: String,
        path: String,
    },
    /// Authenticated, no binding.
    Nothing,
    /// No credentials.
    Anonymous,
}

/// Upstream's authorization attributes of one check.
#[derive(Debug, Clone)]
pub(crate) enum Attr {
    Resource {
        verb: String,
        group: String,
        resource: String,
        namespace: String,
        name: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

pub(crate) fn res_attr(verb: &str, info: &KindSpec, sub: &str, ns: &str, name: &str) -> Attr {
    let resource = if sub.is_empty() {
        info.plural.clone()
    } else {
        format!("{}/{sub}", info.plural)
    };
    // Upstream: a namespace object is in its own namespace.
    let namespace = if info.group.is_empty() && info.plural == "namespaces" {
        name.to_owned()
    } else {
        ns.to_owned()
    };
    Attr::Resource {
        verb: verb.into(),
        group: info.group.clone(),
        resource,
        namespace,
        name: name.into(),
    }
}

pub(crate) fn plain_attr(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attr {
    Attr::Resource {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

/// Upstream's bootstrap grants: `system:public-info-viewer` (everyone), `system:discovery`
/// and `system:basic-user` (authenticated users).
pub(crate) fn bootstrap_allows(authenticated: bool, a: &Attr) -> bool {
    match a {
        Attr::NonResource { verb, path } => {
            let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
            let discovery = ["/api", "/apis", "/openapi"];
            let prefix = ["/api/", "/apis/", "/openapi/"];
            verb == "get"
                && (public.contains(&path.as_str())
                    || (authenticated
                        && (discovery.contains(&path.as_str())
                            || prefix.iter().any(|p| path.starts_with(p)))))
        }
        Attr::Resource {
            verb,
            group,
            resource,
            ..
        } => {
            authenticated
                && verb == "create"
                && ((group == "authorization.k8s.io"
                    && (resource == "selfsubjectaccessreviews"
                        || resource == "selfsubjectrulesreviews"))
                    || (group == "authentication.k8s.io" && resource == "selfsubjectreviews"))
        }
    }
}

impl Attr {
    pub(crate) fn show(&self) -> String {
        match self {
            Attr::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
            } => format!("{verb} {resource}.{group} {namespace}/{name}"),
            Attr::NonResource { verb, path } => format!("{verb} {path}"),
        }
    }
}

impl Perm {
    pub(crate) fn allows(&self, a: &Attr) -> bool {
        let authenticated = !matches!(self, Perm::Anonymous);
        if bootstrap_allows(authenticated, a) {
            return true;
        }
        match (self, a) {
            (
                Perm::Resource {
                    verb,
                    group,
                    resource,
                    scope,
                    names,
                },
                Attr::Resource {
                    verb: v,
                    group: g,
                    resource: r,
                    namespace,
                    name,
                },
            ) => {
                verb == v
                    && group == g
                    && resource == r
                    && match scope {
                        Scope::Cluster => true,
                        Scope::Ns(ns) => namespace == ns,
                    }
                    // Upstream: resourceNames match only requests that name one of them.
                    && (names.is_empty() || names.contains(name))
            }
            (Perm::NonResource { verb, path }, Attr::NonResource { verb: v, path: p }) => {
                verb == v && path == p
            }
            _ => false,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Perm::Resource {
                verb,
                group,
                resource,
                scope,
                names,
            } => format!("{verb} {resource}.{group} in {scope:?} names {names:?}"),
            Perm::NonResource { verb, path } => format!("{verb} {path}"),
            Perm::Nothing => "nothing".into(),
            Perm::Anonymous => "anonymous".into(),
        }
    }
}

pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) perm: Perm,
    /// The resource whose full request set this user sends (its permission's).
    pub(crate) home: Option<KindSpec>,
}

impl User {
    pub(crate) fn token(&self) -> Option<String> {
        (!matches!(self.perm, Perm::Anonymous)).then(|| format!("token-{}", self.name))
    }
}

pub(crate) const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
pub(crate) const SUB_VERBS: &[&str] = &["get", "update", "patch"];
/// The verbs given by `resourceNames` too.
pub(crate) const NAMED_VERBS: &[&str] = &["get", "watch", "create", "update", "patch", "delete"];

pub(crate) fn users(routes: &[Route]) -> Vec<User> {
    let mut out = Vec::new();
    // `resourceNames` are given as suffixes of the user's name (`a` is `<user>-a`).
    let mut add = |mut perm: Perm, home: Option<KindSpec>| {
        let name = format!("m{}", out.len());
        if let Perm::Resource { names, .. } = &mut perm {
            for n in names.iter_mut() {
                *n = format!("{name}-{n}");
            }
        }
        out.push(User { name, perm, home });
    };
    let scopes = |info: &KindSpec| {
        if info.namespaced {
            vec![Scope::Ns(NS), Scope::Cluster]
        } else {
            vec![Scope::Cluster]
        }
    };
    for route in routes {
        match route {
            Route::Resource(info) => {
                let mut verbs: Vec<&str> = VERBS.to_vec();
                if is_rbac_role_kind(info) {
                    verbs.extend(["escalate", "bind"]);
                }
                for scope in scopes(info) {
                    for verb in &verbs {
                        add(
                            Perm::Resource {
                                verb: (*verb).into(),
                                group: info.group.clone(),
                                resource: info.plural.clone(),
                                scope: scope.clone(),
                                names: Vec::new(),
                            },
                            Some(info.clone()),
                        );
                    }
                }
            }
            Route::Subresource(info, sub) => {
                for scope in scopes(info) {
                    for verb in SUB_VERBS {
                        add(
                            Perm::Resource {
                                verb: (*verb).into(),
                                group: info.group.clone(),
                                resource: format!("{}/{sub}", info.plural),
                                scope: scope.clone(),
                                names: Vec::new(),
                            },
                            Some(info.clone()),
                        );
                    }
                }
            }
            Route::Security(path) => {
                for case in security_cases(path) {
                    for check in &case.checks {
                        let Attr::Resource {
                            verb,
                            group,
                            resource,
                            namespace,
                            ..
                        } = check
                        else {
                            continue;
                        };
                        let mut scopes = vec![Scope::Cluster];
                        if namespace == NS {
                            scopes.push(Scope::Ns(NS));
                        }
                        if !namespace.is_empty() && namespace != NS {
                            continue;
                        }
                        for scope in scopes {
                            add(
                                Perm::Resource {
                                    verb: verb.clone(),
                                    group: group.clone(),
                                    resource: resource.clone(),
                                    scope,
                                    names: Vec::new(),
                                },
                                None,
                            );
                        }
                    }
                }
            }
            Route::NonResource(_) => {}
        }
    }
    // One verb restricted by `resourceNames` to the user's own objects `a` (read and
    // written), `d` (deleted) and the names its PUT and apply would create.
    let resources: Vec<KindSpec> = routes
        .iter()
        .filter_map(|r| match r {
            Route::Resource(info) => Some(info.clone()),
            _ => None,
        })
        .collect();
    for info in &resources {
        let scope = if info.namespaced {
            Scope::Ns(NS)
        } else {
            Scope::Cluster
        };
        for verb in NAMED_VERBS {
            add(
                Perm::Resource {
                    verb: (*verb).into(),
                    group: info.group.clone(),
                    resource: info.plural.clone(),
                    scope: scope.clone(),
                    names: ["a", "d", "putc", "applyc"].map(String::from).to_vec(),
                },
                Some(info.clone()),
            );
        }
    }
    for (resource, scope) in [
        ("users", Scope::Cluster),
        ("groups", Scope::Cluster),
        ("serviceaccounts", Scope::Ns(NS)),
        ("serviceaccounts", Scope::Cluster),
    ] {
        add(
            Perm::Resource {
                verb: "impersonate".into(),
                group: String::new(),
                resource: resource.into(),
                scope,
                names: Vec::new(),
            },
            None,
        );
    }
    add(
        Perm::NonResource {
            verb: "get".into(),
            path: "/metrics".into(),
        },
        None,
    );
    add(Perm::Nothing, None);
    add(Perm::Anonymous, None);
    out
}
