//! Parsing and validation of flag values, as clap value parsers, in kube-apiserver's
//! habits: a bad value is a usage error (a message naming the flag and what it accepts,
//! exit code 2) before anything starts.
//!
//! - Durations are Go durations (`10s`, `1m30s`, `500ms`, `1.5h`); a bare whole number
//!   still means seconds, as these flags took before (`--request-timeout 60`). Each is at
//!   most [`MAX_SECONDS`] (ten years), so that no deadline overflows.
//! - Byte sizes are Kubernetes quantities (`1Gi`, `512Mi`, `100M`, `1e6`, plain bytes),
//!   whole bytes only.
//! - Booleans are Go's (`true`, `false`, `1`, `0`, `t`, `f`, `TRUE` …); a boolean flag
//!   alone means `true` (`--watch-cache`), as upstream's.
//! - Addresses may name a host (`localhost:8080`), resolved at start.
//! - `--log-level` must be a level or a tracing filter whose parts name levels.
//!
//! Every count and byte size has an upper bound for the same reason as durations. Where
//! upstream's flag reads 0 as "no limit" (`--max-requests-inflight`,
//! `--max-mutating-requests-inflight`) ours does too, and so do our own limits; where
//! upstream accepts 0 but it breaks the server (`--request-timeout 0` times every request
//! out at its arrival, `--min-request-timeout 0` ends every watch without `timeoutSeconds`
//! at once) ours refuses it. No flag of ours takes a negative value (upstream refuses
//! negative values for each of their equivalents too); `-1` is read as a value and
//! refused with the flag's message, not as an unknown flag.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The longest duration any flag accepts, in seconds (ten years).
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The largest count (connections, seats, watches, queue lengths) any flag accepts.
pub const MAX_COUNT: usize = 1 << 30;

/// The largest byte size any flag accepts (1 TiB).
pub const MAX_BYTES: usize = 1 << 40;

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
    s: &str,
    min: T,
    max: T,
    unit: &str,
) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("must be a whole number from {min} to {max}{unit}")),
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A Go duration (`1h30m`, `1.5s`, `500ms`, `0`), or a bare whole number of seconds.
/// `None` when it is neither, negative, or too large for a [`Duration`].
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().ok().map(Duration::from_secs);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let not_digit = |c: char| !c.is_ascii_digit();
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, r) = rest.split_at(rest.find(not_digit).unwrap_or(rest.len()));
        let (frac, r) = match r.strip_prefix('.') {
            Some(r) => r.split_at(r.find(not_digit).unwrap_or(r.len())),
            None => ("", r),
        };
        if whole.is_empty() && frac.is_empty() {
            return None;
        }
        let (unit, r) = r.split_at(
            r.find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(r.len()),
        );
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            _ => return None,
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        total = total.checked_add(whole.checked_mul(per)?)?;
        // Digits past the 18th cannot change a nanosecond count of an hour.
        let frac = frac.get(..frac.len().min(18)).unwrap_or("");
        if !frac.is_empty() {
            let f: u128 = frac.parse().ok()?;
            let scale = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
            total = total.checked_add(f.checked_mul(per)? / scale)?;
        }
        rest = r;
    }
    let secs = u64::try_from(total / NANOS_PER_SEC).ok()?;
    let nanos = u32::try_from(total % NANOS_PER_SEC).ok()?;
    Some(Duration::new(secs, nanos))
}

fn duration_in(s: &str, min: Duration, what: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Some(d) if d >= min && d <= Duration::from_secs(MAX_SECONDS) => Ok(d),
        _ => Err(format!(
            "must be a duration {what}up to {MAX_SECONDS}s (ten years), as Go writes them \
             (10s, 1m30s, 500ms, 2h) or a whole number of seconds"
        )),
    }
}

/// A duration, 0 allowed.
pub fn duration(s: &str) -> Result<Duration, String> {
    duration_in(s, Duration::ZERO, "")
}

/// A duration above 0.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    duration_in(s, Duration::from_nanos(1), "above 0 ")
}

