//! listwatch-client's credentials and connection settings against the built server over TLS
//! (`--pki-dir`, `--token-auth-file`, ServiceAccount tokens, audit): a bearer token, the
//! admin client certificate from a kubeconfig, a `KUBECONFIG` list merged as kubectl
//! merges it, an exec credential plugin (cached, re-run on 401), a ServiceAccount token file
//! rotated under a running client, in-cluster configuration, impersonation, `tls-server-name`, a
//! `proxy-url` tunnel, a proxy from the environment (`HTTPS_PROXY`, `NO_PROXY`), the
//! system's root CAs when no CA is given, exec plugins returning client certificates (v1)
//! and tokens (v1beta1), and `$KUBECONFIG` and the in-cluster variables read from the
//! environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{PATIENCE, Server, run_ok};
use listwatch_client::{
    ExecConfig, HttpConfig, HttpListerWatcher, Impersonate, ListRequest, ListerWatcher,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKENS: &str = "root-token,root,uid-root,system:masters\nalice-token,alice,uid-alice\n";
const PODS: &str = "/api/v1/namespaces/lw/pods";

struct Cluster {
    server: Server,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Self {
        common::require("kubectl");
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let pki = dir.path().join("pki");
        let audit = dir.path().join("audit.log");
        let server = Server::start(&[
            "--pki-dir",
            pki.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--audit-log-path",
            audit.to_str().unwrap(),
        ]);
        assert!(server.url.starts_with("https://"), "{}", server.url);
        let c = Self { server, dir };
        run_ok(c.admin().args(["create", "namespace", "lw"]));
        run_ok(c.admin().args([
            "run",
            "p0",
            "-n",
            "lw",
            "--image",
            "x",
            "--restart",
            "Never",
        ]));
        c
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn ca(&self) -> Vec<u8> {
        std::fs::read(self.path("pki/ca.crt")).unwrap()
    }

    fn port(&self) -> &str {
        self.server.addr.rsplit(':').next().unwrap()
    }

    fn admin(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(self.path("pki/admin.kubeconfig"))
            .arg("--cache-dir")
            .arg(self.path("cache-admin"));
        c
    }

    /// Users seen by the audit log for requests to `path_part`.
    fn audited_users(&self, path_part: &str) -> Vec<String> {
        let audit = std::fs::read_to_string(self.path("audit.log")).unwrap_or_default();
        audit
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.contains(path_part))
            })
            .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
            .collect()
    }
}

