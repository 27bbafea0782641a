//! Request paths under `/api` and `/apis`, resolved as upstream resolves them (Go's
//! `net/http` decoding, go-restful's routing and `RequestInfoFactory`).
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
//! namespace, not a resource inside it.
//!
//! The rules, each upstream's:
//!
//! | path | upstream | here |
//! | --- | --- | --- |
//! | `%XX` escapes | Go decodes the whole path before routing | the same: `a%3Ab` is the name `a:b`, `%61pi` is `api` |
//! | `%2F` in a segment | decoded to `/` before routing, so it separates segments | the same (`a%2Fb` as a name is the name `a` with the subresource `b`: 404) |
//! | a malformed escape (`%zz`, a cut `%4`) | `net/http` refuses the request line: 400 | 400 BadRequest `invalid URL escape "%zz"` |
//! | an escape decoding to bytes that are not UTF-8 (`%FF`) | a name no object can have (stored JSON is UTF-8) | 400 BadRequest: names here are UTF-8 strings |
//! | trailing slashes | trimmed (go-restful `TrimRightSlashEnabled`, `splitPath`) | trimmed: `/api/v1/pods/` lists pods |
//! | an empty segment inside (`/api//v1`), a leading `//` | no route: 404 | 404 |
//! | `.` or `..` as a segment | not cleaned (no `ServeMux`): a name `..` is refused by the key function | not cleaned; a name `.`, `..` or containing `%` is 400 `Name parameter invalid: "..": may not be '..'` ([`check_name`]); a namespace `.`/`..` is 400 from the storage key |
//! | overlong request lines | `MaxHeaderBytes` (1 MiB): 431 | hyper refuses a URI over 64 KiB with 414 before routing |
//!
//! Invariants: a resolved [`Target`] has no empty coordinate and none contains `/`; every
//! coordinate is the percent-decoded text of exactly one segment of the decoded path.

use std::borrow::Cow;

/// Why a path names nothing that could be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No route: 404 NotFound.
    #[error("the server could not find the requested resource")]
    NotFound,
    /// The path cannot be decoded: 400 BadRequest.
    #[error("{0}")]
    Malformed(String),
}

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

/// Percent-decodes a request path as Go's `url.PathUnescape` does (`+` stays `+`), into
/// UTF-8 text. Borrows when there is nothing to decode.
pub fn decode(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.contains('%') {
        return Ok(Cow::Borrowed(path));
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hex = |at: usize| bytes.get(at).and_then(|c| char::from(*c).to_digit(16));
        match (hex(i + 1), hex(i + 2)) {
            (Some(hi), Some(lo)) => {
                // Two hex digits are at most 0xff.
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                i += 3;
            }
            _ => {
                let end = path.len().min(i + 3);
                let escape = path.get(i..end).unwrap_or("%");
                return Err(PathError::Malformed(format!(
                    "invalid URL escape {escape:?}"
                )));
            }
        }
    }
    String::from_utf8(out).map(Cow::Owned).map_err(|_| {
        PathError::Malformed(
            "the path is not valid UTF-8 once its percent-escapes are decoded".to_owned(),
        )
    })
}

/// Resolves a request path (as sent, percent-encoded) to what it names.
pub fn parse(path: &str) -> Result<ApiPath, PathError> {
    let decoded = decode(path)?;
    resolve(&decoded).ok_or(PathError::NotFound)
}

/// Upstream's `IsValidPathSegmentName` for a name from the path: refused with 400
/// BadRequest `Name parameter invalid: "..": may not be '..'` (the message of upstream's
/// key functions) before any storage is asked.
pub fn check_name(name: &str) -> Result<(), String> {
    let problems: Vec<&str> = if name == "." {
        vec!["may not be '.'"]
    } else if name == ".." {
        vec!["may not be '..'"]
    } else {
        [("/", "may not contain '/'"), ("%", "may not contain '%'")]
            .into_iter()
            .filter(|(bad, _)| name.contains(bad))
            .map(|(_, m)| m)
            .collect()
    };
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Name parameter invalid: {name:?}: {}",
            problems.join(";")
        ))
    }
}

