//! `Object::from_json` on arbitrary bytes: never panics, and an object that parses survives
//! the wire: re-parsing `to_json_bytes()` gives the same stored JSON, resource version and
//! metadata view (what the watch cache and clients rely on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_api::{Object, SelectableFields};

fuzz_target!(|input: &[u8]| {
    let fields = SelectableFields::new(["spec.nodeName"]);
    let Ok(object) = Object::from_json(input, &fields) else {
        return;
    };
    let wire = object.to_json_bytes();
    let again = match Object::from_json(&wire, &fields) {
        Ok(again) => again,
        Err(e) => panic!(
            "wire form {:?} does not parse: {e}",
            String::from_utf8_lossy(&wire)
        ),
    };
    assert_eq!(again.stored_json(), object.stored_json());
    assert_eq!(again.resource_version(), object.resource_version());
    assert_eq!(again.name(), object.name());
    assert_eq!(again.namespace(), object.namespace());
    assert_eq!(again.uid(), object.uid());
    assert_eq!(again.labels(), object.labels());
    // The stored form is canonical: parsing it again changes nothing.
    let stored = match Object::from_json(object.stored_json(), &fields) {
        Ok(stored) => stored,
        Err(e) => panic!("stored form does not parse: {e}"),
    };
    assert_eq!(stored.stored_json(), object.stored_json());
    assert_eq!(stored.resource_version(), 0);
});
