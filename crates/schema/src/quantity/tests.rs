//! Upstream's own quantity test inputs (`TestQuantityParse`, `TestQuantityString`'s
//! alternates, `TestQuantityParseEmit`, re-expressed) and the red team's hostile forms,
//! each with what upstream's `Quantity` answers — its JSON encoding after decoding the
//! text, and after `SetDefaults_ResourceList` — as upstream's code computes them.

use super::*;
use serde_json::json;

/// (text, upstream's encoding, upstream's encoding in a `ResourceList`).
const UPSTREAM: &[(&str, &str, &str)] = &[
    ("0", "0", "0"),
    ("0n", "0", "0"),
    ("0u", "0", "0"),
    ("0m", "0", "0"),
    ("0Ki", "0", "0"),
    ("0k", "0", "0"),
    ("0Mi", "0", "0"),
    ("0M", "0", "0"),
    ("0Gi", "0", "0"),
    ("0G", "0", "0"),
    ("0Ti", "0", "0"),
    ("0T", "0", "0"),
    ("1", "1", "1"),
    ("1Ki", "1Ki", "1Ki"),
    ("8Ki", "8Ki", "8Ki"),
    ("7Mi", "7Mi", "7Mi"),
    ("6Gi", "6Gi", "6Gi"),
    ("5Ti", "5Ti", "5Ti"),
    ("4Pi", "4Pi", "4Pi"),
    ("3Ei", "3Ei", "3Ei"),
    ("10Ti", "10Ti", "10Ti"),
    ("100Ti", "100Ti", "100Ti"),
    ("5n", "5n", "1m"),
    ("4u", "4u", "1m"),
    ("3m", "3m", "3m"),
    ("9", "9", "9"),
    ("8k", "8k", "8k"),
    ("50k", "50k", "50k"),
    ("7M", "7M", "7M"),
    ("6G", "6G", "6G"),
    ("5T", "5T", "5T"),
    ("40T", "40T", "40T"),
    ("300T", "300T", "300T"),
    ("2P", "2P", "2P"),
    ("1E", "1E", "1E"),
    ("1E-3", "1E-3", "1E-3"),
    ("1e3", "1e3", "1e3"),
    ("1E6", "1E6", "1E6"),
    ("1e9", "1e9", "1e9"),
    ("1E12", "1E12", "1E12"),
    ("1e15", "1e15", "1e15"),
    ("1E18", "1E18", "1E18"),
    ("1e14", "100e12", "100e12"),
    ("1e13", "10e12", "10e12"),
    ("100.035k", "100.035k", "100.035k"),
    ("0.001", "1m", "1m"),
    ("0.0005k", "500m", "500m"),
    ("0.005", "5m", "5m"),
    ("0.05", "50m", "50m"),
    ("0.5", "500m", "500m"),
    ("0.00050k", "500m", "500m"),
    ("0.00500", "5m", "5m"),
    ("0.05000", "50m", "50m"),
    ("0.50000", "500m", "500m"),
    ("0.5e0", "500e-3", "500e-3"),
    ("0.5e-1", "50e-3", "50e-3"),
    ("0.5e-2", "5e-3", "5e-3"),
    ("10.035M", "10.035M", "10.035M"),
    ("1.2e3", "1200", "1200"),
    ("1.3E+6", "1300e3", "1300e3"),
    ("1.40e9", "1400e6", "1400e6"),
    ("1.53E12", "1530e9", "1530e9"),
    ("1.6e15", "1600e12", "1600e12"),
    ("1.7E18", "1700e15", "1700e15"),
    ("9.01", "9010m", "9010m"),
    ("8.1k", "8100", "8100"),
    ("7.123456M", "7.123456M", "7.123456M"),
    ("6.987654321G", "6.987654321G", "6.987654321G"),
    ("5.444T", "5.444T", "5.444T"),
    ("40.1T", "40100G", "40100G"),
    ("300.2T", "300200G", "300200G"),
    ("2.5P", "2500T", "2500T"),
    ("1.01E", "1010P", "1010P"),
    ("3.001n", "4n", "1m"),
    ("1.1E-9", "2e-9", "1e-3"),
    ("0.0000000001", "1n", "1m"),
    ("0.0000000005", "1n", "1m"),
    ("0.00000000050", "1n", "1m"),
    ("0.5e-9", "1e-9", "1e-3"),
    ("0.9n", "1n", "1m"),
    ("0.00000012345", "124n", "1m"),
    ("0.00000012354", "124n", "1m"),
    ("9Ei", "9223372036854775807", "9223372036854775807"),
    (
        "9223372036854775807Ki",
        "9223372036854775807",
        "9223372036854775807",
    ),
    ("12E", "12E", "12E"),
    ("100.035Ki", "102435840m", "102435840m"),
    ("0.5Mi", "512Ki", "512Ki"),
    ("0.05Gi", "53687091200m", "53687091200m"),
    ("0.025Ti", "27487790694400m", "27487790694400m"),
    ("0.000000000001Ki", "2n", "1m"),
    (".001", "1m", "1m"),
    (".0001k", "100m", "100m"),
    ("1.", "1.", "1."),
    ("1.G", "1.G", "1.G"),
    ("1024Mi", "1Gi", "1Gi"),
    ("300Mi", "300Mi", "300Mi"),
    ("307200Ki", "300Mi", "300Mi"),
    ("6Ki", "6Ki", "6Ki"),
    ("1025024Mi", "1001Gi", "1001Gi"),
    ("1024Gi", "1Ti", "1Ti"),
    ("5000m", "5", "5"),
    ("1000M", "1G", "1G"),
    ("0.001T", "1G", "1G"),
    ("1000000k", "1G", "1G"),
    ("1000000000", "1G", "1G"),
    ("1000u", "1m", "1m"),
    ("80m", "80m", "80m"),
    ("1.08", "1080m", "1080m"),
    ("1080000000n", "1080m", "1080m"),
    ("300M", "300M", "300M"),
    ("1T", "1T", "1T"),
    ("1234567M", "1234567M", "1234567M"),
    ("3k", "3k", "3k"),
    ("1025", "1025", "1025"),
    ("00", "0", "0"),
    (".001e12", "1e9", "1e9"),
    ("0.001e0", "1e-3", "1e-3"),
    ("1000e-12", "1e-9", "1e-3"),
    ("80e-3", "80e-3", "80e-3"),
    ("300e6", "300e6", "300e6"),
    ("1e12", "1e12", "1e12"),
    ("3e3", "3e3", "3e3"),
    ("1n", "1n", "1m"),
    ("80n", "80n", "1m"),
    ("1080n", "1080n", "1m"),
    ("1u", "1u", "1m"),
    ("80u", "80u", "1m"),
    ("1080u", "1080u", "2m"),
    ("1Mi", "1Mi", "1Mi"),
    ("1Gi", "1Gi", "1Gi"),
    (".001Ki", "1024m", "1024m"),
    (".000001Ki", "1024u", "2m"),
    (".000000001Ki", "1024n", "1m"),
    (".000000000001Ki", "2n", "1m"),
    ("+1", "+1", "+1"),
    ("5.", "5.", "5."),
    ("1E3", "1E3", "1E3"),
    ("-1", "-1", "-1"),
    ("-1.5", "-1500m", "-1500m"),
    ("-0", "0", "0"),
    ("+0", "0", "0"),
    ("012", "012", "012"),
    ("0012m", "0012m", "0012m"),
    ("1e1000000", "10e999999", "10e999999"),
    ("1e-1000000", "1e-9", "1e-3"),
    ("1e+3", "1e+3", "1e+3"),
    ("+1e3", "+1e3", "+1e3"),
    ("-1e3", "-1e3", "-1e3"),
    ("1e0", "1e0", "1e0"),
    ("1e-0", "1e-0", "1e-0"),
    ("1e00003", "1e00003", "1e00003"),
    ("1e2147483647", "10e2147483646", "10e2147483646"),
    ("1e4294967296", "1e4294967296", "1e4294967296"),
    ("1e4294967297", "10", "10"),
    ("1e9223372036854775807", "100e-3", "100e-3"),
    (
        "12345678901234567890",
        "12345678901234567890",
        "12345678901234567890",
    ),
    (
        "123456789012345678901234567890e-20",
        "1234567890123456790e-9",
        "1234567890124e-3",
    ),
    ("10000000000000000000", "10E", "10E"),
    (
        "99999999999999999999Ki",
        "9223372036854775807",
        "9223372036854775807",
    ),
    ("0.1Ki", "102400m", "102400m"),
    ("1.5Ki", "1536", "1536"),
    ("1.5Gi", "1536Mi", "1536Mi"),
    ("1000.0", "1k", "1k"),
    ("1000", "1k", "1k"),
    ("1500", "1500", "1500"),
    ("2000m", "2", "2"),
    ("1.234567891234", "1234567892n", "1235m"),
    ("-0.0000000001", "-1n", "-1m"),
    ("16Ei", "9223372036854775807", "9223372036854775807"),
    ("8Ei", "9223372036854775807", "9223372036854775807"),
    (
        "7.99999Ei",
        "9223360507639729739530240u",
        "9223360507639729739531m",
    ),
    ("1023.5", "1023500m", "1023500m"),
    ("1024.5Ki", "1049088", "1049088"),
    ("2048Ki", "2Mi", "2Mi"),
    ("0.5Gi", "512Mi", "512Mi"),
    ("0.1", "100m", "100m"),
    ("100000000000000000000m", "100P", "100P"),
    ("0.0000000000000000000001k", "1n", "1m"),
    ("1e-10", "1e-9", "1e-3"),
    ("5e-10", "1e-9", "1e-3"),
    ("1.5e-9", "2e-9", "1e-3"),
    ("1001m", "1001m", "1001m"),
    ("1.0001", "1000100u", "1001m"),
    (
        "999999999999999999",
        "999999999999999999",
        "999999999999999999",
    ),
    (
        "9999999999999999999",
        "9999999999999999999",
        "9999999999999999999",
    ),
    ("1e18", "1e18", "1e18"),
    ("1e19", "10e18", "10e18"),
    ("1e-9", "1e-9", "1e-3"),
    ("1e-12", "1e-9", "1e-3"),
    ("4e-3", "4e-3", "4e-3"),
    ("4000e-6", "4e-3", "4e-3"),
    ("1.0", "1", "1"),
    ("1.5", "1500m", "1500m"),
    ("1e308", "100e306", "100e306"),
    ("1e400", "10e399", "10e399"),
    ("2000", "2k", "2k"),
    ("1e21", "1e21", "1e21"),
    ("1e-3", "1e-3", "1e-3"),
    ("12.50", "12500m", "12500m"),
];

