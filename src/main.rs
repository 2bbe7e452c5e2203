//! The `wasmloop` binary: parse the command line, set up diagnostics, run, map to an exit code.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use wasmloop::cli::{Cli, Command, ServeArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmloop: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime's own diagnostics appear only when asked for: the platform reads our
/// stdout and stderr as the action's logs.
fn init_tracing(cli: &Cli) {
    let filter = match (&cli.log_filter, cli.verbose) {
        (Some(filter), _) => filter.clone(),
        (None, true) => "wasmloop=debug".to_owned(),
        (None, false) => return,
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Serve(args)) => serve(args),
        None => serve(cli.serve),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.to_config();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        wasmloop::server::run(listener, config, wasmloop::server::shutdown_signal())
            .await
            .context("the server failed")
    })
}
