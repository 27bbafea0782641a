//! Issue 28 (red team): `listwatch-testenv --kubeconfig PATH` with a PATH that is a link (to
//! a file another user owns, who would then hold the admin credential) is refused before
//! the server starts, and the link's target is left as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

#[cfg(unix)]
#[test]
fn the_cli_refuses_a_kubeconfig_path_that_is_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("theirs");
    std::fs::write(&target, b"their data").unwrap();
    let link = dir.path().join("kubeconfig");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch-testenv"))
        .arg("--kubeconfig")
        .arg(&link)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(out.stdout.is_empty(), "no KUBECONFIG= line");
    assert_eq!(std::fs::read(&target).unwrap(), b"their data");
}
