//! String `format`s upstream checks in custom resources (kube-openapi's `strfmt` defaults,
//! after apiextensions' `StripUnsupportedFormatsPostProcess`). A format upstream strips
//! (e.g. `int32`, `float`) is not checked; of the kept ones, `isbn*`, `creditcard` and
//! `rgbcolor` are accepted as any string here (not checked: documented in docs/crds.md).
//! Every check is linear in the string's length.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `s` is a valid `format` (`true` for a format not checked).
pub(super) fn valid(format: &str, s: &str) -> bool {
    match format {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => uri(s),
        "email" => email(s),
        "hostname" => hostname(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "uuid" => uuid(s, None),
        "uuid3" => uuid(s, Some(b'3')),
        "uuid4" => uuid(s, Some(b'4')),
        "uuid5" => uuid(s, Some(b'5')),
        "ssn" => ssn(s),
        "hexcolor" => hexcolor(s),
        "byte" => base64(s),
        "date" => date(s),
        "datetime" | "date-time" => date_time(s),
        "duration" => duration(s),
        _ => true,
    }
}

fn uri(s: &str) -> bool {
    // Go's `url.ParseRequestURI`: an absolute URI (`scheme:...`) or an absolute path.
    if s.starts_with('/') {
        return !s.contains(' ');
    }
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty()
        && !s.contains(' ')
}

fn email(s: &str) -> bool {
    let Some((local, domain)) = s.rsplit_once('@') else {
        return false;
    };
    !local.is_empty() && !local.contains(char::is_whitespace) && hostname(domain)
}

fn hostname(s: &str) -> bool {
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    s.trim_end_matches('.').split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars()
                .all(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn mac(s: &str) -> bool {
    // Go's `net.ParseMAC`: 6, 8 or 20 octets separated by `:` or `-`, or dotted quads.
    let sep = if s.contains(':') { ':' } else { '-' };
    let parts: Vec<&str> = s.split(sep).collect();
    if matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return true;
    }
    let dotted: Vec<&str> = s.split('.').collect();
    matches!(dotted.len(), 3 | 4 | 10)
        && dotted
            .iter()
            .all(|p| p.len() == 4 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn uuid(s: &str, version: Option<u8>) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return false;
        }
    }
    match version {
        None => true,
        Some(v) => {
            b.get(14) == Some(&v) && (v == b'3' || b.get(19).is_some_and(|c| b"89abAB".contains(c)))
        }
    }
}

fn ssn(s: &str) -> bool {
    let digits: String = s.chars().filter(|c| *c != '-' && *c != ' ').collect();
    digits.len() == 9 && digits.bytes().all(|b| b.is_ascii_digit()) && s.len() <= 11
}

fn hexcolor(s: &str) -> bool {
    s.strip_prefix('#')
        .is_some_and(|h| (h.len() == 3 || h.len() == 6) && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn base64(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() % 4 != 0 {
        return false;
    }
    let body = s.trim_end_matches('=');
    b.len() - body.len() <= 2
        && body
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn date(s: &str) -> bool {
    let mut it = s.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (it.next(), it.next(), it.next()) else {
        return false;
    };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

fn date_time(s: &str) -> bool {
    // RFC 3339: `2006-01-02T15:04:05[.frac](Z|±hh:mm)`; `t`/`z`/space accepted as strfmt does.
    let Some((d, rest)) = s.split_once(['T', 't', ' ']) else {
        return false;
    };
    if !date(d) || rest.len() < 8 {
        return false;
    }
    let (clock, zone) = rest.split_at(8);
    let mut it = clock.split(':');
    let (Some(h), Some(mi), Some(se)) = (it.next(), it.next(), it.next()) else {
        return false;
    };
    let (Some(h), Some(mi), Some(se)) = (digits(h, 2), digits(mi, 2), digits(se, 2)) else {
        return false;
    };
    if h > 23 || mi > 59 || se > 60 {
        return false;
    }
    let zone = match zone.strip_prefix('.') {
        Some(frac) => {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return false;
            }
            frac.get(n..).unwrap_or_default()
        }
        None => zone,
    };
    match zone {
        "Z" | "z" => true,
        z => {
            let Some(off) = z.strip_prefix(['+', '-']) else {
                return false;
            };
            let Some((oh, om)) = off.split_once(':') else {
                return false;
            };
            digits(oh, 2).is_some_and(|h| h < 24) && digits(om, 2).is_some_and(|m| m < 60)
        }
    }
}

fn duration(s: &str) -> bool {
    // strfmt's `ParseDuration`: Go's `time.ParseDuration` (`1h30m`, `-1.5s`), or
    // `<number> <unit>` with units from ns to weeks (`3 days`).
    let units = [
        "ns",
        "us",
        "µs",
        "ms",
        "s",
        "m",
        "h",
        "d",
        "w",
        "nanoseconds",
        "microseconds",
        "milliseconds",
        "seconds",
        "second",
        "minutes",
        "minute",
        "hours",
        "hour",
        "days",
        "day",
        "weeks",
        "week",
    ];
    let t = s.trim();
    if t == "0" {
        return true;
    }
    if let Some((n, u)) = t.split_once(' ') {
        return n.parse::<i64>().is_ok() && units.contains(&u.trim());
    }
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    if body.is_empty() {
        return false;
    }
    let mut rest = body;
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if n == 0 {
            return false;
        }
        rest = rest.get(n..).unwrap_or_default();
        let u = rest
            .chars()
            .take_while(|c| c.is_alphabetic())
            .map(char::len_utf8)
            .sum();
        let unit = rest.get(..u).unwrap_or_default();
        if !["ns", "us", "µs", "ms", "s", "m", "h"].contains(&unit) {
            return false;
        }
        rest = rest.get(u..).unwrap_or_default();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats() {
        for (f, good, bad) in [
            (
                "date-time",
                "2024-02-29T10:00:00.5+01:00",
                "2023-02-29T10:00:00Z",
            ),
            ("date", "2024-01-31", "2024-1-31"),
            (
                "uuid",
                "123e4567-e89b-12d3-a456-426614174000",
                "123e4567e89b12d3a456426614174000",
            ),
            ("ipv4", "10.0.0.1", "10.0.0.256"),
            ("ipv6", "::1", "1::2::3"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "01:23:45:67:89:ab", "01:23:45"),
            ("hostname", "a-b.example.com", "-a.example"),
            ("email", "a@example.com", "example.com"),
            ("byte", "aGVsbG8=", "aGVsbG8"),
            ("duration", "1h30m", "1x"),
            ("uri", "https://example.com/x", "not a uri"),
        ] {
            assert!(valid(f, good), "{f} {good}");
            assert!(!valid(f, bad), "{f} {bad}");
        }
        assert!(valid("int32", "anything"));
    }
}
