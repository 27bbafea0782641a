//! HTTP/1.1 on fresh connections (a watch: its head only), and the admin's view of a
//! write's target.

use super::*;

pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// A watch stream (upgraded, or `stream=watch`) was answered.
    pub(crate) streamed: bool,
}

/// One request on a fresh connection; of a watch that started only the head is read.
pub(crate) fn send(addr: &str, token: Option<&str>, c: &Case) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("{} {} HTTP/1.1\r\nHost: {addr}\r\n", c.method, c.path);
    if !c.headers.iter().any(|(k, _)| *k == "Connection") {
        req.push_str("Connection: close\r\n");
    }
    match token {
        Some(t) if c.token_in_protocol => {
            // kubectl's websocket form: base64url of the token, unpadded.
            let encoded = base64url(t.as_bytes());
            req.push_str(&format!(
                "Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.{encoded}, v4.channel.k8s.io\r\n"
            ));
        }
        Some(t) => req.push_str(&format!("Authorization: Bearer {t}\r\n")),
        None => {}
    }
    for (k, v) in &c.headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", c.body.len()));
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(&c.body).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}: connection closed before the head", c.label);
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let streamed = Answer {
        status,
        body: Vec::new(),
        streamed: true,
    };
    if status == 101 || (c.stream && status == 200) {
        return streamed;
    }
    // A watch answered where upstream answers a plain response is never read to its end:
    // its first event (`{"type":...`) gives it away.
    if status == 200 && head.contains("transfer-encoding: chunked") {
        while !String::from_utf8_lossy(&raw[head_end..]).contains('{') {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                // No first event within the patience: a watch.
                Err(_) => return streamed,
            }
        }
        if String::from_utf8_lossy(&raw[head_end..]).contains("{\"type\"") {
            return streamed;
        }
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(len) => {
            while raw.len() < head_end + len {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
            }
        }
        None => {
            let _ = s.read_to_end(&mut raw);
        }
    }
    let r = common::parse_response(&raw);
    Answer {
        status: r.status,
        body: r.body,
        streamed: false,
    }
}

/// Unpadded base64url, as kubectl encodes a token in the websocket subprotocol.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

pub(crate) fn root(addr: &str, method: &'static str, path: &str, body: &Value) -> Answer {
    let mut c = Case::new(String::new(), method, path.to_owned(), Vec::new(), 0);
    if !body.is_null() {
        c = c.body(JSON, body);
    }
    send(addr, Some("root-token"), &c)
}

pub(crate) fn must(addr: &str, method: &'static str, path: &str, body: &Value) {
    let r = root(addr, method, path, body);
    assert!(
        r.status == 200 || r.status == 201,
        "{method} {path}: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
}

/// What a target looks like to the admin: absent, or its objects' names and versions.
pub(crate) fn snapshot(addr: &str, t: &Target) -> Result<BTreeSet<(String, String)>, u16> {
    let path = match t {
        Target::Object(p) | Target::Collection(p) => p,
    };
    let r = root(addr, "GET", path, &Value::Null);
    if r.status != 200 {
        return Err(r.status);
    }
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let items = match t {
        Target::Object(_) => vec![v],
        Target::Collection(_) => v["items"].as_array().cloned().unwrap_or_default(),
    };
    // An object already being deleted (a namespace emptied by its controller, a pod in its
    // grace period) may go at any time: only the others must stay as they were.
    Ok(items
        .iter()
        .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect())
}
