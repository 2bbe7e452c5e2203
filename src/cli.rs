//! The command line: every setting as a flag with an environment twin, turned into a `Config`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Config};
use crate::executor::registry;

#[derive(Debug, Parser)]
#[command(
    name = "wasmloop",
    version,
    about = "Runs OpenWhisk actions (WebAssembly or native executables) behind the ActionLoop protocol",
    long_about = "Runs OpenWhisk actions behind the ActionLoop protocol: POST /init once with the \
                  action's code, then POST /run for each activation. With no subcommand it serves."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Say more, before or after the subcommand: the runtime's own diagnostics on stderr
    /// (RUST_LOG gives finer control), `serve`'s hints, and under `run` what each input cost
    /// (wall time, CPU time, the instance's memory, whether the instance was fresh, reused
    /// or renewed, and the start's time after a cold one).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Diagnostics on stderr, and /init allowed more than once (the reference's `-debug`).
    #[arg(long, global = true, env = "OW_DEBUG", value_parser = clap::builder::FalseyValueParser::new())]
    pub debug: bool,
    /// Which diagnostics to print, as a tracing filter (e.g. `wasmloop=trace`).
    #[arg(long, global = true, env = "RUST_LOG", hide_env_values = true)]
    pub log_filter: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve /init and /run over HTTP (what a bare `wasmloop` does).
    Serve(ServeArgs),
    /// Run an action locally, without HTTP: each input gives one result line on stdout.
    #[command(after_help = RUN_EXIT_STATUS)]
    Run(RunArgs),
    /// The backends' own subcommands (`wasmloop compile`).
    #[command(flatten)]
    Backend(registry::BackendCommand),
    /// Make a key pair for signed artifacts: DIR/sign.key (keep it secret) and
    /// DIR/verify.key (give it to runtimes as --trust-key).
    Keygen(KeygenArgs),
    /// Write a hello action project for a language, with its SDK, into a new folder.
    New(NewArgs),
    /// Compare the backends: the same hello through each, over real HTTP, in one table.
    #[cfg(feature = "bench")]
    Bench(wasmloop_bench::command::Args),
    /// The reference proxy's `-compile MAIN`: read an upload on stdin, unpack and compile it
    /// as /init would (with OW_COMPILER), write a zip of the result on stdout.
    #[command(hide = true)]
    OwCompile(OwCompileArgs),
}

