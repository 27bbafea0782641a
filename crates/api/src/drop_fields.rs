//! `metadata.managedFields` cut out of an object's JSON: the server side of upstream's
//! managedFields opt-out (KEP-5958, `Accept: application/json;drop=metadata.managedFields`,
//! alpha in 1.37).
//!
//! The cut works on the bytes, not on a parsed value: the JSON is scanned (strings with their
//! escapes, nested objects and arrays) to find the top-level `metadata` member and, inside it,
//! the `managedFields` member, and the result is the same bytes without that member and the
//! comma that joined it. Everything else keeps its bytes and order, so the answer is the one
//! the client would get without the parameter, minus the field.
//!
//! Invariants: the scan reads each byte at most a few times, allocates only the output, never
//! indexes past the input, and nests at most 512 deep (deeper input is left
//! unchanged: the server's own stored JSON is bounded far below it); input that is not a JSON
//! object with that member comes back as `None` (nothing to cut).

/// Nesting the scanner follows at most (the decoders' bound on stored objects is lower).
const MAX_DEPTH: usize = 512;

/// `json` without `metadata.managedFields`, or `None` when it has no such member (or is not
/// JSON the scanner can follow).
pub fn without_managed_fields(json: &[u8]) -> Option<Vec<u8>> {
    let top = skip_ws(json, 0);
    if json.get(top) != Some(&b'{') {
        return None;
    }
    let (_, meta_value) = find_member(json, top + 1, b"metadata")?;
    if json.get(meta_value) != Some(&b'{') {
        return None;
    }
    let (member, value) = find_member(json, meta_value + 1, b"managedFields")?;
    let value_end = skip_value(json, value, 0)?;
    let after = skip_ws(json, value_end);
    let (cut_from, cut_to) = if json.get(after) == Some(&b',') {
        // `"managedFields":..,` — take the comma after it.
        (member, after + 1)
    } else {
        // The last member: take the comma before it, if any.
        let mut i = member;
        while i > 0 && json.get(i - 1).is_some_and(u8::is_ascii_whitespace) {
            i -= 1;
        }
        if i > 0 && json.get(i - 1) == Some(&b',') {
            (i - 1, value_end)
        } else {
            (member, value_end)
        }
    };
    let mut out = Vec::with_capacity(json.len() - (cut_to - cut_from));
    out.extend_from_slice(json.get(..cut_from)?);
    out.extend_from_slice(json.get(cut_to..)?);
    Some(out)
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// In the object whose members start at `i` (just after its `{`), the member named `key`:
/// the offsets of its key's opening quote and of its value.
fn find_member(json: &[u8], mut i: usize, key: &[u8]) -> Option<(usize, usize)> {
    loop {
        i = skip_ws(json, i);
        match json.get(i)? {
            b'}' => return None,
            b'"' => {}
            _ => return None,
        }
        let member = i;
        let key_end = skip_string(json, i)?;
        let name = json.get(i + 1..key_end - 1)?;
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let value = skip_ws(json, i + 1);
        if name == key {
            return Some((member, value));
        }
        i = skip_ws(json, skip_value(json, value, 0)?);
        match json.get(i)? {
            b',' => i += 1,
            _ => return None,
        }
    }
}

/// The offset just past the string whose opening quote is at `i`.
fn skip_string(json: &[u8], mut i: usize) -> Option<usize> {
    if json.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    loop {
        match json.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The offset just past the value starting at `i`.
pub(crate) fn skip_value(json: &[u8], i: usize, depth: usize) -> Option<usize> {
    match json.get(i)? {
        b'"' => skip_string(json, i),
        open @ (b'{' | b'[') => {
            if depth >= MAX_DEPTH {
                return None;
            }
            let close = if *open == b'{' { b'}' } else { b']' };
            let mut j = skip_ws(json, i + 1);
            if json.get(j) == Some(&close) {
                return Some(j + 1);
            }
            loop {
                if *open == b'{' {
                    j = skip_ws(json, skip_string(json, j)?);
                    if json.get(j) != Some(&b':') {
                        return None;
                    }
                    j = skip_ws(json, j + 1);
                }
                j = skip_ws(json, skip_value(json, j, depth + 1)?);
                match json.get(j)? {
                    b',' => j = skip_ws(json, j + 1),
                    c if *c == close => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        _ => {
            let mut j = i;
            while json
                .get(j)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(s: &str) -> Option<String> {
        without_managed_fields(s.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn the_member_goes_with_one_comma_wherever_it_stands() {
        let mf = r#"[{"manager":"kubectl","fieldsV1":{"f:data":{".":{},"f:a\"}":{}}}}]"#;
        for (before, after) in [
            (
                format!(
                    r#"{{"kind":"Pod","metadata":{{"name":"a","managedFields":{mf},"uid":"u"}},"spec":{{}}}}"#
                ),
                r#"{"kind":"Pod","metadata":{"name":"a","uid":"u"},"spec":{}}"#,
            ),
            (
                format!(r#"{{"kind":"Pod","metadata":{{"managedFields":{mf},"name":"a"}}}}"#),
                r#"{"kind":"Pod","metadata":{"name":"a"}}"#,
            ),
            (
                format!(r#"{{"kind":"Pod","metadata":{{"name":"a","managedFields":{mf}}}}}"#),
                r#"{"kind":"Pod","metadata":{"name":"a"}}"#,
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{mf}}},"x":1}}"#),
                r#"{"metadata":{},"x":1}"#,
            ),
            (
                format!(
                    "{{ \"a\" : [1, {{\"metadata\":2}}], \"metadata\" : {{ \"n\" : true , \"managedFields\" : {mf} }} }}"
                ),
                "{ \"a\" : [1, {\"metadata\":2}], \"metadata\" : { \"n\" : true  } }",
            ),
        ] {
            assert_eq!(cut(&before).as_deref(), Some(after), "{before}");
            serde_json::from_str::<serde_json::Value>(after).unwrap();
        }
    }

    #[test]
    fn nothing_to_cut_is_none() {
        for s in [
            r#"{"kind":"Pod","metadata":{"name":"a"}}"#,
            r#"{"kind":"Pod","spec":{"managedFields":[]}}"#,
            r#"{"kind":"Pod","metadata":"x"}"#,
            "[1,2]",
            "",
            r#"{"metadata":{"managedFields":[1,2"#,
        ] {
            assert_eq!(cut(s), None, "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = without_managed_fields(&b);
        }

        #[test]
        fn the_cut_of_a_json_object_is_json_without_the_field(
            name in "[a-z\\\\\"]{0,8}",
            n in 0usize..4,
        ) {
            let mut v = serde_json::json!({"kind": "Pod", "metadata": {"name": name, "labels": {"a": "b"}}, "spec": {"x": [1, 2]}});
            v["metadata"]["managedFields"] = serde_json::json!(vec![serde_json::json!({"manager": "m", "fieldsV1": {"f:spec": {}}}); n]);
            let bytes = serde_json::to_vec(&v).unwrap();
            let out = without_managed_fields(&bytes).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
            if let Some(m) = v["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            proptest::prop_assert_eq!(back, v);
        }
    }
}
