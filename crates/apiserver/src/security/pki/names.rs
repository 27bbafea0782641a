//! The names the `--pki-dir` serving certificate must carry ([`ServingNames`]): the fixed
//! ones (`localhost`, `127.0.0.1`, `::1`, and `kubernetes`, `kubernetes.default`,
//! `kubernetes.default.svc` as upstream's self-signed serving certificate), the machine's
//! host name, the bind address — or, for a wildcard bind (`0.0.0.0`, `::`), the machine's
//! interface addresses — and the operator's `--tls-san` values.
//!
//! Invariants: every name is a valid DNS name (lower case) or an IP address; the interface
//! addresses read are bounded ([`MAX_INTERFACE_ADDRESSES`]) and read in a stream, so a
//! machine with a huge routing table costs time, never memory.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The DNS names upstream's self-signed serving certificate carries besides `localhost`
/// (what in-cluster clients dial).
pub const SERVICE_NAMES: [&str; 3] = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];

/// The most interface addresses put in a certificate (a machine with more names the rest
/// with `--tls-san`).
pub const MAX_INTERFACE_ADDRESSES: usize = 64;

/// Longest `--tls-san` value (a DNS name is at most 253 characters).
const MAX_NAME: usize = 253;

/// What the serving certificate must name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServingNames {
    /// DNS names, lower case.
    pub dns: BTreeSet<String>,
    /// IP addresses.
    pub ips: BTreeSet<IpAddr>,
}

/// A `--tls-san` value: an IP address, or a DNS name (`*.` wildcard allowed), lower-cased.
/// The clap value parser of the flag.
pub fn parse_san(s: &str) -> Result<String, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let name = s.to_ascii_lowercase();
    let host = name.strip_prefix("*.").unwrap_or(&name);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > MAX_NAME || !host.split('.').all(label_ok) {
        return Err(format!(
            "{s:?} is neither an IP address nor a DNS name (lower-case letters, digits, '-' \
             and '.', at most {MAX_NAME} characters, optionally starting with \"*.\")"
        ));
    }
    Ok(name)
}

impl ServingNames {
    /// The names for a server bound to `bind`, with the operator's extra names (each a
    /// [`parse_san`] result).
    pub fn wanted(bind: SocketAddr, extra: &[String]) -> Self {
        let mut n = Self::default();
        n.dns.insert("localhost".to_owned());
        n.dns.extend(SERVICE_NAMES.iter().map(|s| (*s).to_owned()));
        if let Some(h) = hostname() {
            n.dns.insert(h);
        }
        n.ips.insert(IpAddr::V4(Ipv4Addr::LOCALHOST));
        n.ips.insert(IpAddr::V6(Ipv6Addr::LOCALHOST));
        match bind.ip() {
            // `::` takes IPv4 connections too (Linux' default), `0.0.0.0` only IPv4.
            IpAddr::V4(ip) if ip.is_unspecified() => {
                n.ips
                    .extend(interface_addresses().into_iter().filter(IpAddr::is_ipv4));
            }
            IpAddr::V6(ip) if ip.is_unspecified() => n.ips.extend(interface_addresses()),
            ip => {
                n.ips.insert(ip);
            }
        }
        for e in extra {
            match e.parse::<IpAddr>() {
                Ok(ip) => {
                    n.ips.insert(ip);
                }
                Err(_) => {
                    n.dns.insert(e.to_ascii_lowercase());
                }
            }
        }
        n
    }
}

/// The machine's host name, when it is a usable DNS name.
pub fn hostname() -> Option<String> {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())?;
    parse_san(raw.trim())
        .ok()
        .filter(|h| h.parse::<IpAddr>().is_err() && !h.starts_with("*."))
}

/// The machine's own unicast addresses besides loopback (IPv6 link-local ones left out: a
/// URL needs a zone for them), at most [`MAX_INTERFACE_ADDRESSES`]. Linux: from
/// `/proc/net/fib_trie` (IPv4 `host LOCAL` entries) and `/proc/net/if_inet6`; elsewhere, or
/// when those say nothing, the source address of the default route (a connected UDP socket,
/// which sends nothing).
pub fn interface_addresses() -> Vec<IpAddr> {
    let mut out = BTreeSet::new();
    if let Ok(f) = std::fs::File::open("/proc/net/fib_trie") {
        fib_trie_locals(std::io::BufReader::new(f), &mut out);
    }
    if let Ok(f) = std::fs::File::open("/proc/net/if_inet6") {
        if_inet6(std::io::BufReader::new(f), &mut out);
    }
    if out.is_empty() {
        for probe in [
            SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 9)),
            SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 9)),
        ] {
            let local = if probe.is_ipv4() {
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
            } else {
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
            };
            if let Ok(s) = std::net::UdpSocket::bind(local)
                && s.connect(probe).is_ok()
                && let Ok(a) = s.local_addr()
                && usable(a.ip())
            {
                out.insert(a.ip());
            }
        }
    }
    out.into_iter().take(MAX_INTERFACE_ADDRESSES).collect()
}