#[derive(Debug, Clone, Args)]
pub struct OwCompileArgs {
    /// The action's entry point name, passed to the compiler.
    pub main: String,
    /// The action's environment, as a JSON object (the reference's `-env`).
    #[arg(long)]
    pub env_json: Option<String>,
    /// With --sign-key, a WebAssembly upload's precompiled code is signed into the zip.
    #[command(flatten)]
    pub sign: crate::signing::SignArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port to listen on, or a port alone for every address [default:
    /// 0.0.0.0:$PORT when PORT is set, as Knative and Cloud Run set it; else 0.0.0.0:8080].
    #[arg(long, env = "WASMLOOP_LISTEN", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// How requests reach the action: openwhisk (POST /init, POST /run) or http (every
    /// request on every path goes to the --action as HTTP, for Kubernetes, Knative and
    /// Cloud Run: the request as an OpenWhisk web action's value, its result as the
    /// response). Health at /.well-known/wasmloop/health, readiness at
    /// /.well-known/wasmloop/ready, under both.
    #[arg(long, env = "WASMLOOP_PROTOCOL", value_enum, default_value_t = config::Protocol::OpenWhisk)]
    pub protocol: config::Protocol,
    /// Serve Prometheus metrics at GET /metrics on this address, a listener of its own
    /// (off by default): activations by outcome and their times, inits, instances, the
    /// queue, outbound refusals, compiles and the compile cache.
    #[arg(long, env = "WASMLOOP_METRICS_LISTEN", value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve on this already-listening socket, inherited from a supervisor, instead of --listen.
    #[arg(long, env = "WASMLOOP_LISTEN_FD", value_name = "FD")]
    pub listen_fd: Option<i32>,
    /// An action built into the image: loaded (compiled, started) before the server accepts,
    /// so that the platform's code-less `/init` finds it ready. For images derived `FROM
    /// wasmloop` with the action copied in.
    #[arg(long, env = "WASMLOOP_ACTION", value_name = "FILE")]
    pub action: Option<PathBuf>,
    /// The built-in action's entry point name (as `/init`'s `main`).
    #[arg(
        long,
        env = "WASMLOOP_ACTION_MAIN",
        default_value = config::DEFAULT_MAIN,
        requires = "action"
    )]
    pub action_main: String,
    /// What log lines and reports call the built-in action (their `action` in json), as
    /// OpenWhisk names an action [default: the --action file's name without its extension].
    #[arg(
        long,
        env = "WASMLOOP_ACTION_NAME",
        value_name = "NAME",
        requires = "action"
    )]
    pub action_name: Option<String>,
    /// Under --protocol http, how long requests are still served after SIGTERM, while the
    /// readiness path answers 503 so that the platform stops routing here; then those in
    /// flight get --shutdown-timeout. Longer than the readiness probe's period times its
    /// failure threshold, plus a few seconds for the endpoints to catch up [default: 15s;
    /// Ctrl-C skips it]. OpenWhisk's protocol has none: its invoker reads a 503 as "place
    /// the activation elsewhere".
    #[arg(long, env = "WASMLOOP_DRAIN_PERIOD", value_parser = humantime::parse_duration)]
    pub drain_period: Option<Duration>,
    /// Threads serving HTTP and running wasm instances [default: --concurrency, at most
    /// one per CPU]. Compiles and file work run on threads of their own.
    #[arg(long, env = "WASMLOOP_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl ServeArgs {
    /// The server's settings: every flag resolved (the trusted keys read) in one step.
    /// `debug` is the reference's `-debug`, which also allows more than one `/init`;
    /// `verbose`, like it, asks for the runtime's hints.
    pub fn to_config(&self, debug: bool, verbose: bool) -> anyhow::Result<Config> {
        let mut config = self.runtime.to_config()?;
        config.action.allow_reinit = debug;
        config.logs.hints |= debug || verbose;
        config.action.built_in = self
            .action
            .clone()
            .map(|file| (file, self.action_main.clone()));
        config.action.name = self.action_name.clone().or_else(|| {
            let file = self.action.as_deref()?;
            Some(file.file_stem()?.to_string_lossy().into_owned())
        });
        config.protocol = self.protocol;
        if self.protocol == config::Protocol::OpenWhisk
            && self.drain_period.is_some_and(|d| !d.is_zero())
        {
            anyhow::bail!(
                "--drain-period (WASMLOOP_DRAIN_PERIOD) applies under --protocol http only: \
                 under OpenWhisk's protocol a stopping container answers 503 at once, which \
                 tells the invoker to place the activation elsewhere; leave it unset there"
            );
        }
        if self.protocol == config::Protocol::Http {
            if self.action.is_none() {
                anyhow::bail!(
                    "--protocol http serves the action built into the image: give --action FILE \
                     (WASMLOOP_ACTION), the action's file as /init would take it"
                );
            }
            config.pool.concurrency = self.concurrency();
            config.pool.drain_period = self
                .drain_period
                .unwrap_or_else(|| config::duration(config::DEFAULT_HTTP_DRAIN_PERIOD));
            // The sentinels mark an activation's logs for OpenWhisk's invoker; no platform
            // reads them here.
            config.logs.sentinels = false;
            // No platform sends a deadline here: an action that never answers must not
            // hold its connection forever.
            config
                .pool
                .timeout
                .get_or_insert_with(|| config::duration(config::DEFAULT_HTTP_TIMEOUT));
            // A client that never finishes its request's head must not hold a connection.
            if self.runtime.limits.header_read_timeout.is_none() {
                config.limits.header_read_timeout =
                    Some(config::duration(config::DEFAULT_HTTP_HEADER_READ_TIMEOUT));
            }
        }
        Ok(config)
    }

    /// Instances (or children) at once: `--concurrency`, or by default one (OpenWhisk's
    /// invoker sends one activation at a time) and, under `--protocol http`, where many
    /// connections arrive at once and some activations wait on the network, two per CPU.
    pub fn concurrency(&self) -> usize {
        match (self.runtime.pool.concurrency, self.protocol) {
            (Some(n), _) => usize::from(n),
            (None, config::Protocol::OpenWhisk) => usize::from(config::DEFAULT_CONCURRENCY),
            (None, config::Protocol::Http) => {
                2 * std::thread::available_parallelism().map_or(1, usize::from)
            }
        }
    }

    /// Where to listen: --listen, else `$PORT` on every address (Knative and Cloud Run set
    /// it), else the reference's :8080.
    pub fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        listen_addr(self.listen, std::env::var("PORT").ok())
    }

    /// One thread per activation that can run at once: with one, every hop between the
    /// connection, the activation and the instance stays on one thread (a second idle
    /// worker gets woken by each of them: many more context switches per request in
    /// `perf stat`, and more CPU per activation on a 2-core machine).
    pub fn worker_threads(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        match self.threads {
            Some(n) => usize::from(n),
            None => self.concurrency().min(cpus),
        }
    }
}

