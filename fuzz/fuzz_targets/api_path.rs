//! `listwatch_endpoints::path::parse` on arbitrary paths: never panics, and never yields an
//! empty coordinate (an empty namespace or name would address a whole collection).
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_endpoints::path::{ApiPath, parse};

fuzz_target!(|input: &str| {
    match parse(input) {
        None | Some(ApiPath::CoreVersions | ApiPath::Groups) => {}
        Some(ApiPath::Group(g)) => assert!(!g.is_empty()),
        Some(ApiPath::Resources { version, .. }) => assert!(!version.is_empty()),
        Some(ApiPath::Resource(t)) => {
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
        }
    }
});
