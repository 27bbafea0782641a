//! The differential fixture suite: each file of `tests/fixtures/upstream/` is one request
//! and the answer upstream's kube-apiserver gives it — status, the headers clients read,
//! the body field by field, the order of the body's top-level members and its trailing
//! newline — derived from upstream's code and documentation (each file cites its source),
//! never recorded from this binary. This test sends every case to the binary and compares.
//!
//! A fixture (JSON) holds:
//! - `source`: the upstream files or documents the expected answer follows (a string or a
//!   list of them);
//! - `setup`: requests sent first, each of which must succeed (2xx);
//! - `request`: `method`, `path`, optional `headers` (name → value) and `body` (JSON) or
//!   `body_text` (sent as is);
//! - `response`: `status`; `headers` (name → value, `null`: absent); `body` (expected JSON)
//!   or `body_yaml` (expected value of a YAML body) or `body_text` (the exact body of a
//!   response that is not JSON) or `body_at` (JSON pointer → expected
//!   value, for a body whose other parts upstream words in long generated text such as a
//!   Table's column descriptions); `top_level_keys` (the body's member
//!   order); `trailing_newline`; or, for a watch, `frames` (one JSON object per line, each
//!   line ending with a newline) and `frame_object_keys` (the member order of each frame's
//!   object);
//! - optionally `known_difference`: why this binary still answers the whole case differently,
//!   or `known_differences`: field path (as the failure messages print it, e.g.
//!   `body.metadata.generation`) → why this one field still differs, the rest being compared
//!   as usual. Each is listed in docs/conformance.md, and must still differ: when it
//!   matches, the marker goes.
//!
//! The server serves the custom resource of `tests/fixtures/upstream-resources.yaml` besides
//! the built-in ones. Every `{ns}` in a file becomes the case's own namespace (created before its setup), so
//! cases never see each other's objects. In an expected body these values match anything
//! of their kind — the only values the comparison ignores, as they are generated:
//! `<uid>` (a non-empty string), `<resourceVersion>` (a decimal string), `<timestamp>`
//! (RFC 3339, seconds, UTC), `<generated:PREFIX>` (PREFIX and five more characters, as
//! `generateName` makes). Everything else must be equal; an object may not have members
//! the fixture does not list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use common::{Server, http};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Sends one request of a fixture.
fn send(addr: &str, req: &Value) -> common::Response {
    let method = req["method"].as_str().expect("request.method");
    let path = req["path"].as_str().expect("request.path");
    let headers: Vec<(String, String)> = req["headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let body = match (&req["body"], &req["body_text"]) {
        (Value::Null, Value::String(t)) => t.clone().into_bytes(),
        (Value::Null, _) => Vec::new(),
        (b, _) => b.to_string().into_bytes(),
    };
    if !body.is_empty()
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("Content-Type", "application/json"));
    }
    http(addr, method, path, &headers, &body)
}

/// The members of a JSON object's top level, in the order the bytes hold them.
fn key_order(json: &[u8]) -> Result<Vec<String>, String> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut keys = Vec::new();
            while let Some((k, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                keys.push(k);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    de.deserialize_map(Keys).map_err(|e| e.to_string())
}

/// Whether `got` is what the generated-value marker `marker` stands for (`None`: not a
/// marker).
fn generated(marker: &str, got: &Value) -> Option<bool> {
    let s = got.as_str();
    Some(match marker {
        "<uid>" => s.is_some_and(|s| !s.is_empty()),
        "<resourceVersion>" => {
            s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        }
        "<timestamp>" => s.is_some_and(|s| {
            s.len() == 20 && s.ends_with('Z') && s.as_bytes().get(10) == Some(&b'T')
        }),
        _ => {
            let prefix = marker.strip_prefix("<generated:")?.strip_suffix('>')?;
            s.and_then(|s| s.strip_prefix(prefix))
                .is_some_and(|rest| rest.len() == 5)
        }
    })
}

/// Compares `got` with `want` at `path`, adding each difference to `diffs`.
fn compare(path: &str, want: &Value, got: &Value, diffs: &mut Vec<String>) {
    if let Some(ok) = want.as_str().and_then(|m| generated(m, got)) {
        if !ok {
            diffs.push(format!("{path}: expected {want}, got {got}"));
        }
        return;
    }
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    Some(gv) => compare(&format!("{path}.{k}"), wv, gv, diffs),
                    None => diffs.push(format!("{path}.{k}: expected {wv}, got nothing")),
                }
            }
            for (k, gv) in g {
                if !w.contains_key(k) {
                    diffs.push(format!("{path}.{k}: expected nothing, got {gv}"));
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                compare(&format!("{path}[{i}]"), wv, gv, diffs);
            }
        }
        _ if want == got => {}
        _ => diffs.push(format!("{path}: expected {want}, got {got}")),
    }
}

