#!/usr/bin/env python3
"""Create-CRD to first successful custom resource create, against a running server.

usage: measure.py URL [ROUNDS] [BURST]

Each round creates a CRD (a new group each time), then POSTs a custom resource of it
until one is created (201), and records the time from the CRD's POST to that 201. The
median, min and max of ROUNDS rounds are printed. Then BURST CRDs are created at once
(one POST after the other, no waiting) and the time until a custom resource of the last
one is created is printed, with the time until /apis (aggregated discovery) lists them all.
Standard library only.
"""
import http.client
import json
import statistics
import sys
import time
import urllib.parse

url = urllib.parse.urlparse(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
burst = int(sys.argv[3]) if len(sys.argv) > 3 else 50
conn = [http.client.HTTPConnection(url.hostname, url.port, timeout=60)]


def call(method, path, body=None, accept="application/json"):
    headers = {"Accept": accept}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    for attempt in range(2):
        try:
            conn[0].request(method, path, data, headers)
            r = conn[0].getresponse()
            body = r.read()
            if r.getheader("Connection", "").lower() == "close":
                conn[0].close()
            return r.status, body
        except (http.client.HTTPException, OSError):
            # The server closed the connection (e.g. after an error answer): a new one.
            conn[0].close()
            conn[0] = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            if attempt:
                raise


def crd(group):
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def create_cr(group, deadline):
    path = f"/apis/{group}/v1/namespaces/default/widgets"
    body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}}
    while True:
        code, _ = call("POST", path, body)
        if code == 201:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"no custom resource of {group} created: {code}")
        time.sleep(0.001)


times = []
for i in range(rounds):
    group = f"round{i}.latency.example.com"
    t0 = time.monotonic()
    code, body = call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(group))
    assert code == 201, (code, body)
    create_cr(group, t0 + 60)
    times.append((time.monotonic() - t0) * 1000)
print(f"create CRD -> first CR created, {rounds} rounds: median {statistics.median(times):.1f} ms,"
      f" min {min(times):.1f} ms, max {max(times):.1f} ms")

t0 = time.monotonic()
groups = [f"burst{i}.latency.example.com" for i in range(burst)]
for g in groups:
    code, body = call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(g))
    assert code == 201, (code, body)
posted = (time.monotonic() - t0) * 1000
create_cr(groups[-1], t0 + 120)
last = (time.monotonic() - t0) * 1000
while True:
    code, body = call("GET", "/apis", accept="application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    names = {g["metadata"]["name"] for g in json.loads(body).get("items", [])}
    if all(g in names for g in groups):
        break
    if time.monotonic() > t0 + 120:
        raise SystemExit("discovery never listed the burst")
discovered = (time.monotonic() - t0) * 1000
print(f"burst of {burst} CRDs: all POSTed in {posted:.0f} ms, a CR of the last created at {last:.0f} ms,"
      f" all in aggregated discovery at {discovered:.0f} ms")
