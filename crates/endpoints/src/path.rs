//! Request paths under `/api` and `/apis`, parsed like upstream's `RequestInfoFactory`.
//!
//! ```text
//! /api                                   core versions
//! /api/v1                                core resources
//! /apis, /apis/{g}, /apis/{g}/{v}        groups, one group, its resources
//! {prefix}[/watch]/namespaces/{ns}/{resource}[/{name}[/{subresource}]]
//! {prefix}[/watch]/{resource}[/{name}[/{subresource}]]
//! ```
//!
//! `namespaces/{name}/status` and `namespaces/{name}/finalize` are subresources of the
//! namespace, not a resource inside it. Invariant: no segment is empty.

/// What a path under `/api` or `/apis` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`
    Resources {
        /// `""` for core.
        group: String,
        /// e.g. `v1`.
        version: String,
    },
    /// A resource request.
    Resource(Target),
}

/// A resource request's coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `""` for core.
    pub group: String,
    /// e.g. `v1`.
    pub version: String,
    /// The plural resource name.
    pub resource: String,
    /// The namespace from the path.
    pub namespace: Option<String>,
    /// The object name.
    pub name: Option<String>,
    /// e.g. `status`.
    pub subresource: Option<String>,
    /// Whether the path had the legacy `/watch/` prefix.
    pub legacy_watch: bool,
}

/// Parses a path; `None` when it names nothing this server could serve.
pub fn parse(path: &str) -> Option<ApiPath> {
    let trimmed = path.trim_end_matches('/');
    let segs: Vec<&str> = trimmed.split('/').skip(1).collect();
    if segs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api"] => return Some(ApiPath::CoreVersions),
        ["apis"] => return Some(ApiPath::Groups),
        ["apis", g] => return Some(ApiPath::Group((*g).to_owned())),
        ["api", v] => {
            return Some(ApiPath::Resources {
                group: String::new(),
                version: (*v).to_owned(),
            });
        }
        ["apis", g, v] => {
            return Some(ApiPath::Resources {
                group: (*g).to_owned(),
                version: (*v).to_owned(),
            });
        }
        ["api", v, rest @ ..] => (String::new(), *v, rest),
        ["apis", g, v, rest @ ..] => ((*g).to_owned(), *v, rest),
        _ => return None,
    };
    let (legacy_watch, mut rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let mut namespace = None;
    if let ["namespaces", ns, tail @ ..] = rest
        && !tail.is_empty()
        && !matches!(tail[0], "status" | "finalize")
    {
        namespace = Some((*ns).to_owned());
        rest = tail;
    }
    let (resource, name, subresource) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(*n), None),
        [r, n, s] => (*r, Some(*n), Some(*s)),
        _ => return None,
    };
    Some(ApiPath::Resource(Target {
        group,
        version: version.to_owned(),
        resource: resource.to_owned(),
        namespace,
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        legacy_watch,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(p: &str) -> Target {
        match parse(p) {
            Some(ApiPath::Resource(t)) => t,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn parses_namespaced_and_cluster_paths() {
        let t = target("/api/v1/namespaces/ns1/pods/web/status");
        assert_eq!(
            (t.namespace.as_deref(), t.resource.as_str()),
            (Some("ns1"), "pods")
        );
        assert_eq!(
            (t.name.as_deref(), t.subresource.as_deref()),
            (Some("web"), Some("status"))
        );
        let t = target("/api/v1/namespaces/ns1");
        assert_eq!(
            (t.resource.as_str(), t.name.as_deref(), t.namespace),
            ("namespaces", Some("ns1"), None)
        );
        let t = target("/api/v1/namespaces/ns1/status");
        assert_eq!(
            (t.resource.as_str(), t.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let t = target("/apis/apps/v1/watch/namespaces/a/deployments");
        assert!(t.legacy_watch);
        assert_eq!(
            (t.group.as_str(), t.resource.as_str()),
            ("apps", "deployments")
        );
        let t = target("/api/v1/pods");
        assert_eq!((t.resource.as_str(), t.namespace), ("pods", None));
    }

    #[test]
    fn discovery_paths_and_garbage() {
        assert_eq!(parse("/api"), Some(ApiPath::CoreVersions));
        assert_eq!(parse("/apis/"), Some(ApiPath::Groups));
        assert_eq!(parse("/apis/apps"), Some(ApiPath::Group("apps".into())));
        assert_eq!(
            parse("/api/v1"),
            Some(ApiPath::Resources {
                group: String::new(),
                version: "v1".into()
            })
        );
        assert_eq!(parse("/api/v1/namespaces/a/pods/b/c/d"), None);
        assert_eq!(parse("/api//v1"), None);
        assert_eq!(parse("/other"), None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_paths_never_panic(p in "(/[a-z0-9.]{0,6}){0,9}/?") {
            let _ = parse(&p);
        }

        #[test]
        fn namespaced_item_paths_parse_back(
            ns in "[a-z][a-z0-9]{0,5}", res in "[a-z]{1,8}", name in "[a-z0-9][a-z0-9.-]{0,8}",
        ) {
            proptest::prop_assume!(res != "watch" && res != "namespaces");
            let t = target(&format!("/apis/apps/v1/namespaces/{ns}/{res}/{name}"));
            proptest::prop_assert_eq!(t.namespace.as_deref(), Some(ns.as_str()));
            proptest::prop_assert_eq!(t.resource, res);
            proptest::prop_assert_eq!(t.name.as_deref(), Some(name.as_str()));
        }
    }
}
