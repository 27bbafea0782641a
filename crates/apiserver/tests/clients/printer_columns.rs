//! Upstream's printer columns of every built-in kind that used to print only NAME and AGE
//! (issue 28 item 2), through kubectl: one object of each kind is created, then
//! `kubectl get <kind> <name>` must print upstream's headers (pkg/printers/internalversion/
//! printers.go; kube-aggregator's for APIServices; the default table convertor's NAME CREATED
//! AT for roles, cluster roles and limit ranges) and the object's row, and `-o wide` the
//! priority-1 columns where upstream has some.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Stdio;

use crate::common;

use common::{Server, run_ok};

/// One object of each kind, in namespace `cols` for the namespaced ones.
const OBJECTS: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: cols}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm1, namespace: cols}
data: {a: "1", b: "2"}
binaryData: {c: AA==}
---
apiVersion: v1
kind: Secret
metadata: {name: s1, namespace: cols}
type: Opaque
data: {a: YQ==}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa1, namespace: cols}
secrets: [{name: tok}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep1, namespace: cols}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}]
  ports: [{port: 80}, {port: 443}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r1, namespace: cols}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cols-cr1}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rb1, namespace: cols}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
- {kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}
- {kind: ServiceAccount, name: sa1, namespace: cols}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cols-crb1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cols-cr1}
subjects:
- {kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}
- {kind: Group, name: ops, apiGroup: rbac.authorization.k8s.io}
- {kind: ServiceAccount, name: sa1, namespace: cols}
---
apiVersion: v1
kind: LimitRange
metadata: {name: lr1, namespace: cols}
spec: {limits: [{type: Container, default: {cpu: 500m}}]}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: q1, namespace: cols}
spec: {hard: {pods: "10", limits.cpu: "2"}}
---
apiVersion: v1
kind: PodTemplate
metadata: {name: pt1, namespace: cols}
template:
  metadata: {labels: {app: pt}}
  spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: cr1, namespace: cols}
revision: 2
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: cols-ic1}
spec:
  controller: example.com/ic
  parameters: {apiGroup: k8s.example.com, kind: Params, name: p}
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: cols.csi.example.com}
spec: {podInfoOnMount: true, volumeLifecycleModes: [Persistent]}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: cols-node1}
spec: {drivers: [{name: cols.csi.example.com, nodeID: n1}]}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: csc1, namespace: cols}
storageClassName: fast
capacity: 10Gi
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: cols-va1}
spec: {attacher: cols.csi.example.com, source: {persistentVolumeName: pv1}, nodeName: n1}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: cols-mwc}
webhooks:
- {name: a.example.com, clientConfig: {url: "https://a.example.com"}, admissionReviewVersions: [v1], sideEffects: None}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: cols-vwc}
webhooks:
- {name: a.example.com, clientConfig: {url: "https://a.example.com"}, admissionReviewVersions: [v1], sideEffects: None}
- {name: b.example.com, clientConfig: {url: "https://b.example.com"}, admissionReviewVersions: [v1], sideEffects: None}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: cols-vap}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  validations: [{expression: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: cols-vapb}
spec:
  policyName: cols-vap
  paramRef: {name: p, namespace: cols, parameterNotFoundAction: Deny}
  validationActions: [Deny]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.cols.example.com}
spec: {group: cols.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10,
  service: {namespace: cols, name: api}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: cols-fs}
spec:
  priorityLevelConfiguration: {name: cols-pl}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: cols-pl}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    limitResponse: {type: Queue, queuing: {queues: 16, handSize: 4, queueLengthLimit: 20}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: cols-pc}
value: 1000
preemptionPolicy: Never
---
apiVersion: v1
kind: Event
metadata: {name: ev1, namespace: cols}
involvedObject: {kind: Pod, name: p, namespace: cols, fieldPath: "spec.containers{c}"}
type: Normal
reason: Pulled
message: done
source: {component: kubelet, host: n1}
count: 2
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-02T00:00:00Z"
---
apiVersion: v1
kind: Node
metadata:
  name: cols-n1
  labels: {node-role.kubernetes.io/worker: ""}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 10.0.0.5}]
  nodeInfo: {kubeletVersion: v1.32.0, osImage: "", kernelVersion: "", containerRuntimeVersion: "",
    machineID: "", systemUUID: "", bootID: "", kubeProxyVersion: "", operatingSystem: linux, architecture: amd64}
