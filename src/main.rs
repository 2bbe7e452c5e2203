//! The `wasmloop` binary: parse the command line, set up diagnostics, run, map to an exit code.

use std::process::ExitCode;

use anyhow::Context;
use wasmloop::cli::{Cli, Command, KeygenArgs, NewArgs, OwCompileArgs, RunArgs, ServeArgs};

fn main() -> ExitCode {
    keep_freed_memory_for_reuse();
    let cli = wasmloop::cli::parse(std::env::args_os().collect());
    init_tracing(&cli);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wasmloop: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Request and result buffers of a megabyte or more would otherwise be fresh `mmap`s (or
/// trimmed heap) on every activation, each page faulted in and zeroed again: a good share of a
/// 1 MiB echo. Keeping up to 32 MiB of freed heap per arena for reuse removes that cost
/// (the compiler, whose peaks would then stay, runs in child processes).
fn keep_freed_memory_for_reuse() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator thresholds, before any thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
    }
}

/// The runtime's own diagnostics appear only when asked for: the platform reads our
/// stdout and stderr as the action's logs.
fn init_tracing(cli: &Cli) {
    let filter = match (&cli.log_filter, cli.verbose || cli.debug) {
        (Some(filter), _) => filter.clone(),
        (None, true) => "wasmloop=debug".to_owned(),
        (None, false) => return,
    };
    // Colours only for a person at a terminal: a log collector would keep the escape codes.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(colours)
        .init();
}

/// The command's exit status: `wasmloop run`'s tells how its inputs fared; every other
/// command's is 0 when it did its job.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (debug, verbose) = (cli.debug, cli.verbose);
    let done = match cli.command {
        Some(Command::Run(args)) => return run_locally(args, verbose),
        Some(Command::Serve(args)) => serve(args, debug, verbose),
        Some(Command::OwCompile(args)) => ow_compile(args),
        Some(Command::New(args)) => new_project(args),
        Some(Command::Backend(command)) => command.run(),
        Some(Command::Keygen(args)) => keygen(args),
        #[cfg(feature = "bench")]
        Some(Command::Bench(args)) => wasmloop_bench::command::run(
            args,
            wasmloop_bench::Build {
                version: env!("CARGO_PKG_VERSION"),
                commit: option_env!("WASMLOOP_COMMIT"),
            },
        ),
        None => serve(cli.serve, debug, verbose),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// A multi-thread runtime with `threads` workers, or one per CPU.
fn async_runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(args: ServeArgs, debug: bool, verbose: bool) -> anyhow::Result<()> {
    let config = args.to_config(debug, verbose)?;
    async_runtime(Some(args.worker_threads()))?.block_on(async {
        // Before the port opens: a platform may signal as soon as it can connect.
        let stop = wasmloop::signals::stopped();
        let listener = match args.listen_fd {
            Some(fd) => inherited_listener(fd)?,
            None => {
                let addr = args.listen_addr()?;
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?
            }
        };
        let metrics = match args.metrics_listen {
            None => None,
            Some(addr) => {
                let metrics_listener =
                    tokio::net::TcpListener::bind(addr).await.with_context(|| {
                        format!("cannot listen for metrics on {addr} (--metrics-listen)")
                    })?;
                let metrics = std::sync::Arc::new(wasmloop::metrics::Metrics::new());
                tokio::spawn(wasmloop::server::serve_metrics(
                    metrics_listener,
                    metrics.clone(),
                    config.limits.header_read_timeout,
                    config.logs.format,
                ));
                Some(metrics)
            }
        };
        wasmloop::server::run(listener, config, metrics, stop)
            .await
            .context("the server failed")
    })
}

fn run_locally(args: RunArgs, verbose: bool) -> anyhow::Result<ExitCode> {
    let config = args.to_config(verbose)?;
    let context = args.context();
    let inputs = match args.input {
        Some(input) => wasmloop::local_run::Inputs::One(input),
        None => wasmloop::local_run::Inputs::Stdin,
    };
    let tally = async_runtime(None)?.block_on(wasmloop::local_run::run(
        &args.file, &args.main, args.env, inputs, context, config,
    ))?;
    Ok(ExitCode::from(tally.exit_code()))
}

fn new_project(args: NewArgs) -> anyhow::Result<()> {
    let (Some(language), Some(dir), false) = (args.language, &args.dir, args.list) else {
        print!("{}", wasmloop::new_project::list());
        return Ok(());
    };
    let name = wasmloop::new_project::create(language, dir)?;
    // The folder is named after the project most of the time: said once, then.
    let made = match dir.file_name() {
        Some(folder) if folder.to_string_lossy() == name => dir.display().to_string(),
        _ => format!("{name} in {}", dir.display()),
    };
    println!("made {made}: its README.md says how to build, try and deploy it");
    Ok(())
}

fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    let (sign, verify) = wasmloop::signing::keygen(&args.dir)?;
    println!(
        "{}: the signing key; keep it where artifacts are built (`wasmloop compile --sign-key`)",
        sign.display()
    );
    println!(
        "{}: the verify key; give it to runtimes (`wasmloop serve --trust-key`)",
        verify.display()
    );
    Ok(())
}

/// A listening socket handed down by whoever started us (a supervisor, or the tests).
fn inherited_listener(fd: i32) -> anyhow::Result<tokio::net::TcpListener> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD below only asks whether the descriptor is open; the borrow ends there.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if rustix::io::fcntl_getfd(borrowed).is_err() {
        anyhow::bail!("--listen-fd {fd} is not an open file descriptor");
    }
    // SAFETY: the descriptor is open and was handed to us to own; nothing else here uses it.
    let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    // Close-on-exec, so that no child (a compile child, the compiler hook, an action)
    // inherits it: one that outlived us would keep the port accepting connections that
    // nobody answers.
    rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::CLOEXEC)
        .with_context(|| format!("--listen-fd {fd}: cannot mark it close-on-exec"))?;
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
        .with_context(|| format!("--listen-fd {fd} is not a listening TCP socket"))
}

fn ow_compile(args: OwCompileArgs) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("cannot read the upload on stdin")?;
    let config = args.runtime.to_config_untrusting()?;
    let zip = async_runtime(None)?.block_on(wasmloop::ow_compile::compile_to_zip(
        input,
        &args.main,
        args.env_json.as_deref(),
        &config,
        args.sign.sign_key.as_deref(),
    ))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&zip)?;
    stdout.flush().context("cannot write the zip on stdout")
}