/// `--request-timeout`: upstream accepts 0, which makes every request time out at its
/// arrival; refused here, and so is anything under a second.
pub fn request_timeout(s: &str) -> Result<Duration, String> {
    if parse_duration(s).is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(
            "must be at least 1 second: 0 would end every request at its arrival \
                    (what upstream's 0 does)"
                .into(),
        );
    }
    duration_in(s, Duration::from_secs(1), "from 1s ")
}

/// `--min-request-timeout`: upstream accepts 0, which ends every watch without
/// `timeoutSeconds` at once; refused here, and so is anything under a second (the
/// randomized watch timeout is whole seconds, as upstream's).
pub fn min_request_timeout(s: &str) -> Result<Duration, String> {
    if parse_duration(s).is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(
            "must be at least 1 second: 0 would end every watch without timeoutSeconds \
                    at once (what upstream's 0 does)"
                .into(),
        );
    }
    duration_in(s, Duration::from_secs(1), "from 1s ")
}

/// A Kubernetes quantity as a whole number of bytes: plain (`1048576`), binary suffixes
/// (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`), decimal ones (`k` `M` `G` `T` `P` `E`) or a decimal
/// exponent (`1e6`), with a fraction where the result is whole (`1.5Gi`). `None` for
/// anything else, negative, fractional bytes (`0.5`, `1m`) or past `u64`.
pub fn parse_quantity(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let not_digit = |c: char| !c.is_ascii_digit();
    let (whole, r) = s.split_at(s.find(not_digit).unwrap_or(s.len()));
    let (frac, suffix) = match r.strip_prefix('.') {
        Some(r) => r.split_at(r.find(not_digit).unwrap_or(r.len())),
        None => ("", r),
    };
    if (whole.is_empty() && frac.is_empty()) || whole.len() > 30 || frac.len() > 30 {
        return None;
    }
    let multiplier: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        e => {
            let exp = e.strip_prefix(['e', 'E'])?;
            if exp.is_empty() || !exp.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10u128.checked_pow(exp.parse::<u32>().ok().filter(|&x| x <= 30)?)?
        }
    };
    let digits: u128 = format!("{whole}{frac}").parse().ok()?;
    let scale = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let scaled = digits.checked_mul(multiplier)?;
    if scaled % scale != 0 {
        return None;
    }
    u64::try_from(scaled / scale).ok()
}

fn bytes_in(s: &str, min: u64, max: u64, note: &str) -> Result<u64, String> {
    match parse_quantity(s) {
        Some(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!(
            "must be a byte size from {min} to {max}{note}: plain bytes or a Kubernetes \
             quantity (512Mi, 1Gi, 100M, 1e6)"
        )),
    }
}

/// A byte size where 0 means no limit, at most [`MAX_BYTES`].
pub fn bytes_limit(s: &str) -> Result<usize, String> {
    let n = bytes_in(s, 0, MAX_BYTES as u64, " (0: no limit)")?;
    usize::try_from(n).map_err(|e| e.to_string())
}

/// A byte size of at least 1, at most [`MAX_COUNT`] bytes (1 GiB).
pub fn positive_bytes(s: &str) -> Result<usize, String> {
    let n = bytes_in(s, 1, MAX_COUNT as u64, "")?;
    usize::try_from(n).map_err(|e| e.to_string())
}

/// Any byte size.
pub fn bytes(s: &str) -> Result<u64, String> {
    bytes_in(s, 0, u64::MAX, "")
}

/// A limit where 0 means no limit.
pub fn limit(s: &str) -> Result<usize, String> {
    number(s, 0, MAX_COUNT, " (0: no limit)")
}

/// The most threads `--request-workers` accepts.
pub const MAX_WORKERS: usize = 1024;

/// `--request-workers`: threads of the request compute pool, 0 (none: requests compute on
/// the I/O threads) to [`MAX_WORKERS`].
pub fn workers(s: &str) -> Result<usize, String> {
    number(
        s,
        0,
        MAX_WORKERS,
        " (threads; 0: compute on the I/O threads)",
    )
}

/// A count of at least 1.
pub fn positive_count(s: &str) -> Result<usize, String> {
    number(s, 1, MAX_COUNT, "")
}

