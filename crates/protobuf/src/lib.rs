//! Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl's typed clients
//! send that way (`kubectl create namespace|configmap|secret|serviceaccount|service|deployment|job|cronjob|poddisruptionbudget|priorityclass|ingress|quota`,
//! `kubectl certificate approve|deny`,
//! `role|clusterrole|rolebinding|clusterrolebinding`, and the review and TokenRequest bodies
//! of `kubectl auth can-i|whoami` and `kubectl create token`).
//!
//! It owns the wire decoding (varints, length-delimited fields, the `k8s\0` envelope) and
//! the per-kind field tables (`schemas`: each message's field numbers, from k8s.io/api's
//! `generated.proto`, and the JSON names and shapes they become). It was the endpoints'
//! `protobuf` module; the endpoints re-export it as `listwatch_endpoints::protobuf`.
//!
//! A body is the envelope `k8s\0` + `runtime.Unknown{typeMeta, raw}`, where `raw` is the
//! object's own message. Only the fields listed in the schemas below are read (the
//! metadata a client sets and each kind's data fields); anything else is skipped by wire
//! type, never misread. Responses are always JSON, which kubectl accepts.
//!
//! # Invariants
//! - decoding never panics and never reads past the buffer; any malformed input is an error;
//! - the output is bounded by the input: every value decoded is a slice of the body (or a
//!   fixed-size number), and messages nest only as deep as the static schemas do.
//!
//! # Layers
//! It depends only on `listwatch-registry`'s clock (a `metav1.Time` written as RFC 3339).
//! It must never depend on HTTP serving, storage or the endpoints; the endpoints (body
//! decoding) and the server binary (the audit log's bodies, the review routes) use it.
//!
//! ```
//! // `kubectl create namespace demo` sends: the envelope, then `runtime.Unknown` with its
//! // typeMeta (field 1) and the Namespace message as `raw` (field 2).
//! fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
//!     let mut out = vec![(n << 3) | 2, u8::try_from(bytes.len()).unwrap()];
//!     out.extend_from_slice(bytes);
//!     out
//! }
//! let namespace = field(1, &field(1, b"demo")); // metadata.name
//! let type_meta = [field(1, b"v1"), field(2, b"Namespace")].concat();
//! let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &namespace)].concat();
//! let obj = listwatch_protobuf::decode(&body, "Namespace").unwrap();
//! assert_eq!(obj["metadata"]["name"], "demo");
//! assert_eq!(obj["kind"], "Namespace");
//! assert!(listwatch_protobuf::decode(&body, "Pod").is_err()); // no schema: refused
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use listwatch_registry::clock;

const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// Not the Kubernetes envelope.
    #[error("missing the k8s protobuf envelope")]
    NoEnvelope,
    /// Truncated or malformed wire data.
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// A kind this server has no protobuf schema for.
    #[error(
        "protobuf bodies are accepted only for Namespace, ConfigMap, Secret, ServiceAccount, Service, Deployment, Job, CronJob, CertificateSigningRequest, PodDisruptionBudget, PriorityClass, Ingress, ResourceQuota, autoscaling/v1 HorizontalPodAutoscaler, the RBAC kinds, the review kinds and TokenRequest, not {0:?}; send JSON (e.g. kubectl apply -f)"
    )]
    Unsupported(String),
}

