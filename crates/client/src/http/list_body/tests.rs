use super::*;

/// Splits `body` fed in pieces of `piece` bytes; the items and the end.
fn split(body: &[u8], piece: usize) -> Result<(Vec<String>, PageEnd)> {
    let mut s = ListSplitter::default();
    let mut items = Vec::new();
    for part in body.chunks(piece.max(1)) {
        s.push(part)?;
        while let Some(i) = s.next_item() {
            items.push(String::from_utf8(i.to_vec()).unwrap());
        }
    }
    let end = s.finish()?;
    Ok((items, end))
}

#[test]
fn items_come_out_whole_however_the_body_is_cut() {
    let body = br#" {"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"tok"},
        "items":[{"metadata":{"name":"a","resourceVersion":"5"},"s":"q\"}]\\"},
        {"metadata":{"name":"b\u00e9 ]","resourceVersion":"6"},"n":[1,[2,{"x":"}"}]]}, 7 ,"s",null , true]} "#;
    let want = vec![
        r#"{"metadata":{"name":"a","resourceVersion":"5"},"s":"q\"}]\\"}"#.to_owned(),
        r#"{"metadata":{"name":"b\u00e9 ]","resourceVersion":"6"},"n":[1,[2,{"x":"}"}]]}"#
            .to_owned(),
        "7".to_owned(),
        r#""s""#.to_owned(),
        "null".to_owned(),
        "true".to_owned(),
    ];
    for piece in 1..=body.len() {
        let (items, end) = split(body, piece).unwrap();
        assert_eq!(items, want, "pieces of {piece}");
        assert_eq!(
            end,
            PageEnd {
                resource_version: "12".into(),
                continue_token: Some("tok".into())
            }
        );
    }
}

