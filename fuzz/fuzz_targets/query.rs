//! The endpoints' query parsing (`listwatch_endpoints::query`) on arbitrary query strings:
//! never panics, and what `list_options` accepts is what the selector and resource-version
//! parsers accept, and passes storage's own list validation.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use listwatch_api::{FieldSelector, LabelSelector, rv};
use listwatch_endpoints::ResourceInfo;
use listwatch_endpoints::query::{Query, parse_go_duration};

fuzz_target!(|input: &str| {
    let info = ResourceInfo::new("", "v1", "pods", "Pod").selectable_fields(["spec.nodeName"]);
    let q = Query::parse(Some(input));
    for watch in [false, true] {
        for path_name in [None, Some("a")] {
            let Ok(req) = q.list_options(&info, watch, path_name) else {
                continue;
            };
            let opts = &req.opts;
            assert_eq!(
                Ok(opts.resource_version),
                rv::parse_optional(q.get("resourceVersion"))
            );
            let label = q
                .get("labelSelector")
                .map_or(Ok(LabelSelector::everything()), LabelSelector::parse);
            assert_eq!(Ok(&opts.predicate.label), label.as_ref());
            if path_name.is_none() {
                let field = q
                    .get("fieldSelector")
                    .map_or(Ok(FieldSelector::everything()), FieldSelector::parse);
                assert_eq!(Ok(&opts.predicate.field), field.as_ref());
            }
            if !watch {
                assert!(opts.validate_list().is_ok(), "{input:?}");
                assert_eq!(opts.send_initial_events, None);
            }
        }
    }
    let _ = q.is_watch();
    let _ = q.dry_run();
    let _ = q.validate_write();
    let _ = q.get_resource_version();
    let _ = q.include_object();
    let _ = q.delete_options(input.as_bytes());
    if let Ok(t) = q.timeout(Duration::from_secs(60)) {
        assert!(t <= Duration::from_secs(60));
    }
    // A Go duration keeps its value with an explicit '+'.
    if let Some(d) = parse_go_duration(input) {
        if !input.starts_with('+') && input != "0" {
            assert_eq!(parse_go_duration(&format!("+{input}")), Some(d));
        }
    }
});
