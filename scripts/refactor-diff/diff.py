#!/usr/bin/env python3
"""Differential oracle for a behaviour-preserving refactor (first used for issue 27).

Starts the OLD binary and the NEW binary (both TLS + token auth + RBAC, embedded in-memory store),
replays the same corpus of requests against each, and prints every response that differs after
normalising what legitimately differs (uids, timestamps, resourceVersions, gitCommit).

usage: diff.py OLD_BIN NEW_BIN [--verbose]

OLD_BIN is a `listwatch-apiserver` built from the commit before the refactor (e.g.
`git worktree add /tmp/old <commit> && cargo build -p listwatch-apiserver` there), NEW_BIN the
one after. The same binary against itself must give 0 differences (that is what the
normalisation is for: uids, timestamps, resourceVersions, generated names, Age cells, the
order of rules reviews list, the generated CA, random ClusterIPs and the server's port). docs/testing.md, "Refactors: the differential oracle".
"""
import json, re, sys, os, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rtlib

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
VOLATILE = {"uid", "creationTimestamp", "time", "deletionTimestamp", "resourceVersion",
            "gitCommit", "buildDate", "lastTransitionTime", "renewTime", "acquireTime",
            "continue", "startTime", "lastProbeTime", "lastHeartbeatTime", "remainingItemCount"}
SKIP_HEADERS = {"date", "audit-id", "x-kubernetes-pf-flowschema-uid",
                "x-kubernetes-pf-prioritylevel-uid", "content-length", "etag", "last-modified"}


AGE = re.compile(r"^(\d+[smhd])+$")
# Per-run values: the generated CA (kube-root-ca.crt), ClusterIPs drawn at random from the
# service range (upstream allocates at random too), and the server's own port (the
# `kubernetes` Service's endpoints). Without these, a binary differs from itself.
PEM = re.compile(r"-----BEGIN ([A-Z ]+)-----[A-Za-z0-9+/=\s]*-----END \1-----")
SERVICE_IP = re.compile(r"\b10\.0\.\d{1,3}\.\d{1,3}\b")
PORT = None
# ComponentStatus probes the scheduler's and controller manager's local ports: whether some
# other process on the machine listens there is not the binary's doing.
PROBE = re.compile(r'^Get "https://127\.0\.0\.1:(10257|10259)/healthz": .*')
UNORDERED = {"nonResourceRules", "resourceRules"}


def norm(v, key=None):
    if isinstance(v, dict):
        # managedFields keys name list items by uid (`k:{"uid":"…"}`): normalised like values.
        return {UUID.sub("<uuid>", k): ("<v>" if k in VOLATILE and v[k] not in (None, "") else norm(x, k))
                for k, x in v.items()}
    if isinstance(v, list):
        out = [norm(x) for x in v]
        if key in UNORDERED:
            out.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return out
    if isinstance(v, int) and not isinstance(v, bool) and PORT is not None and v == PORT:
        return "<port>"
    if isinstance(v, str):
        v = PROBE.sub(r"<probe \1>", SERVICE_IP.sub("<ip>", PEM.sub(r"<\1>", v)))
        if AGE.match(v):
            return "<age>"
        v = re.sub(r"\bg-[a-z0-9]{5}\b", "g-<gen>", v)
        v = re.sub(r"(resourceVersion|uid|creationTimestamp|time): .*", r"\1: <v>", v)
        return TS.sub("<ts>", UUID.sub("<uuid>", v))
    return v