#[test]
fn metadata_after_items_escaped_keys_and_empty_lists() {
    let (items, end) = split(
        br#"{"items":[{"a":1}],"m\u0065tadata":{"resourceVersion":"3","continue":""},"kind":"X"}"#,
        7,
    )
    .unwrap();
    assert_eq!(items, [r#"{"a":1}"#]);
    assert_eq!(
        end,
        PageEnd {
            resource_version: "3".into(),
            continue_token: None
        }
    );
    for body in [
        &br#"{"metadata":{"resourceVersion":"3"},"items":null}"#[..],
        br#"{"metadata":{"resourceVersion":"3"},"items":[]}"#,
        br#"{"metadata":{"resourceVersion":"3"}}"#,
    ] {
        let (items, end) = split(body, 3).unwrap();
        assert!(items.is_empty());
        assert_eq!(end.resource_version, "3");
    }
    // No metadata: version 0, which the reflector refuses.
    assert_eq!(split(b"{}", 1).unwrap().1.resource_version, "");
}

#[test]
fn hostile_bodies_are_errors_never_panics_or_unbounded() {
    let deep_item = format!(
        r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{}{}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let deep_kind = format!(r#"{{"kind":{}1{}}}"#, "[".repeat(5000), "]".repeat(5000));
    for (body, want) in [
        (&b"nope"[..], "not a JSON object"),
        (b"[1,2]", "not a JSON object"),
        (br#"{"items":[1,]}"#, "expected an item"),
        (br#"{"items":[1 2]}"#, "expected ','"),
        (br#"{"items":{"a":1}}"#, "not an array"),
        (br#"{"items":[],"items":[]}"#, "duplicate field `items`"),
        (
            br#"{"metadata":{},"metadata":{}}"#,
            "duplicate field `metadata`",
        ),
        (br#"{"metadata":{"resourceVersion":5}}"#, "metadata"),
        (br#"{"kind":tru}"#, "list"),
        (br#"{"kind" "x"}"#, "expected ':'"),
        (br#"{"kind":"x",}"#, "expected a key"),
        (br#"{"kind":"x"} x"#, "data after the end"),
        (br#"{"items":[{"a":1}"#, "ended before"),
        (br#"{"items":[{"a":"#, "ended before"),
        (br#"{"ki"#, "ended before"),
        (b"", "ended before"),
    ] {
        let what = String::from_utf8_lossy(body.get(..60).unwrap_or(body));
        let e = match split(body, 5) {
            Ok(r) => panic!("{what}: accepted as {r:?}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want), "{what}: {e}");
    }
    // A deeply nested value of an ignored field is skipped without recursion (serde's
    // `IgnoredAny` does not recurse either), as a whole-body parse skipped it.
    assert_eq!(split(deep_kind.as_bytes(), 5).unwrap().0.len(), 0);
    // Deep items are handed out (the scanner does not recurse); serde refuses them when
    // it decodes the item, with its own nesting limit.
    let (items, _) = split(deep_item.as_bytes(), 4096).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&items[0]).is_err());
    // An item over the bound is refused as it grows, not after.
    let mut s = ListSplitter::default();
    s.push(br#"{"items":["#).unwrap();
    let big = vec![b'['; 1 << 20];
    let mut refused = None;
    for n in 0..=(MAX_ITEM >> 20) + 1 {
        if let Err(e) = s.push(&big) {
            refused = Some((n, e.to_string()));
            break;
        }
    }
    let (n, e) = refused.expect("an oversized item is refused");
    assert!(e.contains("larger than"), "{e}");
    assert_eq!(n, MAX_ITEM >> 20, "refused at the bound");
    assert!(s.cur.len() <= MAX_ITEM);
    // A huge envelope value likewise, at its own bound.
    let mut s = ListSplitter::default();
    s.push(br#"{"kind":""#).unwrap();
    let e = s.push(&vec![b'x'; MAX_ENVELOPE_VALUE + 1]).unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
    // A long key is not kept.
    let mut s = ListSplitter::default();
    s.push(br#"{""#).unwrap();
    s.push(&vec![b'k'; 1 << 20]).unwrap();
    assert!(s.key.len() <= MAX_KEY);
    s.push(br#"":1,"metadata":{"resourceVersion":"2"}}"#)
        .unwrap();
    assert_eq!(s.finish().unwrap().resource_version, "2");
}

#[test]
fn multibyte_text_is_kept_byte_for_byte() {
    let body = "{\"items\":[{\"n\":\"é]}\\\"😀\"},{\"n\":\"日本\"}],\"metadata\":{\"resourceVersion\":\"9\"}}";
    for piece in 1..8 {
        let (items, _) = split(body.as_bytes(), piece).unwrap();
        assert_eq!(items, ["{\"n\":\"é]}\\\"😀\"}", "{\"n\":\"日本\"}"]);
    }
}

#[test]
fn gzip_inflates_in_bounded_steps_and_checks_the_trailer() {
    use flate2::write::GzEncoder;
    use std::io::Write as _;
    let plain = vec![b'a'; 4 << 20];
    let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&plain).unwrap();
    let gz = enc.finish().unwrap();
    assert!(
        gz.len() < 64 << 10,
        "a 4 MiB body compresses to {}",
        gz.len()
    );
    let mut inf = Inflater::new("list body");
    let (mut total, mut largest) = (0, 0);
    let mut out = |b: &[u8]| {
        total += b.len();
        largest = largest.max(b.len());
        Ok(())
    };
    inf.push(&gz, &mut out).unwrap();
    inf.finish(&mut out).unwrap();
    assert_eq!(total, plain.len());
    assert!(largest <= 64 << 10, "one step handed out {largest} bytes");
    // A cut stream and garbage are errors.
    let mut inf = Inflater::new("list body");
    let mut sink = |_: &[u8]| Ok(());
    inf.push(gz.get(..gz.len() / 2).unwrap(), &mut sink)
        .unwrap();
    assert!(inf.finish(&mut sink).is_err());
    let mut inf = Inflater::new("list body");
    assert!(inf.push(b"not gzip at all", &mut sink).is_err());
}
