//! `/healthz` and watch-event latency with and without 2 × cores of the most expensive
//! legal requests in flight (issue 24 deliverable 2; `tests/stress/request_compute.rs` asserts the
//! same with generous bounds, this measures).
//!
//! ```text
//! cargo build -p listwatch-apiserver --bin listwatch-apiserver --example reactor_load
//! target/debug/listwatch-apiserver --bind 127.0.0.1:18080 --request-timeout 600 &
//! target/debug/examples/reactor_load 127.0.0.1:18080 [LOADERS] [SAMPLES] [WRITES]
//! ```
//!
//! Against a fresh server: stores a pod of 4 000 containers (server-side apply), opens a
//! watch on the default namespace's ConfigMaps, then measures twice — idle (the baseline)
//! and while LOADERS clients (default 2 × cores) each send, again and again, a dry-run apply
//! of that pod changing every image (the costliest request found; docs/endpoints.md):
//! SAMPLES `/healthz` round trips (default 40, 100 ms apart) and SAMPLES / 4 watch events
//! (a ConfigMap created; the delay from the create's answer to the event's frame, and from
//! the create's sending, which includes the create's own wait for a compute thread). Prints
//! median, 90th percentile and maximum of each. The loaders and the watch probe's creates
//! come from 127.0.0.1 (one flow-control client); then, still under load, a second client
//! (source address 127.0.0.2) sends WRITES small writes (default 10; ConfigMap creates) one
//! after another: their latency is what the compute pool's fair admission gate bounds
//! (`compute::gate`). Loopback only; bounded by its arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CONTAINERS: usize = 4_000;
const PATIENCE: Duration = Duration::from_secs(600);

/// One request on a fresh connection; returns the status and the body.
fn http(addr: &str, method: &str, path: &str, ct: &str, body: &[u8]) -> (u16, Vec<u8>) {
    http_on(
        TcpStream::connect(addr).unwrap(),
        addr,
        method,
        path,
        ct,
        body,
    )
}

/// A connection to `addr` from the loopback source address `local` (another client).
fn connect_from(local: &str, addr: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{local}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    let remote: std::net::SocketAddr = addr.parse().unwrap();
    socket.connect(&remote.into()).unwrap();
    socket.into()
}

fn http_on(
    mut s: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    ct: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| raw[i + 4..].to_vec())
        .unwrap_or_default();
    (status, body)
}

fn pod(image: &str) -> Vec<u8> {
    let containers: Vec<Value> = (0..CONTAINERS)
        .map(|i| {
            json!({
                "name": format!("c{i}"),
                "image": format!("{image}:{i}"),
                "ports": [{"containerPort": 80 + i % 1000, "name": format!("p{}", i % 1000)}],
            })
        })
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reactor-load"},
        "spec": {"containers": containers},
    }))
    .unwrap()
}

const POD_PATH: &str = "/api/v1/namespaces/default/pods/reactor-load?fieldManager=bench";
const APPLY: &str = "application/apply-patch+yaml";

/// The events of a chunked watch response: (arrival, object name).
fn watch(addr: &str) -> mpsc::Receiver<(Instant, String)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(s);
        let mut line = String::new();
        // The head.
        while r.read_line(&mut line).map(|n| n > 2).unwrap_or(false) {
            line.clear();
        }
        let mut buf = Vec::new();
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                return;
            }
            let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                return;
            };
            let mut chunk = vec![0u8; n + 2];
            if n == 0 || r.read_exact(&mut chunk).is_err() {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let frame: Vec<u8> = buf.drain(..=nl).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&frame) else {
                    continue;
                };
                let name = v["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if tx.send((Instant::now(), name)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

struct Stats(Vec<Duration>);

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut v = self.0.clone();
        v.sort();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "n={:3}  median {:8.1} ms  p90 {:8.1} ms  max {:8.1} ms",
            v.len(),
            ms(at(0.5)),
            ms(at(0.9)),
            ms(at(1.0))
        )
    }
}