/// `--http2-max-streams-per-connection`: as upstream, not negative, 0 for the default
/// (250); at most 2^31 - 1 (what an HTTP/2 SETTINGS value and upstream's int32 hold).
pub fn http2_max_streams(s: &str) -> Result<u32, String> {
    number(s, 0, (1 << 31) - 1, " (0: the default, 250)")
}

/// Any non-negative whole number.
pub fn count(s: &str) -> Result<u64, String> {
    number(s, 0, u64::MAX, "")
}

/// A boolean as Go's `strconv.ParseBool` reads it (what upstream's flags take).
pub fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err("must be true or false (or 1, 0, t, f)".into()),
    }
}

/// The first address `host` resolves to, IPv4 first (what `localhost` means to most
/// clients); an IP address is taken as it is.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, port));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host {host:?}: {e}"))?
        .take(64)
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("host {host:?} resolves to no address"))
}

/// `--bind`: `HOST:PORT`, the host an IP address (`[::1]:8080` for IPv6) or a name
/// resolved now (`localhost:8080`); an empty host (`:8080`) is every IPv4 interface, as
/// Go's listeners read it (0.0.0.0).
pub fn bind_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let usage = "must be HOST:PORT (127.0.0.1:8080, localhost:8080, [::1]:8080, :8080; \
                 port 0 picks a free port)";
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(usage.into());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{usage}: bad port {port:?}"))?;
    if host.is_empty() {
        return Ok(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port));
    }
    resolve(host, port)
}

/// `--bind-address` (upstream's): an IP address or a host name, resolved now.
pub fn bind_host(s: &str) -> Result<IpAddr, String> {
    if s.is_empty() {
        return Err("must be an IP address or a host name".into());
    }
    resolve(s, 0).map(|a| a.ip())
}

/// One `--etcd-servers` URL: not empty, no spaces (`http://host:2379`, `https://…`); the
/// etcd client checks the rest when it starts.
pub fn etcd_server(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err("must be etcd client URLs, comma-separated (http://127.0.0.1:2379)".into());
    }
    Ok(s.to_owned())
}

/// The level names `--log-level` takes (tracing's; klog's `-v` numbers are not levels).
const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// `--log-level`: a level (`info`), or a tracing filter (`info,listwatch_endpoints=debug`)
/// whose every part names a level, so that a typo (`verbose`, `warning`) is refused rather
/// than read as a target name that matches nothing.
pub fn log_filter(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "must be a level ({}) or a filter such as info,listwatch_endpoints=debug",
            LEVELS.join(", ")
        )
    };
    for part in s.split(',') {
        let level = match part.rsplit_once('=') {
            Some((target, level)) if !target.is_empty() => level,
            Some(_) => return Err(bad()),
            None => part,
        };
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(bad());
        }
    }
    tracing_subscriber::EnvFilter::try_new(s).map_err(|e| format!("{}: {e}", bad()))?;
    Ok(s.to_owned())
}

/// `--service-cluster-ip-range`: one CIDR.
pub fn service_cidr(s: &str) -> Result<listwatch_registry::service_alloc::Cidr, String> {
    s.parse()
        .map_err(|e: listwatch_registry::service_alloc::RangeError| e.to_string())
}

