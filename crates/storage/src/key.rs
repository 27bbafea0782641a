//! Storage keys and list continue tokens.
//!
//! A [`Key`] is `/{resource}/{namespace}/{name}` (cluster-scoped: `/{resource}/{name}`); a
//! collection key ends in `/` so that listing `/pods/a/` never includes `/pods/ab/...`.
//! Backends may put their own root in front (etcd: `/registry`). Invariant: no segment is
//! empty, `.` or `..`, or contains `/` or NUL, so a key can never escape its resource.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A validated storage key: one object, or a collection (all of a resource, or one namespace).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    path: String,
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
}

fn check_segment(what: &str, s: &str) -> Result<()> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') || s.contains('\0') {
        return Err(Error::bad_request(format!(
            "invalid {what} {s:?}: must be non-empty, not '.' or '..', and contain no '/'"
        )));
    }
    Ok(())
}

impl Key {
    /// The key of one object.
    ///
    /// ```
    /// use listwatch_storage::Key;
    /// assert_eq!(Key::object("pods", Some("ns"), "a").unwrap().path(), "/pods/ns/a");
    /// assert!(Key::object("pods", Some(".."), "a").is_err());
    /// ```
    pub fn object(resource: &str, namespace: Option<&str>, name: &str) -> Result<Self> {
        check_segment("resource", resource)?;
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        check_segment("name", name)?;
        let path = match namespace {
            Some(ns) => format!("/{resource}/{ns}/{name}"),
            None => format!("/{resource}/{name}"),
        };
        Ok(Self {
            path,
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: Some(name.to_owned()),
        })
    }

    /// The key of a collection: every object of `resource`, or those of one namespace.
    pub fn collection(resource: &str, namespace: Option<&str>) -> Result<Self> {
        check_segment("resource", resource)?;
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        let path = match namespace {
            Some(ns) => format!("/{resource}/{ns}/"),
            None => format!("/{resource}/"),
        };
        Ok(Self {
            path,
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: None,
        })
    }

    /// The path, e.g. `/pods/ns/a` or `/pods/ns/`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The resource segment.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The namespace, when the key has one.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object name; `None` for a collection.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether this names a collection.
    pub fn is_collection(&self) -> bool {
        self.name.is_none()
    }

    /// Whether a stored path falls under this key (the key itself, or inside a collection).
    pub fn contains(&self, path: &str) -> bool {
        if self.is_collection() {
            path.starts_with(&self.path)
        } else {
            path == self.path
        }
    }

    /// The name to show in errors about this key.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// Builds `NotFound` for this key.
    pub fn not_found(&self) -> Error {
        Error::NotFound {
            resource: self.resource.clone(),
            name: self.display_name().to_owned(),
        }
    }

    /// Builds `AlreadyExists` for this key.
    pub fn already_exists(&self) -> Error {
        Error::AlreadyExists {
            resource: self.resource.clone(),
            name: self.display_name().to_owned(),
        }
    }