#[test]
fn every_form_encodes_as_upstreams_quantity_does() {
    for &(text, want, want_in_list) in UPSTREAM {
        assert_eq!(canonical(text).as_deref(), Some(want), "{text}");
        assert_eq!(
            canonical_in_resource_list(text).as_deref(),
            Some(want_in_list),
            "{text} in a ResourceList"
        );
        // What is canonical stays so.
        assert_eq!(canonical(want).as_deref(), Some(want), "{want} again");
    }
}

#[test]
fn whitespace_is_trimmed_and_bad_texts_do_not_parse() {
    assert_eq!(canonical(" 250m ").as_deref(), Some("250m"));
    // Upstream's fast path reads a number without digits as zero.
    for zero in [".", "+", "-", "Ki", "m", ".e3", "0."] {
        assert_eq!(canonical(zero).as_deref(), Some("0"), "{zero}");
    }
    assert_eq!(canonical("  1").as_deref(), Some("1"));
    for bad in [
        "",
        "x",
        "1x",
        "1e",
        "1ii",
        "1.5.5",
        "0x10",
        "1_000",
        "\u{661}",
        ".e-20",
        "+e-20",
        "1e9223372036854775808",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
    ] {
        assert_eq!(canonical(bad), None, "{bad}");
    }
}

#[test]
fn past_e_a_decimal_si_value_keeps_its_exponent() {
    // Upstream's master writes `1000E` as `1` (the exponent has no SI suffix and is
    // dropped); this server keeps the value.
    assert_eq!(canonical("1000E").as_deref(), Some("1e21"));
    let big = format!("1{}", "0".repeat(1000));
    assert_eq!(canonical(&big).as_deref(), Some("10e999"));
}

