//! Every shell block of README.md and docs/*.md, run against a fresh server.
//!
//! The conventions doc writers follow (also in docs/doc-tests.md):
//!
//! - Every fenced block names its language in its info string (```` ```sh ````,
//!   ```` ```rust ````, ```` ```yaml ````, ```` ```text ```` …): an unlabelled block is
//!   refused, so that no shell block escapes the test.
//! - Blocks labelled `sh`, `bash`, `shell` or `console` are shell blocks. Each one runs,
//!   unless its info string says `no-run: REASON` (```` ```sh no-run: a benchmark of several
//!   minutes ````); a `no-run` without a reason is refused. Keep those few: a server the
//!   reader runs in the foreground can run in the background with `&` instead.
//! - The runnable blocks of one file run in order in one bash (`set -euo pipefail`, stdin
//!   closed), as a reader types them into one terminal: variables, the working directory
//!   and background processes carry over from one block to the next. The shell starts in
//!   an empty temporary directory; whatever is still running at the end is killed.
//! - Before a file's blocks, one server is started for it (the built binary: embedded store
//!   in memory, plain HTTP on loopback, a free port). Every `127.0.0.1:8080` in a block (the
//!   address a reader's server listens on by default) is replaced by that server's address,
//!   which is also in `$LISTWATCH_ADDR`. A block that starts a server of its own binds
//!   `127.0.0.1:0` and reads the address the server prints.
//! - `PATH` starts with the built `listwatch-apiserver`; `python3` is `$LISTWATCH_PYTHON`
//!   and `etcd` is `$LISTWATCH_ETCD_BIN` when those are set (`cargo xtask test` sets them).
//!   `KUBECONFIG` names a file in the temporary directory (absent until a block writes it),
//!   so no block reads or changes the user's kubeconfig.
//! - `console` blocks: lines starting with `$ ` are the commands (a line ending in `\`
//!   continues onto the next); the other lines are output, shown to the reader, not checked.
//! - A block that fails fails the test with the file, the line that failed and the output
//!   since the block began.
//! - `LISTWATCH_DOC_FILES=docs/a.md,README.md` runs only those files (while writing them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;

/// The languages whose blocks are shell commands.
const SHELL: &[&str] = &["sh", "bash", "shell", "console"];

/// The address the docs show for the reader's server; replaced by the test server's.
const DOC_ADDR: &str = "127.0.0.1:8080";

/// How long one file's blocks may take in all (only a hang reaches it): a base plus a share
/// per block.
fn deadline_for(blocks: usize) -> Duration {
    Duration::from_secs(120) + Duration::from_secs(60) * u32::try_from(blocks).unwrap_or(u32::MAX)
}

/// One fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// The file, relative to the repository root.
    file: String,
    /// The line of the opening fence (1-based).
    line: usize,
    /// The info string's first word.
    lang: String,
    /// The rest of the info string.
    rest: String,
    /// The lines between the fences.
    body: Vec<String>,
}

impl Block {
    fn is_shell(&self) -> bool {
        SHELL.contains(&self.lang.as_str())
    }

    /// `Some(reason)` for a block marked `no-run: REASON` (the reason may be empty: refused
    /// by [`check_labels`]).
    fn no_run(&self) -> Option<&str> {
        let rest = self.rest.trim();
        let after = rest.strip_prefix("no-run")?;
        Some(after.trim_start_matches(':').trim())
    }

