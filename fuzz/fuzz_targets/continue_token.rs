//! `decode_continue` on arbitrary tokens never escapes the collection: the key it gives
//! starts with the prefix and has no `..` or `.` segment. Tokens are also tried as the
//! base64url of the fuzz input, so the JSON and path checks behind the decoding get fuzzed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_storage::{decode_continue, encode_continue};

const PREFIX: &str = "/pods/";

fn check(token: &str) {
    let Ok((key, rv)) = decode_continue(token, PREFIX) else {
        return;
    };
    assert!(key.starts_with(PREFIX), "{token:?} gave {key:?}");
    let rest = &key[PREFIX.len()..];
    assert!(
        !rest.split('/').any(|s| s == ".." || s == "."),
        "{token:?} gave {key:?}"
    );
    assert!(!key.contains("/../"), "{token:?} gave {key:?}");
    assert!(rv > 0);
    // What decodes re-encodes to a token that decodes to the same place.
    match encode_continue(&key, PREFIX, rv) {
        Ok(t) => assert_eq!(decode_continue(&t, PREFIX).ok(), Some((key, rv))),
        Err(e) => panic!("{key:?} at {rv} does not re-encode: {e}"),
    }
}

fuzz_target!(|input: &[u8]| {
    if let Ok(token) = std::str::from_utf8(input) {
        check(token);
    }
    check(&base64url(input));
});

/// base64url without padding, written out so that the target shares no code with the parser.
fn base64url(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}