/// Every setting of the runtime itself: what `serve` takes besides where it listens (and
/// what `-compile` reads of it). Each group is one part of `Config`.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub upload: UploadArgs,
    #[command(flatten)]
    pub start: StartArgs,
    #[command(flatten)]
    pub activations: ActivationArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub logs: LogArgs,
    #[command(flatten)]
    pub backends: registry::BackendArgs,
}

/// What HTTP bodies and answers may weigh (`Config::limits`, with `UploadArgs`' caps).
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Largest /init body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "WASMLOOP_MAX_INIT_BYTES", default_value_t = config::DEFAULT_MAX_INIT_BYTES)]
    pub max_init_bytes: usize,
    /// Largest /run body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "WASMLOOP_MAX_RUN_BYTES", default_value_t = config::DEFAULT_MAX_RUN_BYTES)]
    pub max_run_bytes: usize,
    /// After SIGTERM, how long in-flight activations may still run before the action is killed.
    #[arg(long, env = "WASMLOOP_SHUTDOWN_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_SHUTDOWN_TIMEOUT)]
    pub shutdown_timeout: Duration,
    /// How long a request's body may take to arrive; a slower one gets 408.
    #[arg(long, env = "WASMLOOP_BODY_READ_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_BODY_READ_TIMEOUT)]
    pub body_read_timeout: Duration,
    /// How long a request's head (its request line and headers) may take to arrive, counted
    /// from when the connection is ready for it, so an idle kept-alive connection closes
    /// then too; 0 for no limit [default: 30s under --protocol http; none under OpenWhisk's,
    /// whose invoker keeps its connections open between activations].
    #[arg(long, env = "WASMLOOP_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Option<Duration>,
}

/// How an upload is unpacked and compiled, and which backends may run it: the same flags
/// for `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct UploadArgs {
    /// Folder in which each /init unpacks its action into a fresh folder [default: the system temp dir].
    #[arg(long, env = "WASMLOOP_ACTION_DIR")]
    pub action_dir: Option<PathBuf>,
    /// Compiler hook run as `COMPILER <main> <srcdir> <bindir>` for uploads that are not executables.
    #[arg(long, env = "OW_COMPILER")]
    pub compiler: Option<PathBuf>,
    /// Most entries an uploaded archive may hold.
    #[arg(long, env = "WASMLOOP_MAX_ARCHIVE_ENTRIES", default_value_t = config::DEFAULT_MAX_ARCHIVE_ENTRIES)]
    pub max_archive_entries: usize,
    /// Most bytes an uploaded archive may unpack to.
    #[arg(long, env = "WASMLOOP_MAX_UNPACKED_BYTES", default_value_t = config::DEFAULT_MAX_UNPACKED_BYTES)]
    pub max_unpacked_bytes: u64,
    /// How long the OW_COMPILER hook, or compiling a WebAssembly module, may take.
    #[arg(long, env = "WASMLOOP_COMPILE_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_COMPILE_TIMEOUT)]
    pub compile_timeout: Duration,
    /// Which backends may run an upload, comma-separated: an image for sandboxed actions
    /// sets `http,wasm,component`, and a native executable is then refused at /init instead of
    /// running with the container's privileges.
    #[arg(
        long,
        env = "WASMLOOP_BACKENDS",
        value_name = "LIST",
        value_parser = registry::name_parser(),
        value_delimiter = ',',
        default_values_t = registry::every_name()
    )]
    pub backends: Vec<registry::BackendName>,
}

