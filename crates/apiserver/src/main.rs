//! `listwatch-apiserver`: a Kubernetes-compatible API server over listwatch's storage.
//!
//! Prints the address it listens on and a kubectl command to paste, then serves until
//! SIGTERM or SIGINT. See `--help` for the flags.

use std::process::ExitCode;

use clap::Parser;
use listwatch_apiserver::{LogFormat, Options, run};
use tracing_subscriber::EnvFilter;

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
    let opts = Options::parse();
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
    let storage = opts.storage;
    let scheme = opts.scheme();
    // With TLS, kubectl needs to trust the certificate, and a token so that it does not
    // prompt for a password (the server does not authenticate: any token will do).
    let trust = match &opts.tls_cert_file {
        Some(cert) => format!(" --certificate-authority {} --token unused", cert.display()),
        None => String::new(),
    };
    let result = runtime.block_on(run(opts, |addr| {
        println!("listwatch-apiserver listening on {scheme}://{addr} (storage: {storage:?})");
        println!("try: kubectl --server {scheme}://{addr}{trust} get pods -A -w");
    }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("listwatch-apiserver: {e}");
            ExitCode::FAILURE
        }
    }
}
