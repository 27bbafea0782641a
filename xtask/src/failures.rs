//! The failures of a CI test run, said again at its end.
//!
//! A CI log is often read from its tail only (the last screen of a run of thousands of
//! lines), and libtest prints each test binary's failures in the middle of it, followed by
//! the other binaries' output and the Python e2e suite. `run_teed` passes a `cargo test`
//! run's output through unchanged while it keeps, bounded:
//! - the name of every test reported `FAILED`;
//! - the first lines of each failure's captured output (`---- NAME stdout ----` blocks);
//! - cargo's lines about a test binary that died (`process didn't exit successfully`).
//!
//! [`summary`] renders them for the end of the run. Invariant: the output seen by the caller
//! is the child's, byte for byte per line; what is kept is at most `MAX_BLOCKS` blocks of
//! `MAX_BLOCK_LINES` lines (each cut at `MAX_LINE` bytes) and `MAX_NAMES` names.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::Duration;

use crate::Result;

const MAX_NAMES: usize = 200;
const MAX_BLOCKS: usize = 20;
const MAX_BLOCK_LINES: usize = 40;
const MAX_LINE: usize = 400;

#[derive(Default)]
struct Kept {
    names: Vec<String>,
    blocks: Vec<Vec<String>>,
    /// Lines of the block being read, while one is open.
    open: Option<Vec<String>>,
    died: Vec<String>,
}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

fn cut(line: &str) -> String {
    if line.len() <= MAX_LINE {
        return line.to_string();
    }
    let mut end = MAX_LINE;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

impl Kept {
    fn close_block(&mut self) {
        if let Some(block) = self.open.take()
            && self.blocks.len() < MAX_BLOCKS
        {
            self.blocks.push(block);
        }
    }

    fn see(&mut self, line: &str) {
        let trimmed = line.trim_end();
        if let Some(name) = trimmed
            .strip_prefix("test ")
            .and_then(|rest| rest.strip_suffix(" ... FAILED"))
        {
            if self.names.len() < MAX_NAMES {
                self.names.push(cut(name));
            }
            return;
        }
        if trimmed.starts_with("---- ") && trimmed.ends_with(" ----") {
            self.close_block();
            self.open = Some(vec![cut(trimmed)]);
            return;
        }
        if trimmed == "failures:" || trimmed.starts_with("test result:") {
            self.close_block();
            return;
        }
        if let Some(block) = self.open.as_mut()
            && block.len() < MAX_BLOCK_LINES
        {
            block.push(cut(trimmed));
        }
        if trimmed.contains("process didn't exit successfully") && self.died.len() < MAX_NAMES {
            self.died.push(cut(trimmed));
        }
    }
}

fn see(line: &str) {
    if let Ok(mut kept) = KEPT.lock() {
        kept.get_or_insert_with(Kept::default).see(line);
    }
}

/// Copies `from` to `to` line by line, showing each line to the keeper.
fn tee(from: impl Read, mut to: impl Write) {
    let mut reader = BufReader::new(from);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let _ = to.write_all(&buf);
                let _ = to.flush();
                see(&String::from_utf8_lossy(&buf));
            }
        }
    }
}

/// Runs `cmd` like `crate::run`, its stdout and stderr passed through and watched.
pub fn run_teed(cmd: Command) -> Result {
    run_teed_to(
        cmd,
        Box::new(std::io::stdout()),
        Box::new(std::io::stderr()),
    )
}

type Sink = Box<dyn Write + Send>;

fn run_teed_to(mut cmd: Command, out: Sink, err: Sink) -> Result {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut copiers = 0;
    if let Some(o) = child.stdout.take() {
        let done = done_tx.clone();
        thread::spawn(move || {
            tee(o, out);
            let _ = done.send(());
        });
        copiers += 1;
    }
    if let Some(e) = child.stderr.take() {
        let done = done_tx.clone();
        thread::spawn(move || {
            tee(e, err);
            let _ = done.send(());
        });
        copiers += 1;
    }
    drop(done_tx);
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {shown}: {e}"))?;
    // A process a test started and left running (a server, an etcd) holds the pipes open
    // after cargo exits: what it writes later is not waited for.
    for _ in 0..copiers {
        if done_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            eprintln!(
                "xtask ci: a process outlived {shown} with its output open; not waiting for it"
            );
            break;
        }
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} exited with {status}"))
    }
}

