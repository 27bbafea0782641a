//! Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`; `kubectl --as`), as upstream's legacy `WithImpersonation`
//! (`k8s.io/apiserver/pkg/endpoints/filters/impersonation`): what the headers ask for
//! ([`requested`]), the `impersonate` checks against the requester, and the user the request
//! then runs as ([`impersonate`]).
//!
//! The rules, each upstream's unless marked *stricter*:
//!
//! | headers | result |
//! | --- | --- |
//! | no impersonation header | the requester, unchanged |
//! | a value that is not UTF-8 (a header carries raw bytes, as Go's `net/http` keeps them) | 400 — *stricter*: upstream keeps the bytes; a Rust string cannot, and dropping the header would run the request as the requester |
//! | `Impersonate-User` present but empty | 400 — *stricter*: upstream treats an empty value as absent and runs the request as the requester |
//! | `Impersonate-User` or `Impersonate-Uid` sent twice | 400 — *stricter*: upstream takes the first, so a value a proxy appends after the client's would be ignored |
//! | groups, uid or extra without a user | 400 `requested … without impersonating a user` |
//! | `system:serviceaccount:<ns>:<name>` (valid namespace and name) | checked as `impersonate` on `serviceaccounts` `<name>` in `<ns>`; other names as `users` |
//! | a ServiceAccount with no `Impersonate-Group` | groups `system:serviceaccounts`, `system:serviceaccounts:<ns>` |
//! | a ServiceAccount with `Impersonate-Group` | exactly the groups asked for (no ServiceAccount groups) |
//! | each group, uid, extra value | its own `impersonate` check (`groups`; `uids` and `userextras/<key>` in `authentication.k8s.io`) |
//! | `Impersonate-Extra-<key>` | the key lower-cased and percent-decoded (a malformed escape is kept as sent) |
//! | user `system:anonymous` | `system:unauthenticated` added unless asked for |
//! | any other user | `system:authenticated` added unless `system:authenticated` or `system:unauthenticated` is among its groups |
//! | an empty `Impersonate-Uid` with a user | no uid, as upstream |
//! | an `Impersonate-Uid` header, even empty, without a user | 400 — *stricter*: upstream ignores an empty one and runs the request as the requester |
//!
//! Invariant: a request carrying an impersonation header runs either as the user the
//! headers name, after every check passed, or not at all (400 or 403); never as its
//! requester.

use axum::http::{HeaderMap, HeaderValue};
use listwatch_api::echo::echo;
use listwatch_api::status::Status;
use listwatch_auth::user::{
    ALL_AUTHENTICATED, ALL_SERVICE_ACCOUNTS, ALL_UNAUTHENTICATED, ANONYMOUS,
};
use listwatch_auth::{Attributes, Authorizer, UserInfo};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// What the impersonation headers of a request ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    /// The user name (never empty).
    pub user: String,
    /// The uid; empty for none.
    pub uid: String,
    /// The groups, as sent (an empty list: none asked for).
    pub groups: Vec<String>,
    /// Extra values by decoded key, in header order.
    pub extra: Vec<(String, String)>,
}

/// Why the headers cannot be used: the request fails with 400 BadRequest and this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadHeaders(pub String);

/// A header value as text: its bytes as UTF-8 (what Go's `net/http` hands upstream, for
/// any UTF-8 a client sends), or [`BadHeaders`].
fn text(name: &str, v: &HeaderValue) -> Result<String, BadHeaders> {
    std::str::from_utf8(v.as_bytes())
        .map(str::to_owned)
        .map_err(|_| BadHeaders(format!("the {name} header value is not valid UTF-8")))
}

/// The one value of a header that may appear once; `None` when absent.
fn single(h: &HeaderMap, name: &str, shown: &str) -> Result<Option<String>, BadHeaders> {
    let mut all = h.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(BadHeaders(format!(
            "the {shown} header may be sent only once"
        )));
    }
    text(shown, first).map(Some)
}

/// Upstream's `url.PathUnescape` of an extra key, keeping the key as sent when an escape is
/// malformed; `None` when the decoded bytes are not UTF-8.
fn unescape_key(key: &str) -> Option<String> {
    if !key.contains('%') {
        return Some(key.to_owned());
    }
    match listwatch_endpoints::path::decode(key) {
        Ok(k) => Some(k.into_owned()),
        Err(listwatch_endpoints::path::PathError::Malformed(m))
            if m.starts_with("invalid URL escape") =>
        {
            Some(key.to_owned())
        }
        Err(_) => None,
    }
}