    /// The commands, one per body line (output lines of a console block blank), so that line
    /// `i` of the script is line `self.line + 1 + i` of the file.
    fn script(&self, addr: &str) -> String {
        let mut out = String::new();
        let mut continued = false;
        for l in &self.body {
            let cmd = if self.lang != "console" || continued {
                Some(l.as_str())
            } else {
                l.strip_prefix("$ ")
            };
            continued = self.lang == "console" && cmd.is_some() && l.ends_with('\\');
            out.push_str(&cmd.unwrap_or("").replace(DOC_ADDR, addr));
            out.push('\n');
        }
        out
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every docs/*.md (not docs/bench/: data), relative to the root.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The fenced blocks of `file` (CommonMark fences of backticks or tildes, up to three spaces
/// of indent; a fence closes on a line of the same character at least as long).
fn blocks(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let mut out = Vec::new();
    let mut open: Option<(char, usize, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let t = line.trim_start_matches(' ');
        let fence = ['`', '~'].into_iter().find_map(|c| {
            let n = t.chars().take_while(|x| *x == c).count();
            (n >= 3 && indent <= 3).then_some((c, n))
        });
        match (&mut open, fence) {
            (Some((c, n, _)), Some((fc, fnum)))
                if fc == *c && fnum >= *n && t.trim_end().chars().all(|x| x == fc) =>
            {
                let (_, _, b) = open.take().unwrap();
                out.push(b);
            }
            (Some((_, _, b)), _) => b.body.push(line.to_owned()),
            (None, Some((c, n))) => {
                let info = t[n..].trim();
                let (lang, rest) = info.split_once(char::is_whitespace).unwrap_or((info, ""));
                open = Some((
                    c,
                    n,
                    Block {
                        file: file.to_owned(),
                        line: i + 1,
                        lang: lang.to_owned(),
                        rest: rest.to_owned(),
                        body: Vec::new(),
                    },
                ));
            }
            (None, None) => {}
        }
    }
    if let Some((_, _, b)) = open {
        panic!("{}:{}: the fenced block is never closed", b.file, b.line);
    }
    out
}

/// Every block is labelled; every shell block runs or says why not. Returns the problems.
fn check_labels(blocks: &[Block]) -> Vec<String> {
    let mut problems = Vec::new();
    for b in blocks {
        if b.lang.is_empty() {
            problems.push(format!(
                "{}:{}: a fenced block without a language (write ```sh, ```text, ```rust …)",
                b.file, b.line
            ));
        } else if b.is_shell() && b.no_run().is_some_and(str::is_empty) {
            problems.push(format!(
                "{}:{}: `no-run` without a reason (```{} no-run: WHY)",
                b.file, b.line, b.lang
            ));
        } else if !b.is_shell() && b.no_run().is_some() {
            problems.push(format!(
                "{}:{}: `no-run` on a {} block, which is never run",
                b.file, b.line, b.lang
            ));
        }
    }
    problems
}

#[test]
fn every_block_is_labelled_and_every_shell_block_runs_or_says_why_not() {
    let mut problems = Vec::new();
    for file in doc_files() {
        problems.extend(check_labels(&blocks(&file)));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The parser sees what a reader sees: fences of both kinds and lengths, info strings,
/// console prompts.
#[test]
fn the_block_parser_reads_fences_info_strings_and_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let text = "a\n```sh\necho 127.0.0.1:8080\n```\n````text\n```\n````\n~~~console\n$ echo a \\\n  b\na b\n~~~\n```\nuntagged\n```\n```sh no-run\nx\n```\n";
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    let path = dir.path().join("docs/x.md");
    std::fs::write(&path, text).unwrap();
    let file = path.to_string_lossy().into_owned();
    let bs = blocks(&file);
    let langs: Vec<_> = bs.iter().map(|b| (b.lang.as_str(), b.line)).collect();
    assert_eq!(
        langs,
        [("sh", 2), ("text", 5), ("console", 8), ("", 13), ("sh", 16)]
    );
    assert_eq!(bs[0].script("127.0.0.1:1"), "echo 127.0.0.1:1\n");
    assert_eq!(bs[1].body, ["```"]);
    assert_eq!(bs[2].script("x"), "echo a \\\n  b\n\n");
    let problems = check_labels(&bs);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("without a language"), "{problems:?}");
    assert!(problems[1].contains("without a reason"), "{problems:?}");
}

/// The runner fails a failing block with its file, line and output, and passes a block that
/// handles a failure itself; variables carry over from block to block.
#[test]
fn a_failing_block_fails_with_its_file_line_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.md");
    let good = "# t\n\n```sh\nA=one\nX=$(false) || true\n```\n\n```sh no-run: never\nfalse\n```\n";
    std::fs::write(
        &path,
        format!("{good}\n```bash\necho \"$A\" two\nfalse\necho never\n```\n"),
    )
    .unwrap();
    let file = path.to_string_lossy().into_owned();
    let err = run_file(&file).unwrap_err();
    assert!(
        err.starts_with(&format!("{file}:14: failed with exit status 1: false")),
        "{err}"
    );
    // The output of the failing block, and nothing after the failure.
    assert!(err.ends_with("--- its output ---\none two\n"), "{err}");
    std::fs::write(&path, good).unwrap();
    assert_eq!(run_file(&file), Ok(1));
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The relative link targets of a Markdown text (`](target)`, not `http…`), outside fences.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(p) = rest.find("](") {
            rest = &rest[p + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") && !target.is_empty() {
                out.push((i + 1, target.to_owned()));
            }
            rest = &rest[end..];
        }
    }
    out
}

/// Every relative link of README.md and docs/*.md names a file that exists and, with an
/// anchor, a heading of it; the README links every document in docs/.
#[test]
fn every_link_resolves_and_the_readme_links_every_document() {
    let mut problems = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let dir = Path::new(&file).parent().unwrap_or(Path::new(""));
        for (line, target) in relative_links(&text) {
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                root().join(&file)
            } else {
                root().join(dir).join(path)
            };
            if !resolved.exists() {
                problems.push(format!("{file}:{line}: {target}: no such file"));
                continue;
            }
            if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    problems.push(format!("{file}:{line}: {target}: no such heading"));
                }
            }
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for file in doc_files().iter().filter(|f| f.starts_with("docs/")) {
        if !readme.contains(&format!("]({file}")) {
            problems.push(format!("README.md does not link {file}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A directory of links put first on PATH: the tools under the names the docs use.
fn tool_dir(tmp: &Path) -> PathBuf {
    let bin = tmp.join(".doc-tools");
    std::fs::create_dir_all(&bin).unwrap();
    let server = Path::new(env!("CARGO_BIN_EXE_listwatch-apiserver"));
    std::os::unix::fs::symlink(server, bin.join("listwatch-apiserver")).unwrap();
    for (var, name) in [
        ("LISTWATCH_PYTHON", "python3"),
        ("LISTWATCH_ETCD_BIN", "etcd"),
    ] {
        if let Some(p) = std::env::var_os(var) {
            let p = PathBuf::from(p);
            // A bare name is looked up on PATH by the shell already.
            if p.is_absolute() {
                std::os::unix::fs::symlink(p, bin.join(name)).unwrap();
            }
        }
    }
    bin
}

/// Runs the runnable shell blocks of one file; `Err` names the file, the line and the output.
fn run_file(file: &str) -> Result<usize, String> {
    let runnable: Vec<Block> = blocks(file)
        .into_iter()
        .filter(|b| b.is_shell() && b.no_run().is_none())
        .collect();
    if runnable.is_empty() {
        return Ok(0);
    }
    let server = Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let scripts = tmp.path().join("blocks");
    std::fs::create_dir(&scripts).unwrap();
    let bin = tool_dir(tmp.path());
    let mut main = String::from(
        "set -Eeuo pipefail\nexec 2>&1\n\
         trap 'rc=$?; echo \"@@doc-failed $(basename \"${BASH_SOURCE[0]}\" .sh) $LINENO $rc@@\"' ERR\n",
    );
    for (i, b) in runnable.iter().enumerate() {
        let path = scripts.join(format!("{i}.sh"));
        std::fs::write(&path, b.script(&server.addr)).unwrap();
        writeln!(main, "echo '@@doc-block {i}@@'").unwrap();
        writeln!(main, "source '{}'", path.display()).unwrap();
    }
    main.push_str("echo '@@doc-all-done@@'\n");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["-c", &main])
        .current_dir(&work)
        .env("PATH", path)
        .env("LISTWATCH_ADDR", &server.addr)
        .env("KUBECONFIG", tmp.path().join("kubeconfig"))
        .env("KUBECACHEDIR", tmp.path().join("kube-cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("bash");
    let pgid = child.id();
    let output = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = Arc::clone(&output);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let deadline = Instant::now() + deadline_for(runnable.len());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the blocks left running (servers in the background) goes with the group.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let _ = reader.join();
    drop(server);
    let text = String::from_utf8_lossy(&output.lock().unwrap()).into_owned();
    // The output of each block, by the markers.
    let mut current: Option<usize> = None;
    let mut per_block: Vec<String> = vec![String::new(); runnable.len()];
    let mut failed: Option<(usize, usize, i32)> = None;
    let mut done = false;
    for line in text.lines() {
        if let Some(i) = marker(line, "@@doc-block ") {
            current = i.parse().ok();
            continue;
        }
        if let Some(f) = marker(line, "@@doc-failed ") {
            let mut w = f.split_whitespace();
            let (b, l, rc) = (w.next(), w.next(), w.next());
            if let (Some(b), Some(l), Some(rc)) = (b, l, rc) {
                // A failure outside a block's script (bash itself) counts for the current one.
                let block = b.parse().ok().or(current).unwrap_or(0);
                failed = Some((block, l.parse().unwrap_or(0), rc.parse().unwrap_or(-1)));
            }
            continue;
        }
        if line.trim() == "@@doc-all-done@@" {
            done = true;
            continue;
        }
        if let Some(out) = current.and_then(|i| per_block.get_mut(i)) {
            out.push_str(line);
            out.push('\n');
        }
    }
    let describe = |i: usize, what: String| {
        let b = &runnable[i];
        format!(
            "{what}\n--- the block ({}:{}) ---\n{}\n--- its output ---\n{}",
            b.file,
            b.line,
            b.body.join("\n"),
            per_block[i]
        )
    };
    let last = current.filter(|i| *i < runnable.len()).unwrap_or(0);
    let ran = text
        .lines()
        .filter(|l| marker(l, "@@doc-block ").is_some())
        .count();
    match status {
        None => Err(describe(
            last,
            format!(
                "{}:{}: the block did not finish within the deadline",
                file, runnable[last].line
            ),
        )),
        // A failure marker counts only when the shell failed: a command whose failure a
        // block handles (`x || true`) may still have run the trap inside a subshell.
        Some(s) if s.success() && done => {
            if ran == runnable.len() {
                Ok(ran)
            } else {
                Err(format!("{file}: {ran} of {} blocks ran", runnable.len()))
            }
        }
        Some(s) => match failed {
            Some((i, l, rc)) if i < runnable.len() => {
                let b = &runnable[i];
                let doc_line = b.line + l;
                let cmd = b.body.get(l.saturating_sub(1)).cloned().unwrap_or_default();
                Err(describe(
                    i,
                    format!("{file}:{doc_line}: failed with exit status {rc}: {cmd}"),
                ))
            }
            _ => Err(describe(
                last,
                format!(
                    "{}:{}: the shell ended ({s}) before every block ran",
                    file, runnable[last].line
                ),
            )),
        },
    }
}

/// The text of a `@@NAME …@@` marker line, after `prefix`.
fn marker<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.trim().strip_prefix(prefix)?.strip_suffix("@@")
}

#[test]
#[ignore = "needs kubectl, openssl, curl, etcd and the Python kubernetes client (cargo xtask test provides them)"]
fn every_shell_block_in_the_docs_runs() {
    common::require("kubectl");
    common::require("openssl");
    common::require("curl");
    let mut files = doc_files();
    // For a doc writer's quick look at one file: LISTWATCH_DOC_FILES=docs/a.md,README.md.
    if let Ok(only) = std::env::var("LISTWATCH_DOC_FILES") {
        let only: Vec<&str> = only.split(',').map(str::trim).collect();
        files.retain(|f| only.contains(&f.as_str()));
        eprintln!("LISTWATCH_DOC_FILES: running only {files:?}");
        assert!(!files.is_empty(), "LISTWATCH_DOC_FILES names no doc file");
    }
    let queue = Arc::new(Mutex::new(files.clone()));
    let results = Arc::new(Mutex::new(Vec::new()));
    // A few files at a time: each has its server and its commands.
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let queue = Arc::clone(&queue);
            let results = Arc::clone(&results);
            std::thread::spawn(move || {
                loop {
                    let Some(file) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let started = Instant::now();
                    let r = run_file(&file);
                    eprintln!(
                        "{file}: {} in {:.1?}",
                        match &r {
                            Ok(n) => format!("{n} blocks ran"),
                            Err(_) => "FAILED".to_owned(),
                        },
                        started.elapsed()
                    );
                    results.lock().unwrap().push((file, r));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let results = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(results.len(), files.len());
    let failures: Vec<String> = results.into_iter().filter_map(|(_, r)| r.err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The kube-rs test of docs/guide-ci-testing.md, compiled and run: the guide's `rust` block
/// is the text between the markers below (checked by `the_guides_kube_rs_test_is_this_one`).
mod guide_kube_rs {
    /// The binary: here the test's build; in your tests, `"listwatch-apiserver"` on `PATH`
    /// or a path from your build.
    fn listwatch_apiserver() -> &'static str {
        env!("CARGO_BIN_EXE_listwatch-apiserver")
    }

    // guide: kube-rs begin
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    #[tokio::test]
    async fn my_controller_writes_its_config_map() -> Result<(), Box<dyn std::error::Error>> {
        let mut server = Command::new(listwatch_apiserver())
            .args(["--bind", "127.0.0.1:0", "--log-level", "warn"])
            .stdout(Stdio::piped())
            .spawn()?;
        // "listwatch-apiserver listening on http://127.0.0.1:PORT (storage: …)", once it serves.
        let mut first = String::new();
        BufReader::new(server.stdout.take().ok_or("no stdout")?).read_line(&mut first)?;
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or("no address")?;

        let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        // Your controller runs against `client` here; this stands for what it writes.
        let cm = serde_json::json!({"metadata": {"name": "made-by-my-controller"}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm)?)
            .await?;
        assert!(cms.get_opt("made-by-my-controller").await?.is_some());

        server.kill()?;
        server.wait()?;
        Ok(())
    }
    // guide: kube-rs end
}

/// The guide's kube-rs block is the compiled test above, line for line (indentation aside).
#[test]
fn the_guides_kube_rs_test_is_this_one() {
    // This file wherever it is (`file!()` is relative to the workspace root): the test
    // binaries were folded once already (issue 27).
    let source = std::fs::read_to_string(root().join(file!())).unwrap();
    let begin =
        source.find("// guide: kube-rs begin\n").unwrap() + "// guide: kube-rs begin\n".len();
    let end = source.find("    // guide: kube-rs end").unwrap();
    let ours: Vec<&str> = source[begin..end]
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    let file = "docs/guide-ci-testing.md";
    let guide = blocks(file)
        .into_iter()
        .find(|b| b.lang == "rust" && b.body.iter().any(|l| l.contains("kube::Client")))
        .unwrap_or_else(|| panic!("{file}: no kube-rs block"));
    assert_eq!(
        guide.body.join("\n"),
        ours.join("\n"),
        "{file}:{}: the kube-rs block differs from {}'s guide_kube_rs",
        guide.line,
        file!()
    );
}
