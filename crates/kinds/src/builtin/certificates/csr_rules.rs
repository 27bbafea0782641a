//! The certificate signing request's validation, as upstream's
//! pkg/apis/certificates/validation: what `spec` a create may carry and what a write to the
//! status (`/status`, `/approval`) may change.
//!
//! Invariants this module keeps:
//! - `spec.request` is base64 (JSON bytes) of a PEM `CERTIFICATE REQUEST` block whose body
//!   is a DER SEQUENCE (the block type and framing are checked by hand; the PKCS#10 signature
//!   is not checked — there is no X.509 parser in the workspace);
//! - `spec.signerName` is `<dns-domain with a dot>/<dns-subdomains>`, `spec.usages` are
//!   known KeyUsages without duplicates, `spec.expirationSeconds` is at least 600;
//! - conditions: Approved and Denied never together, no duplicate types, Approved/Denied/
//!   Failed only with status `True`, other types `True`/`False`/`Unknown`; an Approved,
//!   Denied or Failed condition once set cannot be removed;
//! - `status.certificate`, when set, is one or more PEM `CERTIFICATE` blocks without headers,
//!   and once set never changes.
//!
//! As upstream's ratcheting, an update is refused only for what it introduces: a rule the
//! stored object already broke (duplicates, both Approved and Denied, an unparsable
//! certificate it keeps) does not block writes to it. Every decode is bounded by the input
//! (no allocation beyond the request body's size).

use base64::Engine;
use serde_json::Value;

use crate::FieldError;

/// Upstream's `allValidUsages` (the `KeyUsage` values).
const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The condition types that may only be `True` and never be removed.
const FINAL: &[&str] = &["Approved", "Denied", "Failed"];
const STATUSES: &[&str] = &["False", "True", "Unknown"];

