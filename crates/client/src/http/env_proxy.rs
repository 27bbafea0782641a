//! Proxies from the environment, as client-go's transports take them (Go's
//! `http.ProxyFromEnvironment`): `HTTPS_PROXY` for `https://` servers, `HTTP_PROXY` for
//! `http://` ones (each also lower-case; the upper-case one wins when both are set and not
//! empty), and `NO_PROXY` for the servers reached directly. A kubeconfig cluster's
//! `proxy-url` wins over all of them (client-go does the same).
//!
//! Invariants (Go's `httpproxy` rules):
//! - `localhost` and loopback addresses are never proxied;
//! - `NO_PROXY` is a comma-separated list of `*` (nothing is proxied), IP addresses, CIDR
//!   ranges, and host names that match themselves and their subdomains (`foo.com`,
//!   `.foo.com` and `*.foo.com` all match `bar.foo.com`; only `foo.com` also matches
//!   `foo.com`), each optionally with `:port`, which then must match the server's port
//!   (the scheme's default when the URL has none);
//! - a proxy value without a scheme is `http://`;
//! - `HTTP_PROXY` is ignored when `REQUEST_METHOD` is set (a CGI environment: the variable
//!   may come from a client's `Proxy:` header, httpoxy);
//! - the environment is read once, when a client is built.

use std::net::IpAddr;

use http::Uri;

/// The proxy variables of an environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EnvProxy {
    http: Option<String>,
    https: Option<String>,
    no_proxy: String,
    cgi: bool,
}

impl EnvProxy {
    /// This process's environment.
    pub(crate) fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// The variables `get` gives.
    pub(crate) fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let any = |names: [&str; 2]| names.iter().filter_map(|n| get(n)).find(|v| !v.is_empty());
        Self {
            http: any(["HTTP_PROXY", "http_proxy"]),
            https: any(["HTTPS_PROXY", "https_proxy"]),
            no_proxy: any(["NO_PROXY", "no_proxy"]).unwrap_or_default(),
            cgi: get("REQUEST_METHOD").is_some_and(|v| !v.is_empty()),
        }
    }

    /// The proxy URL for a server at `url`, `None` to connect directly.
    pub(crate) fn proxy_for(&self, url: &Uri) -> Option<String> {
        let (proxy, default_port) = match url.scheme_str() {
            Some("https") => (self.https.as_deref()?, 443),
            Some("http") if !self.cgi => (self.http.as_deref()?, 80),
            _ => return None,
        };
        let host = url
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = url.port_u16().unwrap_or(default_port);
        if !use_proxy(&host, port, &self.no_proxy) {
            return None;
        }
        Some(if proxy.contains("://") {
            proxy.to_owned()
        } else {
            format!("http://{proxy}")
        })
    }
}

/// Whether a server at `host:port` goes through the proxy, given `NO_PROXY`.
fn use_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    if host.is_empty() {
        return true;
    }
    if host == "localhost" {
        return false;
    }
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',') {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            continue;
        }
        if entry == "*" {
            return false;
        }
        if let Some((net, bits)) = parse_cidr(&entry) {
            if ip.is_some_and(|ip| in_cidr(ip, net, bits)) {
                return false;
            }
            continue;
        }
        let (phost, pport) = split_port(&entry);
        if let Some(pport) = pport
            && pport != port
        {
            continue;
        }
        if let Ok(pip) = phost.parse::<IpAddr>() {
            if ip == Some(pip) {
                return false;
            }
            continue;
        }
        if phost.is_empty() {
            continue;
        }
        let phost = phost.strip_prefix('*').unwrap_or(phost);
        let (suffix, exact) = match phost.strip_prefix('.') {
            Some(rest) => (format!(".{rest}"), None),
            None => (format!(".{phost}"), Some(phost)),
        };
        if host.ends_with(&suffix) || exact == Some(host) {
            return false;
        }
    }
    true
}

