//! The CLI mode: the kubeconfig it prints (used by kubectl), stopping when stdin closes or
//! on SIGTERM, and inputs refused at once (devices, FIFOs, TLS or address flags).

use super::*;

/// The CLI mode, for other languages' tests: the `KUBECONFIG=` line, kubectl using it, and
/// the server gone once stdin closes.
#[test]
#[ignore = "needs kubectl"]
fn the_cli_prints_a_kubeconfig_kubectl_uses_and_stops_when_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let crd = serde_json::to_string(&Widget::crd()).unwrap();
    std::fs::write(dir.path().join("widget.json"), crd).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-testenv"))
        .arg("--crds")
        .arg(dir.path())
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
    let cache = dir.path().join("kubectl-cache");
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", &kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut p = c.spawn().expect("kubectl runs");
        if let Some(s) = stdin {
            p.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        }
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    kubectl(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {color: green}\n",
        ),
    );
    let table = kubectl(&["get", "wd"], None);
    assert!(
        table.contains("COLOR") && table.contains("green"),
        "{table}"
    );
    drop(child.stdin.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("listwatch-testenv did not stop after stdin closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
}

/// Red-team T4 and T5: inputs that would hang the start or serve an unusable kubeconfig are
/// errors at once.
#[tokio::test]
async fn devices_fifos_and_tls_or_address_flags_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("crds.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for path in [std::path::PathBuf::from("/dev/zero"), fifo] {
        let started = tokio::time::timeout(
            Duration::from_secs(30),
            TestEnv::builder().crds_from(&path).start(),
        )
        .await
        .expect("refused at once, not read forever");
        let err = started.unwrap_err();
        assert!(
            matches!(err, Error::Manifest { ref source, .. } if source.to_string().contains("not a regular file")),
            "{}: {err}",
            path.display()
        );
    }
    let pki = dir.path().join("pki");
    for flags in [
        vec!["--pki-dir".to_owned(), pki.display().to_string()],
        vec!["--bind".to_owned(), "127.0.0.1:18080".to_owned()],
    ] {
        let err = flags
            .iter()
            .fold(TestEnv::builder(), |b, f| b.arg(f.clone()))
            .start()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Flags(ref m) if m.contains("not supported")),
            "{flags:?}: {err}"
        );
    }
}

/// Red-team T1 and T2: the CLI ends on SIGTERM while its stdin is still open (it used to stop
/// the server and then hang in the runtime's shutdown, waiting for the blocked stdin read),
/// and bytes on stdin that are not UTF-8 do not count as its end.
#[test]
fn the_cli_exits_on_sigterm_with_stdin_open_and_ignores_what_stdin_sends() {
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
    let server = std::fs::read_to_string(&kubeconfig).unwrap();
    let addr = server
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .unwrap()
        .to_owned();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\xff\xfe not utf-8\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "still serving after non-UTF-8 input"
    );
    assert!(
        std::net::TcpStream::connect(&addr).is_ok(),
        "still listening on {addr}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("listwatch-testenv did not exit after SIGTERM with its stdin open");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    drop(stdin);
}

/// A script's background job (`listwatch-testenv … &`) has `/dev/null` on stdin: the CLI
/// serves until a signal instead of stopping as soon as it printed its kubeconfig (it used to
/// read the end of `/dev/null` at once, stop, and remove the kubeconfig it had just printed).
#[test]
fn the_cli_with_dev_null_on_stdin_serves_until_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-testenv"))
        .stdin(Stdio::null())
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
    // A harness reads the kubeconfig and uses the server, as a test would.
    let read = std::fs::read_to_string(&kubeconfig);
    let served = read
        .as_ref()
        .ok()
        .map(|_| get_with_kubeconfig(Path::new(&kubeconfig), "/api/v1/namespaces/default"));
    let alive = child.try_wait().unwrap().is_none();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(
        served.as_ref().is_some_and(Result::is_ok),
        "the server was gone once its kubeconfig was printed: kubeconfig {read:?}, answer {served:?}"
    );
    assert!(
        alive && killed.success(),
        "listwatch-testenv exited by itself"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("listwatch-testenv did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
}