/// The `spec` rules of a create (an update keeps the stored spec).
pub(super) fn spec_errors(obj: &Value) -> Vec<FieldError> {
    let spec = &obj["spec"];
    let mut out = Vec::new();
    if let Some(req) = spec["request"].as_str().filter(|s| !s.is_empty())
        && let Err(detail) = check_request(req)
    {
        out.push(FieldError::invalid_str(
            "spec.request",
            "<request data>",
            detail,
        ));
    }
    if let Some(name) = spec["signerName"].as_str().filter(|s| !s.is_empty()) {
        out.extend(signer_name_errors(name));
    }
    let mut seen = Vec::new();
    for (i, u) in spec["usages"].as_array().into_iter().flatten().enumerate() {
        let field = format!("spec.usages[{i}]");
        let s = u.as_str().unwrap_or("");
        if !USAGES.contains(&s) {
            out.push(FieldError::not_supported_str(&field, s, USAGES));
        } else if seen.contains(&s) {
            out.push(FieldError::duplicate(&field, s));
        } else {
            seen.push(s);
        }
    }
    if let Some(secs) = spec.get("expirationSeconds").filter(|v| !v.is_null())
        && secs.as_i64().is_none_or(|s| s < 600)
    {
        out.push(FieldError::invalid(
            "spec.expirationSeconds",
            secs,
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    out
}

/// The status rules of an update from `old` to `new`.
pub(super) fn status_update_errors(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut out = conditions_errors(new, old);
    for t in FINAL {
        if count_type(old, t) > count_type(new, t) {
            out.push(FieldError::forbidden(
                "status.conditions",
                format!("updates may not remove a condition of type \"{t}\""),
            ));
        }
    }
    // Compared as JSON values: a non-string the body smuggled in is neither empty nor equal.
    let cert = |v: &Value| {
        v["status"]
            .get("certificate")
            .filter(|c| !c.is_null())
            .cloned()
    };
    let (new_cert, old_cert) = (cert(new), cert(old));
    let set = |c: &Option<Value>| c.as_ref().is_some_and(|c| c.as_str() != Some(""));
    if new_cert != old_cert && (set(&new_cert) || set(&old_cert)) {
        if set(&old_cert) {
            out.push(FieldError::invalid_str(
                "status.certificate",
                "[omitted]",
                "updates may not modify existing certificate content",
            ));
        } else {
            let checked = match new_cert.as_ref().and_then(Value::as_str) {
                Some(pem) => check_certificate(pem),
                None => Err("must be base64-encoded bytes".into()),
            };
            if let Err(detail) = checked {
                out.push(FieldError::invalid_str(
                    "status.certificate",
                    "<certificate data>",
                    detail,
                ));
            }
        }
    }
    let list = &new["status"]["conditions"];
    if !list.is_null() && !list.is_array() {
        out.push(FieldError::invalid(
            "status.conditions",
            list,
            "must be a list of conditions",
        ));
    }
    out
}

fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    obj["status"]["conditions"].as_array().into_iter().flatten()
}

fn count_type(obj: &Value, t: &str) -> usize {
    conditions(obj)
        .filter(|c| c["type"].as_str() == Some(t))
        .count()
}

fn has_duplicates(obj: &Value) -> bool {
    let mut seen = Vec::new();
    conditions(obj).any(|c| {
        let t = c["type"].as_str().unwrap_or("");
        let dup = seen.contains(&t);
        seen.push(t);
        dup
    })
}

fn conditions_errors(new: &Value, old: &Value) -> Vec<FieldError> {
    let allow_duplicates = has_duplicates(old);
    let allow_both = count_type(old, "Approved") > 0 && count_type(old, "Denied") > 0;
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (i, c) in conditions(new).enumerate() {
        let t = c["type"].as_str().unwrap_or("");
        let status = c["status"].as_str().unwrap_or("");
        if t.is_empty() {
            out.push(FieldError::required(
                &format!("status.conditions[{i}].type"),
                "",
            ));
        }
        let field = format!("status.conditions[{i}].status");
        if FINAL.contains(&t) {
            if status != "True" {
                out.push(FieldError::not_supported_str(&field, status, &["True"]));
            }
        } else if !STATUSES.contains(&status) {
            out.push(FieldError::not_supported_str(&field, status, STATUSES));
        }
        if !allow_duplicates && seen.contains(&t) {
            out.push(FieldError::duplicate(
                &format!("status.conditions[{i}].type"),
                t,
            ));
        }
        seen.push(t);
    }
    if !allow_both && seen.contains(&"Approved") && seen.contains(&"Denied") {
        out.push(FieldError::invalid_str(
            "status.conditions",
            "Denied",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    out
}

/// Upstream's `ValidateSignerName`.
fn signer_name_errors(name: &str) -> Vec<FieldError> {
    const F: &str = "spec.signerName";
    let mut out = Vec::new();
    let mut segments = name.split('/');
    let (Some(domain), Some(path), None) = (segments.next(), segments.next(), segments.next())
    else {
        out.push(FieldError::invalid_str(
            F,
            name,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return out;
    };
    if domain.len() > 253 {
        out.push(FieldError::invalid_str(
            F,
            domain,
            "must have at most 253 bytes",
        ));
    }
    for label in domain.split('.') {
        let mut errs = listwatch_api::labels::dns1123_subdomain_errors(label);
        if label.len() > 63 {
            errs.push("must be no more than 63 characters".into());
        }
        if !errs.is_empty() {
            for e in errs {
                out.push(FieldError::invalid_str(
                    F,
                    domain,
                    format!("validating label \"{label}\": {e}"),
                ));
            }
            break;
        }
    }
    if !domain.contains('.') {
        out.push(FieldError::invalid_str(
            F,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for label in path.split('.') {
        let errs = listwatch_api::labels::dns1123_subdomain_errors(label);
        if !errs.is_empty() {
            for e in errs {
                out.push(FieldError::invalid_str(
                    F,
                    path,
                    format!("validating component \"{label}\": {e}"),
                ));
            }
            break;
        }
    }
    out
}

/// A PEM block: its type, whether it had headers, and its decoded body.
struct Block {
    kind: String,
    headers: bool,
    der: Vec<u8>,
}

/// The JSON bytes of `field` (standard base64).
fn json_bytes(b64: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("illegal base64 data: {e}"))
}

/// The next well-formed PEM block in `data` and what follows it (as Go's `pem.Decode`,
/// leading text is skipped; a malformed block ends the search).
fn next_block(data: &[u8]) -> Option<(Block, &[u8])> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    let start = find(data, BEGIN)? + BEGIN.len();
    let rest = data.get(start..)?;
    let type_end = find(rest, b"-----")?;
    let kind = std::str::from_utf8(rest.get(..type_end)?).ok()?.to_owned();
    if kind.contains('\n') {
        return None;
    }
    let rest = rest.get(type_end + 5..)?;
    let end_marker = format!("-----END {kind}-----");
    let end = find(rest, end_marker.as_bytes())?;
    let body = std::str::from_utf8(rest.get(..end)?).ok()?;
    let headers = body.lines().any(|l| l.contains(':'));
    let b64: String = body
        .lines()
        .filter(|l| !l.contains(':'))
        .flat_map(str::chars)
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let after = rest.get(end + end_marker.len()..)?;
    Some((Block { kind, headers, der }, after))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A DER body is at least a SEQUENCE (what X.509 certificates and PKCS#10 requests are).
fn looks_like_der(der: &[u8]) -> bool {
    der.len() > 2 && der.first() == Some(&0x30)
}

/// Upstream's `ParseCSR`: the first PEM block is a `CERTIFICATE REQUEST`.
fn check_request(b64: &str) -> Result<(), String> {
    let pem = json_bytes(b64)?;
    match next_block(&pem) {
        Some((b, _)) if b.kind == "CERTIFICATE REQUEST" => {
            if looks_like_der(&b.der) {
                Ok(())
            } else {
                Err("x509: malformed certificate request".into())
            }
        }
        _ => Err("PEM block type must be CERTIFICATE REQUEST".into()),
    }
}

/// Upstream's `validateCertificate`: one or more `CERTIFICATE` blocks, no headers.
fn check_certificate(b64: &str) -> Result<(), String> {
    let pem = json_bytes(b64)?;
    let mut data = pem.as_slice();
    let mut blocks = 0usize;
    while let Some((b, rest)) = next_block(data) {
        if b.kind != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found \"{}\"",
                b.kind
            ));
        }
        if b.headers {
            return Err("no PEM block headers are permitted".into());
        }
        if !looks_like_der(&b.der) {
            return Err("x509: malformed certificate".into());
        }
        blocks += 1;
        data = rest;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    const PEM_BODY: &str = "MIIBkTCB\n";

    #[test]
    fn certificate_blocks() {
        let cert = format!("-----BEGIN CERTIFICATE-----\n{PEM_BODY}-----END CERTIFICATE-----\n");
        assert_eq!(check_certificate(&b64(&cert)), Ok(()));
        assert_eq!(check_certificate(&b64(&format!("{cert}{cert}"))), Ok(()));
        assert!(check_certificate(&b64("garbage")).is_err());
        assert!(check_certificate("garbage").is_err());
        let key = cert.replace("CERTIFICATE", "PRIVATE KEY");
        assert!(
            check_certificate(&b64(&key))
                .unwrap_err()
                .contains("PRIVATE KEY")
        );
        let headers = cert.replace("-----\nMII", "-----\nProc-Type: 4\n\nMII");
        assert!(
            check_certificate(&b64(&headers))
                .unwrap_err()
                .contains("headers")
        );
        let unterminated = "-----BEGIN CERTIFICATE-----\nMIIB";
        assert!(check_certificate(&b64(unterminated)).is_err());
    }

    #[test]
    fn signer_names_and_usages() {
        let ok = |n: &str| signer_name_errors(n).is_empty();
        assert!(ok("kubernetes.io/kube-apiserver-client"));
        assert!(ok("example.com/a.b"));
        for bad in [
            "Evil Signer!!",
            "example/s",
            "example.com/",
            "a.com/b/c",
            "EX.com/s",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        let errs = spec_errors(&json!({"spec": {"usages": ["bogus usage", "any", "any"]}}));
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn conditions_ratchet_on_the_stored_object() {
        let both = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}});
        let none = json!({"status": {}});
        assert!(!status_update_errors(&both, &none).is_empty());
        assert!(status_update_errors(&both, &both).is_empty());
        assert!(!status_update_errors(&none, &both).is_empty(), "removal");
        let number = json!({"status": {"certificate": 5}});
        assert!(!status_update_errors(&number, &none).is_empty(), "a number");
        assert!(
            !status_update_errors(&none, &number).is_empty(),
            "a number, removed"
        );
        let text = json!({"status": {"conditions": "x"}});
        assert!(
            !status_update_errors(&text, &none).is_empty(),
            "conditions text"
        );
    }
}