/// `host[:port]` of a `NO_PROXY` entry (`[v6]:port` and bare IPv6 addresses too).
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':').and_then(|p| p.parse().ok())),
            None => (entry, None),
        };
    }
    match entry.rsplit_once(':') {
        // One colon: a port; more: a bare IPv6 address.
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(p) => (h, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

/// `addr/bits` of a CIDR entry.
fn parse_cidr(entry: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = entry.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((addr, bits))
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let (ip, net, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (u128::from(u32::from(a)), u128::from(u32::from(b)), 32u32)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128u32),
        _ => return false,
    };
    let shift = width.saturating_sub(u32::from(bits));
    let mask = if shift >= 128 {
        0
    } else {
        (u128::MAX << shift) & (u128::MAX >> (128 - width))
    };
    ip & mask == net & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> EnvProxy {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        EnvProxy::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    fn via(e: &EnvProxy, url: &str) -> Option<String> {
        e.proxy_for(&url.parse().unwrap())
    }

    #[test]
    fn scheme_picks_the_variable_and_upper_case_wins() {
        let e = env(&[
            ("HTTPS_PROXY", "http://secure:3128"),
            ("https_proxy", "http://lower:3128"),
            ("http_proxy", "plain:8080"),
        ]);
        assert_eq!(
            via(&e, "https://api.example.com:6443").as_deref(),
            Some("http://secure:3128")
        );
        assert_eq!(
            via(&e, "http://api.example.com").as_deref(),
            Some("http://plain:8080"),
            "no scheme: http://"
        );
        let lower = env(&[("HTTPS_PROXY", ""), ("https_proxy", "http://lower:3128")]);
        assert_eq!(
            via(&lower, "https://api.example.com").as_deref(),
            Some("http://lower:3128"),
            "an empty upper-case variable does not hide the lower-case one"
        );
        assert_eq!(via(&EnvProxy::default(), "https://api.example.com"), None);
        let only_http = env(&[("HTTP_PROXY", "http://p:1")]);
        assert_eq!(via(&only_http, "https://api.example.com"), None);
    }

    #[test]
    fn loopback_is_never_proxied() {
        let e = env(&[("HTTPS_PROXY", "http://p:1")]);
        for url in [
            "https://localhost:6443",
            "https://127.0.0.1:6443",
            "https://127.3.2.1",
            "https://[::1]:6443",
        ] {
            assert_eq!(via(&e, url), None, "{url}");
        }
        assert!(via(&e, "https://10.0.0.1").is_some());
    }

    #[test]
    fn no_proxy_matches_like_go() {
        let e = |no: &str| env(&[("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", no)]);
        let direct = |no: &str, url: &str| via(&e(no), url).is_none();
        assert!(direct("*", "https://anything.example"));
        // host names: themselves and subdomains; a leading dot or `*.`: subdomains only
        assert!(direct("foo.com", "https://foo.com"));
        assert!(direct("foo.com", "https://api.foo.com"));
        assert!(!direct("foo.com", "https://barfoo.com"));
        assert!(direct(".foo.com", "https://api.foo.com"));
        assert!(!direct(".foo.com", "https://foo.com"));
        assert!(direct("*.foo.com", "https://api.foo.com"));
        assert!(!direct("*.foo.com", "https://foo.com"));
        assert!(direct(" bar.org , FOO.com ", "https://API.Foo.COM"));
        // ports: the URL's, or the scheme's default
        assert!(direct("foo.com:6443", "https://foo.com:6443"));
        assert!(!direct("foo.com:6443", "https://foo.com"));
        assert!(direct("foo.com:443", "https://foo.com"));
        // IPs and CIDRs
        assert!(direct("10.1.2.3", "https://10.1.2.3:6443"));
        assert!(!direct("10.1.2.3", "https://10.1.2.4"));
        assert!(direct("10.0.0.0/8", "https://10.200.0.1"));
        assert!(!direct("10.0.0.0/8", "https://11.0.0.1"));
        assert!(!direct("10.0.0.0/8", "https://ten.example"));
        assert!(direct("fd00::/8", "https://[fd12::1]:6443"));
        assert!(direct("[fd00::1]:6443", "https://[fd00::1]:6443"));
        assert!(direct("fd00::1", "https://[fd00::1]"));
        assert!(direct("0.0.0.0/0", "https://1.2.3.4"));
        // nonsense entries are skipped, not fatal
        assert!(!direct(",, :80, /x, 10.0.0.0/99", "https://api.example"));
    }

    #[test]
    fn cgi_environments_ignore_http_proxy() {
        let e = env(&[
            ("HTTP_PROXY", "http://evil:80"),
            ("HTTPS_PROXY", "http://p:1"),
            ("REQUEST_METHOD", "GET"),
        ]);
        assert_eq!(via(&e, "http://api.example"), None);
        assert!(via(&e, "https://api.example").is_some());
    }
}