async fn list(config: HttpConfig) -> listwatch_client::Result<usize> {
    let lw = HttpListerWatcher::new(config, PODS)?;
    Ok(lw.list(&ListRequest::default()).await?.items.len())
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs kubectl"]
async fn every_credential_kind_works_against_the_tls_apiserver() {
    let c = Cluster::start();
    let url = c.server.url.clone();

    // No credentials: refused, never served as someone.
    let anon = list(HttpConfig::new(&url).unwrap().ca_pem(c.ca())).await;
    assert!(
        matches!(
            anon.as_ref().map_err(listwatch_client::Error::code),
            Err(Some(401 | 403))
        ),
        "{anon:?}"
    );

    // A static token.
    let token = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(c.ca())
        .bearer_token("root-token");
    assert_eq!(list(token.clone()).await.unwrap(), 1);
    let wrong = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(c.ca())
        .bearer_token("nope");
    assert_eq!(list(wrong).await.unwrap_err().code(), Some(401));

    // Impersonation: root acting as alice (no grants) is refused as alice; acting as alice
    // in system:masters is served.
    let as_alice = token.clone().impersonate(Impersonate {
        user: "alice".into(),
        ..Impersonate::default()
    });
    let e = list(as_alice).await.unwrap_err();
    assert_eq!(e.code(), Some(403), "{e}");
    assert!(e.to_string().contains(r#"User "alice""#), "{e}");
    let as_master = token.clone().impersonate(Impersonate {
        user: "alice".into(),
        groups: vec!["system:masters".into()],
        ..Impersonate::default()
    });
    assert_eq!(list(as_master).await.unwrap(), 1);
    // alice herself may not impersonate.
    let alice = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(c.ca())
        .bearer_token("alice-token")
        .impersonate(Impersonate {
            user: "root".into(),
            ..Impersonate::default()
        });
    assert_eq!(list(alice).await.unwrap_err().code(), Some(403));

    // The admin client certificate, from the generated kubeconfig.
    let admin = HttpConfig::from_kubeconfig(&c.path("pki/admin.kubeconfig")).unwrap();
    assert!(admin.client_identity_pem.is_some());
    assert_eq!(list(admin).await.unwrap(), 1);

    // A KUBECONFIG list: the cluster (relative CA file) in one file, the user in another;
    // a missing file and a later file's conflicting cluster are ignored, as by kubectl.
    let a = c.path("kc-a");
    let b = c.path("kc-b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::copy(c.path("pki/ca.crt"), a.join("ca.crt")).unwrap();
    std::fs::write(
        a.join("config"),
        format!(
            "current-context: lw\ncontexts: [{{name: lw, context: {{cluster: lw, user: root, namespace: lw}}}}]\nclusters: [{{name: lw, cluster: {{server: \"{url}\", certificate-authority: ca.crt}}}}]\n"
        ),
    )
    .unwrap();
    std::fs::write(b.join("token"), "root-token\n").unwrap();
    std::fs::write(
        b.join("config"),
        "current-context: elsewhere\nclusters: [{name: lw, cluster: {server: \"https://192.0.2.1:1\"}}]\nusers: [{name: root, user: {tokenFile: token}}]\n",
    )
    .unwrap();
    let merged =
        HttpConfig::from_kubeconfigs(&[c.path("missing"), a.join("config"), b.join("config")])
            .unwrap();
    assert_eq!(merged.default_namespace.as_deref(), Some("lw"));
    assert_eq!(list(merged).await.unwrap(), 1);

    // tls-server-name: the certificate is checked against it, not the URL's host.
    let named = token.clone().tls_server_name("kubernetes.default.svc");
    assert_eq!(list(named).await.unwrap(), 1);
    let misnamed = token
        .clone()
        .tls_server_name("not-in-the-certificate.example");
    let e = list(misnamed).await.unwrap_err();
    assert!(
        format!("{e:?}").to_lowercase().contains("certificate"),
        "{e:?}"
    );

    // An exec plugin: its first token is stale (401), so it runs again at once; then the
    // credential is cached (the plugin ran twice for four lists).
    let runs = c.path("exec-runs");
    let plugin = script(
        c.dir.path(),
        "plugin.sh",
        &format!(
            r#"echo x >> {runs}; n=$(wc -l < {runs} | tr -d ' ')
if [ "$n" = 1 ]; then t=stale-token; else t=root-token; fi
printf '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"%s","expirationTimestamp":"2999-01-01T00:00:00Z"}}}}' "$t""#,
            runs = runs.display()
        ),
    );
    let exec = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(c.ca())
        .exec(ExecConfig {
            command: plugin.to_string_lossy().into_owned(),
            args: vec![],
            env: vec![],
            api_version: "client.authentication.k8s.io/v1".into(),
            interactive_mode: Some("Never".into()),
            cluster: None,
        });
    let lw = HttpListerWatcher::new(exec, PODS).unwrap();
    for _ in 0..4 {
        assert_eq!(
            lw.list(&ListRequest::default()).await.unwrap().items.len(),
            1
        );
    }
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);

    // In-cluster: token, CA and namespace files, service host and port.
    let sa = c.path("sa");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), "root-token").unwrap();
    std::fs::copy(c.path("pki/ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("namespace"), "lw\n").unwrap();
    let incluster = HttpConfig::in_cluster_from("127.0.0.1", c.port(), &sa).unwrap();
    assert_eq!(incluster.default_namespace.as_deref(), Some("lw"));
    assert_eq!(list(incluster).await.unwrap(), 1);
    assert!(HttpConfig::in_cluster_from("", "", &sa).is_err());

    // proxy-url: the TLS connection tunnels through an HTTP CONNECT proxy.
    let (proxy, connects) = connect_proxy().await;
    let proxied = token.clone().proxy_url(proxy);
    assert_eq!(list(proxied).await.unwrap(), 1);
    assert_eq!(
        connects.lock().unwrap().as_slice(),
        [format!("CONNECT {} HTTP/1.1", c.server.addr)]
    );

    // A rotated ServiceAccount token file: the client keeps working when the file gets a
    // new token and the old one stops being accepted (re-read on the 401).
    for sa in ["one", "two"] {
        run_ok(c.admin().args(["create", "serviceaccount", sa, "-n", "lw"]));
    }
    run_ok(c.admin().args([
        "create",
        "rolebinding",
        "sa-admin",
        "-n",
        "lw",
        "--clusterrole",
        "cluster-admin",
        "--serviceaccount",
        "lw:one",
        "--serviceaccount",
        "lw:two",
    ]));
    let t1 = run_ok(c.admin().args(["create", "token", "one", "-n", "lw"]));
    let t2 = run_ok(c.admin().args(["create", "token", "two", "-n", "lw"]));
    let file = c.path("sa-token");
    std::fs::write(&file, t1.trim()).unwrap();
    let rotating = HttpListerWatcher::new(
        HttpConfig::new(&url)
            .unwrap()
            .ca_pem(c.ca())
            .bearer_token_file(&file),
        PODS,
    )
    .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while rotating.list(&ListRequest::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the binding never took effect");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    std::fs::write(&file, t2.trim()).unwrap();
    run_ok(
        c.admin()
            .args(["delete", "serviceaccount", "one", "-n", "lw"]),
    );
    let old = HttpConfig::new(&url)
        .unwrap()
        .ca_pem(c.ca())
        .bearer_token(t1.trim());
    let deadline = Instant::now() + PATIENCE;
    while list(old.clone()).await.is_ok() {
        assert!(Instant::now() < deadline, "the old token is still accepted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The cached token is the old one (its 50 s period has not passed): 401, re-read, ok.
    assert_eq!(
        rotating
            .list(&ListRequest::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let users = c.audited_users(PODS);
    assert!(
        users.iter().any(|u| u == "system:serviceaccount:lw:one")
            && users
                .last()
                .is_some_and(|u| u == "system:serviceaccount:lw:two"),
        "{users:?}"
    );
}

/// A one-shot HTTP CONNECT proxy on loopback; returns its URL and the CONNECT lines seen.
async fn connect_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    connect_proxy_to(None).await
}

/// An HTTP CONNECT proxy on loopback that connects every tunnel to `upstream` (or else to
/// the target asked for): it knows where a name the client cannot resolve is.
async fn connect_proxy_to(upstream: Option<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let log = Arc::clone(&log);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let Ok(b) = client.read_u8().await else {
                        return;
                    };
                    head.push(b);
                }
                let head = String::from_utf8(head).unwrap();
                let line = head.lines().next().unwrap().to_owned();
                let target = line.split_whitespace().nth(1).unwrap().to_owned();
                log.lock().unwrap().push(line);
                let target = upstream.unwrap_or(target);
                let mut upstream = tokio::net::TcpStream::connect(target).await.unwrap();
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                tokio::io::copy_bidirectional(&mut client, &mut upstream)
                    .await
                    .ok();
            });
        }
    });
    (url, seen)
}

/// With no CA configured, https trusts the system's roots (client-go's default): a server
/// whose CA is not among them is refused, and trusted once it is (`SSL_CERT_FILE`, read
/// by the system-roots loader, in a child process so this process's environment stays
/// untouched).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs kubectl"]
async fn with_no_ca_the_system_roots_are_trusted() {
    if let Ok(url) = std::env::var("LW_SYSTEM_ROOTS_URL") {
        // The child: SSL_CERT_FILE names the cluster's CA.
        let config = HttpConfig::new(url).unwrap().bearer_token("root-token");
        assert_eq!(list(config).await.unwrap(), 1);
        return;
    }
    let c = Cluster::start();
    let config = HttpConfig::new(&c.server.url)
        .unwrap()
        .bearer_token("root-token");
    let e = list(config).await.unwrap_err();
    assert!(
        format!("{e:?}").to_lowercase().contains("certificate"),
        "{e:?}"
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_name(module_path!(), "with_no_ca_the_system_roots_are_trusted").as_str(),
            "--include-ignored",
            "--nocapture",
        ])
        .env("LW_SYSTEM_ROOTS_URL", &c.server.url)
        .env("SSL_CERT_FILE", c.path("pki/ca.crt"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Without a kubeconfig `proxy-url` the client takes its proxy from the environment as
/// client-go's transports do (`HTTPS_PROXY`, a value without a scheme being `http://`;
/// `NO_PROXY`), and a `proxy-url` wins over it. The server is addressed as
/// `kubernetes.default.svc` (a name in its certificate that is not loopback, which is never
/// proxied); only the proxy knows where that is. The environment is set for child
/// processes only, so this process's stays untouched.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs kubectl"]
async fn the_proxy_comes_from_the_environment_unless_the_kubeconfig_names_one() {
    if let Ok(url) = std::env::var("LW_ENV_PROXY_URL") {
        // The child: lists through whatever the environment (and LW_*) say.
        let ca = std::fs::read(std::env::var("LW_ENV_PROXY_CA").unwrap()).unwrap();
        let mut config = HttpConfig::new(url)
            .unwrap()
            .bearer_token("root-token")
            .ca_pem(ca);
        if let Ok(p) = std::env::var("LW_ENV_PROXY_KUBECONFIG_PROXY") {
            config = config.proxy_url(p);
        }
        let result = list(config).await;
        if std::env::var("LW_ENV_PROXY_EXPECT").unwrap() == "ok" {
            assert_eq!(result.unwrap(), 1);
        }
        return;
    }
    let c = Cluster::start();
    let (proxy, connects) = connect_proxy_to(Some(c.server.addr.clone())).await;
    let port = c.port().to_owned();
    let url = format!("https://kubernetes.default.svc:{port}");
    let ca = c.path("pki/ca.crt");
    let child = |vars: &[(&str, &str)]| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            common::test_name(
                module_path!(),
                "the_proxy_comes_from_the_environment_unless_the_kubeconfig_names_one",
            )
            .as_str(),
            "--include-ignored",
            "--nocapture",
        ]);
        for v in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "NO_PROXY",
            "no_proxy",
            "REQUEST_METHOD",
        ] {
            cmd.env_remove(v);
        }
        cmd.env("LW_ENV_PROXY_URL", &url)
            .env("LW_ENV_PROXY_CA", &ca);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{vars:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let tunnels = || connects.lock().unwrap().clone();
    let expected = format!("CONNECT kubernetes.default.svc:{port} HTTP/1.1");

    // HTTPS_PROXY, here without a scheme (http:// is assumed, as Go does).
    let authority = proxy.trim_start_matches("http://");
    child(&[("LW_ENV_PROXY_EXPECT", "ok"), ("HTTPS_PROXY", authority)]);
    assert_eq!(tunnels(), std::slice::from_ref(&expected));
    // The lower-case variable, when the upper-case one is empty.
    child(&[
        ("LW_ENV_PROXY_EXPECT", "ok"),
        ("HTTPS_PROXY", ""),
        ("https_proxy", &proxy),
    ]);
    assert_eq!(tunnels().len(), 2);
    // NO_PROXY naming the server's domain: a direct connection (which cannot find
    // kubernetes.default.svc here); the proxy sees nothing.
    child(&[
        ("LW_ENV_PROXY_EXPECT", "any"),
        ("HTTPS_PROXY", &proxy),
        ("NO_PROXY", "example.com,.svc"),
    ]);
    assert_eq!(tunnels().len(), 2, "NO_PROXY was not honoured");
    // A kubeconfig proxy-url wins over the environment's (here a dead port).
    child(&[
        ("LW_ENV_PROXY_EXPECT", "ok"),
        ("HTTPS_PROXY", "http://127.0.0.1:1"),
        ("LW_ENV_PROXY_KUBECONFIG_PROXY", &proxy),
    ]);
    assert_eq!(tunnels(), [expected.clone(), expected.clone(), expected]);
}

/// A client certificate for `user` in `system:masters`, signed by the cluster's CA (the
/// `--pki-dir` CA key): (certificate PEM, key PEM).
fn client_cert(c: &Cluster, user: &str) -> (String, String) {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    };
    let ca_key =
        KeyPair::from_pem(&std::fs::read_to_string(c.path("pki/ca.key")).unwrap()).unwrap();
    // The issuer as `--pki-dir` made the CA: its subject, and key identifiers derived from
    // its key the same way.
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "listwatch-ca");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, user);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Waits until the audit log holds `n` completed requests to `path_part` by users starting
/// with `prefix`; returns those users in order (one per request: the `ResponseComplete`
/// event).
async fn audited(c: &Cluster, path_part: &str, prefix: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let audit = std::fs::read_to_string(c.path("audit.log")).unwrap_or_default();
        let users: Vec<String> = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["requestURI"]
                        .as_str()
                        .is_some_and(|u| u.contains(path_part))
            })
            .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
            .filter(|u| u.starts_with(prefix))
            .collect();
        if users.len() >= n || Instant::now() >= deadline {
            return users;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Exec plugins against the TLS apiserver: one that returns client certificates (v1), the
/// first already expired, so the second run's certificate replaces it — the client presents
/// each in turn (its connector rebuilt) and caches the second; and a v1beta1 plugin that
/// returns a token and is told the cluster (`provideClusterInfo`).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs kubectl"]
async fn exec_plugins_return_client_certificates_and_v1beta1_tokens() {
    let c = Cluster::start();
    let url = c.server.url.clone();
    for (n, user) in [(1, "exec-one"), (2, "exec-two")] {
        let (cert, key) = client_cert(&c, user);
        let expiry = if n == 1 {
            "2000-01-01T00:00:00Z"
        } else {
            "2999-01-01T00:00:00Z"
        };
        let cred = serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {
                "clientCertificateData": cert,
                "clientKeyData": key,
                "expirationTimestamp": expiry,
            },
        });
        std::fs::write(c.path(&format!("cred{n}.json")), cred.to_string()).unwrap();
    }
    let runs = c.path("cert-runs");
    let plugin = script(
        c.dir.path(),
        "cert-plugin.sh",
        &format!(
            r#"echo x >> {runs}; n=$(wc -l < {runs} | tr -d ' ')
if [ "$n" -gt 2 ]; then n=2; fi
cat {dir}/cred$n.json"#,
            runs = runs.display(),
            dir = c.dir.path().display()
        ),
    );
    let exec = |command: &Path, api_version: &str, mode: Option<&str>| ExecConfig {
        command: command.to_string_lossy().into_owned(),
        args: vec![],
        env: vec![],
        api_version: api_version.into(),
        interactive_mode: mode.map(str::to_owned),
        cluster: None,
    };
    let config = HttpConfig::new(&url).unwrap().ca_pem(c.ca()).exec(exec(
        &plugin,
        "client.authentication.k8s.io/v1",
        Some("Never"),
    ));
    let lw = HttpListerWatcher::new(config, PODS).unwrap();
    for _ in 0..4 {
        assert_eq!(
            lw.list(&ListRequest::default()).await.unwrap().items.len(),
            1
        );
    }
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap().lines().count(),
        2,
        "run once per certificate: the second is cached until it expires"
    );
    assert_eq!(
        audited(&c, PODS, "exec-", 4).await,
        ["exec-one", "exec-two", "exec-two", "exec-two"],
        "each certificate was presented, the new one on new connections"
    );

    // v1beta1: no interactiveMode needed; KUBERNETES_EXEC_INFO names the version and the
    // cluster.
    let info = c.path("exec-info");
    let plugin = script(
        c.dir.path(),
        "beta-plugin.sh",
        &format!(
            r#"printf '%s' "$KUBERNETES_EXEC_INFO" > {info}
echo '{{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{{"token":"root-token"}}}}'"#,
            info = info.display()
        ),
    );
    let mut beta = exec(&plugin, "client.authentication.k8s.io/v1beta1", None);
    beta.cluster = Some(listwatch_client::ExecCluster {
        server: url.clone(),
        ca_pem: Some(c.ca()),
        tls_server_name: None,
        proxy_url: None,
    });
    let config = HttpConfig::new(&url).unwrap().ca_pem(c.ca()).exec(beta);
    assert_eq!(list(config).await.unwrap(), 1);
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info).unwrap()).unwrap();
    assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1beta1");
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["spec"]["cluster"]["server"], url.as_str());
    assert_eq!(audited(&c, PODS, "root", 1).await, ["root"]);
}