/// `/healthz` round trips, and watch delays (from the create's answer, from its sending).
fn measure(
    addr: &str,
    frames: &mpsc::Receiver<(Instant, String)>,
    samples: usize,
    round: &str,
) -> (Stats, Stats, Stats) {
    let probing = Arc::new(AtomicBool::new(true));
    let probes = {
        let (addr, probing) = (addr.to_owned(), Arc::clone(&probing));
        std::thread::spawn(move || {
            let mut out = Vec::new();
            while out.len() < samples || probing.load(Ordering::SeqCst) {
                let start = Instant::now();
                let (status, _) = http(&addr, "GET", "/healthz", "text/plain", b"");
                assert_eq!(status, 200);
                out.push(start.elapsed());
                std::thread::sleep(Duration::from_millis(100));
            }
            out
        })
    };
    let (mut answered, mut sent) = (Vec::new(), Vec::new());
    for k in 0..(samples / 4).max(1) {
        let name = format!("{round}-{k}");
        let body = json!({"metadata": {"name": name}}).to_string();
        let t0 = Instant::now();
        let (status, _) = http(
            addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            body.as_bytes(),
        );
        let t1 = Instant::now();
        assert_eq!(status, 201);
        let at = loop {
            let (at, got) = frames.recv_timeout(PATIENCE).expect("the watch event");
            if got == name {
                break at;
            }
        };
        answered.push(at.saturating_duration_since(t1));
        sent.push(at.saturating_duration_since(t0));
    }
    probing.store(false, Ordering::SeqCst);
    (Stats(probes.join().unwrap()), Stats(answered), Stats(sent))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18080".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let loaders: usize = args.next().map_or(2 * cores, |s| s.parse().unwrap());
    let samples: usize = args.next().map_or(40, |s| s.parse().unwrap());
    let writes: usize = args.next().map_or(10, |s| s.parse().unwrap());

    let (status, body) = http(&addr, "PATCH", POD_PATH, APPLY, &pod("busybox"));
    assert!(
        status == 200 || status == 201,
        "{status} {}",
        String::from_utf8_lossy(&body)
    );
    let frames = watch(&addr);
    let expensive = Arc::new(pod("nginx"));
    let one = Instant::now();
    let dry = format!("{POD_PATH}&dryRun=All");
    assert_eq!(http(&addr, "PATCH", &dry, APPLY, &expensive).0, 200);
    println!(
        "one expensive request alone: {:.1} ms",
        one.elapsed().as_secs_f64() * 1000.0
    );

    let baseline = measure(&addr, &frames, samples, "idle");

    let stop = Arc::new(AtomicBool::new(false));
    let (sent_n, in_flight) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..loaders)
        .map(|_| {
            let (addr, dry, body, stop, sent_n, in_flight) = (
                addr.clone(),
                dry.clone(),
                Arc::clone(&expensive),
                Arc::clone(&stop),
                Arc::clone(&sent_n),
                Arc::clone(&in_flight),
            );
            std::thread::spawn(move || {
                let mut took = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let t = Instant::now();
                    let (status, _) = http(&addr, "PATCH", &dry, APPLY, &body);
                    took.push(t.elapsed());
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    sent_n.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(status, 200);
                }
                took
            })
        })
        .collect();
    while in_flight.load(Ordering::SeqCst) < loaders {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let loaded = measure(&addr, &frames, samples, "loaded");
    let answered_during = sent_n.load(Ordering::SeqCst);
    // The second client's small writes, one after another, under the same load.
    let mut other = Vec::new();
    for k in 0..writes {
        let body = json!({"metadata": {"name": format!("other-{k}")}}).to_string();
        let t = Instant::now();
        let (status, _) = http_on(
            connect_from("127.0.0.2", &addr),
            &addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            body.as_bytes(),
        );
        other.push(t.elapsed());
        assert_eq!(status, 201);
    }
    stop.store(true, Ordering::SeqCst);
    let took: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();

    println!(
        "{loaders} loaders (cores: {cores}); {answered_during} expensive requests answered while measuring"
    );
    println!("expensive request under load     {}", Stats(took));
    println!("idle    /healthz                 {}", baseline.0);
    println!("idle    watch event after answer {}", baseline.1);
    println!("idle    watch event after send   {}", baseline.2);
    println!("loaded  /healthz                 {}", loaded.0);
    println!("loaded  watch event after answer {}", loaded.1);
    println!("loaded  watch event after send   {}", loaded.2);
    if !other.is_empty() {
        println!("loaded  other client's write     {}", Stats(other));
    }
}