/// How a started action announces itself: the platform's variables (`serve` only; `run`
/// has its own `--wait-for-ack` switch).
#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    /// When non-empty, actions must write {"ok":true} on their result channel once ready.
    #[arg(long, env = "OW_WAIT_FOR_ACK")]
    pub wait_for_ack: Option<String>,
    /// When non-empty, the action's bin/exec.env must hold this value.
    #[arg(long, env = "OW_EXECUTION_ENV")]
    pub execution_env: Option<String>,
    /// When non-empty, /init errors are written to the logs and the client gets a generic message.
    #[arg(long, env = "OW_LOG_INIT_ERROR", num_args = 0..=1, default_missing_value = "1")]
    pub log_init_error: Option<String>,
}

/// How long an activation may run and how many one instance serves: the same flags for
/// `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct ActivationArgs {
    /// Stop any activation that runs longer than this (e.g. 30s), even without a deadline.
    #[arg(long, env = "WASMLOOP_TIMEOUT", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Activations one instance (wasm) or child (native) serves before a fresh one replaces
    /// it: 1 gives every activation a fresh instance, with nothing left over from the one
    /// before; the fresh one is made while the last answer goes out. 0: no limit (each
    /// instance lives as long as the action, keeping its state between activations).
    #[arg(long, env = "WASMLOOP_MAX_ACTIVATIONS_PER_INSTANCE", value_name = "N",
          default_value_t = config::DEFAULT_MAX_ACTIVATIONS_PER_INSTANCE)]
    pub max_activations_per_instance: u32,
    /// Longest result an action may return, in bytes: its result line (an HTTP
    /// component's: its response body); longer ones get 502.
    #[arg(long, env = "WASMLOOP_MAX_RESULT_BYTES", default_value_t = config::DEFAULT_MAX_RESULT_BYTES)]
    pub max_result_bytes: usize,
    /// How long an action may take to start: to acknowledge it, or for a guest to reach
    /// its first read of stdin (e.g. 500ms, 60s, 2m) [default: 60s; under `run`, its
    /// --timeout].
    #[arg(long, env = "WASMLOOP_ACK_TIMEOUT", value_parser = humantime::parse_duration)]
    pub ack_timeout: Option<Duration>,
}

/// How many instances run at once and how many activations may wait (`serve` only).
#[derive(Debug, Clone, Args)]
pub struct PoolArgs {
    /// How many instances (wasm) or children (native) of the action run activations in
    /// parallel; each keeps its own state [default: 1, as OpenWhisk's runtimes; with
    /// --protocol http, two per CPU, since no platform limits it there].
    #[arg(long, env = "WASMLOOP_CONCURRENCY", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: Option<u16>,
    /// Replace an instance (or child) whose memory grew past this many bytes (a wasm
    /// instance's linear memories; a child's resident set) once its activation has ended;
    /// the activation itself is answered as usual [default: never].
    #[arg(long, env = "WASMLOOP_RECYCLE_ABOVE_MEMORY", value_name = "BYTES")]
    pub recycle_above_memory: Option<u64>,
    /// How many activations may wait when every instance is busy; beyond that, 429 with `Retry-After: 1`.
    #[arg(long, env = "WASMLOOP_MAX_QUEUE", default_value_t = config::DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
}

/// What the runtime writes on the container's streams (`serve` only: `run` writes text
/// for a person, hints included).
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// How the action's log lines reach the container's stdout and stderr: `text`, as the
    /// action wrote them (a whole line at a time), or `json`, one object per line naming
    /// the activation that wrote it (time, stream, activationId, namespace, action,
    /// message), for a log collector when activations overlap (--concurrency > 1).
    #[arg(long, env = "WASMLOOP_LOG_FORMAT", value_enum, default_value_t = crate::logs::LogFormat::Text)]
    pub log_format: crate::logs::LogFormat,
    /// Explain on stderr, among the activation's logs, an answer that is not a JSON object
    /// or array: what the action returned and what to change (the 502 body stays
    /// OpenWhisk's fixed message). Off by default because OpenWhisk's runtime tests expect
    /// stderr to hold only what the action wrote; on with -debug, -v and --log-format json.
    #[arg(long, env = "WASMLOOP_HINTS", value_parser = clap::builder::FalseyValueParser::new())]
    pub hints: bool,
}

