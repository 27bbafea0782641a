//! A watch upgraded to a websocket on the same route: one text message per event, then a
//! close when the watch ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