    /// Builds `Conflict` for this key.
    pub fn conflict(&self, message: impl Into<String>) -> Error {
        Error::Conflict {
            resource: self.resource.clone(),
            name: self.display_name().to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.path)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

const CONTINUE_VERSION: &str = "meta.k8s.io/v1";

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

/// Encodes a continue token: the next page starts at `next_key` (a full path under
/// `prefix`, usually the last key plus `"\0"`) and reads at revision `rv`.
///
/// Tokens are Kubernetes' own format: base64url without padding of
/// `{"v":"meta.k8s.io/v1","rv":REV,"start":KEY-without-prefix}`.
pub fn encode_continue(next_key: &str, prefix: &str, rv: u64) -> Result<String> {
    let start = next_key.strip_prefix(prefix).ok_or_else(|| {
        Error::internal(format!("continue key {next_key:?} is outside {prefix:?}"))
    })?;
    let rv = i64::try_from(rv).map_err(|_| Error::internal("revision out of range"))?;
    let token = ContinueToken {
        v: CONTINUE_VERSION.into(),
        rv,
        start: start.to_owned(),
    };
    let json = serde_json::to_vec(&token).map_err(|e| Error::internal(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(json))
}

/// Decodes a continue token against the collection `prefix`, giving the full start key and
/// the revision. The start key is cleaned so that a token can never point outside `prefix`.
///
/// ```
/// use listwatch_storage::{encode_continue, decode_continue};
/// let t = encode_continue("/pods/ns/b\0", "/pods/ns/", 42).unwrap();
/// assert_eq!(decode_continue(&t, "/pods/ns/").unwrap(), ("/pods/ns/b\0".to_owned(), 42));
/// ```
pub fn decode_continue(token: &str, prefix: &str) -> Result<(String, u64)> {
    let bad = |why: &str| Error::bad_request(format!("continue key is not valid: {why}"));
    let raw = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad("not base64url"))?;
    let t: ContinueToken = serde_json::from_slice(&raw).map_err(|_| bad("not a continue token"))?;
    if t.v != CONTINUE_VERSION {
        return Err(Error::bad_request(format!(
            "continue key is not supported by this server: version {:?}",
            t.v
        )));
    }
    if t.rv <= 0 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if t.start.is_empty() {
        return Err(bad("encoded start key empty (version meta.k8s.io/v1)"));
    }
    let absolute = if t.start.starts_with('/') {
        t.start.clone()
    } else {
        format!("/{}", t.start)
    };
    if clean_path(&absolute) != absolute {
        return Err(bad(&format!("{:?}", t.start)));
    }
    let rv = u64::try_from(t.rv).map_err(|_| bad("revision out of range"))?;
    Ok((format!("{prefix}{}", &absolute[1..]), rv))
}

/// Lexical path cleaning as Go's `path.Clean` does for rooted paths.
fn clean_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn collection_keys_do_not_prefix_their_neighbours() {
        let a = Key::collection("pods", Some("a")).unwrap();
        assert!(a.contains("/pods/a/x"));
        assert!(!a.contains("/pods/ab/x"));
        let one = Key::object("pods", Some("a"), "x").unwrap();
        assert!(one.contains("/pods/a/x"));
        assert!(!one.contains("/pods/a/xy"));
    }

    #[test]
    fn rejects_traversal_and_empty_segments() {
        for (r, ns, n) in [
            ("pods", Some(""), "a"),
            ("pods", None, "."),
            ("", None, "a"),
            ("pods", Some("a/b"), "c"),
        ] {
            assert!(Key::object(r, ns, n).is_err());
        }
    }

    #[test]
    fn continue_tokens_reject_traversal_and_bad_versions() {
        let enc = |start: &str, rv: i64, v: &str| {
            URL_SAFE_NO_PAD.encode(
                serde_json::to_vec(&ContinueToken {
                    v: v.into(),
                    rv,
                    start: start.into(),
                })
                .unwrap(),
            )
        };
        assert!(decode_continue(&enc("../secrets/x", 5, CONTINUE_VERSION), "/pods/").is_err());
        assert!(decode_continue(&enc("a/../../b", 5, CONTINUE_VERSION), "/pods/").is_err());
        assert!(decode_continue(&enc("a", 0, CONTINUE_VERSION), "/pods/").is_err());
        assert!(decode_continue(&enc("a", 5, "v2"), "/pods/").is_err());
        assert!(decode_continue(&enc("", 5, CONTINUE_VERSION), "/pods/").is_err());
        assert!(decode_continue("!!!", "/pods/").is_err());
        assert_eq!(
            decode_continue(&enc("a\0", 5, CONTINUE_VERSION), "/pods/")
                .unwrap()
                .0,
            "/pods/a\0"
        );
    }

    #[test]
    fn token_format_is_kubernetes_own() {
        let t = encode_continue("/pods/ns/b\0", "/pods/", 7).unwrap();
        let raw = URL_SAFE_NO_PAD.decode(t).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"v":"meta.k8s.io/v1","rv":7,"start":"ns/b\u{0}"})
        );
    }

    proptest! {
        #[test]
        fn arbitrary_tokens_never_panic_or_escape(s in "\\PC{0,60}") {
            if let Ok((key, _)) = decode_continue(&s, "/pods/") {
                prop_assert!(key.starts_with("/pods/"));
            }
        }

        #[test]
        fn round_trips(name in "[a-z0-9.-]{1,10}", rv in 1u64..(i64::MAX as u64)) {
            let key = format!("/pods/ns/{name}\0");
            let t = encode_continue(&key, "/pods/", rv).unwrap();
            prop_assert_eq!(decode_continue(&t, "/pods/").unwrap(), (key, rv));
        }
    }
}