/// `wasmloop run --help`'s last words: what its exit status says.
pub(crate) const RUN_EXIT_STATUS: &str = "Exit status: 0 when every input succeeded; 3 when an answer \
    was an application error (a result with an \"error\" key); 4 when an activation failed \
    (the action exited or trapped, ran out of time, or answered no JSON object or array); 1 \
    when the action could not start or an input was not JSON. When inputs fail in more than \
    one way, the first of 1, 4, 3 wins.";

/// `wasmloop run`: one local process running one action, with the groups of `serve`'s
/// settings that apply to it. Its `--timeout` has a default: a mistake that makes an
/// action wait forever must not hang a terminal.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("timeout", |arg| arg
    .default_value(config::DEFAULT_RUN_TIMEOUT)
    .help("Stop an activation (and the start-up) that takes longer than this (e.g. 500ms, 2m)")))]
pub struct RunArgs {
    /// The action: a .wasm module, a native executable or script, or a zip / tar.gz.
    pub file: PathBuf,
    /// The action's entry point name (picks `<main>.wasm` in an archive).
    #[arg(long, default_value = config::DEFAULT_MAIN)]
    pub main: String,
    /// An environment variable for the action, as KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// The action's input (its `value`); without it, JSON values are read one per line from stdin.
    #[arg(long)]
    pub input: Option<String>,
    /// Ask the action to acknowledge its start with {"ok":true} on its result channel, as
    /// runtime images with OW_WAIT_FOR_ACK do (a launcher that cannot start then says why).
    #[arg(long)]
    pub wait_for_ack: bool,
    /// The activation id every input's request line carries [default: a fresh 32-hex-digit
    /// id for each, as the platform gives].
    #[arg(long, value_name = "ID")]
    pub activation_id: Option<String>,
    /// The namespace the request lines name.
    #[arg(long, default_value = "_")]
    pub namespace: String,
    /// The action name the request lines name [default: /NAMESPACE/ and the file's name
    /// without its extension].
    #[arg(long, value_name = "NAME")]
    pub action_name: Option<String>,
    /// Send each input line as the whole request line, as it is (for testing the raw
    /// contract); otherwise each input is the `value` of a request line that also carries
    /// `activation_id`, `deadline` (now + --timeout), `namespace` and `action_name`.
    #[arg(long, conflicts_with_all = ["activation_id", "action_name"])]
    pub raw: bool,
    #[command(flatten)]
    pub activations: ActivationArgs,
    #[command(flatten)]
    pub upload: UploadArgs,
    #[command(flatten)]
    pub backends: registry::BackendArgs,
}

impl RunArgs {
    /// How long one activation (and the start-up) may take: `--timeout` always has a
    /// value under `run`.
    pub fn timeout(&self) -> Duration {
        self.activations
            .timeout
            .unwrap_or_else(|| config::duration(config::DEFAULT_RUN_TIMEOUT))
    }

    /// What each request line carries besides the input.
    pub fn context(&self) -> crate::local::RequestContext {
        let stem = self
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "action".to_owned());
        crate::local::RequestContext {
            activation_id: self.activation_id.clone(),
            action_name: self
                .action_name
                .clone()
                .unwrap_or_else(|| format!("/{}/{stem}", self.namespace)),
            namespace: self.namespace.clone(),
            timeout: self.timeout(),
            raw: self.raw,
        }
    }

    /// The run's settings, `verbose` asking for each input's report; fails on a trusted
    /// key that cannot be read.
    pub fn to_config(&self, verbose: bool) -> anyhow::Result<Config> {
        let mut config = Config::default();
        let timeout = self.timeout();
        config.logs.reports = verbose;
        self.upload.apply(&mut config.action, &mut config.limits);
        self.activations.apply(&mut config, timeout);
        self.backends.read(&mut config.backends, true)?;
        config.action.wait_for_ack = self.wait_for_ack.then(|| "1".to_owned());
        config.action.one_shot = true;
        config.pool.timeout = Some(timeout);
        config.logs.sentinels = false;
        // A person at a terminal, not a platform's log reader.
        config.logs.hints = true;
        Ok(config)
    }
}

