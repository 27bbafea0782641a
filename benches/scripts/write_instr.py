#!/usr/bin/env python3
"""Instructions (callgrind) or server CPU (/proc) per create, merge PATCH and GET of W2's pod.

A load-independent companion of scenario W2 (docs/benchmarks.md): on a shared machine wall
time and even CPU time move with the load, instruction counts do not. Starts each given
server build (ours or `write-bare`) on a free loopback port, under `valgrind --tool=callgrind`
with `--mode instr` (the default) or bare with `--mode cpu`, on one keep-alive HTTP/1.1
connection: WARM creates, patches and GETs of other pods first (lazy start-up work, caches),
then N sequential creates, N merge PATCHes of one label, N GETs of W2's 1 645-byte pod. In
instr mode the counters are zeroed after the warm-up and dumped after each phase
(`callgrind_control`), so each figure is every thread's instructions in that phase divided
by N: the request itself and whatever it sets off in the server (watch cache, informers).

usage: write_instr.py [--mode instr|cpu] [--n N] [--warm W] [--keep DIR] LABEL=BIN[,FLAG..] ...
  e.g. write_instr.py ours=/work/relw/release/listwatch-apiserver,--storage,embedded \
                      bare=/work/relw/release/write-bare
Prints one line per side: LABEL create X patch Y get Z (instructions or µs per request).
"""
import argparse, glob, http.client, os, re, shutil, socket, subprocess, sys, tempfile, time

def pod(name, i):
    return ('{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","namespace":"default","labels":{"app":"web","tier":"frontend","pod-template-hash":"7d4b9c8f5","version":"1.27.3"},"annotations":{"kubernetes.io/config.seen":"2026-01-01T00:00:00.000000000Z","prometheus.io/scrape":"true","prometheus.io/port":"9090"}},"spec":{"nodeName":"node-%04d","restartPolicy":"Always","schedulerName":"default-scheduler","serviceAccountName":"default","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","containers":[{"name":"web","image":"registry.example/web:1.27.3","args":["--port=8080","--metrics-port=9090","--log-level=info"],"ports":[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}],"env":[{"name":"MODE","value":"production"},{"name":"REGION","value":"eu-west-1"},{"name":"CACHE_SIZE","value":"256Mi"},{"name":"FEATURE_FLAGS","value":"alpha,beta,gamma"}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"cpu":"500m","memory":"512Mi"}},"readinessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"periodSeconds":10,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3},"volumeMounts":[{"name":"config","mountPath":"/etc/web","readOnly":true},{"name":"data","mountPath":"/var/lib/web"}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"volumes":[{"name":"config","configMap":{"name":"web-config","defaultMode":420}},{"name":"data","emptyDir":{}}],"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}' % (name, i % 5000)).encode()

PODS = "/api/v1/namespaces/default/pods"

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def cpu_of(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def total_ir(path):
    # The `summary:` (or `totals:`) line of a callgrind dump: instructions of every thread.
    for line in open(path):
        m = re.match(r"(summary|totals): (\d+)", line)
        if m:
            return int(m.group(2))
    raise SystemExit(f"no totals in {path}")

def side(label, argv, mode, n, warm, outdir):
    port = free_port()
    cmd = argv + ["--bind", f"127.0.0.1:{port}"]
    if mode == "instr":
        cmd = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--quiet",
               f"--callgrind-out-file={outdir}/{label}.%p"] + cmd
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                c.request("GET", "/readyz"); r = c.getresponse(); r.read()
                if r.status == 200: break
            except OSError:
                pass
            if time.time() > deadline or srv.poll() is not None:
                raise SystemExit(f"{label}: not ready")
            time.sleep(0.5)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        def req(want, m, p, body=None, ct="application/json"):
            c.request(m, p, body=body, headers={"Content-Type": ct} if body is not None else {})
            r = c.getresponse(); r.read()
            if r.status != want: raise SystemExit(f"{label}: {m} {p}: {r.status}, want {want}")
        def phases(prefix, count):
            yield [(201, "POST", PODS, pod(f"{prefix}{i:06}", i)) for i in range(count)]
            yield [(200, "PATCH", f"{PODS}/{prefix}{(j * 7919) % count:06}",
                    ('{"metadata":{"labels":{"bench":"w%d"}}}' % j).encode(), "application/merge-patch+json")
                   for j in range(count)]
            yield [(200, "GET", f"{PODS}/{prefix}{(j * 7919) % count:06}", None) for j in range(count)]
        for reqs in phases("warm-", warm):
            for want, m, p, body, *ct in reqs: req(want, m, p, body, *ct)
        time.sleep(1)
        out = []
        if mode == "instr":
            subprocess.run(["callgrind_control", "-z", str(srv.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c0 = cpu_of(srv.pid)
        for name, reqs in zip(["create", "patch", "get"], phases("pod-", n)):
            for want, m, p, body, *ct in reqs: req(want, m, p, body, *ct)
            if mode == "instr":
                before = set(glob.glob(f"{outdir}/{label}.{srv.pid}*"))
                subprocess.run(["callgrind_control", "-d", name, str(srv.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                new = sorted(set(glob.glob(f"{outdir}/{label}.{srv.pid}*")) - before, key=os.path.getmtime)
                if not new: raise SystemExit(f"{label}: no dump after {name}")
                out.append((name, total_ir(new[-1]) / n))
                subprocess.run(["callgrind_control", "-z", str(srv.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                c1 = cpu_of(srv.pid); out.append((name, (c1 - c0) / n * 1e6)); c0 = c1
        return out
    finally:
        srv.terminate()
        try: srv.wait(timeout=60)
        except subprocess.TimeoutExpired: srv.kill()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["instr", "cpu"], default="instr")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--warm", type=int, default=100)
    ap.add_argument("--keep", default=None, help="keep the callgrind dumps in this folder")
    ap.add_argument("sides", nargs="+")
    a = ap.parse_args()
    n = a.n or (300 if a.mode == "instr" else 3000)
    outdir = a.keep or tempfile.mkdtemp(prefix="write-instr-")
    os.makedirs(outdir, exist_ok=True)
    unit = "instructions" if a.mode == "instr" else "us CPU"
    for s in a.sides:
        label, spec = s.split("=", 1)
        res = side(label, spec.split(","), a.mode, n, a.warm, outdir)
        print(f"{label}: " + ", ".join(f"{k} {v:,.0f}" for k, v in res) + f" ({unit} per request, n={n})", flush=True)
    if not a.keep:
        shutil.rmtree(outdir, ignore_errors=True)

main()