def paths(a, b, at="", out=None):
    out = [] if out is None else out
    if type(a) != type(b):
        out.append("%s: %s != %s" % (at, json.dumps(a)[:300], json.dumps(b)[:300]))
    elif isinstance(a, dict):
        if list(a) != list(b):
            out.append("%s keys: %s != %s" % (at, list(a), list(b)))
        for k in a:
            if k in b:
                paths(a[k], b[k], at + "." + k, out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append("%s len %d != %d" % (at, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            paths(x, y, "%s[%d]" % (at, i), out)
    elif a != b:
        out.append("%s: %s != %s" % (at, json.dumps(a)[:300], json.dumps(b)[:300]))
    return out


def sample(kind, name, ns):
    meta = {"name": name, "labels": {"app": "x", "tier": name}}
    if ns:
        meta["namespace"] = ns
    o = {"metadata": meta}
    k = kind
    if k == "Pod":
        o["spec"] = {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}], "nodeName": "n1"}
    elif k == "Deployment":
        o["spec"] = {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    elif k == "Service":
        o["spec"] = {"ports": [{"port": 80}], "selector": {"app": "x"}}
    elif k == "ConfigMap":
        o["data"] = {"a": "1"}
    elif k == "Secret":
        o["stringData"] = {"a": "1"}
    elif k == "Event":
        o.update({"involvedObject": {"kind": "Pod", "name": "p", "namespace": ns}, "reason": "R", "message": "m", "type": "Normal"})
    elif k == "Lease":
        o["spec"] = {"holderIdentity": "me", "leaseDurationSeconds": 10}
    elif k in ("Role", "ClusterRole"):
        o["rules"] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    elif k in ("RoleBinding", "ClusterRoleBinding"):
        o["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
        o["subjects"] = [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}]
    elif k == "Node":
        o["status"] = {"capacity": {"cpu": "2"}}
    return o


def corpus(s):
    """Yields (label, method, path, body, headers, token)."""
    yield ("discovery", "GET", "/api", None, {}, "admintok")
    yield ("discovery", "GET", "/apis", None, {}, "admintok")
    yield ("discovery", "GET", "/api/v1", None, {}, "admintok")
    yield ("discovery-agg", "GET", "/apis", None, {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}, "admintok")
    yield ("openapi3", "GET", "/openapi/v3", None, {}, "admintok")
    yield ("openapi2", "GET", "/openapi/v2", None, {}, "admintok")
    yield ("ns", "POST", "/api/v1/namespaces", {"metadata": {"name": "d1"}}, {}, "admintok")
    _, _, groups = s.req("GET", "/apis", token="admintok")
    gvs = ["/api/v1"] + ["/apis/" + g["preferredVersion"]["groupVersion"] for g in groups.get("groups", [])]
    for gv in gvs:
        st, _, rl = s.req("GET", gv, token="admintok")
        if st != 200:
            continue
        for r in rl.get("resources", []):
            if "/" in r["name"]:
                continue
            plural, kind, nsd = r["name"], r["kind"], r["namespaced"]
            verbs = set(r.get("verbs", []))
            base = gv + ("/namespaces/d1/" if nsd else "/") + plural
            api_version = gv.split("/api/")[-1] if gv.startswith("/api/") else gv[len("/apis/"):]
            tag = plural
            def obj(name):
                o = sample(kind, name, "d1" if nsd else None)
                o["apiVersion"], o["kind"] = api_version, kind
                return o
            if "create" in verbs:
                yield (tag, "POST", base, obj("a1"), {}, "admintok")
                yield (tag + " dry", "POST", base + "?dryRun=All", obj("a2"), {}, "admintok")
                yield (tag + " dup", "POST", base, obj("a1"), {}, "admintok")
                yield (tag + " gen", "POST", base + "?dryRun=All", dict(obj("x"), metadata={"generateName": "g-", "namespace": "d1"} if nsd else {"generateName": "g-"}), {}, "admintok")
                yield (tag + " badname", "POST", base, obj("Bad_Name"), {}, "admintok")
                yield (tag + " badjson", "POST", base, b"{\"metadata\": ", {"Content-Type": "application/json"}, "admintok")
                yield (tag + " wrongkind", "POST", base, dict(obj("a3"), kind="Nope"), {}, "admintok")
                yield (tag + " strict", "POST", base + "?fieldValidation=Strict", dict(obj("a4"), bogus=1), {}, "admintok")
                yield (tag + " alice", "POST", base, obj("a5"), {}, "alicetok")
            if "get" in verbs:
                yield (tag, "GET", base + "/a1", None, {}, "admintok")
                yield (tag + " missing", "GET", base + "/zz", None, {}, "admintok")
                yield (tag + " table", "GET", base + "/a1", None, {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, "admintok")
                yield (tag + " pom", "GET", base + "/a1", None, {"Accept": "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"}, "admintok")
                yield (tag + " yaml", "GET", base + "/a1", None, {"Accept": "application/yaml"}, "admintok")
                yield (tag + " alice", "GET", base + "/a1", None, {}, "alicetok")
            if "list" in verbs:
                yield (tag, "GET", base, None, {}, "admintok")
                yield (tag + " sel", "GET", base + "?labelSelector=tier%3Da1&fieldSelector=metadata.name%3Da1", None, {}, "admintok")
                yield (tag + " badsel", "GET", base + "?fieldSelector=spec.nope%3D1", None, {}, "admintok")
                yield (tag + " limit", "GET", base + "?limit=1", None, {}, "admintok")
                yield (tag + " tablelist", "GET", base, None, {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, "admintok")
                yield (tag + " all-ns", "GET", gv + "/" + plural, None, {}, "admintok")
            if "patch" in verbs:
                yield (tag + " merge", "PATCH", base + "/a1", {"metadata": {"labels": {"p": "1"}}}, {"Content-Type": "application/merge-patch+json"}, "admintok")
                yield (tag + " json", "PATCH", base + "/a1", [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}], {"Content-Type": "application/json-patch+json"}, "admintok")
                yield (tag + " jsonbad", "PATCH", base + "/a1", [{"op": "test", "path": "/metadata/name", "value": "no"}], {"Content-Type": "application/json-patch+json"}, "admintok")
                yield (tag + " smp", "PATCH", base + "/a1", {"metadata": {"labels": {"s": "1"}}}, {"Content-Type": "application/strategic-merge-patch+json"}, "admintok")
                yield (tag + " apply", "PATCH", base + "/a1?fieldManager=m1", dict(obj("a1"), metadata=dict(obj("a1")["metadata"], labels={"ap": "1"})), {"Content-Type": "application/apply-patch+yaml"}, "admintok")
                yield (tag + " apply-new", "PATCH", base + "/ap?fieldManager=m1&force=true", obj("ap"), {"Content-Type": "application/apply-patch+yaml"}, "admintok")
                yield (tag + " apply-nomgr", "PATCH", base + "/a1", obj("a1"), {"Content-Type": "application/apply-patch+yaml"}, "admintok")
            if "update" in verbs:
                yield (tag + " put-stale", "PUT", base + "/a1", dict(obj("a1"), metadata=dict(obj("a1")["metadata"], resourceVersion="1")), {}, "admintok")
                yield (tag + " put-new", "PUT", base + "/pn", obj("pn"), {}, "admintok")
                yield (tag + " put-namemismatch", "PUT", base + "/a1", obj("other"), {}, "admintok")
            for sub in ("status", "scale"):
                yield (tag + " " + sub, "GET", base + "/a1/" + sub, None, {}, "admintok")
                yield (tag + " " + sub + " patch", "PATCH", base + "/a1/" + sub, {"status": {"x": 1}} if sub == "status" else {"spec": {"replicas": 3}}, {"Content-Type": "application/merge-patch+json"}, "admintok")
            if "watch" in verbs:
                yield (tag + " watch", "GET", base + "?watch=1&timeoutSeconds=1&resourceVersion=0&labelSelector=tier%3Da1", None, {}, "admintok")
            if "delete" in verbs:
                yield (tag + " del-dry", "DELETE", base + "/a1?dryRun=All", None, {}, "admintok")
                yield (tag + " del-precond", "DELETE", base + "/a1", {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}, {}, "admintok")
                yield (tag + " del-fg", "DELETE", base + "/a1", {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}, {}, "admintok")
                yield (tag + " del-missing", "DELETE", base + "/zz", None, {}, "admintok")
            if "deletecollection" in verbs:
                yield (tag + " delcoll", "DELETE", base + "?labelSelector=app%3Dx", None, {}, "admintok")
    # A finalizer holds the namespace in Terminating, so that the reads below do not race the
    # namespace controller's removal of it.
    yield ("ns hold", "POST", "/api/v1/namespaces/d1/configmaps", {"metadata": {"name": "hold", "finalizers": ["example.com/hold"]}}, {}, "admintok")
    yield ("ns del", "DELETE", "/api/v1/namespaces/d1", None, {}, "admintok")
    yield ("ns get", "GET", "/api/v1/namespaces/d1", None, {}, "admintok")
    yield ("ns create in terminating", "POST", "/api/v1/namespaces/d1/configmaps", {"metadata": {"name": "late"}}, {}, "admintok")
    yield ("selfsubjectrulesreview", "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {"spec": {"namespace": "default"}}, {}, "alicetok")
    yield ("ssar", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}, {}, "alicetok")
    yield ("bootstrap ns", "GET", "/api/v1/namespaces/kube-system", None, {}, "admintok")
    yield ("bootstrap roles", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin", None, {}, "admintok")


def run(binpath, reqs=None):
    rtlib.BIN = binpath
    global PORT
    s = rtlib.Server(tls=True)
    PORT = s.port
    out = []
    items = list(reqs) if reqs is not None else None
    gen = items if items is not None else corpus(s)
    recorded = []
    for label, m, p, b, h, tok in gen:
        recorded.append((label, m, p, b, h, tok))
        st, hd, body = s.req(m, p, body=b, token=tok, headers=h, raw=True)
        if label == "ns get":
            # The namespace controller writes the Terminating namespace's conditions shortly
            # after the DELETE: wait for them (10 s at most) rather than race it.
            deadline = time.time() + 10
            while st == 200 and "conditions" not in json.loads(body).get("status", {}) and time.time() < deadline:
                time.sleep(0.1)
                st, hd, body = s.req(m, p, body=b, token=tok, headers=h, raw=True)
        try:
            j = norm(json.loads(body))
        except Exception:
            j = norm(body.decode("utf-8", "replace"))
        hdrs = {k.lower(): v for k, v in hd.items() if k.lower() not in SKIP_HEADERS}
        out.append((label, m, p, st, hdrs, j))
    s.stop()
    return recorded, out


def main():
    old, new = sys.argv[1], sys.argv[2]
    verbose = "--verbose" in sys.argv
    reqs, a = run(old)
    _, b = run(new, reqs)
    diffs = 0
    for x, y in zip(a, b):
        if x[3:] != y[3:]:
            diffs += 1
            print("DIFF %s %s %s" % (x[0], x[1], x[2]))
            if x[3] != y[3]:
                print("  status old=%s new=%s" % (x[3], y[3]))
            if x[4] != y[4]:
                print("  headers old=%s\n          new=%s" % (x[4], y[4]))
            if x[5] != y[5]:
                for line in paths(x[5], y[5])[:8]:
                    print("  body" + line)
    print("%d requests, %d differ" % (len(a), diffs))
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
