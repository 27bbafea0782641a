#!/usr/bin/env python3
"""Server CPU per create and per merge PATCH of a pod, one keep-alive HTTP/1.1 connection.

Starts the given listwatch-apiserver build on a free loopback port (embedded store), creates
PODS pods in `default`, then sends PATCHES merge patches of one label round-robin, and prints
the server's CPU (utime + stime from /proc, 10 ms ticks) and wall time per request for each
phase. Extra arguments are passed to the server. For profiling, attach `perf record -p` to the
server during the PATCH phase (a build with `-C force-frame-pointers=yes` gives call graphs).

usage: write_cost.py BIN PODS PATCHES [server flags...]
"""
import atexit, http.client, json, os, socket, subprocess, sys, time
bin_, pods, patches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
extra = sys.argv[4:]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
srv = subprocess.Popen([bin_, "--bind", f"127.0.0.1:{port}", "--max-mutating-requests-inflight", "0"] + extra,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
atexit.register(srv.kill)  # also when a request fails
def cpu():
    f = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
for _ in range(300):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10); c.request("GET", "/readyz"); r = c.getresponse(); r.read()
        if r.status == 200: break
    except Exception: pass
    time.sleep(0.1)
else:
    raise SystemExit("the server did not become ready in 30 s")
def pod(i):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i:06}", "namespace": "default",
      "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f5"},
      "annotations": {"kubernetes.io/config.seen": "2026-01-01T00:00:00.000000000Z"}},
      "spec": {"nodeName": f"node-{i % 5000:04}", "restartPolicy": "Always", "schedulerName": "default-scheduler",
      "serviceAccountName": "default", "containers": [{"name": "web", "image": "registry.example/web:1.27.3",
      "ports": [{"containerPort": 8080, "protocol": "TCP"}], "env": [{"name": "MODE", "value": "production"}],
      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}, "imagePullPolicy": "IfNotPresent"}]}}
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
def req(m, p, body, ct):
    c.request(m, p, body=json.dumps(body), headers={"Content-Type": ct}); r = c.getresponse(); r.read()
    if r.status >= 300: raise SystemExit(f"{m} {p}: {r.status}")
c0 = cpu(); t0 = time.time()
for i in range(pods): req("POST", "/api/v1/namespaces/default/pods", pod(i), "application/json")
c1 = cpu(); t1 = time.time()
for j in range(patches):
    req("PATCH", f"/api/v1/namespaces/default/pods/pod-{(j * 7919) % pods:06}", {"metadata": {"labels": {"bench": f"w{j}"}}}, "application/merge-patch+json")
c2 = cpu(); t2 = time.time()
print(f"{' '.join(extra) or 'defaults'}: create {1e6*(c1-c0)/pods:.0f} us CPU ({1e6*(t1-t0)/pods:.0f} us wall), patch {1e6*(c2-c1)/patches:.0f} us CPU ({1e6*(t2-t1)/patches:.0f} us wall)")
srv.terminate(); srv.wait()