#[derive(Debug, Clone, Args)]
#[command(arg_required_else_help = true)]
pub struct NewArgs {
    /// The action's language.
    #[arg(value_enum, required_unless_present = "list")]
    pub language: Option<crate::template::Language>,
    /// The folder to make (it must not exist, or be empty).
    #[arg(required_unless_present = "list")]
    pub dir: Option<PathBuf>,
    /// Say what each template makes, and make nothing.
    #[arg(long)]
    pub list: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeygenArgs {
    /// The folder to write sign.key and verify.key into (an existing key is never replaced).
    pub dir: PathBuf,
}

fn listen_addr(listen: Option<SocketAddr>, port: Option<String>) -> anyhow::Result<SocketAddr> {
    if let Some(addr) = listen {
        return Ok(addr);
    }
    let default: SocketAddr = config::DEFAULT_LISTEN
        .parse()
        .expect("the default address is well-formed");
    match port.filter(|p| !p.is_empty()) {
        None => Ok(default),
        Some(port) => {
            let port: u16 = port.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "PORT={port:?} is no port number: set it to one (1-65535), or give --listen"
                )
            })?;
            Ok(SocketAddr::new(default.ip(), port))
        }
    }
}

/// An address to listen on: `HOST:PORT`, or a port alone for every address.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    text.parse().map_err(|_| {
        format!("{text:?} is no address to listen on: give HOST:PORT (0.0.0.0:9090 for every address) or a port alone (9090)")
    })
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// The command line, parsed (exiting with clap's message when it is wrong). A bare
/// `wasmloop` serves, so `serve`'s flags are also the top level's; before a subcommand
/// they are refused here, where clap's `args_conflicts_with_subcommands` would also refuse
/// the global flags (`wasmloop -v run`).
pub fn parse(args: Vec<OsString>) -> Cli {
    use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
    let mut command = Cli::command();
    let matches = command.clone().get_matches_from(from_reference_flags(args));
    if let Some((subcommand, _)) = matches.subcommand() {
        let given_before = command.get_arguments().find(|arg| {
            !arg.is_global_set()
                && matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
        });
        if let Some(arg) = given_before {
            let flag = arg.get_long().unwrap_or(arg.get_id().as_str());
            command
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "--{flag} before `{subcommand}` is a flag of `serve`: give it after \
                         `wasmloop {subcommand}` if that takes it (`wasmloop {subcommand} --help`)"
                    ),
                )
                .exit();
        }
    }
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Rewrites the reference proxy's single-dash flags (`-version`, `-debug`, `-compile MAIN`,
/// `-env JSON`) into ours, so that wasmloop can stand in for its binary in existing images.
pub fn from_reference_flags(args: Vec<OsString>) -> Vec<OsString> {
    let position = |flag: &str| args.iter().position(|a| a == flag);
    let value_after = |flag: &str| position(flag).and_then(|i| args.get(i + 1)).cloned();
    let mut out: Vec<OsString> = args.iter().take(1).cloned().collect();
    if let Some(main) = value_after("-compile") {
        out.push("ow-compile".into());
        out.push(main);
        if let Some(env) = value_after("-env") {
            out.push("--env-json".into());
            out.push(env);
        }
        if position("-debug").is_some() {
            out.push("--debug".into());
        }
        return out;
    }
    out.extend(args.iter().skip(1).map(|arg| match arg.to_str() {
        Some("-version") => "--version".into(),
        Some("-debug") => "--debug".into(),
        _ => arg.clone(),
    }));
    out
}

/// OpenWhisk treats an empty variable as an unset one.
fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

impl RuntimeArgs {
    /// The runtime's settings; fails on a trusted key that cannot be read (a mistake to
    /// hear about at start-up, not at the first signed `/init`).
    pub fn to_config(&self) -> anyhow::Result<Config> {
        self.config(true)
    }

    /// The settings without the trusted keys, which `-compile` (only packing an upload)
    /// never reads.
    pub fn to_config_untrusting(&self) -> anyhow::Result<Config> {
        self.config(false)
    }

