//! The connection layer and flow control against the binary: slow and silent clients are
//! cut at their deadlines, connections past the cap are closed, a slow body holds no seat,
//! a client flooding requests or watches gets 429s while another is served, a client that
//! stops reading is cut. Clients are told apart by their source address (127.0.0.x: all
//! loopback). Deadlines are configured short by flags; the assertions are about what
//! happens, never about how long it took.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, connect_from, connect_with, http, open_stream};

/// Reads until the server closes the connection; returns what arrived. Panics when the
/// connection is still open after [`PATIENCE`].
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the connection is still open after {PATIENCE:?}")
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
}

/// The sum of the `/metrics` samples whose line starts with `series`.
fn metric(addr: &str, series: &str) -> f64 {
    let r = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `series` reaches `at_least`.
fn wait_for_metric(addr: &str, series: &str, at_least: f64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = metric(addr, series);
        if v >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{series} stayed at {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `byte` every `every` until the connection fails.
fn trickle(s: &TcpStream, byte: u8, every: Duration) -> std::thread::JoinHandle<()> {
    let mut s = s.try_clone().unwrap();
    std::thread::spawn(move || {
        while s.write_all(&[byte]).is_ok() {
            std::thread::sleep(every);
        }
    })
}

fn create_configmap(addr: &str, name: &str, value: &str) {
    let body = serde_json::json!({"metadata": {"name": name}, "data": {"v": value}}).to_string();
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// The status code of a raw response.
fn status_of(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {:?}", String::from_utf8_lossy(raw)))
}

#[test]
fn a_head_sent_slowly_is_cut_at_the_read_header_timeout_while_others_are_served() {
    let server = Server::start(&["--read-header-timeout", "2"]);
    let mut slow = connect_from("127.0.0.2", &server.addr);
    slow.write_all(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .unwrap();
    let writer = trickle(&slow, b'a', Duration::from_millis(200));
    // Meanwhile another client is served.
    let r = http(&server.addr, "GET", "/api/v1/namespaces", &[], b"");
    assert_eq!(r.status, 200);
    // The head never completes: the server closes the connection without an answer.
    assert!(read_until_closed(&mut slow).is_empty());
    writer.join().unwrap();
    assert!(
        metric(
            &server.addr,
            "apiserver_connection_timeouts_total{phase=\"read_header\"}"
        ) >= 1.0
    );
}

#[test]
fn connections_past_the_cap_are_closed_at_once_and_silent_ones_at_the_header_timeout() {
    let server = Server::start(&["--max-connections", "8", "--read-header-timeout", "2"]);
    // Eight connections that send nothing fill the cap (the server accepts in order).
    let mut silent: Vec<TcpStream> = (0..8)
        .map(|_| connect_from("127.0.0.2", &server.addr))
        .collect();
    // One more is accepted and closed without an answer, though it asks a question.
    let mut extra = connect_from("127.0.0.3", &server.addr);
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert!(read_until_closed(&mut extra).is_empty());
    // The silent ones are closed at the read-header timeout, without an answer...
    for s in &mut silent {
        assert!(read_until_closed(s).is_empty());
    }
    // ...which frees the cap for everyone else.
    let r = http(&server.addr, "GET", "/api/v1/namespaces", &[], b"");
    assert_eq!(r.status, 200);
    assert!(metric(&server.addr, "apiserver_rejected_connections_total") >= 1.0);
    assert!(
        metric(
            &server.addr,
            "apiserver_connection_timeouts_total{phase=\"read_header\"}"
        ) >= 8.0
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed_and_a_quiet_watch_is_not() {
    let server = Server::start(&[
        "--idle-connection-timeout",
        "2",
        "--read-header-timeout",
        "2",
    ]);
    let (mut watch, code) = open_stream(
        &server.addr,
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=120",
    );
    assert_eq!(code, 200);
    // A keep-alive connection answered once, then left idle, is closed by the server.
    let mut idle = connect_from("127.0.0.2", &server.addr);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let answered = read_until_closed(&mut idle);
    assert_eq!(status_of(&answered), 200);
    assert!(answered.ends_with(b"ok"), "one answer, then the close");
    assert!(
        metric(
            &server.addr,
            "apiserver_connection_timeouts_total{phase=\"idle\"}"
        ) >= 1.0
    );
    // The watch, quiet all that while, is still open and delivers.
    create_configmap(&server.addr, "after-the-quiet", "v");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("after-the-quiet") {
        let n = watch.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended");
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_slow_body_holds_no_seat_and_is_answered_408_at_its_deadline() {
    let server = Server::start(&[
        "--max-mutating-requests-inflight",
        "1",
        "--request-timeout",
        "4",
    ]);
    let mut slow = connect_from("127.0.0.2", &server.addr);
    slow.write_all(
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\
          Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"metadata\":",
    )
    .unwrap();
    // A few more bytes, slowly, then nothing.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        slow.write_all(b" ").unwrap();
    }
    // The only mutating seat is free meanwhile: another client writes.
    create_configmap(&server.addr, "while-a-body-trickles", "v");
    // The body never completes: 408 at the request's deadline, and the connection closes.
    let answer = read_until_closed(&mut slow);
    assert_eq!(status_of(&answer), 408);
    assert!(String::from_utf8_lossy(&answer).contains("\"reason\":\"Timeout\""));
}

/// A watch request from the loopback address `local`: the connection and the status code.
fn open_watch_from(local: &str, addr: &str, path: &str) -> (TcpStream, u16) {
    let mut s = connect_from(local, addr);
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed before the head");
        head.push(byte[0]);
    }
    let code = status_of(&head);
    (s, code)
}

/// Reads `watch` until `name` shows up in it.
fn wait_for_event(watch: &mut TcpStream, name: &str) {
    // Only the end of what arrived is searched, so a long stream costs linear time.
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    while !tail.windows(name.len()).any(|w| w == name.as_bytes()) {
        let keep = tail.len().min(name.len());
        tail.drain(..tail.len() - keep);
        let n = watch.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended");
        tail.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_client_flooding_seats_and_watches_gets_429s_while_another_lists_watches_and_writes() {
    let server = Server::start(&[
        "--max-requests-inflight",
        "2",
        "--max-queued-requests-per-client",
        "2",
        "--max-watches-per-client",
        "3",
    ]);
    let watch_path = "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=120";
    // The flooder (127.0.0.2) opens watches until refused: three, then 429s.
    let mut flooder_watches = Vec::new();
    for _ in 0..3 {
        let (s, code) = open_watch_from("127.0.0.2", &server.addr, watch_path);
        assert_eq!(code, 200);
        flooder_watches.push(s);
    }
    for _ in 0..3 {
        assert_eq!(
            open_watch_from("127.0.0.2", &server.addr, watch_path).1,
            429
        );
    }
    // ...and keeps ten connections busy with reads that each hold a seat for a while (the
    // cache waits 3 s for a version it has not reached, then answers 504), for as long as
    // the other client is being checked.
    let list = http(&server.addr, "GET", "/api/v1/namespaces", &[], b"").json();
    let current: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let slow = format!(
        "/api/v1/namespaces?resourceVersion={}&resourceVersionMatch=NotOlderThan",
        current + 1_000_000_000
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let flooders: Vec<_> = (0..10)
        .map(|_| {
            let (addr, slow, stop, tx) = (
                server.addr.clone(),
                slow.clone(),
                std::sync::Arc::clone(&stop),
                tx.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut s = connect_from("127.0.0.2", &addr);
                    write!(
                        s,
                        "GET {slow} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                    )
                    .unwrap();
                    let _ = tx.send(status_of(&read_until_closed(&mut s)));
                }
            })
        })
        .collect();
    drop(tx);
    // One seated (a flow holds at most half of the two seats), two queued: the rest of the
    // flood is refused.
    let mut codes = Vec::new();
    while codes.iter().filter(|c| **c == 429).count() < 6 {
        codes.push(rx.recv_timeout(PATIENCE).expect("an answer"));
    }
    // Throughout, another client (127.0.0.1) lists, watches and writes as usual: its list
    // takes the seat the flooder may not, or the next free one, ahead of the flooder's queue.
    for _ in 0..3 {
        let r = http(
            &server.addr,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[],
            b"",
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let (mut watch, code) = open_watch_from("127.0.0.1", &server.addr, watch_path);
    assert_eq!(code, 200);
    create_configmap(&server.addr, "seen-during-the-flood", "v");
    wait_for_event(&mut watch, "seen-during-the-flood");
    // The flood was still going on: more of it was refused after the checks began.
    let before = codes.len();
    while codes.len() < before + 4 {
        codes.push(rx.recv_timeout(PATIENCE).expect("an answer"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    codes.extend(rx.try_iter());
    assert!(codes.iter().all(|c| *c == 429 || *c == 504), "{codes:?}");
    // The flooder's own watches were not cut either.
    wait_for_event(&mut flooder_watches[0], "seen-during-the-flood");
}

#[test]
fn a_client_over_its_watch_cap_gets_429_while_another_lists_and_watches() {
    let server = Server::start(&["--max-watches-per-client", "3"]);
    let path = "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=120";
    let open_from = |local: &str| {
        let mut s = connect_from(local, &server.addr);
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "closed before the head");
            head.push(byte[0]);
        }
        (s, status_of(&head))
    };
    let held: Vec<_> = (0..3).map(|_| open_from("127.0.0.2")).collect();
    assert!(held.iter().all(|(_, code)| *code == 200));
    assert_eq!(open_from("127.0.0.2").1, 429);
    // Another client lists and watches as usual.
    let r = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    let (mut watch, code) = open_from("127.0.0.3");
    assert_eq!(code, 200);
    create_configmap(&server.addr, "seen-by-the-other", "v");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("seen-by-the-other") {
        let n = watch.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended");
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_client_that_stops_reading_is_cut_at_the_write_stall_timeout() {
    let server = Server::start(&["--write-stall-timeout", "2"]);
    // 16 MB of configmaps: more than the socket buffers between us hold.
    let value = "x".repeat(1_000_000);
    for i in 0..16 {
        create_configmap(&server.addr, &format!("big-{i}"), &value);
    }
    let mut s = connect_with("127.0.0.2", &server.addr, Some(4096));
    s.write_all(b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // We read nothing: the server's write stalls, and it gives up.
    wait_for_metric(
        &server.addr,
        "apiserver_connection_timeouts_total{phase=\"write_stall\"}",
        1.0,
    );
    let got = read_until_closed(&mut s);
    assert_eq!(status_of(&got), 200);
    assert!(got.len() < 16_000_000, "the response was cut short");
}

/// The kernel's keep-alive timer of the server's end of `client` (from `/proc/net/tcp`):
/// `Some(seconds until the first probe)` when armed, `None` when the socket has none.
#[cfg(target_os = "linux")]
fn server_side_keepalive(server: &str, client: &TcpStream) -> Option<f64> {
    let server_port = server.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let client_port = client.local_addr().unwrap().port();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    // sl local rem st tx:rx tr:when ...; ports are hex after the colon.
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).unwrap();
    let line = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| port(f[1]) == server_port && port(f[2]) == client_port)
        .expect("the server's end of the connection");
    let (timer, when) = line[5].split_once(':').unwrap();
    // Timer 2 is the keep-alive timer; `when` counts clock ticks (USER_HZ, 100 a second).
    (timer == "02").then(|| u64::from_str_radix(when, 16).unwrap() as f64 / 100.0)
}

#[cfg(target_os = "linux")]
#[test]
fn accepted_connections_have_tcp_keep_alive_so_half_open_ones_are_found() {
    let server = Server::start(&[]);
    // A keep-alive connection, answered once and then quiet (as a watch without events):
    // if its client vanished without a FIN, only TCP keep-alive would ever notice.
    let mut quiet = connect_from("127.0.0.2", &server.addr);
    quiet
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = quiet.read(&mut buf).unwrap();
    assert_eq!(status_of(&buf[..n]), 200);
    let first_probe = server_side_keepalive(&server.addr, &quiet)
        .expect("the server's socket has no keep-alive timer");
    // Upstream's listener: a probe after 3 minutes of silence.
    assert!(
        first_probe > 120.0 && first_probe <= 180.0,
        "first probe in {first_probe} s"
    );
}

#[test]
fn a_client_reading_a_response_slowly_is_cut_at_its_deadline_and_a_watch_is_not() {
    // The deadline leaves the list's handler ample time even on a loaded machine.
    let server = Server::start(&["--request-timeout", "5"]);
    // 16 MB of configmaps: a list response that takes minutes at the pace read below.
    let value = "x".repeat(1_000_000);
    for i in 0..16 {
        create_configmap(&server.addr, &format!("big-{i}"), &value);
    }
    // A watch from the current version (no initial events), which will outlive the same
    // deadline.
    let list = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=1",
        &[],
        b"",
    )
    .json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (mut watch, code) = open_watch_from(
        "127.0.0.3",
        &server.addr,
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=120&resourceVersion={rv}"
        ),
    );
    assert_eq!(code, 200);
    let mut s = connect_with("127.0.0.2", &server.addr, Some(4096));
    s.write_all(b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // The client keeps reading, 4 KiB every 50 ms: the writes never stall, they just never
    // finish. Once told to stop it reads what is left at full speed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match s.read(&mut buf) {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
                    Err(e) => panic!("reading: {e}"),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            got.extend(read_until_closed(&mut s));
            got
        })
    };
    wait_for_metric(
        &server.addr,
        "apiserver_connection_timeouts_total{phase=\"response\"}",
        1.0,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = reader.join().unwrap();
    assert_eq!(status_of(&got), 200);
    assert!(got.len() < 16_000_000, "the response was cut short");
    // The watch, past the same deadline, still delivers.
    create_configmap(&server.addr, "after-the-deadline", "v");
    wait_for_event(&mut watch, "after-the-deadline");
}