/// Every difference between the answer and the fixture's expected `response`.
fn differences(want: &Value, resp: &common::Response) -> Vec<String> {
    let mut diffs = Vec::new();
    let body_text = String::from_utf8_lossy(&resp.body);
    if want["status"].as_u64() != Some(u64::from(resp.status)) {
        diffs.push(format!(
            "status: expected {}, got {} ({body_text})",
            want["status"], resp.status
        ));
    }
    if let Some(headers) = want["headers"].as_object() {
        for (name, value) in headers {
            let got = resp.header(&name.to_ascii_lowercase());
            let ok = match (value.as_str(), got) {
                (None, None) => true,
                (Some("<present>"), Some(_)) => true,
                (Some(w), Some(g)) => w == g,
                _ => false,
            };
            if !ok {
                diffs.push(format!("header {name}: expected {value}, got {got:?}"));
            }
        }
    }
    if let Some(newline) = want["trailing_newline"].as_bool()
        && resp.body.ends_with(b"\n") != newline
    {
        diffs.push(format!(
            "trailing newline: expected {newline}, got {} ({body_text:?})",
            !newline
        ));
    }
    if let Some(keys) = want["top_level_keys"].as_array() {
        match key_order(&resp.body) {
            Ok(got) if Value::from(got.clone()) == Value::Array(keys.clone()) => {}
            Ok(got) => diffs.push(format!(
                "top-level key order: expected {}, got {got:?}",
                Value::Array(keys.clone())
            )),
            Err(e) => diffs.push(format!("body is not a JSON object ({e}): {body_text:?}")),
        }
    }
    if !want["body"].is_null() {
        match serde_json::from_slice::<Value>(&resp.body) {
            Ok(got) => compare("body", &want["body"], &got, &mut diffs),
            Err(e) => diffs.push(format!("body is not JSON ({e}): {body_text:?}")),
        }
    }
    if let Some(at) = want["body_at"].as_object() {
        match serde_json::from_slice::<Value>(&resp.body) {
            Ok(got) => {
                for (pointer, w) in at {
                    let g = got.pointer(pointer).unwrap_or(&Value::Null);
                    compare(&format!("body{pointer}"), w, g, &mut diffs);
                }
            }
            Err(e) => diffs.push(format!("body is not JSON ({e}): {body_text:?}")),
        }
    }
    if let Some(text) = want["body_text"].as_str()
        && resp.body != text.as_bytes()
    {
        diffs.push(format!("body: expected {text:?}, got {body_text:?}"));
    }
    if !want["body_yaml"].is_null() {
        match serde_yaml::from_slice::<Value>(&resp.body) {
            Ok(got) => compare("body", &want["body_yaml"], &got, &mut diffs),
            Err(e) => diffs.push(format!("body is not YAML ({e}): {body_text:?}")),
        }
    }
    if let Some(frames) = want["frames"].as_array() {
        compare_frames(want, frames, &resp.body, &mut diffs);
    }
    diffs
}

fn compare_frames(want: &Value, frames: &[Value], body: &[u8], diffs: &mut Vec<String>) {
    if !body.is_empty() && !body.ends_with(b"\n") {
        diffs.push("watch: the last frame does not end with a newline".into());
    }
    let lines: Vec<&[u8]> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() != frames.len() {
        diffs.push(format!(
            "watch: expected {} frames, got {}: {:?}",
            frames.len(),
            lines.len(),
            String::from_utf8_lossy(body)
        ));
        return;
    }
    for (i, (line, frame)) in lines.iter().zip(frames).enumerate() {
        match serde_json::from_slice::<Value>(line) {
            Ok(got) => compare(&format!("frame[{i}]"), frame, &got, diffs),
            Err(e) => diffs.push(format!("frame[{i}] is not one JSON object: {e}")),
        }
        match key_order(line) {
            Ok(keys) if keys == ["type", "object"] => {}
            other => diffs.push(format!(
                "frame[{i}] key order: expected [type, object], got {other:?}"
            )),
        }
        if let Some(keys) = want["frame_object_keys"].as_array() {
            let object = line
                .windows(10)
                .position(|w| w == b"\"object\":{")
                .and_then(|at| line.get(at + 9..line.len().saturating_sub(1)));
            match object.map(key_order) {
                Some(Ok(got)) if Value::from(got.clone()) == Value::Array(keys.clone()) => {}
                other => diffs.push(format!(
                    "frame[{i}].object key order: expected {}, got {other:?}",
                    Value::Array(keys.clone())
                )),
            }
        }
    }
}