"#;

/// A cell that must be an age (`0s`, `12s`, `2m3s`, ...).
const AGE: &str = "<age>";
/// A cell that must be an RFC 3339 UTC timestamp (the CREATED AT column).
const CREATED: &str = "<created>";

/// One `kubectl get`: the resource (qualified where a short name could be ambiguous), the
/// object, whether it is namespaced, the header and row cells of the default view, and of
/// `-o wide` when upstream has priority-1 columns.
struct Case {
    resource: &'static str,
    name: &'static str,
    namespaced: bool,
    header: &'static [&'static str],
    row: &'static [&'static str],
    wide: Option<(&'static [&'static str], &'static [&'static str])>,
}

const fn case(
    resource: &'static str,
    name: &'static str,
    namespaced: bool,
    header: &'static [&'static str],
    row: &'static [&'static str],
) -> Case {
    Case {
        resource,
        name,
        namespaced,
        header,
        row,
        wide: None,
    }
}

/// An event's header and row: no NAME and no AGE but LAST SEEN.
const EVENT: (&[&str], &[&str]) = (
    &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
    &[AGE, "Normal", "Pulled", "pod/p", "done"],
);
const EVENT_WIDE: (&[&str], &[&str]) = (
    &[
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "SUBOBJECT",
        "SOURCE",
        "MESSAGE",
        "FIRST SEEN",
        "COUNT",
        "NAME",
    ],
    &[
        AGE,
        "Normal",
        "Pulled",
        "pod/p",
        "spec.containers{c}",
        "kubelet, n1",
        "done",
        AGE,
        "2",
        "ev1",
    ],
);

