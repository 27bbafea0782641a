//! `listwatch-testenv`: a test API server for other languages' tests (envtest's role).
//!
//! Starts a server in memory on a free loopback port with the CRDs given, writes a kubeconfig,
//! prints `KUBECONFIG=<path>` on stdout (one line, once the server is ready), and serves until
//! stdin closes, SIGTERM or SIGINT — so a test harness can `export $(listwatch-testenv --crds
//! dir)`-style read the line, run its tests, and close the pipe. Stdin counts only when it is
//! a pipe, a socket or a terminal: `/dev/null` (a script's background job) or a file would end
//! the server as soon as it is ready, so then only the signals do.
//!
//! ```text
//! listwatch-testenv [--crds PATH]... [--kubeconfig PATH] [-- SERVER-FLAGS...]
//! ```
//!
//! `--kubeconfig PATH` is created mode 0600 (never through a link), or replaces a regular
//! file of the same user; a link, another user's file or anything else is refused before
//! the server starts.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use listwatch_testenv::TestEnv;

const USAGE: &str =
    "usage: listwatch-testenv [--crds FILE-OR-DIR]... [--kubeconfig PATH] [-- SERVER-FLAGS...]";

fn main() -> ExitCode {
    let mut builder = TestEnv::builder();
    let mut kubeconfig: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--crds" => match args.next() {
                Some(p) => builder = builder.crds_from(p),
                None => return usage("--crds needs a path"),
            },
            "--kubeconfig" => match args.next() {
                Some(p) => kubeconfig = Some(PathBuf::from(p)),
                None => return usage("--kubeconfig needs a path"),
            },
            "--" => {
                for flag in args.by_ref() {
                    builder = builder.arg(flag);
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    // Refused before the server starts: a link, a directory, another user's file (see
    // `private_file`); the write after the start checks again.
    if let Some(p) = &kubeconfig
        && let Err(e) = listwatch_testenv::private_file::check(p)
    {
        eprintln!("listwatch-testenv: cannot write {}: {e}", p.display());
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("listwatch-testenv: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let env = match builder.start().await {
            Ok(env) => env,
            Err(e) => {
                eprintln!("listwatch-testenv: {e}");
                return ExitCode::FAILURE;
            }
        };
        let path = match kubeconfig {
            // Mode 0600, never through a link or into another user's file: it holds the
            // admin key.
            Some(p) => match listwatch_testenv::write_kubeconfig(&env, &p) {
                Ok(()) => p,
                Err(e) => {
                    eprintln!("listwatch-testenv: cannot write {}: {e}", p.display());
                    return ExitCode::FAILURE;
                }
            },
            None => env.kubeconfig_path().to_owned(),
        };
        let mut out = std::io::stdout();
        let _ = writeln!(out, "KUBECONFIG={}", path.display());
        let _ = out.flush();
        wait_for_end().await;
        env.stop();
        ExitCode::SUCCESS
    })
}

/// Whether the end of stdin means the harness is done with the server: a pipe, a socket or a
/// terminal. `/dev/null` or a regular file ends at once — a background job of a script
/// (`listwatch-testenv … &`) gets `/dev/null` — so then only a signal stops the server.
fn stdin_is_a_channel() -> bool {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return true;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata("/dev/stdin") {
            Ok(m) => m.file_type().is_fifo() || m.file_type().is_socket(),
            // No stdin to look at: reading it ends at once, as before.
            Err(_) => true,
        }
    }
    #[cfg(not(unix))]
    true
}

/// Stdin closed (or unreadable) when it is a channel ([`stdin_is_a_channel`]), SIGTERM or
/// SIGINT.
async fn wait_for_end() {
    if !stdin_is_a_channel() {
        eprintln!(
            "listwatch-testenv: stdin is not a pipe or terminal: serving until SIGTERM or SIGINT"
        );
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
        return;
    }
    // A thread of its own, not the runtime's blocking pool: a read blocked on an open stdin
    // would hold the runtime's shutdown (and the process) after a signal. Whatever stdin
    // sends is read in fixed-size pieces and dropped (no line buffering, any bytes): only its
    // end matters.
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 8192];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = closed_tx.send(());
        });
    let stdin_closed = async move {
        match reader {
            // A dropped sender (the thread ended) counts as closed too.
            Ok(_) => {
                let _ = closed_rx.await;
            }
            // No thread to watch stdin: only a signal ends the server.
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    () = stdin_closed => {}
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => stdin_closed.await,
        }
    }
    #[cfg(not(unix))]
    stdin_closed.await;
}

fn usage(why: &str) -> ExitCode {
    eprintln!("listwatch-testenv: {why}\n{USAGE}");
    ExitCode::from(2)
}
