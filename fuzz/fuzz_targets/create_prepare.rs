//! Create preparation as the create handler does it: `limits::decode_json` of the body, then
//! `validation::prepare_create` (type, namespace, `generateName`, name and metadata
//! validation, server-set fields), then the stored object and its storage key. The first
//! byte picks the resource's name rule, whether it is namespaced and the path's namespace;
//! the rest is the body.
//!
//! Checked beyond "no panic": an accepted object has a name that passes its rule, a
//! `generateName` is kept whole up to a character boundary at 58 bytes and completed with 5
//! characters, the namespace is the path's, server-set fields are set and `resourceVersion`
//! is not, annotations total at most 256 KiB, the object parses as the stored `Object`
//! (same name and namespace) and has a storage key, and it is at most 8 × the body + 512
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_api::{Object, text};
use listwatch_endpoints::limits;
use listwatch_endpoints::validation::{self, MAX_ANNOTATIONS_BYTES, prepare_create};
use listwatch_endpoints::{NameValidation, ResourceInfo};
use listwatch_storage::Key;
use serde_json::Value;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let rule = match selector % 4 {
        0 => NameValidation::Subdomain,
        1 => NameValidation::Label,
        2 => NameValidation::Label1035,
        _ => NameValidation::PathSegment,
    };
    let namespaced = selector & 4 == 0;
    let path_ns = match (namespaced, selector & 8 == 0) {
        (true, true) => Some("default"),
        _ => None,
    };
    let info = ResourceInfo::new("", "v1", "things", "Thing")
        .namespaced(namespaced)
        .name_validation(rule)
        .selectable_fields(["spec.nodeName"]);
    let Ok(Value::Object(mut obj)) = limits::decode_json(body) else {
        return;
    };
    let meta_in = obj.get("metadata").and_then(Value::as_object).cloned();
    if prepare_create(&info, &mut obj, path_ns).is_err() {
        return;
    }
    let value = Value::Object(obj);
    let meta = value
        .get("metadata")
        .and_then(Value::as_object)
        .expect("an accepted object has metadata");
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .expect("an accepted object has a name");
    assert!(validation::validate_name(rule, name).is_ok(), "{name:?}");
    let given = meta_in
        .as_ref()
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if given.is_empty() {
        let prefix = meta_in
            .as_ref()
            .and_then(|m| m.get("generateName"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let kept = text::truncate(prefix, 58);
        assert!(name.starts_with(kept), "{name:?} from {prefix:?}");
        assert_eq!(name.len(), kept.len() + 5, "{name:?} from {prefix:?}");
    } else {
        assert_eq!(name, given);
    }
    let ns = meta.get("namespace").and_then(Value::as_str);
    if namespaced {
        assert!(ns.is_some_and(|n| !n.is_empty()));
        if let Some(p) = path_ns {
            assert_eq!(ns, Some(p));
        }
    } else {
        assert_eq!(ns, None);
    }
    for k in ["uid", "creationTimestamp", "generation"] {
        assert!(meta.contains_key(k), "{k} is set");
    }
    assert!(!meta.contains_key("resourceVersion"));
    if let Some(Value::Object(a)) = meta.get("annotations") {
        let total: usize = a
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        assert!(total <= MAX_ANNOTATIONS_BYTES, "annotations total {total}");
    }
    assert!(Key::object("things", ns, name).is_ok(), "{ns:?}/{name:?}");
    let stored = match Object::from_value(value.clone(), &info.selectable_fields) {
        Ok(o) => o,
        Err(e) => panic!("an accepted object is not a storable Object: {e}"),
    };
    assert_eq!(stored.name(), name);
    assert_eq!(stored.namespace(), ns);
    let size = serde_json::to_vec(&value).map_or(0, |b| b.len());
    assert!(
        size <= body.len() * 8 + 512,
        "a {}-byte body was prepared into {size} bytes",
        body.len()
    );
});
