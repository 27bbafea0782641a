//! Object body decoding as the create and update handlers do it (`limits::decode_json`,
//! `limits::decode_yaml`, `protobuf::decode`), on arbitrary bytes. The first byte picks the
//! format (and, for protobuf, the kind); the rest is the body.
//!
//! Checked beyond "no panic": a decoded body nests at most `MAX_DEPTH` levels; its JSON
//! encoding is bounded linearly by the input (JSON ≤ 8 × input + 64 — a float such as
//! `1e15` prints longer than it is written —, YAML ≤ `yaml_budget(input)`, protobuf
//! ≤ 32 × input + 1024); and every decoded value round-trips through its JSON encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use listwatch_endpoints::limits::{self, MAX_DEPTH};
use listwatch_endpoints::protobuf;
use serde_json::Value;

const KINDS: [&str; 10] = [
    "Namespace",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Service",
    "Deployment",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
];

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let (value, bound) = match selector % 3 {
        0 => match limits::decode_json(body) {
            Ok(v) => (v, body.len() * 8 + 64),
            Err(_) => return,
        },
        1 => match limits::decode_yaml(body) {
            Ok(v) => (v, limits::yaml_budget(body.len())),
            Err(_) => return,
        },
        _ => {
            let kind = KINDS[usize::from(selector / 3) % KINDS.len()];
            match protobuf::decode(body, kind) {
                Ok(m) => (Value::Object(m), body.len() * 32 + 1024),
                Err(_) => return,
            }
        }
    };
    assert!(limits::depth(&value) <= MAX_DEPTH, "too deep");
    let encoded = serde_json::to_vec(&value).unwrap_or_default();
    assert!(
        encoded.len() <= bound,
        "format {}: {} input bytes decoded to {} JSON bytes (bound {bound})",
        selector % 3,
        body.len(),
        encoded.len()
    );
    // What was decoded is what a later read of the stored JSON gives back.
    match limits::decode_json(&encoded) {
        Ok(again) => assert_eq!(again, value, "JSON round trip"),
        Err(e) => panic!("the JSON of a decoded body does not decode: {e}"),
    }
});
