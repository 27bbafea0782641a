//! Running the Python `kubernetes` client from a test: which interpreter, and a script run
//! to its end under a deadline.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::PATIENCE;

/// The Python to use: `$LISTWATCH_PYTHON` (set by `cargo xtask test`), else `python3`.
pub fn python() -> String {
    std::env::var("LISTWATCH_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs Python with `args` to its end, killing it (and panicking with its output) after
/// `limit`.
pub fn run_script(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(python())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} still running after {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Runs `python -c script args..` (at most twice [`PATIENCE`]) and returns its stdout;
/// panics with stdout and stderr unless it exits 0.
pub fn python_ok(script: &str, args: &[&str]) -> String {
    let mut all = vec!["-c", script];
    all.extend_from_slice(args);
    let out = run_script(&all, 2 * PATIENCE);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
