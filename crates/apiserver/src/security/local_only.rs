//! The unauthenticated mode's guard against web pages. Without an authenticator every
//! client is a cluster administrator; what keeps that to the local machine is the loopback
//! bind — which a browser on the machine crosses for any page it shows: a page of
//! `evil.example.com` whose name the attacker re-points at 127.0.0.1 (DNS rebinding) reads
//! the answers as its own origin, and any page may open a cross-site websocket (browsers
//! apply no same-origin rule to websockets) or send a cross-site POST.
//!
//! So in that mode a request is refused (403, a Status naming the reason) when
//! - a `Host` header or the request's authority (HTTP/2's `:authority`, an absolute-form
//!   request target) names anything but `localhost`, a loopback IP address, or the address
//!   the connection was accepted on (the bound address; for a wildcard bind, the concrete
//!   local address), with or without a port (IPv6 in brackets, `[::1]:8080`); a DNS
//!   rebinding request carries the attacker's name;
//! - an `Origin` header is present and is not `http(s)://` with such a host: a browser
//!   sends `Origin` on every websocket handshake and cross-site POST, and `null` from
//!   sandboxed or `file:` pages.
//!
//! A request without `Host` (HTTP/1.0) is not a browser's and is allowed; kubectl, kube-rs,
//! client-go and the Python client send the host they were given (`127.0.0.1:PORT`,
//! `localhost:PORT`) and no `Origin`.
//!
//! Invariant: in the unauthenticated mode, no request naming a non-local host or carrying a
//! non-local origin reaches authorization or a handler (websocket upgrades included).

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Uri, header};

/// Whether `host` (no port, IPv6 without brackets) is local: `localhost` (any case, an
/// optional final dot), a loopback address, or the connection's local address.
fn local_host(host: &str, local: Option<SocketAddr>) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let Ok(ip) = host.parse::<IpAddr>() else {
        return false;
    };
    let ip = ip.to_canonical();
    ip.is_loopback() || local.is_some_and(|l| l.ip().to_canonical() == ip)
}

/// Splits `host[:port]` / `[v6][:port]`; `None` when it is not of that shape.
fn split_host_port(s: &str) -> Option<&str> {
    if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        return match after {
            "" => Some(v6),
            p => p
                .strip_prefix(':')
                .filter(|port| port.bytes().all(|b| b.is_ascii_digit()))
                .map(|_| v6),
        };
    }
    match s.rsplit_once(':') {
        None => Some(s),
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => Some(h),
        // An IPv6 address without brackets is no valid Host.
        Some(_) => None,
    }
}

fn allowed_authority(value: &str, local: Option<SocketAddr>) -> bool {
    !value.is_empty()
        && !value.contains('@')
        && split_host_port(value).is_some_and(|h| local_host(h, local))
}

fn allowed_origin(value: &str, local: Option<SocketAddr>) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    // An origin is scheme://host[:port], no path; tolerate a final '/'.
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    scheme_ok && !authority.contains('/') && allowed_authority(authority, local)
}

/// Shown in a refusal, bounded and printable.
fn shown(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    let mut out: String = s.chars().take(100).collect();
    if s.chars().count() > 100 {
        out.push('…');
    }
    out
}

/// Checks a request of the unauthenticated mode; `Err` is the 403's message.
pub fn check(headers: &HeaderMap, uri: &Uri, local: Option<SocketAddr>) -> Result<(), String> {
    let hosts = headers
        .get_all(header::HOST)
        .iter()
        .map(|v| v.as_bytes())
        .chain(uri.authority().map(|a| a.as_str().as_bytes()));
    for h in hosts {
        let ok = std::str::from_utf8(h).is_ok_and(|h| allowed_authority(h, local));
        if !ok {
            return Err(format!(
                "this server authenticates nobody (every client is a cluster administrator), so it \
                 serves only requests addressed to localhost, a loopback address or its own address: \
                 Host {:?} is refused (a web page could reach this port through DNS rebinding); \
                 configure authentication (--pki-dir) to serve other names",
                shown(h)
            ));
        }
    }
    for o in headers.get_all(header::ORIGIN) {
        let ok = o.to_str().is_ok_and(|o| allowed_origin(o, local));
        if !ok {
            return Err(format!(
                "this server authenticates nobody (every client is a cluster administrator), so it \
                 refuses requests made by web pages of other origins: Origin {:?} is not \
                 localhost or a loopback address",
                shown(o.as_bytes())
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, &str)], uri: &str) -> Result<(), String> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        check(
            &h,
            &uri.parse().unwrap(),
            Some("10.1.2.3:8080".parse().unwrap()),
        )
    }

    #[test]
    fn local_hosts_pass() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:6443",
            "127.9.9.9:1",
            "[::1]",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
            "10.1.2.3",
            "10.1.2.3:8080",
        ] {
            assert_eq!(req(&[("host", host)], "/api"), Ok(()), "{host}");
        }
        assert_eq!(req(&[], "/api"), Ok(()), "no Host: not a browser");
        assert_eq!(req(&[], "http://localhost:1/api"), Ok(()));
    }

    #[test]
    fn other_hosts_are_refused() {
        for host in [
            "evil.example.com",
            "evil.example.com:8080",
            "localhost.evil.example.com",
            "127.0.0.1.nip.io",
            "10.1.2.4",
            "::1",
            "[::1]x",
            "127.0.0.1:80x",
            "user@localhost",
            "",
        ] {
            let e = req(&[("host", host)], "/api").unwrap_err();
            assert!(e.contains("DNS rebinding"), "{host}: {e}");
        }
        assert!(req(&[("host", "localhost")], "http://evil.example.com/api").is_err());
        assert!(
            req(
                &[("host", "localhost"), ("host", "evil.example.com")],
                "/api"
            )
            .is_err(),
            "every Host counts"
        );
    }

    #[test]
    fn origins_must_be_local() {
        for origin in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
        ] {
            assert_eq!(
                req(&[("host", "localhost"), ("origin", origin)], "/api"),
                Ok(()),
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example.com",
            "null",
            "file://",
            "http://localhost.evil.example.com",
            "ftp://localhost",
            "http://localhost/path",
        ] {
            let e = req(&[("host", "localhost"), ("origin", origin)], "/api").unwrap_err();
            assert!(e.contains("Origin"), "{origin}: {e}");
        }
    }
}
