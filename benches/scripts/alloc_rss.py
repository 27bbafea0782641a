#!/usr/bin/env python3
"""Resident memory of a server build through large bodies (the allocator check of docs/benchmarks.md, W2).

Starts BIN (embedded store) on a free port: 40 creates of ~1 MiB ConfigMaps, deleted again, then 20
bodies of 2.9 MiB (over the body limit: 413); prints VmRSS after each phase and VmHWM.

usage: alloc_rss.py BIN
"""
import http.client, json, os, socket, subprocess, sys, time
bin_ = sys.argv[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
srv = subprocess.Popen([bin_, "--bind", f"127.0.0.1:{port}", "--storage", "embedded", "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def rss():
    for l in open(f"/proc/{srv.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) // 1024
    return -1
def hwm():
    for l in open(f"/proc/{srv.pid}/status"):
        if l.startswith("VmHWM"): return int(l.split()[1]) // 1024
try:
    for _ in range(300):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10); c.request("GET", "/readyz"); r = c.getresponse(); r.read()
            if r.status == 200: break
        except OSError: pass
        time.sleep(0.1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    def req(m, p, body=None):
        c.request(m, p, body=body, headers={"Content-Type": "application/json"}); r = c.getresponse(); r.read(); return r.status
    base = rss()
    big = "x" * (1 << 20)
    codes = [req("POST", "/api/v1/namespaces/default/configmaps", json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i}"}, "data": {"k": big}})) for i in range(40)]
    after_create = rss()
    for i in range(40): req("DELETE", f"/api/v1/namespaces/default/configmaps/big-{i}")
    time.sleep(2); after_delete = rss()
    huge = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"}, "data": {"k": "y" * (2900 << 10)}})
    codes2 = [req("POST", "/api/v1/namespaces/default/configmaps", huge) for _ in range(20)]
    time.sleep(2)
    print(f"{os.path.basename(bin_)}: start {base} MiB, 40x1MiB created {after_create} (codes {sorted(set(codes))}), deleted {after_delete}, 20x2.9MiB bodies {rss()} (codes {sorted(set(codes2))}), peak {hwm()} MiB; alive={srv.poll() is None}")
finally:
    srv.terminate(); srv.wait()
