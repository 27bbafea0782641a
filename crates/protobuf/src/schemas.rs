//! The protobuf schemas of the kinds whose bodies [`super::decode`] reads: for each message,
//! its field numbers (k8s.io/api's `generated.proto`) and the JSON names and shapes they
//! become. Data only; the decoding is the parent module's.
//!
//! Invariant: a field number appears once per message, and a schema lists only fields whose
//! wire form its [`F`] variant reads (anything else is skipped by wire type).

use super::F;

pub(super) const OBJECT_META: &[(u32, F)] = &[
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

pub(super) const NAMESPACE: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", &[(1, F::RepStr("finalizers"))])),
    (3, F::Msg("status", &[(1, F::Str("phase"))])),
];

pub(super) const CONFIG_MAP: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapStr("data")),
    (3, F::MapBytes("binaryData")),
    (4, F::Bool("immutable")),
];

pub(super) const SECRET: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapBytes("data")),
    (3, F::Str("type")),
    (4, F::MapStr("stringData")),
    (5, F::Bool("immutable")),
];

pub(super) const SERVICE_ACCOUNT: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (4, F::Bool("automountServiceAccountToken")),
];

pub(super) const LABEL_SELECTOR: &[(u32, F)] = &[
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

pub(super) const CONTAINER: &[(u32, F)] = &[
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

pub(super) const POD_SPEC: &[(u32, F)] = &[
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

pub(super) const DEPLOYMENT: &[(u32, F)] = &[
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
pub(super) const JOB_SPEC: &[(u32, F)] = &[
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
pub(super) const JOB: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", JOB_SPEC)),
];

/// `batch/v1` `CronJob` (`kubectl create cronjob`).
pub(super) const CRON_JOB: &[(u32, F)] = &[
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
pub(super) const POD_DISRUPTION_BUDGET: &[(u32, F)] = &[
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

pub(super) const INGRESS_BACKEND: &[(u32, F)] = &[
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
pub(super) const INGRESS: &[(u32, F)] = &[
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
pub(super) const RESOURCE_QUOTA: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[(1, F::MapQuantity("hard")), (2, F::RepStr("scopes"))],
        ),
    ),
];

/// `autoscaling/v1` `HorizontalPodAutoscaler` (`kubectl autoscale`).
pub(super) const HORIZONTAL_POD_AUTOSCALER_V1: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (
        2,
        F::Msg(
            "spec",
            &[
                (
                    1,
                    F::Msg(
                        "scaleTargetRef",
                        &[
                            (1, F::Str("kind")),
                            (2, F::Str("name")),
                            (3, F::Str("apiVersion")),
                        ],
                    ),
                ),
                (2, F::Int("minReplicas")),
                (3, F::IntZ("maxReplicas")),
                (4, F::Int("targetCPUUtilizationPercentage")),
            ],
        ),
    ),
];

/// `scheduling.k8s.io/v1` `PriorityClass` (`kubectl create priorityclass`).
pub(super) const PRIORITY_CLASS: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::IntZ("value")),
    (3, F::BoolZ("globalDefault")),
    (4, F::Str("description")),
    (5, F::Str("preemptionPolicy")),
];

/// `certificates.k8s.io/v1` `CertificateSigningRequest` (the PUT to `/approval` of
/// `kubectl certificate approve|deny`; `spec.extra` is not read).
pub(super) const CERTIFICATE_SIGNING_REQUEST: &[(u32, F)] = &[
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

pub(super) const SERVICE: &[(u32, F)] = &[
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

pub(super) const RESOURCE_ATTRIBUTES: &[(u32, F)] = &[
    (1, F::Str("namespace")),
    (2, F::Str("verb")),
    (3, F::Str("group")),
    (4, F::Str("version")),
    (5, F::Str("resource")),
    (6, F::Str("subresource")),
    (7, F::Str("name")),
];

pub(super) const NON_RESOURCE_ATTRIBUTES: &[(u32, F)] = &[(1, F::Str("path")), (2, F::Str("verb"))];

/// `authorization.k8s.io/v1` `SelfSubjectAccessReview` (what `kubectl auth can-i` sends).
pub(super) const SELF_SUBJECT_ACCESS_REVIEW: &[(u32, F)] = &[
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
pub(super) const SUBJECT_ACCESS_REVIEW: &[(u32, F)] = &[
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
pub(super) const SELF_SUBJECT_RULES_REVIEW: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", &[(1, F::Str("namespace"))])),
];

/// `authentication.k8s.io/v1` `SelfSubjectReview` (`kubectl auth whoami`).
pub(super) const SELF_SUBJECT_REVIEW: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META))];

/// `authentication.k8s.io/v1` `TokenRequest` (`kubectl create token`).
pub(super) const TOKEN_REQUEST: &[(u32, F)] = &[
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

pub(super) const POLICY_RULE: &[(u32, F)] = &[
    (1, F::RepStr("verbs")),
    (2, F::RepStr("apiGroups")),
    (3, F::RepStr("resources")),
    (4, F::RepStr("resourceNames")),
    (5, F::RepStr("nonResourceURLs")),
];

/// `rbac.authorization.k8s.io/v1` `Role` and `ClusterRole` (`kubectl create role|clusterrole`).
pub(super) const ROLE: &[(u32, F)] = &[
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
pub(super) const ROLE_BINDING: &[(u32, F)] = &[
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