fn cases() -> Vec<Case> {
    vec![
        case(
            "configmaps",
            "cm1",
            true,
            &["NAME", "DATA", "AGE"],
            &["cm1", "3", AGE],
        ),
        case(
            "secrets",
            "s1",
            true,
            &["NAME", "TYPE", "DATA", "AGE"],
            &["s1", "Opaque", "1", AGE],
        ),
        case(
            "serviceaccounts",
            "sa1",
            true,
            &["NAME", "SECRETS", "AGE"],
            &["sa1", "1", AGE],
        ),
        case(
            "endpoints",
            "ep1",
            true,
            &["NAME", "ENDPOINTS", "AGE"],
            &[
                "ep1",
                "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...",
                AGE,
            ],
        ),
        case(
            "roles.rbac.authorization.k8s.io",
            "r1",
            true,
            &["NAME", "CREATED AT"],
            &["r1", CREATED],
        ),
        case(
            "clusterroles.rbac.authorization.k8s.io",
            "cols-cr1",
            false,
            &["NAME", "CREATED AT"],
            &["cols-cr1", CREATED],
        ),
        Case {
            wide: Some((
                &["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
                &["rb1", "ClusterRole/view", AGE, "alice", "devs", "cols/sa1"],
            )),
            ..case(
                "rolebindings.rbac.authorization.k8s.io",
                "rb1",
                true,
                &["NAME", "ROLE", "AGE"],
                &["rb1", "ClusterRole/view", AGE],
            )
        },
        Case {
            wide: Some((
                &["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
                &[
                    "cols-crb1",
                    "ClusterRole/cols-cr1",
                    AGE,
                    "bob",
                    "ops",
                    "cols/sa1",
                ],
            )),
            ..case(
                "clusterrolebindings.rbac.authorization.k8s.io",
                "cols-crb1",
                false,
                &["NAME", "ROLE", "AGE"],
                &["cols-crb1", "ClusterRole/cols-cr1", AGE],
            )
        },
        case(
            "limitranges",
            "lr1",
            true,
            &["NAME", "CREATED AT"],
            &["lr1", CREATED],
        ),
        case(
            "resourcequotas",
            "q1",
            true,
            &["NAME", "REQUEST", "LIMIT", "AGE"],
            &["q1", "pods: 1/10", "limits.cpu: 0/2", AGE],
        ),
        case(
            "podtemplates",
            "pt1",
            true,
            &["NAME", "CONTAINERS", "IMAGES", "POD LABELS"],
            &["pt1", "c", "nginx", "app=pt"],
        ),
        case(
            "controllerrevisions.apps",
            "cr1",
            true,
            &["NAME", "CONTROLLER", "REVISION", "AGE"],
            &["cr1", "<none>", "2", AGE],
        ),
        case(
            "ingressclasses.networking.k8s.io",
            "cols-ic1",
            false,
            &["NAME", "CONTROLLER", "PARAMETERS", "AGE"],
            &[
                "cols-ic1",
                "example.com/ic",
                "Params.k8s.example.com/p",
                AGE,
            ],
        ),
        case(
            "csidrivers.storage.k8s.io",
            "cols.csi.example.com",
            false,
            &[
                "NAME",
                "ATTACHREQUIRED",
                "PODINFOONMOUNT",
                "STORAGECAPACITY",
                "TOKENREQUESTS",
                "REQUIRESREPUBLISH",
                "MODES",
                "AGE",
            ],
            &[
                "cols.csi.example.com",
                "true",
                "true",
                "false",
                "<unset>",
                "false",
                "Persistent",
                AGE,
            ],
        ),
        case(
            "csinodes.storage.k8s.io",
            "cols-node1",
            false,
            &["NAME", "DRIVERS", "AGE"],
            &["cols-node1", "1", AGE],
        ),
        case(
            "csistoragecapacities.storage.k8s.io",
            "csc1",
            true,
            &["NAME", "STORAGECLASSNAME", "CAPACITY"],
            &["csc1", "fast", "10Gi"],
        ),
        case(
            "volumeattachments.storage.k8s.io",
            "cols-va1",
            false,
            &["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"],
            &[
                "cols-va1",
                "cols.csi.example.com",
                "pv1",
                "n1",
                "false",
                AGE,
            ],
        ),
        case(
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            "cols-mwc",
            false,
            &["NAME", "WEBHOOKS", "AGE"],
            &["cols-mwc", "1", AGE],
        ),
        case(
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            "cols-vwc",
            false,
            &["NAME", "WEBHOOKS", "AGE"],
            &["cols-vwc", "2", AGE],
        ),
        case(
            "validatingadmissionpolicies.admissionregistration.k8s.io",
            "cols-vap",
            false,
            &["NAME", "VALIDATIONS", "PARAMKIND", "AGE"],
            &["cols-vap", "1", "v1/ConfigMap", AGE],
        ),
        case(
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            "cols-vapb",
            false,
            &["NAME", "POLICYNAME", "PARAMREF", "AGE"],
            &["cols-vapb", "cols-vap", "cols/p", AGE],
        ),
        case(
            "apiservices.apiregistration.k8s.io",
            "v1.cols.example.com",
            false,
            &["NAME", "SERVICE", "AVAILABLE", "AGE"],
            &[
                "v1.cols.example.com",
                "cols/api",
                "False (FailedDiscoveryCheck)",
                AGE,
            ],
        ),
        case(
            "flowschemas.flowcontrol.apiserver.k8s.io",
            "cols-fs",
            false,
            &[
                "NAME",
                "PRIORITYLEVEL",
                "MATCHINGPRECEDENCE",
                "DISTINGUISHERMETHOD",
                "AGE",
                "MISSINGPL",
            ],
            &["cols-fs", "cols-pl", "500", "ByUser", AGE, "?"],
        ),
        case(
            "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
            "cols-pl",
            false,
            &[
                "NAME",
                "TYPE",
                "NOMINALCONCURRENCYSHARES",
                "QUEUES",
                "HANDSIZE",
                "QUEUELENGTHLIMIT",
                "AGE",
            ],
            &["cols-pl", "Limited", "5", "16", "4", "20", AGE],
        ),
        case(
            "priorityclasses.scheduling.k8s.io",
            "cols-pc",
            false,
            &["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
            &["cols-pc", "1000", "false", AGE, "Never"],
        ),
        Case {
            wide: Some((EVENT_WIDE.0, EVENT_WIDE.1)),
            ..case("events", "ev1", true, EVENT.0, EVENT.1)
        },
        // Upstream prints both groups' events with one printer.
        Case {
            wide: Some((EVENT_WIDE.0, EVENT_WIDE.1)),
            ..case("events.v1.events.k8s.io", "ev1", true, EVENT.0, EVENT.1)
        },
        Case {
            wide: Some((
                &[
                    "NAME",
                    "STATUS",
                    "ROLES",
                    "AGE",
                    "VERSION",
                    "INTERNAL-IP",
                    "EXTERNAL-IP",
                    "OS-IMAGE",
                    "KERNEL-VERSION",
                    "CONTAINER-RUNTIME",
                ],
                &[
                    "cols-n1",
                    "Ready",
                    "worker",
                    AGE,
                    "v1.32.0",
                    "10.0.0.5",
                    "<none>",
                    "<unknown>",
                    "<unknown>",
                    "<unknown>",
                ],
            )),
            ..case(
                "nodes",
                "cols-n1",
                false,
                &["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
                &["cols-n1", "Ready", "worker", AGE, "v1.32.0"],
            )
        },
    ]
}

/// kubectl's table cells: columns are padded with at least three spaces (its tabwriter's
/// padding), so a run of three or more spaces separates cells and one space is inside one.
fn cells(line: &str) -> Vec<String> {
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

fn matches(want: &str, got: &str) -> bool {
    match want {
        AGE => {
            got.starts_with(|c: char| c.is_ascii_digit())
                && got.chars().all(|c| c.is_ascii_alphanumeric())
        }
        CREATED => {
            got.len() == 20
                && got.ends_with('Z')
                && got.as_bytes().get(10) == Some(&b'T')
                && got.starts_with("20")
        }
        _ => want == got,
    }
}

/// `kubectl get` of one case's object: the header and row cells.
fn get(server: &Server, dir: &std::path::Path, c: &Case, wide: bool) -> (Vec<String>, Vec<String>) {
    let mut cmd = server.kubectl(dir);
    cmd.args(["get", c.resource, c.name]);
    if c.namespaced {
        cmd.args(["-n", "cols"]);
    }
    if wide {
        cmd.args(["-o", "wide"]);
    }
    let out = run_ok(&mut cmd);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{} {}: {out}", c.resource, c.name);
    (cells(lines[0]), cells(lines[1]))
}

fn check(
    what: &str,
    header: &[&str],
    row: &[&str],
    got: &(Vec<String>, Vec<String>),
) -> Option<String> {
    let (h, r) = got;
    let ok = h.iter().map(String::as_str).eq(header.iter().copied())
        && r.len() == row.len()
        && row.iter().zip(r).all(|(w, g)| matches(w, g));
    (!ok).then(|| format!("{what}: want {header:?} / {row:?}, got {h:?} / {r:?}"))
}

/// Before: every kind here printed NAME AGE only (`kubectl get configmaps` without DATA,
/// `kubectl get rolebindings` without ROLE, ...).
#[test]
#[ignore = "needs kubectl"]
fn kubectl_prints_upstreams_columns_for_every_built_in_kind() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut create = server.kubectl(dir.path());
    create
        .args(["create", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = create.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(OBJECTS.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The quota's usage, as its controller would write it.
    run_ok(server.kubectl(dir.path()).args([
        "patch",
        "resourcequota",
        "q1",
        "-n",
        "cols",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"hard":{"pods":"10","limits.cpu":"2"},"used":{"pods":"1"}}}"#,
    ]));

    let mut wrong = Vec::new();
    for c in cases() {
        let got = get(&server, dir.path(), &c, false);
        wrong.extend(check(c.resource, c.header, c.row, &got));
        if let Some((header, row)) = c.wide {
            let got = get(&server, dir.path(), &c, true);
            wrong.extend(check(&format!("{} -o wide", c.resource), header, row, &got));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