/// What the impersonation headers ask for: `None` when there are none, [`BadHeaders`] when
/// they cannot be used.
pub fn requested(h: &HeaderMap) -> Result<Option<Requested>, BadHeaders> {
    let user = single(h, USER, "Impersonate-User")?;
    let uid_header = single(h, UID, "Impersonate-Uid")?;
    let uid_sent = uid_header.is_some();
    let uid = uid_header.unwrap_or_default();
    let groups = h
        .get_all(GROUP)
        .iter()
        .map(|v| text("Impersonate-Group", v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut extra = Vec::new();
    for (name, v) in h {
        // Header names are lower-case here (HTTP/2 requires it, hyper folds HTTP/1's).
        let Some(raw_key) = name.as_str().strip_prefix(EXTRA_PREFIX) else {
            continue;
        };
        let key = unescape_key(raw_key).ok_or_else(|| {
            BadHeaders(format!(
                "the Impersonate-Extra-{raw_key} header's key is not valid UTF-8 once percent-decoded"
            ))
        })?;
        extra.push((key, text("Impersonate-Extra-*", v)?));
    }
    match user {
        Some(u) if u.is_empty() => Err(BadHeaders(
            "the Impersonate-User header is empty: name the user to impersonate".into(),
        )),
        Some(user) => Ok(Some(Requested {
            user,
            uid,
            groups,
            extra,
        })),
        None if groups.is_empty() && !uid_sent && extra.is_empty() => Ok(None),
        None => Err(BadHeaders(format!(
            "requested {} without impersonating a user",
            describe(uid_sent.then_some(uid.as_str()), &groups, &extra)
        ))),
    }
}

fn describe(uid: Option<&str>, groups: &[String], extra: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    if !groups.is_empty() {
        parts.push(format!("groups {}", echo(&format!("{groups:?}"))));
    }
    if let Some(uid) = uid {
        parts.push(format!("uid {:?}", echo(uid)));
    }
    if !extra.is_empty() {
        let keys: Vec<&str> = extra.iter().map(|(k, _)| k.as_str()).collect();
        parts.push(format!("extra {}", echo(&format!("{keys:?}"))));
    }
    parts.join(", ")
}

/// `(namespace, name)` when `user` is a ServiceAccount's name by upstream's
/// `serviceaccount.SplitUsername`: a valid namespace (DNS-1123 label) and a valid account
/// name (DNS-1123 subdomain); anything else is a plain user name.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = listwatch_auth::user::split_service_account(user)?;
    let valid = listwatch_endpoints::validation::validate_dns_label(ns).is_ok()
        && listwatch_api::labels::validate_dns_subdomain(name).is_ok();
    valid.then_some((ns, name))
}

/// Checks every `impersonate` the request needs against `requester` and returns the user
/// it runs as; a refused check is upstream's 403 Status for that check.
pub fn impersonate(
    authz: &dyn Authorizer,
    requester: &UserInfo,
    want: Requested,
) -> Result<UserInfo, Box<Status>> {
    let sa = service_account(&want.user);
    let mut checks: Vec<Attributes> = Vec::new();
    checks.push(match sa {
        Some((ns, name)) => {
            Attributes::resource("impersonate", "", "serviceaccounts", ns).named(name)
        }
        None => Attributes::resource("impersonate", "", "users", "").named(&want.user),
    });
    if !want.uid.is_empty() {
        checks.push(
            Attributes::resource("impersonate", "authentication.k8s.io", "uids", "")
                .named(&want.uid),
        );
    }
    for g in &want.groups {
        checks.push(Attributes::resource("impersonate", "", "groups", "").named(g));
    }
    for (k, v) in &want.extra {
        checks.push(
            Attributes::resource("impersonate", "authentication.k8s.io", "userextras", "")
                .with_subresource(k)
                .named(v),
        );
    }
    for a in &checks {
        let d = authz.authorize(requester, a);
        if !d.allowed() {
            return Err(Box::new(listwatch_auth::authz::forbidden_status(
                requester,
                a,
                d.reason(),
            )));
        }
    }
    let mut groups = want.groups;
    if groups.is_empty()
        && let Some((ns, _)) = sa
    {
        groups = vec![
            ALL_SERVICE_ACCOUNTS.to_owned(),
            format!("{ALL_SERVICE_ACCOUNTS}:{ns}"),
        ];
    }
    let has = |g: &str, groups: &[String]| groups.iter().any(|x| x == g);
    if want.user == ANONYMOUS {
        if !has(ALL_UNAUTHENTICATED, &groups) {
            groups.push(ALL_UNAUTHENTICATED.to_owned());
        }
    } else if !has(ALL_AUTHENTICATED, &groups) && !has(ALL_UNAUTHENTICATED, &groups) {
        groups.push(ALL_AUTHENTICATED.to_owned());
    }
    let mut user = UserInfo::new(want.user, groups);
    user.uid = want.uid;
    for (k, v) in want.extra {
        user.extra.entry(k).or_default().push(v);
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_auth::authz::AlwaysAllow;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    fn as_user(pairs: &[(&str, &[u8])]) -> UserInfo {
        let want = requested(&headers(pairs)).unwrap().unwrap();
        impersonate(&AlwaysAllow, &UserInfo::new("root", [""; 0]), want).unwrap()
    }

    #[test]
    fn utf8_values_are_names_and_other_bytes_are_refused() {
        let u = as_user(&[("Impersonate-User", "josé".as_bytes())]);
        assert_eq!(u.name, "josé");
        for name in [
            "Impersonate-User",
            "Impersonate-Group",
            "Impersonate-Uid",
            "Impersonate-Extra-k",
        ] {
            let mut pairs: Vec<(&str, &[u8])> = vec![("Impersonate-User", b"bob")];
            if name == "Impersonate-User" {
                pairs.clear();
            }
            pairs.push((name, b"jos\xe9"));
            let e = requested(&headers(&pairs)).unwrap_err();
            assert!(e.0.contains("not valid UTF-8"), "{name}: {e}");
        }
    }

    #[test]
    fn unusable_user_headers_are_refused() {
        assert_eq!(requested(&headers(&[])).unwrap(), None);
        for pairs in [
            vec![("Impersonate-User", b"".as_slice())],
            vec![
                ("Impersonate-User", b"".as_slice()),
                ("Impersonate-Group", b"g"),
            ],
            vec![
                ("Impersonate-User", b"a".as_slice()),
                ("Impersonate-User", b"b"),
            ],
            vec![("Impersonate-Group", b"g".as_slice())],
            vec![("Impersonate-Uid", b"1".as_slice())],
            vec![("Impersonate-Uid", b"".as_slice())],
            vec![("Impersonate-Extra-scopes", b"x".as_slice())],
        ] {
            assert!(requested(&headers(&pairs)).is_err(), "{pairs:?}");
        }
        let e = requested(&headers(&[("Impersonate-Group", b"dev")])).unwrap_err();
        assert!(e.0.contains("without impersonating a user"), "{e}");
    }

    #[test]
    fn groups_follow_upstream() {
        let sa = as_user(&[("Impersonate-User", b"system:serviceaccount:demo:bot")]);
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:demo",
                ALL_AUTHENTICATED
            ]
        );
        let sa = as_user(&[
            ("Impersonate-User", b"system:serviceaccount:demo:bot"),
            ("Impersonate-Group", b"dev"),
        ]);
        assert_eq!(sa.groups, ["dev", ALL_AUTHENTICATED]);
        let anon = as_user(&[("Impersonate-User", b"system:anonymous")]);
        assert_eq!(anon.groups, [ALL_UNAUTHENTICATED]);
        let unauth = as_user(&[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Group", b"system:unauthenticated"),
        ]);
        assert_eq!(unauth.groups, [ALL_UNAUTHENTICATED]);
        // Not a valid ServiceAccount name: a plain user, no ServiceAccount groups.
        let odd = as_user(&[("Impersonate-User", b"system:serviceaccount:Demo:bot")]);
        assert_eq!(odd.groups, [ALL_AUTHENTICATED]);
    }

    #[test]
    fn extra_keys_are_percent_decoded_and_uid_kept() {
        let u = as_user(&[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Uid", b"u-1"),
            ("Impersonate-Extra-example.com%2fscope", b"a"),
            ("Impersonate-Extra-example.com%2fscope", b"b"),
            ("Impersonate-Extra-bad%zz", b"c"),
        ]);
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.extra["example.com/scope"], ["a", "b"]);
        assert_eq!(u.extra["bad%zz"], ["c"]);
        let e = requested(&headers(&[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Extra-k%ff", b"c"),
        ]))
        .unwrap_err();
        assert!(e.0.contains("not valid UTF-8"), "{e}");
    }
}
