//! Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl's typed clients
//! send that way (`kubectl create namespace|configmap|secret|serviceaccount|service|deployment|job|cronjob|poddisruptionbudget|priorityclass|ingress|quota`,
//! `kubectl certificate approve|deny`,
//! `role|clusterrole|rolebinding|clusterrolebinding`, and the review and TokenRequest bodies
//! of `kubectl auth can-i|whoami` and `kubectl create token`).
//!
//! A body is the envelope `k8s\0` + `runtime.Unknown{typeMeta, raw}`, where `raw` is the
//! object's own message. Only the fields listed in the schemas below are read (the
//! metadata a client sets and each kind's data fields); anything else is skipped by wire
//! type, never misread. Responses are always JSON, which kubectl accepts.
//!
//! Invariant: decoding never panics and never reads past the buffer; any malformed input is
//! an error.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use crate::clock;

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
        "protobuf bodies are accepted only for Namespace, ConfigMap, Secret, ServiceAccount, Service, Deployment, Job, CronJob, CertificateSigningRequest, PodDisruptionBudget, PriorityClass, Ingress, ResourceQuota, the RBAC kinds, the review kinds and TokenRequest, not {0:?}; send JSON (e.g. kubectl apply -f)"
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

const OBJECT_META: &[(u32, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("generateName")),
    (3, F::Str("namespace")),
    (5, F::Str("uid")),
    (6, F::Str("resourceVersion")),
    (7, F::IntZ("generation")),
    (8, F::Time("creationTimestamp")),
    (11, F::MapStr("labels")),
    (12, F::MapStr("annotations")),
    (
        13,
        F::RepMsg(
            "ownerReferences",
            &[
                (1, F::Str("kind")),
                (3, F::Str("name")),
                (4, F::Str("uid")),
                (5, F::Str("apiVersion")),
                (6, F::Bool("controller")),
                (7, F::Bool("blockOwnerDeletion")),
            ],
        ),
    ),
    (14, F::RepStr("finalizers")),
];

const NAMESPACE: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", &[(1, F::RepStr("finalizers"))])),
    (3, F::Msg("status", &[(1, F::Str("phase"))])),
];

const CONFIG_MAP: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapStr("data")),
    (3, F::MapBytes("binaryData")),
    (4, F::Bool("immutable")),
];

const SECRET: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapBytes("data")),
    (3, F::Str("type")),
    (4, F::MapStr("stringData")),
    (5, F::Bool("immutable")),
];

const SERVICE_ACCOUNT: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (4, F::Bool("automountServiceAccountToken")),
];

const LABEL_SELECTOR: &[(u32, F)] = &[
    (1, F::MapStr("matchLabels")),
    (
        2,
        F::RepMsg(
            "matchExpressions",
            &[
                (1, F::Str("key")),
                (2, F::Str("operator")),
                (3, F::RepStr("values")),
            ],
        ),
    ),
];

const CONTAINER: &[(u32, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("image")),
    (3, F::RepStr("command")),
    (4, F::RepStr("args")),
    (5, F::Str("workingDir")),
    (
        6,
        F::RepMsg(
            "ports",
            &[
                (1, F::Str("name")),
                (2, F::IntZ("hostPort")),
                (3, F::IntZ("containerPort")),
                (4, F::Str("protocol")),
                (5, F::Str("hostIP")),
            ],
        ),
    ),
    (
        7,
        F::RepMsg("env", &[(1, F::Str("name")), (2, F::Str("value"))]),
    ),
    (
        9,
        F::RepMsg(
            "volumeMounts",
            &[
                (1, F::Str("name")),
                (2, F::BoolZ("readOnly")),
                (3, F::Str("mountPath")),
                (4, F::Str("subPath")),
            ],
        ),
    ),
    (13, F::Str("terminationMessagePath")),
    (14, F::Str("imagePullPolicy")),
    (16, F::BoolZ("stdin")),
    (17, F::BoolZ("stdinOnce")),
    (18, F::BoolZ("tty")),
    (20, F::Str("terminationMessagePolicy")),
];

const POD_SPEC: &[(u32, F)] = &[
    (2, F::RepMsg("containers", CONTAINER)),
    (3, F::Str("restartPolicy")),
    (4, F::Int("terminationGracePeriodSeconds")),
    (6, F::Str("dnsPolicy")),
    (7, F::MapStr("nodeSelector")),
    (8, F::Str("serviceAccountName")),
    (10, F::Str("nodeName")),
    (11, F::BoolZ("hostNetwork")),
    (16, F::Str("hostname")),
    (17, F::Str("subdomain")),
    (19, F::Str("schedulerName")),
    (20, F::RepMsg("initContainers", CONTAINER)),
];

