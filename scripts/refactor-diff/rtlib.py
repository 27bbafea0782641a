"""Helpers for the differential oracle: start a private server (TLS, tokens), speak HTTP(S)."""
import atexit, shutil, http.client, json, os, re, signal, ssl, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "listwatch-apiserver")
TOKENS = 'admintok,admin,u1,"system:masters"\nalicetok,alice,u2,"devs"\nbobtok,bob,u3,"devs"\n'


class Server:
    def __init__(self, tls=False, data_dir=None, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="refactor-diff-", dir=os.path.join(HERE, "run") if os.path.isdir(os.path.join(HERE, "run")) else None)
        self.tls = tls
        self.data_dir = data_dir
        self.extra = list(extra)
        self.start()

    def start(self):
        args = [BIN, "--bind", "127.0.0.1:0", "--log-level", "warn"]
        if self.tls:
            tok = os.path.join(self.tmp, "tokens.csv")
            open(tok, "w").write(TOKENS)
            args += ["--pki-dir", os.path.join(self.tmp, "pki"), "--token-auth-file", tok]
        else:
            pass
        if self.data_dir:
            args += ["--data-dir", self.data_dir]
        args += self.extra
        self.log = open(os.path.join(self.tmp, "server.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log)
        atexit.register(self._cleanup, self.proc)
        atexit.register(shutil.rmtree, self.tmp, True)
        self.port = None
        deadline = time.time() + 30
        buf = b""
        while time.time() < deadline and self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                break
            buf += line
            m = re.search(rb"127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            raise SystemExit("server did not start: %r" % buf)
        for _ in range(100):
            try:
                st, _, _ = self.req("GET", "/readyz", token="admintok")
                if st == 200:
                    break
            except Exception:
                pass
            time.sleep(0.1)

    @staticmethod
    def _cleanup(proc):
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    @property
    def pid(self):
        return self.proc.pid

    def conn(self):
        if self.tls:
            ctx = ssl.create_default_context(cafile=os.path.join(self.tmp, "pki", "ca.crt"))
            return http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=120)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def req(self, method, path, body=None, token=None, headers=None, raw=False):
        h = dict(headers or {})
        if token and self.tls:
            h["Authorization"] = "Bearer " + token
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = self.conn()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        if raw:
            return r.status, dict(r.getheaders()), data
        try:
            j = json.loads(data)
        except Exception:
            j = data
        return r.status, dict(r.getheaders()), j

    def kill(self, sig=signal.SIGKILL):
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stop(self):
        self.kill(signal.SIGTERM)

    def cpu(self):
        f = open("/proc/%d/stat" % self.pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def hwm_kib(self):
        for l in open("/proc/%d/status" % self.pid):
            if l.startswith("VmHWM"):
                return int(l.split()[1])
        return 0

    def rss_kib(self):
        for l in open("/proc/%d/status" % self.pid):
            if l.startswith("VmRSS"):
                return int(l.split()[1])
        return 0


def rbac(s, user, rules, name=None, cluster=True):
    """Give `user` a ClusterRole with `rules` (as admin)."""
    name = name or ("rt-" + user)
    s.req("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", token="admintok",
          body={"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": rules})
    s.req("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", token="admintok",
          body={"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})