/// What the environment configures, read in child processes (this process's environment
/// stays untouched): `$KUBECONFIG` as a list (a missing file, the user and context in one,
/// the cluster in another) by `from_default_kubeconfig`, and `KUBERNETES_SERVICE_HOST` /
/// `_PORT` by `in_cluster_with_dir` and `in_cluster`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs kubectl"]
async fn kubeconfig_and_in_cluster_settings_come_from_the_environment() {
    if let Ok(what) = std::env::var("LW_ENV_CHILD") {
        match what.as_str() {
            "kubeconfig" => {
                let config = HttpConfig::from_default_kubeconfig().unwrap();
                assert_eq!(config.default_namespace.as_deref(), Some("lw"));
                assert_eq!(list(config).await.unwrap(), 1);
            }
            "in-cluster" => {
                let sa = PathBuf::from(std::env::var("LW_SA_DIR").unwrap());
                let config = HttpConfig::in_cluster_with_dir(&sa).unwrap();
                let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap();
                assert_eq!(config.base_url, format!("https://127.0.0.1:{port}"));
                assert_eq!(config.default_namespace.as_deref(), Some("lw"));
                assert_eq!(list(config).await.unwrap(), 1);
                // The standard mount: the environment was read (no "not in a cluster"),
                // then its token file is looked for there.
                match HttpConfig::in_cluster() {
                    Ok(c) => assert_eq!(c.base_url, format!("https://127.0.0.1:{port}")),
                    Err(e) => assert!(
                        e.to_string()
                            .contains(listwatch_client::http::SERVICE_ACCOUNT_DIR),
                        "{e}"
                    ),
                }
            }
            "no-cluster" => {
                let sa = PathBuf::from(std::env::var("LW_SA_DIR").unwrap());
                let e = HttpConfig::in_cluster_with_dir(&sa).unwrap_err();
                assert!(e.to_string().contains("not in a cluster"), "{e}");
            }
            other => panic!("unknown child {other}"),
        }
        return;
    }
    let c = Cluster::start();
    let dir = c.path("env");
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(
        dir.join("user.yaml"),
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u, namespace: lw}\nusers:\n- name: u\n  user: {token: root-token}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster: {{server: \"{}\", certificate-authority: ../pki/ca.crt}}\n",
            c.server.url
        ),
    )
    .unwrap();
    let sa = c.path("sa-env");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), "root-token").unwrap();
    std::fs::copy(c.path("pki/ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("namespace"), "lw\n").unwrap();
    let list_path = std::env::join_paths([
        dir.join("missing.yaml"),
        dir.join("user.yaml"),
        dir.join("cluster.yaml"),
    ])
    .unwrap();
    let child = |what: &str, vars: &[(&str, &std::ffi::OsStr)]| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            common::test_name(
                module_path!(),
                "kubeconfig_and_in_cluster_settings_come_from_the_environment",
            )
            .as_str(),
            "--include-ignored",
            "--nocapture",
        ]);
        for v in [
            "KUBECONFIG",
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
            "HTTPS_PROXY",
            "https_proxy",
            "NO_PROXY",
            "no_proxy",
        ] {
            cmd.env_remove(v);
        }
        cmd.env("LW_ENV_CHILD", what)
            .env("LW_SA_DIR", &sa)
            .env("HOME", dir.join("home"));
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{what}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    child("kubeconfig", &[("KUBECONFIG", list_path.as_os_str())]);
    let port = std::ffi::OsString::from(c.port());
    child(
        "in-cluster",
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".as_ref()),
            ("KUBERNETES_SERVICE_PORT", port.as_os_str()),
        ],
    );
    child("no-cluster", &[]);
}
