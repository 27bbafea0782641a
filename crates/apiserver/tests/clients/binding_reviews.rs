//! `v1` Binding and the create-only review APIs in discovery (issue 28 items 2 and 3):
//! `pods/binding` and `bindings` assign a pod to a node as upstream's `assignPod` (409 when
//! bound already, 404 for a missing pod), through the Python client and kubectl; discovery
//! lists `bindings`, `pods/binding`, `serviceaccounts/token` and the review resources with
//! the verb `create`, so `kubectl create -f` of a TokenReview maps its kind; kubectl's
//! default validation of create-only kinds reads `/openapi/v2`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, run_ok};
use serde_json::Value;

const BIND: &str = r#"
import sys, json
from kubernetes import client
from kubernetes.client.rest import ApiException
c = client.Configuration()
c.host = sys.argv[1]
core = client.CoreV1Api(client.ApiClient(c))
def body(name, node):
    return client.V1Binding(metadata=client.V1ObjectMeta(name=name, annotations={"by": "test"}),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
r = core.create_namespaced_pod_binding("web", "default", body("web", "node-1"), _preload_content=False)
print("bound", r.status, json.loads(r.data)["status"])
p = core.read_namespaced_pod("web", "default")
cond = [(x.type, x.status) for x in p.status.conditions or []]
print("pod", p.spec.node_name, p.metadata.annotations.get("by"), cond)
try:
    core.create_namespaced_pod_binding("web", "default", body("web", "node-2"), _preload_content=False)
except ApiException as e:
    print("again", e.status, json.loads(e.body)["message"])
try:
    core.create_namespaced_pod_binding("nope", "default", body("nope", "node-1"), _preload_content=False)
except ApiException as e:
    print("missing", e.status, json.loads(e.body)["reason"])
r = core.create_namespaced_binding("default", body("web2", "node-3"), _preload_content=False)
print("legacy", r.status, core.read_namespaced_pod("web2", "default").spec.node_name)
"#;

#[test]
#[ignore = "needs kubectl and the Python kubernetes client"]
fn pods_are_bound_once_and_create_only_resources_are_discovered() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());

    let resources = run_ok(k().args(["api-resources", "-o", "wide"]));
    for (name, group, kind) in [
        ("bindings", "v1", "Binding"),
        ("tokenreviews", "authentication.k8s.io/v1", "TokenReview"),
        (
            "selfsubjectreviews",
            "authentication.k8s.io/v1",
            "SelfSubjectReview",
        ),
        (
            "subjectaccessreviews",
            "authorization.k8s.io/v1",
            "SubjectAccessReview",
        ),
        (
            "localsubjectaccessreviews",
            "authorization.k8s.io/v1",
            "LocalSubjectAccessReview",
        ),
        (
            "selfsubjectaccessreviews",
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
        ),
        (
            "selfsubjectrulesreviews",
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
        ),
    ] {
        let line = resources
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{resources}"));
        assert!(
            line.contains(group)
                && line.contains(kind)
                && line.split_whitespace().any(|w| w == "create"),
            "{line}"
        );
    }
    let v1: Value = serde_json::from_str(&run_ok(k().args(["get", "--raw", "/api/v1"]))).unwrap();
    let subs: Vec<(String, String, Vec<Value>)> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["kind"].as_str().unwrap().to_owned(),
                r["verbs"].as_array().unwrap().clone(),
            )
        })
        .collect();
    for (name, kind) in [
        ("pods/binding", "Binding"),
        ("serviceaccounts/token", "TokenRequest"),
    ] {
        assert!(
            subs.iter()
                .any(|(n, k, v)| n == name && k == kind && v == &[Value::from("create")]),
            "{name} not in {v1}"
        );
    }

    // The Python client binds pods (the scheduler's write).
    run_ok(k().args(["run", "web", "--image=nginx"]));
    run_ok(k().args(["run", "web2", "--image=nginx"]));
    let text = common::python::python_ok(BIND, &[&server.url]);
    assert!(text.contains("bound 201 Success"), "{text}");
    assert!(
        text.contains("pod node-1 test [('PodScheduled', 'True')]"),
        "{text}"
    );
    assert!(
        text.contains(
            "again 409 Operation cannot be fulfilled on pods \"web\": pod web is already assigned to node \"node-1\""
        ),
        "{text}"
    );
    assert!(text.contains("missing 404 NotFound"), "{text}");
    assert!(text.contains("legacy 201 node-3"), "{text}");

    // kubectl maps a TokenReview's kind through discovery (its validation: the next test).
    let file = dir.path().join("review.yaml");
    std::fs::write(
        &file,
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec: {token: abc}\n",
    )
    .unwrap();
    let review = run_ok(k().args(["create", "-o", "yaml", "-f"]).arg(&file));
    assert!(
        review.contains("kind: TokenReview") && review.contains("status:"),
        "{review}"
    );
}

