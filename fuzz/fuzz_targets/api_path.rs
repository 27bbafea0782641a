//! `listwatch_endpoints::path::parse` on arbitrary paths: never panics, never yields an
//! empty coordinate or one containing `/` (an empty namespace or name would address a whole
//! collection), and a resolved resource path round-trips: every coordinate percent-encoded
//! byte by byte resolves to the same target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_endpoints::path::{ApiPath, PathError, Target, parse};

fn escape(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn rebuild(t: &Target) -> String {
    let mut p = if t.group.is_empty() {
        format!("/api/{}", escape(&t.version))
    } else {
        format!("/apis/{}/{}", escape(&t.group), escape(&t.version))
    };
    if t.legacy_watch {
        p.push_str("/watch");
    }
    if let Some(ns) = &t.namespace {
        p.push_str("/namespaces/");
        p.push_str(&escape(ns));
    }
    for part in [Some(&t.resource), t.name.as_ref(), t.subresource.as_ref()]
        .into_iter()
        .flatten()
    {
        p.push('/');
        p.push_str(&escape(part));
    }
    p
}

fuzz_target!(|input: &str| {
    match parse(input) {
        Err(PathError::NotFound | PathError::Malformed(_))
        | Ok(ApiPath::CoreVersions | ApiPath::Groups) => {}
        Ok(ApiPath::Group(g)) => assert!(!g.is_empty()),
        Ok(ApiPath::Resources { version, .. }) => assert!(!version.is_empty()),
        Ok(ApiPath::Resource(t)) => {
            assert!(
                !t.version.is_empty() && !t.resource.is_empty(),
                "{input:?}: {t:?}"
            );
            for part in [&t.namespace, &t.name, &t.subresource]
                .into_iter()
                .flatten()
            {
                assert!(!part.is_empty(), "{input:?}: {t:?}");
                assert!(!part.contains('/'), "{input:?}: {t:?}");
            }
            let again = rebuild(&t);
            assert_eq!(parse(&again), Ok(ApiPath::Resource(t)), "{input:?} → {again:?}");
        }
    }
});
