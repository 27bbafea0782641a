//! `listwatch-apiserver`: a Kubernetes-compatible API server over listwatch's storage.
//!
//! Prints the address it listens on and a kubectl command to paste (true for the security
//! flags given: `security::hint`), then serves until SIGTERM or SIGINT. See `--help` for
//! the flags.

use std::io::Write;
use std::process::ExitCode;

use listwatch_apiserver::{LogFormat, Options, run};
use tracing_subscriber::EnvFilter;

/// With feature `mimalloc`, the binary allocates through mimalloc rather than the system's
/// malloc: measured beside it in docs/benchmarks.md (W2).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(opts: &Options) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&opts.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, not in log files and pipes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match opts.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let opts = Options::parse_checked();
    init_logging(&opts);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("listwatch-apiserver: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let storage = opts.storage_description();
    let scheme = opts.scheme();
    // The flags as given: what the hint says follows them, not what --pki-dir fills in.
    let given = opts.clone();
    let result = runtime.block_on(run(opts, |addr| {
        // Not println!: a closed stdout (`listwatch-apiserver | head -1`, a supervisor that
        // stopped reading) must not panic the server.
        let mut out = std::io::stdout().lock();
        let mut lines = vec![format!(
            "listwatch-apiserver listening on {scheme}://{addr} (storage: {storage})"
        )];
        lines.extend(listwatch_apiserver::security::hint::start_hint(
            &given, addr,
        ));
        for line in lines {
            if writeln!(out, "{line}").is_err() {
                break;
            }
        }
        let _ = out.flush();
    }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("listwatch-apiserver: {e}");
            ExitCode::FAILURE
        }
    }
}
