//! Child processes with deadlines: each runs in a process group of its own, which is killed
//! whole (cargo's rustc children, a test's shells) when its deadline passes or its owner
//! drops it.
//!
//! Invariant: no wait here is unbounded; a [`Group`] never outlives its owner.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A child process leading its own process group.
pub struct Group {
    child: Child,
    done: bool,
}

impl Group {
    pub fn spawn(mut cmd: Command) -> Result<Self, String> {
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
        Ok(Self { child, done: false })
    }

    pub fn take_stdout(&mut self) -> Result<ChildStdout, String> {
        self.child.stdout.take().ok_or_else(|| "no stdout".into())
    }

    /// Runs `cmd` with inherited output; fails on a non-zero exit or past `deadline`.
    pub fn run(what: &str, mut cmd: Command, deadline: Instant) -> Result<(), String> {
        eprintln!("$ {cmd:?}");
        cmd.stdin(Stdio::null());
        let mut g = Self::spawn(cmd)?;
        let status = g.wait_until(deadline, what)?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{what} exited with {status}"))
        }
    }

    /// Runs `cmd` and returns its stdout (stderr inherited); fails as [`Group::run`].
    pub fn run_capturing(
        what: &str,
        mut cmd: Command,
        deadline: Instant,
    ) -> Result<String, String> {
        eprintln!("$ {cmd:?}");
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut g = Self::spawn(cmd)?;
        let mut stdout = g.take_stdout()?;
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let status = g.wait_until(deadline, what)?;
        let out = reader.join().unwrap_or_default();
        if status.success() {
            Ok(out)
        } else {
            Err(format!("{what} exited with {status}"))
        }
    }

    /// Runs `cmd` with its stdout and stderr copied to ours and to `log`; returns its status
    /// and stdout. Fails only past `deadline` (a non-zero exit is the caller's to judge).
    pub fn run_teed(
        mut cmd: Command,
        deadline: Instant,
        log: &Path,
    ) -> Result<(ExitStatus, String), String> {
        let file = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let file = Arc::new(Mutex::new(file));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut g = Self::spawn(cmd)?;
        let stdout = g.take_stdout()?;
        let stderr = g.child.stderr.take().ok_or("no stderr")?;
        let out = tee(stdout, Arc::clone(&file), true);
        let err = tee(stderr, file, false);
        let status = g.wait_until(deadline, "the test binary")?;
        let text = out.join().unwrap_or_default();
        let _ = err.join();
        Ok((status, text))
    }

    /// Waits for the child until `deadline`, then kills its group and fails. Whatever the
    /// outcome, what is left of the group (a grandchild holding a pipe) is killed too.
    fn wait_until(&mut self, deadline: Instant, what: &str) -> Result<ExitStatus, String> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.done = true;
                    kill_group(self.child.id());
                    return Ok(status);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("{what}: {e}")),
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("{what} overran its deadline and was killed"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the whole group and reaps the leader (idempotent).
    pub fn kill(&mut self) {
        if !self.done {
            kill_group(self.child.id());
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.done = true;
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGKILL to the process group `pgid` (best effort: it may be gone already).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Copies `from` line by line to our stderr and to `log`, keeping the lines when `keep`.
fn tee(from: impl Read + Send + 'static, log: Arc<Mutex<File>>, keep: bool) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept = String::new();
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{line}");
            }
            if keep {
                kept.push_str(&line);
                kept.push('\n');
            }
        }
        kept
    })
}
