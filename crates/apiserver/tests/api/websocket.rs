//! A watch upgraded to a websocket on the same route: one text message per event, then a
//! close when the watch ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{PATIENCE, Server, http};

/// Reads one server frame (unmasked): opcode and payload.
fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).ok()?;
    let opcode = head[0] & 0x0f;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).ok()?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).ok()?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).unwrap()];
    s.read_exact(&mut payload).ok()?;
    Some((opcode, payload))
}

#[test]
fn a_websocket_watch_sends_one_message_per_event_then_closes() {
    let server = Server::start(&[]);
    for name in ["a", "b"] {
        let body = format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"k":"v"}}}}"#);
        let r = http(
            &server.addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 201);
    }
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=2 HTTP/1.1\r\n\
         Host: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );

    let mut events = Vec::new();
    let mut closed = false;
    while let Some((opcode, payload)) = read_frame(&mut s) {
        match opcode {
            0x1 => events.push(serde_json::from_slice::<serde_json::Value>(&payload).unwrap()),
            0x8 => {
                closed = true;
                break;
            }
            other => panic!("unexpected opcode {other}"),
        }
    }
    assert!(
        closed,
        "the server closes the websocket when the watch ends"
    );
    let mut names: Vec<&str> = events
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "ADDED");
            e["object"]["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn an_inbound_frame_over_the_limit_closes_the_websocket() {
    let server = Server::start(&[]);
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600 HTTP/1.1\r\n\
         Host: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    // A masked text frame of 64 KiB (the library's default limit is 64 MiB); a watch
    // client has nothing to say that needs more than a ping.
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&65_536u64.to_be_bytes());
    frame.extend_from_slice(&mask);
    frame.extend((0..65_536).map(|i| b'a' ^ mask[i % 4]));
    // The server may close before it has read it all.
    let _ = s.write_all(&frame);
    // The websocket ends: a close frame with 1009 (message too big), then the connection.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the websocket is still open ({e})"),
        }
    }
    let close = got
        .windows(4)
        .position(|w| w[0] == 0x88 && w[1] >= 2 && w[2..4] == 1009u16.to_be_bytes())
        .is_some();
    assert!(close, "a 1009 close frame: {got:?}");
}

/// A CBOR client's websocket watch (`Accept: application/cbor`, KEP-4222): one binary
/// message per event, each a whole CBOR item (the self-described tag, `{type, object}`)
/// with nothing trimmed, then a close.
#[test]
fn a_cbor_websocket_watch_sends_one_binary_cbor_item_per_event() {
    let server = Server::start(&[]);
    for name in ["a", "b"] {
        let body = format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"k":"v\n"}}}}"#);
        let r = http(
            &server.addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 201);
    }
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=2 HTTP/1.1\r\n\
         Host: {}\r\nAccept: application/cbor\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    let mut names = Vec::new();
    let mut closed = false;
    while let Some((opcode, payload)) = read_frame(&mut s) {
        match opcode {
            0x2 => {
                assert!(listwatch_cbor::is_self_described(&payload));
                let e = listwatch_cbor::decode(&payload).unwrap();
                assert_eq!(e["type"], "ADDED");
                assert_eq!(e["object"]["data"]["k"], "v\n");
                names.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
            }
            0x8 => {
                closed = true;
                break;
            }
            other => panic!("unexpected opcode {other}"),
        }
    }
    assert!(closed);
    names.sort_unstable();
    assert_eq!(names, ["a", "b"]);
}
