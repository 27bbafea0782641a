//! Only the environment's credential is served: a kubeconfig without it, curl without it and
//! a client of another environment are refused.

use super::*;

/// A kubeconfig trusting the environment's CA with no credential: what another local user
/// who can dial the port (but not read the environment's files) can do at best.
fn anonymous_kubeconfig(env: &TestEnv, dir: &Path) -> std::path::PathBuf {
    use base64::Engine;
    let path = dir.join("anonymous.kubeconfig");
    let ca = base64::engine::general_purpose::STANDARD.encode(env.ca_pem());
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  \
             context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            env.url()
        ),
    )
    .unwrap();
    path
}

/// Red team rt28, finding 4: the environment served plain HTTP without authentication, so
/// every local user of the machine was cluster-admin on it. Now: TLS with the environment's
/// own CA, the admin certificate as the only credential, anonymous requests 401, and the
/// kubeconfig readable by its owner only.
#[tokio::test]
async fn only_the_environments_credential_is_served() {
    let env = TestEnv::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let addr = env.addr();
    // Plain HTTP, as `curl http://127.0.0.1:PORT/api/v1/secrets` by another user.
    let plain = listwatch_client::HttpClient::new(
        listwatch_client::HttpConfig::new(format!("http://{addr}")).unwrap(),
    )
    .unwrap();
    let answer = plain.get("/api/v1/namespaces/default/secrets").await;
    assert!(
        answer.is_err(),
        "served over plain HTTP without a credential: {answer:?}"
    );
    // TLS trusting the CA, without a credential: 401, for reads, writes and /healthz alike.
    let anonymous = anonymous_kubeconfig(&env, dir.path());
    let client = listwatch_client::HttpClient::new(
        listwatch_client::HttpConfig::from_kubeconfig(&anonymous).unwrap(),
    )
    .unwrap();
    for answer in [
        client.get("/api/v1/namespaces/default/secrets").await.map(|_| ()),
        client
            .create(
                "/api/v1/namespaces/default/secrets",
                &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
            )
            .await
            .map(|_| ()),
        client.get("/healthz").await.map(|_| ()),
    ] {
        let err = answer.expect_err("an anonymous request was served");
        assert!(err.to_string().contains("401"), "{err}");
    }
    // The environment's own clients work, with its kubeconfig too.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kube_client().unwrap(), "default");
    assert!(secrets.list(&ListParams::default()).await.is_ok());
    assert!(
        env.client()
            .unwrap()
            .get("/api/v1/namespaces/default/secrets")
            .await
            .unwrap()
            .is_some()
    );
    let path = env.kubeconfig_path().to_owned();
    let text = tokio::task::spawn_blocking(move || {
        get_with_kubeconfig(&path, "/api/v1/namespaces/default")
    })
    .await
    .unwrap();
    assert!(text.is_ok(), "{text:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let kubeconfig = env.kubeconfig_path();
        assert_eq!(
            mode(kubeconfig),
            0o600,
            "the kubeconfig holds the admin key"
        );
        assert_eq!(
            mode(kubeconfig.parent().unwrap()),
            0o700,
            "the environment's directory"
        );
    }
}

/// The same for a real client: kubectl with the environment's kubeconfig works, curl
/// without its credential gets 401 (library and CLI mode).
#[test]
#[ignore = "needs kubectl and curl"]
fn kubectl_with_the_kubeconfig_works_and_curl_without_it_is_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(TestEnv::start()).unwrap();
    let check = |kubeconfig: &Path, url: &str| {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(["get", "namespaces", "-o", "name"])
            .output()
            .unwrap();
        let names = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && names.contains("namespace/default"),
            "kubectl: {names} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for args in [
            vec![
                "-sk".to_owned(),
                format!("{url}/api/v1/namespaces/default/secrets"),
            ],
            vec![
                "-sk".to_owned(),
                "-XPOST".to_owned(),
                "-HContent-Type: application/json".to_owned(),
                "-d{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"s\"}}"
                    .to_owned(),
                format!("{url}/api/v1/namespaces/default/secrets"),
            ],
            vec![
                "-s".to_owned(),
                format!(
                    "{}/api/v1/namespaces/default/secrets",
                    url.replace("https://", "http://")
                ),
            ],
        ] {
            let out = Command::new("curl")
                .args(["-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30"])
                .args(&args)
                .output()
                .unwrap();
            let code = String::from_utf8_lossy(&out.stdout).into_owned();
            if args[0] == "-s" {
                // Plain HTTP to the TLS port: no HTTP answer at all.
                assert!(!code.starts_with('2'), "plain HTTP was served: {code}");
            } else {
                assert_eq!(code, "401", "curl {args:?}");
            }
        }
    };
    check(env.kubeconfig_path(), &env.url());
    drop(env);
    // The CLI mode.
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-testenv"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let kubeconfig = line
        .trim()
        .strip_prefix("KUBECONFIG=")
        .expect(&line)
        .to_owned();
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_owned();
    check(Path::new(&kubeconfig), &url);
    drop(child.stdin.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("listwatch-testenv did not stop after stdin closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client kept after its environment stops must not reach a later one (which may get the
/// same port): each environment has its own CA and admin certificate, so a client of one,
/// pointed at another's address (as if the port were reused), fails the TLS handshake.
#[tokio::test]
async fn a_client_of_one_environment_cannot_use_another() {
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.ca_pem(), b.ca_pem(), "each environment has its own CA");
    let dir = tempfile::tempdir().unwrap();
    // A's kubeconfig (its CA, its admin certificate) at B's address.
    let stale = a.kubeconfig_yaml().replace(&a.url(), &b.url());
    let client = listwatch_client::HttpClient::new(
        listwatch_client::HttpConfig::from_kubeconfig_yaml(&stale, dir.path()).unwrap(),
    )
    .unwrap();
    let answer = client.get("/api/v1/namespaces/default").await;
    let err = answer.expect_err("a client of another environment was served");
    assert!(err.to_string().contains("connection failed"), "{err}");
    // B's own client is served.
    assert!(
        b.client()
            .unwrap()
            .get("/api/v1/namespaces/default")
            .await
            .unwrap()
            .is_some()
    );
}