    fn config(&self, trusting: bool) -> anyhow::Result<Config> {
        let mut config = Config::default();
        let LimitArgs {
            max_init_bytes,
            max_run_bytes,
            shutdown_timeout,
            body_read_timeout,
            header_read_timeout,
        } = self.limits;
        config.limits.body_read_timeout = body_read_timeout;
        config.limits.header_read_timeout = header_read_timeout.filter(|d| !d.is_zero());
        config.limits.max_init_bytes = max_init_bytes;
        config.limits.max_run_bytes = max_run_bytes;
        config.pool.shutdown_timeout = shutdown_timeout;
        self.upload.apply(&mut config.action, &mut config.limits);
        let start = &self.start;
        config.action.wait_for_ack = non_empty(&start.wait_for_ack);
        config.action.execution_env = non_empty(&start.execution_env);
        config.logs.log_init_error = non_empty(&start.log_init_error).is_some();
        self.activations
            .apply(&mut config, config::duration(config::DEFAULT_ACK_TIMEOUT));
        config.pool.concurrency =
            usize::from(self.pool.concurrency.unwrap_or(config::DEFAULT_CONCURRENCY));
        config.pool.recycle_above_memory = self.pool.recycle_above_memory;
        config.pool.max_queue = self.pool.max_queue;
        config.logs.format = self.logs.log_format;
        // A log pipeline (json) is an operator's, never the platform's canonical default.
        config.logs.hints = self.logs.hints || self.logs.log_format == crate::logs::LogFormat::Json;
        // A text log keeps to the action's own lines, as the platform's tests want it.
        config.logs.reports = self.logs.log_format == crate::logs::LogFormat::Json;
        self.backends.read(&mut config.backends, trusting)?;
        Ok(config)
    }
}

impl UploadArgs {
    fn apply(&self, action: &mut config::ActionSettings, limits: &mut config::Limits) {
        if let Some(dir) = &self.action_dir {
            action.dir = dir.clone();
        }
        // OpenWhisk treats an empty variable as unset.
        action.compiler_hook = self.compiler.clone().filter(|p| !p.as_os_str().is_empty());
        action.path_env = std::env::var("PATH").ok();
        action.inherited_env = inherited_ow_env();
        action.compile_timeout = self.compile_timeout;
        action.background_compile_timeout = self.compile_timeout;
        action.backends = Some(self.backends.iter().map(|name| name.0).collect());
        limits.max_archive_entries = self.max_archive_entries;
        limits.max_unpacked_bytes = self.max_unpacked_bytes;
    }
}

impl ActivationArgs {
    /// Sets the activations' bounds; a start may take `start` unless --ack-timeout says.
    fn apply(&self, config: &mut Config, start: Duration) {
        config.pool.timeout = self.timeout;
        config.pool.max_activations_per_instance = self.max_activations_per_instance;
        config.limits.max_result_bytes = self.max_result_bytes;
        config.action.ack_timeout = self.ack_timeout.unwrap_or(start);
    }
}

