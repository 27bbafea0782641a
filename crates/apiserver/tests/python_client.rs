//! The Python `kubernetes` client against the built server (driven by
//! tests/python/client_checks.py): list, watch from a resource version, 410 handling, a
//! percent-encoded name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::Server;

/// The Python to use: `$LISTWATCH_PYTHON` (set by `cargo xtask test`), else `python3`.
fn python() -> String {
    std::env::var("LISTWATCH_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Panics unless the Python client is importable: `cargo xtask test` installs it.
fn require_python_client() {
    let ok = Command::new(python())
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{} cannot import the `kubernetes` module: `cargo xtask test` installs it \
         (or pip install kubernetes)",
        python()
    );
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_lists_watches_and_handles_410() {
    require_python_client();
    let server = Server::start(common::SHORT_HISTORY);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_checks.py");
    let out = Command::new(python())
        .arg(script)
        .arg(&server.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client checks passed"));
}