#[test]
fn long_and_far_values_are_exact_and_bounded() {
    // Upstream accepts any number of digits and keeps them.
    let nines = "9".repeat(100_000);
    assert_eq!(canonical(&nines).as_deref(), Some(nines.as_str()));
    assert_eq!(
        canonical(&format!("{nines}Ki")).as_deref(),
        Some("9223372036854775807")
    );
    assert_eq!(
        canonical(&format!("0.{}1", "0".repeat(100_000))).as_deref(),
        Some("1n")
    );
    assert_eq!(
        canonical_in_resource_list(&format!("0.{}1", "0".repeat(100_000))).as_deref(),
        Some("1m")
    );
    // Exponents far out are never expanded: upstream's wrapped 32-bit arithmetic.
    assert_eq!(canonical("1e2147483647").as_deref(), Some("10e2147483646"));
    assert_eq!(canonical("1e-2147483648").as_deref(), Some("1e-9"));
    assert_eq!(canonical("1e-2147483647").as_deref(), Some("1e-9"));
    assert_eq!(
        canonical("1111111111111111111e-2000000000").as_deref(),
        Some("1e-9")
    );
    assert_eq!(
        canonical("1111111111111111111e2000000000").as_deref(),
        Some("111111111111111111100e1999999998")
    );
    assert_eq!(
        canonical_in_resource_list("1e-2147483648").as_deref(),
        Some("1e-3")
    );
}

