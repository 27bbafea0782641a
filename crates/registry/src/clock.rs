//! Timestamps (RFC 3339, second precision, UTC: Kubernetes' `metav1.Time`) and the
//! human-readable ages of Table printing, without a date-time dependency.
//!
//! Invariant: `parse_rfc3339(&format_rfc3339(t)) == t` for every whole second since 1970.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `2026-11-29T08:36:13Z` for a Unix time.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// `Sun, 29 Nov 2026 08:36:13 GMT` (an HTTP date, RFC 9110's IMF-fixdate) for a Unix time.
pub fn format_http_date(unix: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS
        .get(usize::try_from(days.rem_euclid(7)).unwrap_or(0))
        .unwrap_or(&"Thu");
    let month = MONTHS
        .get(usize::try_from(m - 1).unwrap_or(0))
        .unwrap_or(&"Jan");
    format!(
        "{weekday}, {d:02} {month} {y:04} {:02}:{:02}:{:02} GMT",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            sign * (rest.get(1..3)?.parse::<i64>().ok()? * 3600
                + rest.get(4..6)?.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// Upstream's `duration.HumanDuration`: `45s`, `3m12s`, `5h2m`, `3d4h`, `400d`, `2y10d`.
pub fn human_duration(d: Duration) -> String {
    let s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    if s < 60 * 2 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rs}s")
        };
    }
    if m < 60 * 3 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = m % 60;
        return if rm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rm}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        let rh = h % 24;
        let days = h / 24;
        return if rh == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{rh}h")
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        let dy = (h / 24) % 365;
        let y = h / 24 / 365;
        return if dy == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{dy}d")
        };
    }
    format!("{}y", h / 24 / 365)
}

/// The AGE cell for a creation timestamp: `<unknown>` when absent or unreadable.
pub fn age(creation_timestamp: Option<&str>, now: i64) -> String {
    match creation_timestamp.and_then(parse_rfc3339) {
        None => "<unknown>".into(),
        Some(t) if now < t => "0s".into(),
        Some(t) => human_duration(Duration::from_secs(u64::try_from(now - t).unwrap_or(0))),
    }
}

// Howard Hinnant's civil-date algorithms.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_http_dates() {
        assert_eq!(format_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            format_http_date(1_795_941_373),
            "Sun, 29 Nov 2026 08:36:13 GMT"
        );
        assert_eq!(
            format_http_date(951_782_400),
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_941_373), "2026-11-29T08:36:13Z");
        assert_eq!(
            parse_rfc3339("2026-11-29T09:36:13+01:00"),
            Some(1_795_941_373)
        );
        assert_eq!(
            parse_rfc3339("2026-11-29T08:36:13.123456Z"),
            Some(1_795_941_373)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn human_durations_follow_upstream_buckets() {
        let h = |s| human_duration(Duration::from_secs(s));
        assert_eq!(h(5), "5s");
        assert_eq!(h(119), "119s");
        assert_eq!(h(185), "3m5s");
        assert_eq!(h(600), "10m");
        assert_eq!(h(3 * 3600 + 120), "3h2m");
        assert_eq!(h(30 * 3600), "30h");
        assert_eq!(h(3 * 86_400 + 3600), "3d1h");
        assert_eq!(h(400 * 86_400), "400d");
        assert_eq!(h(3 * 365 * 86_400), "3y");
        assert_eq!(age(None, 0), "<unknown>");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(t in 0i64..8_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
        }
    }
}