const DEPLOYMENT: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Int("replicas")),
                (2, F::Msg("selector", LABEL_SELECTOR)),
                (
                    3,
                    F::Msg(
                        "template",
                        &[
                            (1, F::Msg("metadata", OBJECT_META)),
                            (2, F::Msg("spec", POD_SPEC)),
                        ],
                    ),
                ),
                (
                    4,
                    F::Msg(
                        "strategy",
                        &[
                            (1, F::Str("type")),
                            (
                                2,
                                F::Msg(
                                    "rollingUpdate",
                                    &[
                                        (1, F::IntOrStr("maxUnavailable")),
                                        (2, F::IntOrStr("maxSurge")),
                                    ],
                                ),
                            ),
                        ],
                    ),
                ),
                (5, F::IntZ("minReadySeconds")),
                (6, F::Int("revisionHistoryLimit")),
                (7, F::BoolZ("paused")),
                (9, F::Int("progressDeadlineSeconds")),
            ],
        ),
    ),
];

/// `batch/v1` `JobSpec` (what `kubectl create job` and `create cronjob` set, and the
/// scalars clients commonly do).
const JOB_SPEC: &[(u32, F)] = &[
    (1, F::Int("parallelism")),
    (2, F::Int("completions")),
    (3, F::Int("activeDeadlineSeconds")),
    (4, F::Msg("selector", LABEL_SELECTOR)),
    (5, F::Bool("manualSelector")),
    (
        6,
        F::Msg(
            "template",
            &[
                (1, F::Msg("metadata", OBJECT_META)),
                (2, F::Msg("spec", POD_SPEC)),
            ],
        ),
    ),
    (7, F::Int("backoffLimit")),
    (8, F::Int("ttlSecondsAfterFinished")),
    (9, F::Str("completionMode")),
    (10, F::Bool("suspend")),
    (12, F::Int("backoffLimitPerIndex")),
    (13, F::Int("maxFailedIndexes")),
    (14, F::Str("podReplacementPolicy")),
    (15, F::Str("managedBy")),
];

/// `batch/v1` `Job` (`kubectl create job`).
const JOB: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", JOB_SPEC)),
];

/// `batch/v1` `CronJob` (`kubectl create cronjob`).
const CRON_JOB: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Str("schedule")),
                (2, F::Int("startingDeadlineSeconds")),
                (3, F::Str("concurrencyPolicy")),
                (4, F::Bool("suspend")),
                (
                    5,
                    F::Msg(
                        "jobTemplate",
                        &[
                            (1, F::Msg("metadata", OBJECT_META)),
                            (2, F::Msg("spec", JOB_SPEC)),
                        ],
                    ),
                ),
                (6, F::Int("successfulJobsHistoryLimit")),
                (7, F::Int("failedJobsHistoryLimit")),
                (8, F::Str("timeZone")),
            ],
        ),
    ),
];

/// `policy/v1` `PodDisruptionBudget` (`kubectl create poddisruptionbudget`).
const POD_DISRUPTION_BUDGET: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::IntOrStr("minAvailable")),
                (2, F::Msg("selector", LABEL_SELECTOR)),
                (3, F::IntOrStr("maxUnavailable")),
                (4, F::Str("unhealthyPodEvictionPolicy")),
            ],
        ),
    ),
];

const INGRESS_BACKEND: &[(u32, F)] = &[
    (
        3,
        F::Msg(
            "resource",
            &[
                (1, F::Str("apiGroup")),
                (2, F::Str("kind")),
                (3, F::Str("name")),
            ],
        ),
    ),
    (
        4,
        F::Msg(
            "service",
            &[
                (1, F::Str("name")),
                (
                    2,
                    F::Msg("port", &[(1, F::Str("name")), (2, F::IntZ("number"))]),
                ),
            ],
        ),
    ),
];

/// `networking.k8s.io/v1` `Ingress` (`kubectl create ingress`).
const INGRESS: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Msg("defaultBackend", INGRESS_BACKEND)),
                (
                    2,
                    F::RepMsg("tls", &[(1, F::RepStr("hosts")), (2, F::Str("secretName"))]),
                ),
                (
                    3,
                    F::RepMsg(
                        "rules",
                        &[
                            (1, F::Str("host")),
                            (
                                2,
                                F::Inline(&[(
                                    1,
                                    F::Msg(
                                        "http",
                                        &[(
                                            1,
                                            F::RepMsg(
                                                "paths",
                                                &[
                                                    (1, F::Str("path")),
                                                    (2, F::Msg("backend", INGRESS_BACKEND)),
                                                    (3, F::Str("pathType")),
                                                ],
                                            ),
                                        )],
                                    ),
                                )]),
                            ),
                        ],
                    ),
                ),
                (4, F::Str("ingressClassName")),
            ],
        ),
    ),
];

/// `v1` `ResourceQuota` (`kubectl create quota`).
const RESOURCE_QUOTA: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[(1, F::MapQuantity("hard")), (2, F::RepStr("scopes"))],
        ),
    ),
];

/// `scheduling.k8s.io/v1` `PriorityClass` (`kubectl create priorityclass`).
const PRIORITY_CLASS: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::IntZ("value")),
    (3, F::BoolZ("globalDefault")),
    (4, F::Str("description")),
    (5, F::Str("preemptionPolicy")),
];