fn usable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => !v.is_loopback() && !v.is_unspecified() && !v.is_broadcast(),
        IpAddr::V6(v) => !v.is_loopback() && !v.is_unspecified() && !v.is_unicast_link_local(),
    }
}

/// The IPv4 addresses `/proc/net/fib_trie` lists as `/32 host LOCAL` (the machine's own).
fn fib_trie_locals(r: impl BufRead, out: &mut BTreeSet<IpAddr>) {
    let mut last: Option<Ipv4Addr> = None;
    for line in r.lines() {
        let Ok(line) = line else { return };
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL")
            && let Some(ip) = last.take()
            && usable(IpAddr::V4(ip))
        {
            out.insert(IpAddr::V4(ip));
            if out.len() >= MAX_INTERFACE_ADDRESSES {
                return;
            }
        }
    }
}

/// The addresses of `/proc/net/if_inet6` (32 hex digits, then index, prefix, scope, flags,
/// interface).
fn if_inet6(r: impl BufRead, out: &mut BTreeSet<IpAddr>) {
    for line in r.lines() {
        let Ok(line) = line else { return };
        let Some(hex) = line.split_whitespace().next() else {
            continue;
        };
        let Ok(bits) = u128::from_str_radix(hex, 16) else {
            continue;
        };
        if hex.len() != 32 {
            continue;
        }
        let ip = IpAddr::V6(Ipv6Addr::from(bits));
        if usable(ip) {
            out.insert(ip);
            if out.len() >= MAX_INTERFACE_ADDRESSES {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn san_values_are_ip_addresses_or_dns_names() {
        assert_eq!(parse_san("10.0.0.1").unwrap(), "10.0.0.1");
        assert_eq!(parse_san("FD00::0002").unwrap(), "fd00::2");
        assert_eq!(parse_san("API.Example.com").unwrap(), "api.example.com");
        assert_eq!(parse_san("*.example.com").unwrap(), "*.example.com");
        let long = format!("{}.com", "a".repeat(250));
        for bad in [
            "",
            "a..b",
            "-a.com",
            "a-.com",
            "a_b.com",
            "*",
            "*.",
            "a.*.com",
            "exämple.com",
            "a b",
            "http://x",
            long.as_str(),
            &"a".repeat(64),
        ] {
            assert!(parse_san(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_addresses_are_read_from_procfs_shapes() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.0\n              /8 host LOCAL\n           |-- 127.0.0.1\n              /32 host LOCAL\n        |-- 127.255.255.255\n           /32 link BROADCAST\n        +-- 192.0.2.0/30 2 0 2\n           |-- 192.0.2.0\n              /24 link UNICAST\n           |-- 192.0.2.2\n              /32 host LOCAL\n        |-- 192.0.2.255\n           /32 link BROADCAST\nLocal:\n           |-- 192.0.2.2\n              /32 host LOCAL\n           |-- garbage\n              /32 host LOCAL\n";
        let mut out = BTreeSet::new();
        fib_trie_locals(trie.as_bytes(), &mut out);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            ["192.0.2.2".parse::<IpAddr>().unwrap()]
        );
        let inet6 = "00000000000000000000000000000001 01 80 10 80       lo\nfe8000000000000000fc00fffe000001 04 40 20 80     eth0\nfd000000000000000000000000000002 04 40 00 82     eth0\nzz 1\n\n123 04\n";
        let mut out = BTreeSet::new();
        if_inet6(inet6.as_bytes(), &mut out);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            ["fd00::2".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn many_addresses_are_bounded() {
        let mut trie = String::new();
        for i in 0..10_000u32 {
            let ip = Ipv4Addr::from(0x0a00_0000 + i);
            trie.push_str(&format!("   |-- {ip}\n      /32 host LOCAL\n"));
        }
        let mut out = BTreeSet::new();
        fib_trie_locals(trie.as_bytes(), &mut out);
        assert_eq!(out.len(), MAX_INTERFACE_ADDRESSES);
    }

    #[test]
    fn the_wanted_names_follow_the_bind_address() {
        let loopback = ServingNames::wanted("127.0.0.1:6443".parse().unwrap(), &[]);
        assert!(loopback.dns.contains("localhost"));
        assert!(loopback.dns.contains("kubernetes.default.svc"));
        assert!(loopback.ips.contains(&IpAddr::V6(Ipv6Addr::LOCALHOST)));
        if let Some(h) = hostname() {
            assert!(loopback.dns.contains(&h));
        }
        let one = ServingNames::wanted("192.0.2.77:6443".parse().unwrap(), &[]);
        assert!(one.ips.contains(&"192.0.2.77".parse().unwrap()));
        let wild = ServingNames::wanted(
            "0.0.0.0:6443".parse().unwrap(),
            &["10.9.8.7".into(), "api.example.com".into()],
        );
        assert!(!wild.ips.iter().any(IpAddr::is_unspecified));
        for ip in interface_addresses().into_iter().filter(IpAddr::is_ipv4) {
            assert!(wild.ips.contains(&ip), "{ip}");
        }
        assert!(wild.ips.contains(&"10.9.8.7".parse().unwrap()));
        assert!(wild.dns.contains("api.example.com"));
    }
}