/// Runs one fixture in namespace `ns`; its differences, or an error of its setup.
fn run(addr: &str, ns: &str, text: &str) -> Result<(Value, Vec<String>), String> {
    let fixture: Value = serde_json::from_str(&text.replace("{ns}", ns))
        .map_err(|e| format!("not a JSON fixture: {e}"))?;
    let cited = match &fixture["source"] {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => {
            !a.is_empty() && a.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty()))
        }
        _ => false,
    };
    if !cited {
        return Err("cites no upstream source".into());
    }
    let ns_body = format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#);
    let created = http(
        addr,
        "POST",
        "/api/v1/namespaces",
        &[("Content-Type", "application/json")],
        ns_body.as_bytes(),
    );
    if created.status != 201 {
        return Err(format!("namespace {ns}: {}", created.status));
    }
    for (i, step) in fixture["setup"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let resp = send(addr, step);
        if !(200..300).contains(&resp.status) {
            return Err(format!(
                "setup[{i}] answered {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            ));
        }
    }
    let resp = send(addr, &fixture["request"]);
    let diffs = differences(&fixture["response"], &resp);
    Ok((fixture, diffs))
}

/// Takes out of `diffs` those at a path the fixture's `known_differences` lists, and adds a
/// difference for each listed path that no longer differs.
fn tolerate(fixture: &Value, diffs: &mut Vec<String>) {
    let Some(known) = fixture["known_differences"].as_object() else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    diffs.retain(
        |d| match known.keys().find(|k| d.starts_with(&format!("{k}:"))) {
            Some(k) => {
                eprintln!(
                    "{}: known difference ({}): {d}",
                    fixture["request"]["path"], known[k]
                );
                seen.insert(k.clone());
                false
            }
            None => true,
        },
    );
    for (k, why) in known {
        if !seen.contains(k) {
            diffs.push(format!(
                "{k}: now as upstream; remove it from known_differences ({why}) and docs/conformance.md"
            ));
        }
    }
}

#[test]
fn the_binary_answers_as_upstream_for_every_fixture() {
    let files = fixtures();
    assert!(files.len() >= 40, "only {} fixtures", files.len());
    let resources =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream-resources.yaml");
    let server = Server::start(&["--resources", resources.to_str().unwrap()]);
    let mut report = String::new();
    for (i, file) in files.iter().enumerate() {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let text = std::fs::read_to_string(file).unwrap();
        match run(&server.addr, &format!("fx{i}"), &text) {
            Err(e) => writeln!(report, "{name}: {e}").unwrap(),
            Ok((fixture, mut diffs)) => match (fixture["known_difference"].as_str(), {
                tolerate(&fixture, &mut diffs);
                diffs.is_empty()
            }) {
                (None, true) => {}
                (None, false) => {
                    for d in diffs {
                        writeln!(report, "{name}: {d}").unwrap();
                    }
                }
                (Some(_), false) => {
                    eprintln!("{name}: known difference still there: {diffs:?}");
                }
                (Some(why), true) => writeln!(
                    report,
                    "{name}: now answers as upstream; remove its known_difference ({why}) \
                     and its entry in docs/conformance.md"
                )
                .unwrap(),
            },
        }
    }
    assert!(
        report.is_empty(),
        "fixtures that differ from upstream:\n{report}"
    );
}

#[test]
fn the_comparison_names_the_field_and_both_values() {
    let want = serde_json::json!({"a": {"b": "x", "u": "<uid>"}, "n": "<generated:p->"});
    let got = serde_json::json!({"a": {"b": "y", "u": "9", "c": 1}, "n": "p-abcde"});
    let mut diffs = Vec::new();
    compare("body", &want, &got, &mut diffs);
    assert_eq!(
        diffs,
        [
            r#"body.a.b: expected "x", got "y""#,
            "body.a.c: expected nothing, got 1"
        ]
    );
    assert_eq!(
        key_order(br#"{"kind":"K","apiVersion":"v1","metadata":{"z":1,"a":2}}"#).unwrap(),
        ["kind", "apiVersion", "metadata"]
    );
}