/// `certificates.k8s.io/v1` `CertificateSigningRequest` (the PUT to `/approval` of
/// `kubectl certificate approve|deny`; `spec.extra` is not read).
const CERTIFICATE_SIGNING_REQUEST: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Bytes64("request")),
                (2, F::Str("username")),
                (3, F::Str("uid")),
                (4, F::RepStr("groups")),
                (5, F::RepStr("usages")),
                (7, F::Str("signerName")),
                (8, F::Int("expirationSeconds")),
            ],
        ),
    ),
    (
        3,
        F::Msg(
            "status",
            &[
                (
                    1,
                    F::RepMsg(
                        "conditions",
                        &[
                            (1, F::Str("type")),
                            (2, F::Str("reason")),
                            (3, F::Str("message")),
                            (4, F::Time("lastUpdateTime")),
                            (5, F::Time("lastTransitionTime")),
                            (6, F::Str("status")),
                        ],
                    ),
                ),
                (2, F::Bytes64("certificate")),
            ],
        ),
    ),
];

const SERVICE: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (
                    1,
                    F::RepMsg(
                        "ports",
                        &[
                            (1, F::Str("name")),
                            (2, F::Str("protocol")),
                            (3, F::IntZ("port")),
                            (4, F::IntOrStr("targetPort")),
                            (5, F::IntZ("nodePort")),
                            (6, F::Str("appProtocol")),
                        ],
                    ),
                ),
                (2, F::MapStr("selector")),
                (3, F::Str("clusterIP")),
                (4, F::Str("type")),
                (5, F::RepStr("externalIPs")),
                (7, F::Str("sessionAffinity")),
                (10, F::Str("externalName")),
                (11, F::Str("externalTrafficPolicy")),
                (18, F::RepStr("clusterIPs")),
            ],
        ),
    ),
];

const RESOURCE_ATTRIBUTES: &[(u32, F)] = &[
    (1, F::Str("namespace")),
    (2, F::Str("verb")),
    (3, F::Str("group")),
    (4, F::Str("version")),
    (5, F::Str("resource")),
    (6, F::Str("subresource")),
    (7, F::Str("name")),
];

const NON_RESOURCE_ATTRIBUTES: &[(u32, F)] = &[(1, F::Str("path")), (2, F::Str("verb"))];

/// `authorization.k8s.io/v1` `SelfSubjectAccessReview` (what `kubectl auth can-i` sends).
const SELF_SUBJECT_ACCESS_REVIEW: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Msg("resourceAttributes", RESOURCE_ATTRIBUTES)),
                (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRIBUTES)),
            ],
        ),
    ),
];

/// `SubjectAccessReview` and `LocalSubjectAccessReview` (`extra` is not read).
const SUBJECT_ACCESS_REVIEW: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::Msg("resourceAttributes", RESOURCE_ATTRIBUTES)),
                (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRIBUTES)),
                (3, F::Str("user")),
                (4, F::RepStr("groups")),
                (6, F::Str("uid")),
            ],
        ),
    ),
];

/// `SelfSubjectRulesReview` (`kubectl auth can-i --list`).
const SELF_SUBJECT_RULES_REVIEW: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", &[(1, F::Str("namespace"))])),
];

/// `authentication.k8s.io/v1` `SelfSubjectReview` (`kubectl auth whoami`).
const SELF_SUBJECT_REVIEW: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META))];

/// `authentication.k8s.io/v1` `TokenRequest` (`kubectl create token`).
const TOKEN_REQUEST: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (1, F::RepStr("audiences")),
                (
                    3,
                    F::Msg(
                        "boundObjectRef",
                        &[
                            (1, F::Str("kind")),
                            (2, F::Str("apiVersion")),
                            (3, F::Str("name")),
                            (4, F::Str("uid")),
                        ],
                    ),
                ),
                (4, F::Int("expirationSeconds")),
            ],
        ),
    ),
];

const POLICY_RULE: &[(u32, F)] = &[
    (1, F::RepStr("verbs")),
    (2, F::RepStr("apiGroups")),
    (3, F::RepStr("resources")),
    (4, F::RepStr("resourceNames")),
    (5, F::RepStr("nonResourceURLs")),
];

/// `rbac.authorization.k8s.io/v1` `Role` and `ClusterRole` (`kubectl create role|clusterrole`).
const ROLE: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::RepMsg("rules", POLICY_RULE)),
    (
        3,
        F::Msg(
            "aggregationRule",
            &[(1, F::RepMsg("clusterRoleSelectors", LABEL_SELECTOR))],
        ),
    ),
];

/// `RoleBinding` and `ClusterRoleBinding` (`kubectl create rolebinding|clusterrolebinding`).
const ROLE_BINDING: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::RepMsg(
            "subjects",
            &[
                (1, F::Str("kind")),
                (2, F::Str("apiGroup")),
                (3, F::Str("name")),
                (4, F::Str("namespace")),
            ],
        ),
    ),
    (
        3,
        F::Msg(
            "roleRef",
            &[
                (1, F::Str("apiGroup")),
                (2, F::Str("kind")),
                (3, F::Str("name")),
            ],
        ),
    ),
];

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
    let schema = match kind {
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
    let unknown = decode_message(inner, UNKNOWN)?;
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
                         "Ingress", "ResourceQuota"] {
                let _ = decode(&[MAGIC, &bytes[..]].concat(), kind);
            }
        }
    }
}
