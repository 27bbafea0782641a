//! `LabelSelector::parse` on arbitrary UTF-8: never panics, and whatever parses prints back
//! to a string that parses to the same selector (the cacher and clients re-send selectors
//! in their printed form).
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_api::LabelSelector;

fuzz_target!(|input: &str| {
    let Ok(selector) = LabelSelector::parse(input) else {
        return;
    };
    let printed = selector.to_string();
    match LabelSelector::parse(&printed) {
        Ok(again) => assert_eq!(again, selector, "{input:?} printed as {printed:?}"),
        Err(e) => panic!("{input:?} printed as {printed:?}, which does not parse: {e}"),
    }
});