/// kubectl's default (strict) validation of a create-only kind: its OpenAPI v3 document has
/// no PATCH operation of the kind, so kubectl reads `/openapi/v2` (protobuf) and validates
/// the object against the kind's v2 definition there, as against upstream. A kind with a
/// PATCH operation is still validated by the server (`fieldValidation=Strict`).
#[test]
#[ignore = "needs kubectl"]
fn create_only_kinds_are_validated_by_kubectl_against_openapi_v2() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let write = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        f
    };

    let review = write(
        "review.yaml",
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec: {token: abc}\n",
    );
    let out = run_ok(k().args(["create", "-o", "yaml", "-f"]).arg(&review));
    assert!(out.contains("kind: TokenReview"), "{out}");
    let sar = write(
        "sar.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\n\
         spec: {user: alice, resourceAttributes: {verb: get, resource: pods}}\n",
    );
    let out = run_ok(k().args(["create", "-o", "json", "-f"]).arg(&sar));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "SubjectAccessReview", "{out}");
    assert_eq!(v["status"]["allowed"], true, "{out}");
    let eviction_like = write(
        "ssr.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\n\
         spec: {resourceAttributes: {verb: list, resource: secrets}}\n",
    );
    run_ok(k().args(["create", "-o", "name", "-f"]).arg(&eviction_like));

    // kubectl's own validation refuses an unknown field of a create-only kind, before any
    // request (the message names the v2 definition).
    let bad = write(
        "bad-review.yaml",
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec: {token: abc, bogus: 1}\n",
    );
    let err = common::run_err(k().args(["create", "-f"]).arg(&bad));
    assert!(
        err.contains(
            "ValidationError(TokenReview.spec): unknown field \"bogus\" in io.k8s.api.authentication.v1.TokenReviewSpec"
        ),
        "{err}"
    );
    // A pod with an unknown field is still refused under --validate=strict.
    let pod = write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n\
         spec: {containers: [{name: c, image: nginx}], bogus: 1}\n",
    );
    let err = common::run_err(k().args(["create", "--validate=strict", "-f"]).arg(&pod));
    assert!(err.contains("unknown field \"spec.bogus\""), "{err}");
    // And a valid one is created, by create and by apply.
    let pod = write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n",
    );
    run_ok(k().args(["apply", "-f"]).arg(&pod));
    let cm = write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n",
    );
    run_ok(k().args(["create", "-f"]).arg(&cm));
}

/// Binds with the binding's `metadata.uid` and `metadata.resourceVersion` as upstream's
/// `assignPod` preconditions.
const PRECONDITIONS: &str = r#"
import sys, json
from kubernetes import client
from kubernetes.client.rest import ApiException
c = client.Configuration()
c.host = sys.argv[1]
core = client.CoreV1Api(client.ApiClient(c))
def bind(uid=None, rv=None):
    b = client.V1Binding(metadata=client.V1ObjectMeta(name="web", uid=uid, resource_version=rv),
        target=client.V1ObjectReference(kind="Node", name="node-1"))
    try:
        r = core.create_namespaced_pod_binding("web", "default", b, _preload_content=False)
        return r.status
    except ApiException as e:
        return "%d %s" % (e.status, json.loads(e.body)["message"])
p = core.read_namespaced_pod("web", "default")
# A body the typed client cannot send: a numeric uid (upstream's decoding refuses it).
import urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + "/api/v1/namespaces/default/pods/web/binding",
    data=json.dumps({"metadata": {"name": "web", "uid": 5}, "target": {"name": "node-1"}}).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
try:
    urllib.request.urlopen(req, timeout=30)
    print("numeric uid accepted")
except urllib.error.HTTPError as e:
    print("numeric uid", e.code, json.loads(e.read())["message"])
print("uid", bind(uid="not-the-uid"))
print("rv", bind(rv="1" + p.metadata.resource_version))
print("node", core.read_namespaced_pod("web", "default").spec.node_name)
print("match", bind(uid=p.metadata.uid, rv=p.metadata.resource_version))
print("node", core.read_namespaced_pod("web", "default").spec.node_name)
"#;

#[test]
#[ignore = "needs kubectl and the Python kubernetes client"]
fn a_binding_s_uid_and_resource_version_are_preconditions_on_the_pod() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        server
            .kubectl(dir.path())
            .args(["run", "web", "--image=nginx"]),
    );
    let text = common::python::python_ok(PRECONDITIONS, &[&server.url]);
    assert!(
        text.contains(
            "uid 409 Operation cannot be fulfilled on pods \"web\": Precondition failed: \
             UID in precondition: not-the-uid, UID in object meta: "
        ),
        "{text}"
    );
    assert!(
        text.contains("rv 409 Operation cannot be fulfilled on pods \"web\": Precondition failed: ResourceVersion in precondition: 1"),
        "{text}"
    );
    assert!(
        text.contains("numeric uid 400 Binding in version \"v1\" cannot be handled as a Binding: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.uid of type string"),
        "{text}"
    );
    assert!(text.contains("node None\n"), "{text}");
    assert!(text.contains("match 201\nnode node-1"), "{text}");
}