/// Every `__OW_*` variable of our own environment, values kept whole (the reference cuts at `=`).
fn inherited_ow_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("__OW_"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        from_reference_flags(args.iter().map(OsString::from).collect())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn serving_threads_follow_the_concurrency_up_to_the_cpus() {
        let threads = |args: &[&str]| {
            let cli = Cli::try_parse_from(["wasmloop", "serve"].iter().chain(args)).unwrap();
            let Some(Command::Serve(serve)) = cli.command else {
                panic!("not serve")
            };
            serve.worker_threads()
        };
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(threads(&[]), 1);
        assert_eq!(threads(&["--concurrency", "500"]), cpus);
        assert_eq!(threads(&["--concurrency", "500", "--threads", "3"]), 3);
        assert!(Cli::try_parse_from(["wasmloop", "serve", "--threads", "0"]).is_err());
    }

    #[test]
    fn hints_are_off_for_the_platform_and_on_for_whoever_asks() {
        let hints = |args: &[&str]| {
            let cli = Cli::try_parse_from(["wasmloop"].iter().chain(args)).unwrap();
            match cli.command {
                Some(Command::Serve(serve)) => serve.to_config(cli.debug, cli.verbose),
                Some(Command::Run(run)) => run.to_config(cli.verbose),
                _ => panic!("neither serve nor run"),
            }
            .unwrap()
            .logs
            .hints
        };
        assert!(!hints(&["serve"]));
        assert!(hints(&["serve", "--hints"]));
        assert!(hints(&["serve", "--debug"]));
        assert!(hints(&["serve", "-v"]));
        assert!(hints(&["serve", "--log-format", "json"]));
        assert!(hints(&["run", "a.wasm"]));
    }

    #[test]
    fn an_address_to_listen_on_may_be_a_port_alone_and_a_wrong_one_says_what_to_give() {
        let addr = serve(&["--listen", "9000", "--metrics-listen", "127.0.0.1:9090"]);
        assert_eq!(addr.listen, Some(SocketAddr::from(([0, 0, 0, 0], 9000))));
        assert_eq!(
            addr.metrics_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9090)))
        );
        let wrong = Cli::try_parse_from(["wasmloop", "serve", "--metrics-listen", "localhost"])
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("give HOST:PORT (0.0.0.0:9090 for every address) or a port alone"),
            "{wrong}"
        );
    }

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["wasmloop", "serve"].iter().chain(args)).unwrap();
        let Some(Command::Serve(serve)) = cli.command else {
            panic!("not serve")
        };
        serve
    }

    #[test]
    fn plain_http_has_its_own_pool_deadline_and_no_sentinels_unless_told() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let plain = serve(&["--protocol", "http", "--action", "a.wasm"])
            .to_config(false, false)
            .unwrap();
        assert_eq!(plain.pool.concurrency, 2 * cpus);
        assert_eq!(plain.pool.timeout, Some(Duration::from_secs(60)));
        assert!(!plain.logs.sentinels);
        assert_eq!(
            plain.limits.header_read_timeout,
            Some(Duration::from_secs(30))
        );
        let told = serve(&[
            "--protocol",
            "http",
            "--action",
            "a.wasm",
            "--concurrency",
            "3",
            "--timeout",
            "5s",
            "--header-read-timeout",
            "0",
        ])
        .to_config(false, false)
        .unwrap();
        assert_eq!(told.limits.header_read_timeout, None, "0 is no limit");
        assert_eq!(
            (told.pool.concurrency, told.pool.timeout),
            (3, Some(Duration::from_secs(5)))
        );
        // OpenWhisk's protocol keeps its defaults.
        let openwhisk = serve(&[]).to_config(false, false).unwrap();
        assert_eq!(
            (openwhisk.pool.concurrency, openwhisk.pool.timeout),
            (1, None)
        );
        assert!(openwhisk.logs.sentinels);
        // The invoker keeps its connections open between activations.
        assert_eq!(openwhisk.limits.header_read_timeout, None);
    }

    #[test]
    fn run_has_a_timeout_by_default_and_no_server_flags() {
        let cli = Cli::try_parse_from(["wasmloop", "run", "a.wasm"]).unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        let config = run.to_config(cli.verbose).unwrap();
        assert_eq!(config.pool.timeout, Some(Duration::from_secs(30)));
        assert!(!config.logs.reports);
        // -v asks for each input's report before the subcommand as after it.
        for args in [
            ["wasmloop", "-v", "run", "a.wasm"],
            ["wasmloop", "run", "a.wasm", "-v"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            let Some(Command::Run(run)) = cli.command else {
                panic!("not run")
            };
            assert!(run.to_config(cli.verbose).unwrap().logs.reports, "{args:?}");
        }
        let wasm = config.backends.get::<crate::executor::wasm::WasmSettings>();
        assert_eq!(
            wasm.map(|w| w.compiler),
            Some(crate::executor::wasm::WasmCompiler::Tiered),
            "the wasm folder's flags were read"
        );
        assert!(!config.logs.sentinels);
        assert!(Cli::try_parse_from(["wasmloop", "run", "a.wasm", "--max-queue", "3"]).is_err());
    }

    #[test]
    fn port_is_where_to_listen_unless_listen_says() {
        let given: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(listen_addr(Some(given), Some("7".into())).unwrap(), given);
        assert_eq!(
            listen_addr(None, Some("7000".into())).unwrap().to_string(),
            "0.0.0.0:7000"
        );
        assert_eq!(listen_addr(None, None).unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(listen_addr(None, Some(String::new())).unwrap().port(), 8080);
        let bad = listen_addr(None, Some("http".into()))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("PORT=\"http\" is no port number"), "{bad}");
    }

    #[test]
    fn the_reference_proxys_flags_become_ours() {
        assert_eq!(rewrite(&["w", "-version"]), ["w", "--version"]);
        assert_eq!(rewrite(&["w", "-debug"]), ["w", "--debug"]);
        assert_eq!(
            rewrite(&["w", "-debug", "-compile", "niam", "-env", "{}"]),
            ["w", "ow-compile", "niam", "--env-json", "{}", "--debug"]
        );
        assert_eq!(
            rewrite(&["w", "serve", "--listen", "0.0.0.0:1"]),
            ["w", "serve", "--listen", "0.0.0.0:1"]
        );
    }
}