#[derive(Clone, Copy)]
enum F {
    Str(&'static str),
    /// An optional (pointer) integer: zero is a value.
    Int(&'static str),
    /// A plain integer: Go writes zero for unset, so zero is dropped.
    IntZ(&'static str),
    Bool(&'static str),
    /// A plain bool: false is dropped.
    BoolZ(&'static str),
    /// `intstr.IntOrString`: `{type, intVal, strVal}` becomes a number or a string.
    IntOrStr(&'static str),
    RepMsg(&'static str, &'static [(u32, F)]),
    Time(&'static str),
    RepStr(&'static str),
    MapStr(&'static str),
    MapBytes(&'static str),
    Bytes64(&'static str),
    Msg(&'static str, &'static [(u32, F)]),
    /// A message whose fields JSON inlines into its parent's (Go's `json:",inline"`, e.g.
    /// an ingress rule's `IngressRuleValue`).
    Inline(&'static [(u32, F)]),
    /// `map<string, resource.Quantity>`: each value is the quantity's string (field 1).
    MapQuantity(&'static str),
}

mod schemas;

use schemas::*;

const UNKNOWN: &[(u32, F)] = &[
    (
        1,
        F::Msg(
            "typeMeta",
            &[(1, F::Str("apiVersion")), (2, F::Str("kind"))],
        ),
    ),
    (2, F::Bytes64("raw")),
    (3, F::Str("contentEncoding")),
    (4, F::Str("contentType")),
];

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(ProtobufError::Malformed("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtobufError::Malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if n > self.buf.len() {
            return Err(ProtobufError::Malformed("length past the end"));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtobufError> {
        let n = usize::try_from(self.varint()?)
            .map_err(|_| ProtobufError::Malformed("length overflow"))?;
        self.take(n)
    }

    fn skip(&mut self, wire: u64) -> Result<(), ProtobufError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.take(8).map(drop),
            2 => self.bytes().map(drop),
            5 => self.take(4).map(drop),
            _ => Err(ProtobufError::Malformed("unsupported wire type")),
        }
    }
}

fn utf8(b: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtobufError::Malformed("string is not UTF-8"))
}

fn map_entry(b: &[u8]) -> Result<(String, &[u8]), ProtobufError> {
    let mut r = Reader { buf: b };
    let (mut k, mut v): (String, &[u8]) = (String::new(), &[]);
    while !r.buf.is_empty() {
        let tag = r.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => k = utf8(r.bytes()?)?,
            (2, 2) => v = r.bytes()?,
            (_, w) => r.skip(w)?,
        }
    }
    Ok((k, v))
}

fn decode_message(buf: &[u8], schema: &[(u32, F)]) -> Result<Map<String, Value>, ProtobufError> {
    let mut out = Map::new();
    let mut r = Reader { buf };
    while !r.buf.is_empty() {
        let tag = r.varint()?;
        let (field, wire) = (tag >> 3, tag & 7);
        let Some((_, f)) = schema.iter().find(|(n, _)| u64::from(*n) == field) else {
            r.skip(wire)?;
            continue;
        };
        let expect = |w: u64| {
            if wire == w {
                Ok(())
            } else {
                Err(ProtobufError::Malformed("unexpected wire type"))
            }
        };
        match *f {
            F::Str(name) => {
                expect(2)?;
                // Go's encoder writes unset strings as empty ones; unset is what they mean.
                let s = utf8(r.bytes()?)?;
                if !s.is_empty() {
                    out.insert(name.into(), Value::String(s));
                }
            }
            F::Bytes64(name) => {
                expect(2)?;
                out.insert(name.into(), Value::String(STANDARD.encode(r.bytes()?)));
            }
            F::Int(name) => {
                expect(0)?;
                // Two's complement int64 on the wire.
                out.insert(
                    name.into(),
                    Value::from(i64::from_ne_bytes(r.varint()?.to_ne_bytes())),
                );
            }
            F::Bool(name) => {
                expect(0)?;
                out.insert(name.into(), Value::Bool(r.varint()? != 0));
            }
            F::Time(name) => {
                expect(2)?;
                let t = decode_message(r.bytes()?, &[(1, F::Int("seconds"))])?;
                // Go writes a zero time for unset; JSON clients see it as absent.
                let secs = t.get("seconds").and_then(Value::as_i64).unwrap_or(0);
                if secs != 0 {
                    out.insert(name.into(), Value::String(clock::format_rfc3339(secs)));
                }
            }
            F::RepStr(name) => {
                expect(2)?;
                let s = Value::String(utf8(r.bytes()?)?);
                match out.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
                    Value::Array(a) => a.push(s),
                    _ => return Err(ProtobufError::Malformed("repeated field clash")),
                }
            }
            F::MapStr(name) | F::MapBytes(name) => {
                expect(2)?;
                let (k, v) = map_entry(r.bytes()?)?;
                let v = match f {
                    F::MapStr(_) => Value::String(utf8(v)?),
                    _ => Value::String(STANDARD.encode(v)),
                };
                match out.entry(name).or_insert_with(|| Value::Object(Map::new())) {
                    Value::Object(m) => {
                        m.insert(k, v);
                    }
                    _ => return Err(ProtobufError::Malformed("map field clash")),
                }
            }
            F::Msg(name, sub) => {
                expect(2)?;
                out.insert(name.into(), Value::Object(decode_message(r.bytes()?, sub)?));
            }
            F::Inline(sub) => {
                expect(2)?;
                for (k, v) in decode_message(r.bytes()?, sub)? {
                    out.insert(k, v);
                }
            }
            F::MapQuantity(name) => {
                expect(2)?;
                let (k, v) = map_entry(r.bytes()?)?;
                let q = decode_message(v, &[(1, F::Str("string"))])?;
                let v = q
                    .get("string")
                    .cloned()
                    .unwrap_or_else(|| Value::String(String::new()));
                match out.entry(name).or_insert_with(|| Value::Object(Map::new())) {
                    Value::Object(m) => {
                        m.insert(k, v);
                    }
                    _ => return Err(ProtobufError::Malformed("map field clash")),
                }
            }
            F::RepMsg(name, sub) => {
                expect(2)?;
                let item = Value::Object(decode_message(r.bytes()?, sub)?);
                match out.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
                    Value::Array(a) => a.push(item),
                    _ => return Err(ProtobufError::Malformed("repeated field clash")),
                }
            }
            F::IntZ(name) => {
                expect(0)?;
                let v = i64::from_ne_bytes(r.varint()?.to_ne_bytes());
                if v != 0 {
                    out.insert(name.into(), Value::from(v));
                }
            }
            F::BoolZ(name) => {
                expect(0)?;
                if r.varint()? != 0 {
                    out.insert(name.into(), Value::Bool(true));
                }
            }
            F::IntOrStr(name) => {
                expect(2)?;
                let m = decode_message(
                    r.bytes()?,
                    &[
                        (1, F::Int("type")),
                        (2, F::Int("intVal")),
                        (3, F::Str("strVal")),
                    ],
                )?;
                let v = if m.get("type").and_then(Value::as_i64) == Some(1) {
                    m.get("strVal")
                        .cloned()
                        .unwrap_or_else(|| Value::String(String::new()))
                } else {
                    m.get("intVal").cloned().unwrap_or_else(|| Value::from(0))
                };
                out.insert(name.into(), v);
            }
        }
    }
    Ok(out)
}

/// Decodes a protobuf request body of `kind` into its JSON form.
pub fn decode(body: &[u8], kind: &str) -> Result<Map<String, Value>, ProtobufError> {
    let inner = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoEnvelope)?;
    let unknown = decode_message(inner, UNKNOWN)?;
    let api_version = unknown
        .get("typeMeta")
        .and_then(|t| t.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let schema = match kind {
        // v1's message only (`kubectl autoscale`): a v2 body would lose its metrics.
        "HorizontalPodAutoscaler" if api_version == "autoscaling/v1" => {
            HORIZONTAL_POD_AUTOSCALER_V1
        }
        "Namespace" => NAMESPACE,
        "ConfigMap" => CONFIG_MAP,
        "Secret" => SECRET,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "Deployment" => DEPLOYMENT,
        "Job" => JOB,
        "CronJob" => CRON_JOB,
        "CertificateSigningRequest" => CERTIFICATE_SIGNING_REQUEST,
        "PodDisruptionBudget" => POD_DISRUPTION_BUDGET,
        "PriorityClass" => PRIORITY_CLASS,
        "Ingress" => INGRESS,
        "ResourceQuota" => RESOURCE_QUOTA,
        "Service" => SERVICE,
        "SelfSubjectAccessReview" => SELF_SUBJECT_ACCESS_REVIEW,
        "SubjectAccessReview" | "LocalSubjectAccessReview" => SUBJECT_ACCESS_REVIEW,
        "SelfSubjectRulesReview" => SELF_SUBJECT_RULES_REVIEW,
        "SelfSubjectReview" => SELF_SUBJECT_REVIEW,
        "TokenRequest" => TOKEN_REQUEST,
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => ROLE_BINDING,
        other => return Err(ProtobufError::Unsupported(other.to_owned())),
    };
    let raw = unknown
        .get("raw")
        .and_then(Value::as_str)
        .and_then(|s| STANDARD.decode(s).ok())
        .ok_or(ProtobufError::Malformed("envelope without raw object"))?;
    let mut obj = decode_message(&raw, schema)?;
    if let Some(Value::Object(tm)) = unknown.get("typeMeta") {
        for (k, v) in tm {
            obj.insert(k.clone(), v.clone());
        }
    }
    Ok(obj)
}

/// Decodes a protobuf request body of the kind its envelope names (`typeMeta.kind`), for a
/// reader that does not know the resource (the audit log records bodies as JSON).
pub fn decode_enveloped(body: &[u8]) -> Result<Map<String, Value>, ProtobufError> {
    let inner = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoEnvelope)?;
    let unknown = decode_message(inner, UNKNOWN)?;
    let kind = unknown
        .get("typeMeta")
        .and_then(|t| t.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    decode(body, &kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![
            u8::try_from((n << 3) | 2).unwrap(),
            u8::try_from(bytes.len()).unwrap(),
        ];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_what_kubectl_create_namespace_sends() {
        let labels = [field(1, b"team"), field(2, b"a")].concat();
        let meta = [field(1, b"demo"), field(11, &labels)].concat();
        let ns = [field(1, &meta), field(2, &[]), field(3, &[])].concat();
        let tm = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [MAGIC.to_vec(), field(1, &tm), field(2, &ns), field(4, b"")].concat();
        let obj = decode(&body, "Namespace").unwrap();
        assert_eq!(obj["metadata"]["name"], "demo");
        assert_eq!(obj["metadata"]["labels"]["team"], "a");
        assert_eq!(obj["kind"], "Namespace");
        assert_eq!(obj["apiVersion"], "v1");
        assert_eq!(decode_enveloped(&body).unwrap(), obj);
    }

    #[test]
    fn secrets_keep_bytes_as_base64_and_unknown_kinds_are_refused() {
        let entry = [field(1, b"k"), field(2, &[0, 159, 146, 150])].concat();
        let secret = [
            field(1, &field(1, b"s")),
            field(2, &entry),
            field(3, b"Opaque"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(2, &secret)].concat();
        let obj = decode(&body, "Secret").unwrap();
        assert_eq!(obj["data"]["k"], "AJ+Slg==");
        assert!(matches!(
            decode(&body, "Pod"),
            Err(ProtobufError::Unsupported(_))
        ));
        assert!(decode(b"{}", "Secret").is_err());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let body = [MAGIC.to_vec(), vec![0x12, 0x40, 0x0a]].concat();
        assert!(decode(&body, "ConfigMap").is_err());
        for cut in 0..12 {
            let _ = decode(
                &[MAGIC, &[0x12, 0x05, 0x0a, 0x03, b'a', 0x80, 0x80][..]].concat()
                    [..4 + cut.min(7)],
                "ConfigMap",
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96)) {
            for kind in ["Namespace", "ConfigMap", "Secret", "ServiceAccount", "Job", "CronJob",
                         "CertificateSigningRequest", "PodDisruptionBudget", "PriorityClass",
                         "Ingress", "ResourceQuota", "HorizontalPodAutoscaler"] {
                let _ = decode(&[MAGIC, &bytes[..]].concat(), kind);
            }
        }
    }
}