/// Resolves a decoded path.
fn resolve(path: &str) -> Option<ApiPath> {
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
            Ok(ApiPath::Resource(t)) => t,
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
        assert_eq!(parse("/api"), Ok(ApiPath::CoreVersions));
        assert_eq!(parse("/apis/"), Ok(ApiPath::Groups));
        assert_eq!(parse("/apis/apps"), Ok(ApiPath::Group("apps".into())));
        assert_eq!(
            parse("/api/v1"),
            Ok(ApiPath::Resources {
                group: String::new(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse("/api/v1/namespaces/a/pods/b/c/d"),
            Err(PathError::NotFound)
        );
        assert_eq!(parse("/api//v1"), Err(PathError::NotFound));
        assert_eq!(parse("//api/v1"), Err(PathError::NotFound));
        assert_eq!(parse("/other"), Err(PathError::NotFound));
    }

    #[test]
    fn segments_are_percent_decoded() {
        let t = target("/api/v1/namespaces/default/events/a%3Ab");
        assert_eq!(t.name.as_deref(), Some("a:b"));
        let t = target("/api/v1/namespaces/default/events/a%3ab");
        assert_eq!(t.name.as_deref(), Some("a:b"));
        // Before routing, as Go decodes `URL.Path`: any segment may be escaped.
        let t = target("/%61pi/v1/namespaces/n%73/pods/%C3%A9t%C3%A9");
        assert_eq!(
            (
                t.resource.as_str(),
                t.namespace.as_deref(),
                t.name.as_deref()
            ),
            ("pods", Some("ns"), Some("été"))
        );
        // `+` is not a space in a path.
        assert_eq!(target("/api/v1/pods/a+b").name.as_deref(), Some("a+b"));
    }

    #[test]
    fn an_escaped_slash_separates_segments() {
        let t = target("/api/v1/namespaces/default/configmaps/a%2Fb");
        assert_eq!(
            (t.name.as_deref(), t.subresource.as_deref()),
            (Some("a"), Some("b"))
        );
        // Trimmed like a trailing slash.
        assert_eq!(
            target("/api/v1/namespaces/default/configmaps/a%2F")
                .name
                .as_deref(),
            Some("a")
        );
        assert_eq!(
            parse("/api/v1/namespaces/default/configmaps/a%2F%2Fb"),
            Err(PathError::NotFound)
        );
    }

    #[test]
    fn malformed_escapes_and_non_utf8_are_bad_requests() {
        for (p, m) in [
            ("/api/v1/pods/%zz", "invalid URL escape \"%zz\""),
            ("/api/v1/pods/a%4", "invalid URL escape \"%4\""),
            ("/api/v1/pods/a%", "invalid URL escape \"%\""),
            ("/api/v1/pods/%%41", "invalid URL escape \"%%4\""),
        ] {
            assert_eq!(parse(p), Err(PathError::Malformed(m.to_owned())), "{p}");
        }
        for p in [
            "/api/v1/pods/%FF",
            "/api/v1/pods/%C3",
            "/api/v1/pods/%ED%A0%80",
        ] {
            assert!(matches!(parse(p), Err(PathError::Malformed(_))), "{p}");
        }
    }

    #[test]
    fn trailing_slashes_are_trimmed_and_dots_kept() {
        let t = target("/api/v1/namespaces/default/pods//");
        assert_eq!((t.resource.as_str(), t.name), ("pods", None));
        let t = target("/api/v1/namespaces/default/pods/..");
        assert_eq!(t.name.as_deref(), Some(".."));
        let t = target("/api/v1/namespaces/default/pods/%2E");
        assert_eq!(t.name.as_deref(), Some("."));
    }

    #[test]
    fn names_are_checked_like_upstream_path_segments() {
        assert_eq!(check_name("a:b"), Ok(()));
        assert_eq!(
            check_name(".."),
            Err("Name parameter invalid: \"..\": may not be '..'".to_owned())
        );
        assert_eq!(
            check_name("."),
            Err("Name parameter invalid: \".\": may not be '.'".to_owned())
        );
        assert_eq!(
            check_name("a%b"),
            Err("Name parameter invalid: \"a%b\": may not contain '%'".to_owned())
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_paths_never_panic(p in "(/[a-z0-9.%]{0,6}){0,9}/?") {
            let _ = parse(&p);
        }

        #[test]
        fn escaped_names_resolve_to_themselves(name in "[^/]{1,12}") {
            let escaped: String = name.bytes().map(|b| format!("%{b:02X}")).collect();
            let t = target(&format!("/api/v1/namespaces/n/events/{escaped}"));
            proptest::prop_assert_eq!(t.name.as_deref(), Some(name.as_str()));
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