#[test]
fn numbers_read_from_their_text() {
    assert_eq!(canonical_value(&json!(1), false).as_deref(), Some("1"));
    assert_eq!(
        canonical_value(&json!(1.5), false).as_deref(),
        Some("1500m")
    );
    assert_eq!(canonical_value(&json!(2000), false).as_deref(), Some("2k"));
    assert_eq!(
        canonical_value(&json!(1e21), false).as_deref(),
        Some("1e21")
    );
    assert_eq!(
        canonical_value(&json!(1e308), false).as_deref(),
        Some("100e306")
    );
    // serde renders this float `1e-10`, a decimal exponent (upstream, reading the literal
    // `0.0000000001`, writes `1m`).
    assert_eq!(
        canonical_value(&json!(0.000_000_000_1), true).as_deref(),
        Some("1e-3")
    );
    assert_eq!(canonical_value(&json!("1n"), true).as_deref(), Some("1m"));
    assert_eq!(canonical_value(&json!("1n"), false).as_deref(), Some("1n"));
    assert_eq!(canonical_value(&json!(true), false), None);
}

#[test]
fn the_exact_value_is_the_one_its_canonical_text_writes() {
    for (text, encoded, in_list) in UPSTREAM {
        let value = exact(text);
        assert!(value.is_some(), "{text}");
        assert_eq!(exact(encoded), value, "{text} as {encoded}");
        let rounded = exact(in_list);
        assert!(rounded.is_some(), "{text} in a list");
    }
    let parts = |t: &str| exact(t).map(|e| (e.negative, e.digits, e.exp));
    assert_eq!(parts("1.5Ki"), Some((false, vec![1, 5, 3, 6], 0)));
    assert_eq!(parts("-0"), Some((false, vec![], 0)));
    assert_eq!(parts("-0.000e5"), Some((false, vec![], 0)));
    assert_eq!(parts("1e-10"), Some((false, vec![1], -9)));
    assert_eq!(parts("16Ei"), parts("9223372036854775807"));
    // Upstream's 32-bit scale wraps: this many digits take its exact path, where the
    // exponent 2^31-1 becomes a shift of nearly -2^31 and the value rounds up to `1n`,
    // the value of the text the decoder writes.
    let far = "1111111111111111111e2147483647";
    assert_eq!(canonical(far).as_deref(), Some("1e-9"));
    assert_eq!(parts(far), parts("1n"));
    for no_digit in ["-", ".", "e3", "+.", "Ki", ""] {
        assert_eq!(exact(no_digit), None, "{no_digit}");
    }
}
