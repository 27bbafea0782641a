//! `FieldSelector::parse` on arbitrary UTF-8: never panics, and whatever parses prints back
//! to a string that parses to the same selector.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_api::FieldSelector;

fuzz_target!(|input: &str| {
    let Ok(selector) = FieldSelector::parse(input) else {
        return;
    };
    let printed = selector.to_string();
    match FieldSelector::parse(&printed) {
        Ok(again) => assert_eq!(again, selector, "{input:?} printed as {printed:?}"),
        Err(e) => panic!("{input:?} printed as {printed:?}, which does not parse: {e}"),
    }
});