/// `--service-node-port-range`: FIRST-LAST.
pub fn port_range(s: &str) -> Result<listwatch_registry::service_alloc::PortRange, String> {
    s.parse()
        .map_err(|e: listwatch_registry::service_alloc::RangeError| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn values_are_bounded_and_zero_means_what_upstream_means() {
        assert_eq!(limit("0"), Ok(0));
        assert_eq!(limit("400"), Ok(400));
        for bad in [
            "-1",
            "1e3",
            "",
            "x",
            "1073741825",
            "99999999999999999999999",
        ] {
            assert!(limit(bad).is_err(), "{bad}");
        }
        assert!(request_timeout("0").unwrap_err().contains("at least 1"));
        assert!(min_request_timeout("0").is_err());
        assert_eq!(request_timeout("60"), Ok(Duration::from_secs(60)));
        assert!(positive_duration(&(MAX_SECONDS + 1).to_string()).is_err());
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert!(positive_duration("0s").is_err());
        assert!(positive_count("0").is_err());
        assert_eq!(bytes_limit("0"), Ok(0));
        assert_eq!(count("18446744073709551615"), Ok(u64::MAX));
        assert!(count("-1").is_err());
        assert_eq!(http2_max_streams("0"), Ok(0));
        assert_eq!(http2_max_streams("250"), Ok(250));
        for bad in ["-1", "2147483648", "x", ""] {
            assert!(http2_max_streams(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_are_go_durations_or_whole_seconds() {
        let ms = Duration::from_millis;
        for (s, want) in [
            ("10", ms(10_000)),
            ("10s", ms(10_000)),
            ("1m30s", ms(90_000)),
            ("500ms", ms(500)),
            ("1.5h", ms(5_400_000)),
            ("2h45m", ms(9_900_000)),
            ("0", ms(0)),
            ("0s", ms(0)),
            (".5s", ms(500)),
            ("1.s", ms(1000)),
            ("+3s", ms(3000)),
            ("1500us", ms(1) + Duration::from_micros(500)),
            ("1µs", Duration::from_micros(1)),
            ("7ns", Duration::from_nanos(7)),
        ] {
            assert_eq!(parse_duration(s), Some(want), "{s}");
        }
        for bad in [
            "",
            "-1",
            "-1s",
            "1.5",
            "s",
            "1x",
            "1 s",
            ".s",
            "1e3s",
            "1m-1s",
            "1d",
            "999999999999999999999999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert!(duration(&format!("{}h", MAX_SECONDS / 3600 + 1)).is_err());
        assert!(request_timeout("500ms").unwrap_err().contains("at least 1"));
        assert_eq!(request_timeout("1m"), Ok(Duration::from_secs(60)));
    }

    #[test]
    fn sizes_are_kubernetes_quantities_in_whole_bytes() {
        for (s, want) in [
            ("0", 0),
            ("1024", 1024),
            ("1Ki", 1024),
            ("512Mi", 512 << 20),
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("100M", 100_000_000),
            ("2k", 2000),
            ("1e6", 1_000_000),
            ("1E3", 1000),
            ("+5", 5),
            ("1Ei", 1 << 60),
        ] {
            assert_eq!(parse_quantity(s), Some(want), "{s}");
        }
        for bad in [
            "", "-1", "1m", "0.5", "1.1", "1KiB", "1K", "1 Gi", "Gi", "1e", "1e99", "16Ei", "1e-3",
            "x",
        ] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
        assert!(bytes_limit("2Ti").is_err());
        assert_eq!(positive_bytes("1536Ki"), Ok(1536 * 1024));
        assert!(positive_bytes("0").is_err());
    }

    #[test]
    fn booleans_addresses_and_log_levels() {
        assert_eq!(go_bool("T"), Ok(true));
        assert_eq!(go_bool("0"), Ok(false));
        assert!(go_bool("yes").is_err());
        assert_eq!(
            bind_address("localhost:8080").unwrap().port(),
            8080,
            "a host name is resolved"
        );
        assert!(bind_address("localhost:8080").unwrap().ip().is_loopback());
        assert_eq!(bind_address(":0"), Ok("0.0.0.0:0".parse().unwrap()));
        assert_eq!(bind_address("[::1]:1"), Ok("[::1]:1".parse().unwrap()));
        for bad in [
            "127.0.0.1:99999",
            "127.0.0.1",
            "localhost",
            "host.invalid:80",
        ] {
            assert!(bind_address(bad).is_err(), "{bad}");
        }
        assert_eq!(bind_host("127.0.0.1"), Ok(IpAddr::from([127, 0, 0, 1])));
        for ok in ["info", "WARN", "info,listwatch_endpoints=debug", "off"] {
            assert!(log_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["verbose", "warning", "", "info,", "=debug", "x=loud", "5"] {
            assert!(log_filter(bad).is_err(), "{bad}");
        }
    }
}
