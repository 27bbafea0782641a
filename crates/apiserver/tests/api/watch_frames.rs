//! The watch server's write path against the binary (issue 15, item 2): events queued while
//! the client is not reading go out together, several whole frames per HTTP/1.1 chunk or
//! HTTP/2 DATA frame, and every frame arrives intact and in order — small objects, one
//! larger than the batch copies (sent as its own buffer), and the DELETED burst of a
//! delete-collection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use common::{PATIENCE, Server, http};

const SMALL: usize = 120;
/// Larger than the body's copy limit (16 KiB).
const LARGE: usize = 40 * 1024;
const PATH: &str = "/api/v1/namespaces/default/configmaps";

fn list_rv(addr: &str) -> String {
    let r = http(addr, "GET", PATH, &[], b"");
    assert_eq!(r.status, 200);
    r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn create(addr: &str, name: &str, size: usize) {
    let body = serde_json::json!({"metadata": {"name": name}, "data": {"d": "x".repeat(size)}});
    let r = http(
        addr,
        "POST",
        PATH,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// The writes every watch sees: `SMALL` creates with a large one in the middle, then a
/// delete-collection of all of them. Returns the (type, name) sequence expected.
fn write_all(addr: &str) -> Vec<(String, String)> {
    let mut want = Vec::new();
    for i in 0..SMALL {
        let name = format!("c{i:03}");
        create(addr, &name, 3000);
        want.push(("ADDED".to_owned(), name));
        if i == SMALL / 2 {
            create(addr, "large", LARGE);
            want.push(("ADDED".to_owned(), "large".to_owned()));
        }
    }
    let r = http(addr, "DELETE", PATH, &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut deleted: Vec<String> = want.iter().map(|(_, n)| n.clone()).collect();
    deleted.sort();
    want.extend(deleted.into_iter().map(|n| ("DELETED".to_owned(), n)));
    want
}

/// Checks the frames: their (type, name) sequence (the deletions in name order, as a
/// delete-collection walks the keys) and the large object's data.
fn check(frames: &[serde_json::Value], want: &[(String, String)]) {
    let got: Vec<(String, String)> = frames
        .iter()
        .map(|f| {
            (
                f["type"].as_str().unwrap().to_owned(),
                f["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    for f in frames {
        if f["object"]["metadata"]["name"] == "large" {
            assert_eq!(f["object"]["data"]["d"].as_str().unwrap().len(), LARGE);
        }
    }
}

/// Whole lines of `buf` as JSON frames (the rest stays in `buf`); how many there were.
fn take_frames(buf: &mut Vec<u8>, out: &mut Vec<serde_json::Value>) -> usize {
    let mut n = 0;
    while let Some(i) = buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = buf.drain(..=i).collect();
        out.push(serde_json::from_slice(&line).expect("a whole JSON frame"));
        n += 1;
    }
    n
}

/// An HTTP/1.1 watch on a socket with a small receive buffer, so that the server's writes
/// block while the test does not read.
fn http1_watch(addr: &str, path: &str) -> BufReader<TcpStream> {
    let sa: SocketAddr = addr.parse().unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&sa.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            return r;
        }
        assert!(
            !line.to_ascii_lowercase().starts_with("content-length"),
            "{line}"
        );
    }
}

/// Reads chunks until `want` frames arrived: the frames and, per chunk, how many frames
/// ended in it.
fn http1_frames(r: &mut BufReader<TcpStream>, want: usize) -> (Vec<serde_json::Value>, Vec<usize>) {
    let (mut frames, mut per_chunk, mut buf) = (Vec::new(), Vec::new(), Vec::new());
    while frames.len() < want {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim_end(), 16).expect("a chunk size line");
        assert!(n > 0, "the watch ended after {} frames", frames.len());
        let mut chunk = vec![0u8; n + 2];
        r.read_exact(&mut chunk).unwrap();
        assert!(chunk.ends_with(b"\r\n"));
        buf.extend_from_slice(&chunk[..n]);
        per_chunk.push(take_frames(&mut buf, &mut frames));
    }
    assert!(buf.is_empty(), "a partial frame after the last");
    (frames, per_chunk)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_events_coalesce_into_whole_frames_on_http1_and_http2() {
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    let rv = list_rv(&addr);
    let path = format!("{PATH}?watch=1&resourceVersion={rv}&timeoutSeconds=600");
    let mut h1 = http1_watch(&addr, &path);
    // HTTP/2 (h2c), with a stream window smaller than the events: the server waits for
    // window while the test does not read.
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(16 * 1024)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(())
        .unwrap();
    let (resp, _) = client
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let resp = tokio::time::timeout(PATIENCE, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let mut h2_body = resp.into_body();

    let want = {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || write_all(&addr))
            .await
            .unwrap()
    };
    // Let the server queue what it cannot write.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let n = want.len();
    let (frames, per_chunk) = tokio::task::spawn_blocking(move || http1_frames(&mut h1, n))
        .await
        .unwrap();
    check(&frames, &want);
    let most = per_chunk.iter().max().copied().unwrap_or(0);
    eprintln!(
        "HTTP/1.1: {} frames in {} chunks, at most {most} frames ending in one",
        frames.len(),
        per_chunk.len()
    );
    assert!(
        most >= 2,
        "events queued while the client did not read go out together"
    );

    let (mut frames, mut buf, mut most) = (Vec::new(), Vec::new(), 0);
    let mut data_frames = 0;
    while frames.len() < n {
        let chunk = tokio::time::timeout(PATIENCE, h2_body.data())
            .await
            .expect("events keep coming")
            .expect("the stream is open")
            .unwrap();
        h2_body
            .flow_control()
            .release_capacity(chunk.len())
            .unwrap();
        data_frames += 1;
        buf.extend_from_slice(&chunk);
        // Frames whose bytes are all in this DATA frame.
        let before = buf.len() - chunk.len();
        let whole = chunk.iter().filter(|&&b| b == b'\n').count()
            - usize::from(before > 0 && chunk.contains(&b'\n'));
        most = most.max(whole);
        take_frames(&mut buf, &mut frames);
    }
    assert!(buf.is_empty(), "a partial frame after the last");
    check(&frames, &want);
    eprintln!(
        "HTTP/2: {} frames in {data_frames} DATA frames, at most {most} whole ones in one",
        frames.len()
    );
    assert!(
        most >= 2,
        "events queued behind flow control go out together"
    );
}
