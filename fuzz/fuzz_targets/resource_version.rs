//! `rv::parse` / `rv::parse_optional`: accepted strings are exactly `""` or the decimal form
//! of a `u64` (leading zeros allowed, as `strconv.ParseUint` allows them), and the two
//! functions agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_api::rv;

fuzz_target!(|input: &str| {
    let parsed = rv::parse(input);
    let all_digits = input.bytes().all(|b| b.is_ascii_digit());
    let significant = match input.trim_start_matches('0') {
        "" => "0",
        s => s,
    };
    match &parsed {
        Ok(v) if input.is_empty() => assert_eq!(*v, 0),
        Ok(v) => {
            assert!(all_digits, "{input:?} accepted as {v}");
            assert_eq!(rv::format(*v), significant, "{input:?}");
        }
        Err(e) => {
            assert_eq!(e.value, input);
            // A string of digits may be rejected only for overflowing u64 (20+ digits).
            assert!(!all_digits || significant.len() >= 20, "{input:?} rejected");
        }
    }
    match rv::parse_optional(Some(input)) {
        Ok(None) => assert!(input.is_empty()),
        Ok(Some(v)) => assert_eq!(parsed, Ok(v)),
        Err(e) => assert_eq!(parsed, Err(e)),
    }
});