/// What the watched runs failed, for the end of the log; empty when nothing failed.
pub fn summary() -> String {
    let Ok(mut guard) = KEPT.lock() else {
        return String::new();
    };
    let Some(kept) = guard.as_mut() else {
        return String::new();
    };
    kept.close_block();
    if kept.names.is_empty() && kept.died.is_empty() {
        return String::new();
    }
    let mut s = String::from("xtask ci: the tests that failed (their output is above):\n");
    for name in &kept.names {
        s.push_str(&format!("  FAILED {name}\n"));
    }
    for line in &kept.died {
        s.push_str(&format!("  {line}\n"));
    }
    for block in &kept.blocks {
        s.push('\n');
        for line in block {
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::Kept;

    #[test]
    fn failed_names_and_their_output_are_kept_and_passing_ones_are_not() {
        let mut k = Kept::default();
        for line in [
            "running 3 tests",
            "test a::ok ... ok",
            "test b::bad ... FAILED",
            "test c::ignored ... ignored",
            "",
            "failures:",
            "",
            "---- b::bad stdout ----",
            "thread 'b::bad' panicked at tests/b.rs:3:5:",
            "assertion failed: x",
            "",
            "failures:",
            "    b::bad",
            "",
            "test result: FAILED. 1 passed; 1 failed",
            "error: test failed, to rerun pass `--test x`",
            "  process didn't exit successfully: `target/debug/deps/y-1` (signal: 6, SIGABRT)",
        ] {
            k.see(line);
        }
        k.close_block();
        assert_eq!(k.names, vec!["b::bad".to_string()]);
        assert_eq!(k.blocks.len(), 1);
        assert_eq!(k.blocks[0][0], "---- b::bad stdout ----");
        assert!(k.blocks[0].iter().any(|l| l == "assertion failed: x"));
        assert!(
            !k.blocks[0]
                .iter()
                .any(|l| l.contains("b::bad") && l.starts_with("    "))
        );
        assert_eq!(k.died.len(), 1);
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut k = Kept::default();
        for i in 0..1000 {
            k.see(&format!("test t{i} ... FAILED"));
            k.see(&format!("---- t{i} stdout ----"));
            for _ in 0..100 {
                k.see(&"é".repeat(1000));
            }
        }
        k.close_block();
        assert_eq!(k.names.len(), super::MAX_NAMES);
        assert_eq!(k.blocks.len(), super::MAX_BLOCKS);
        assert!(k.blocks.iter().all(|b| b.len() <= super::MAX_BLOCK_LINES));
        assert!(
            k.blocks
                .iter()
                .flatten()
                .all(|l| l.len() <= super::MAX_LINE + 3)
        );
    }

    #[test]
    fn a_teed_run_passes_its_status_and_its_failures_reach_the_summary() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            "echo 'test q::broken ... FAILED'; echo '---- q::broken stdout ----'; \
             echo 'boom at q.rs:1'; echo 'failures:'; exit 3",
        ]);
        // Into sinks: a nested CI run must not see these lines as its own failures.
        let r = super::run_teed_to(cmd, Box::new(std::io::sink()), Box::new(std::io::sink()));
        assert!(r.is_err(), "{r:?}");
        let s = super::summary();
        assert!(s.contains("FAILED q::broken"), "{s}");
        assert!(s.contains("boom at q.rs:1"), "{s}");
        let mut ok = std::process::Command::new("sh");
        ok.args(["-c", "echo fine"]);
        let sinks = (Box::new(std::io::sink()), Box::new(std::io::sink()));
        assert!(super::run_teed_to(ok, sinks.0, sinks.1).is_ok());
    }
}
