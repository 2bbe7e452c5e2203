//! The command line: every setting as a flag with an environment twin, turned into a `Config`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Config};

#[derive(Debug, Parser)]
#[command(
    name = "wasmloop",
    version,
    about = "Runs OpenWhisk actions (WebAssembly or native executables) behind the ActionLoop protocol",
    long_about = "Runs OpenWhisk actions behind the ActionLoop protocol: POST /init once with the \
                  action's code, then POST /run for each activation. With no subcommand it serves.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Print the runtime's own diagnostics on stderr (RUST_LOG gives finer control).
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
    Run(RunArgs),
    /// Compile a WebAssembly module ahead of time (load it with --allow-precompiled, or sign
    /// it with --sign-key for runtimes that --trust-key the signer).
    Compile(CompileArgs),
    /// Make a key pair for signed artifacts: DIR/sign.key (keep it secret) and
    /// DIR/verify.key (give it to runtimes as --trust-key).
    Keygen(KeygenArgs),
    /// Write a hello action project for a language, with its SDK, into a new folder.
    New(NewArgs),
    /// Compare the backends: the same hello through each, over real HTTP, in one table.
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
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
    /// Sign a WebAssembly upload's precompiled code into the zip (see `compile --sign-key`).
    #[arg(long, env = "WASMLOOP_SIGN_KEY", value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[cfg(feature = "bench")]
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Measured activations per row (after the warm-up).
    #[arg(long, default_value_t = 10_000)]
    pub hits: usize,
    /// Activations per row before measuring.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: usize,
    /// Keep-alive connections sending at once.
    #[arg(long, short, default_value_t = 1)]
    pub connections: usize,
    /// Instances (or children) each server runs at once (its --concurrency) [default: 1;
    /// with --compare, 8, so that 8 connections meet 8 instances].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: Option<u16>,
    /// Compare one action across backends, compilers and instance lifetimes instead of
    /// the rows: cold /init (compiled, from the cache, signed), warm latency and req/s at 1
    /// and 8 connections with their spread over rounds, memory, and the time from a crash
    /// to the next answer. The action's forms are --wasm, --component and --native (see
    /// --forms); --out writes report.html and compare.csv.
    #[arg(long)]
    pub compare: bool,
    /// With --compare: a project `wasmloop new` made (or one laid out the same way),
    /// built with its language's own tools into every form the language reaches (Rust: a
    /// module, a component and a native executable; Go and C: a module and a native one;
    /// Python and JavaScript: a component), instead of --wasm, --component and --native.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// With --compare: which forms of the action to compare.
    #[arg(long, value_delimiter = ',', default_value = "module,component,native")]
    pub forms: Vec<crate::bench::Form>,
    /// With --compare: fresh servers per cold /init figure (the median is shown).
    #[arg(long, default_value_t = 5)]
    pub cold_runs: usize,
    /// With --compare: rounds each variant's hits are split into, taken in turns across
    /// the variants; the spread over rounds is shown beside each median.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// With --compare: a /run body that crashes the action, to time the next answer after
    /// a crash [default: `{"value":{"crash":true}}` for the examples' hello; for a body of
    /// your own, natively its process is killed instead, and WebAssembly rows show none].
    #[arg(long)]
    pub crash_body: Option<String>,
    /// Which rows, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm,component,pipe,exec,floor"
    )]
    pub rows: Vec<crate::bench::Row>,
    /// The WebAssembly hello (wasm-examples/build.sh makes it).
    #[arg(long, default_value = "wasm-examples/out/hello-rust.wasm")]
    pub wasm: PathBuf,
    /// The native hello (native-examples/build.sh makes it).
    #[arg(long, default_value = "native-examples/out/hello-rust")]
    pub native: PathBuf,
    /// The Python hello, a zip of the launcher and main.py (native-examples/build.sh).
    #[arg(long, default_value = "native-examples/out/hello-python.zip")]
    pub python: PathBuf,
    /// The Rust hello as a component (component-examples/build.sh makes it).
    #[arg(long, default_value = "component-examples/out/hello-rust.wasm")]
    pub component: PathBuf,
    /// The Python hello as a component (component-examples/build.sh makes it).
    #[arg(long, default_value = "component-examples/out/hello-python.wasm")]
    pub python_component: PathBuf,
    /// Measure a running, initialized server's /run instead (e.g. http://127.0.0.1:8080/run).
    /// By default each request is the hello's, `{"value":{"name":"bench<N>"}}`, and only
    /// the status is checked; --body and --expect change that.
    #[arg(long)]
    pub url: Option<String>,
    /// The whole /run body each request sends, e.g. '{"value":{"text":"a b"}}' (instead of
    /// the hello's `{"value":{"name":"bench<N>"}}`).
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// A file of /run bodies, one per line, sent in turn.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// The exact answer every request must get (a trailing newline is added if missing);
    /// other answers count as errors. Without it, the hello's greeting is expected for the
    /// hello's body, and any 200 for a body of your own.
    #[arg(long)]
    pub expect: Option<String>,
    /// Also write bench.csv and latency.svg into this folder (with --compare, report.html
    /// and compare.csv).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, env = "WASMLOOP_LISTEN", default_value = config::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
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
        let runtime = self.runtime.to_config()?;
        Ok(Config {
            allow_reinit: debug,
            hints: runtime.hints || debug || verbose,
            built_in_action: self
                .action
                .clone()
                .map(|file| (file, self.action_main.clone())),
            ..runtime
        })
    }

    /// One thread per activation that can run at once: with one, every hop between the
    /// connection, the activation and the instance stays on one thread (a second idle
    /// worker gets woken by each of them: 2.5 context switches per request instead of 1.1
    /// in `perf stat`, and ~50% more CPU per activation on a 2-core machine).
    pub fn worker_threads(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        match self.threads {
            Some(n) => usize::from(n),
            None => usize::from(self.runtime.concurrency).min(cpus),
        }
    }
}

/// Whose signed artifacts load without compiling: the same flag for `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    /// A verify key (from `wasmloop keygen`) whose signed artifacts' precompiled code is
    /// loaded without compiling (repeatable; the variable takes a comma-separated list).
    /// Other uploads, and artifacts it did not sign, are compiled as usual.
    #[arg(
        long = "trust-key",
        env = "WASMLOOP_TRUST_KEY",
        value_name = "FILE",
        value_delimiter = ','
    )]
    pub trust_keys: Vec<PathBuf>,
}

/// Where components may connect: the same flag for `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct OutboundArgs {
    /// Hosts and ports WebAssembly components may reach, comma-separated: host:port, host:*,
    /// *:port or * (e.g. api.example.com:443,127.0.0.1:6379), for TCP and UDP connects and
    /// HTTP requests alike. Empty (the default): no network at all.
    #[arg(
        long,
        env = "WASMLOOP_ALLOW_OUTBOUND",
        value_name = "LIST",
        default_value = ""
    )]
    pub allow_outbound: crate::outbound::AllowList,
}

/// `wasmloop run`: only what applies to one local process running one action.
#[derive(Debug, Clone, Args)]
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
    /// Stop an activation (and the start-up) that takes longer than this (e.g. 500ms, 2m).
    #[arg(long, value_parser = humantime::parse_duration, default_value = config::DEFAULT_RUN_TIMEOUT)]
    pub timeout: Duration,
    /// Ask the action to acknowledge its start with {"ok":true} on its result channel, as
    /// runtime images with OW_WAIT_FOR_ACK do (a launcher that cannot start then says why).
    #[arg(long)]
    pub wait_for_ack: bool,
    /// Which compiler makes machine code of WebAssembly modules (as for `serve`).
    #[arg(long, value_enum, default_value_t = config::DEFAULT_WASM_COMPILER)]
    pub wasm_compiler: config::WasmCompiler,
    /// Cap on the WebAssembly instance's linear memory, in bytes [default: 256 MiB, or
    /// less to fit within the memory limit of the cgroup wasmloop runs in].
    #[arg(long)]
    pub max_memory_bytes: Option<usize>,
    /// Folder for compiled WebAssembly modules [default: <temp dir>/wasmloop-cache].
    #[arg(long, env = "WASMLOOP_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the module afresh; keep nothing on disk.
    #[arg(long, env = "WASMLOOP_NO_CACHE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_cache: bool,
    #[command(flatten)]
    pub outbound: OutboundArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Accept a module precompiled by `wasmloop compile` (its machine code runs unchecked).
    #[arg(long)]
    pub allow_precompiled: bool,
    /// Compiler hook for uploads that are not executables, as for `serve`.
    #[arg(long, env = "OW_COMPILER")]
    pub compiler: Option<PathBuf>,
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
    /// Activations one instance serves before a fresh one replaces it, as for `serve`
    /// (1: each input meets a fresh instance; 0: no limit).
    #[arg(long, value_name = "N", default_value_t = config::DEFAULT_MAX_ACTIVATIONS_PER_INSTANCE)]
    pub max_activations_per_instance: u32,
}

impl RunArgs {
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
            timeout: self.timeout,
            raw: self.raw,
        }
    }

    /// The run's settings; fails on a trusted key that cannot be read.
    pub fn to_config(&self) -> anyhow::Result<Config> {
        let defaults = Config::default();
        Ok(Config {
            trust_keys: crate::signing::read_trusted(&self.trust.trust_keys)?,
            compiler: hook(&self.compiler),
            path_env: std::env::var("PATH").ok(),
            wait_for_ack: self.wait_for_ack.then(|| "1".to_owned()),
            inherited_env: inherited_ow_env(),
            ack_timeout: self.timeout,
            timeout: Some(self.timeout),
            max_memory_bytes: memory_cap(self.max_memory_bytes, 1),
            wasm_compiler: self.wasm_compiler,
            cache_dir: cache_dir(&self.cache_dir, self.no_cache, &defaults),
            allow_precompiled: self.allow_precompiled,
            allow_outbound: self.outbound.allow_outbound.clone(),
            max_activations_per_instance: self.max_activations_per_instance,
            sentinels: false,
            // A person at a terminal, not a platform's log reader.
            hints: true,
            one_shot: true,
            ..defaults
        })
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

#[derive(Debug, Clone, Args)]
pub struct CompileArgs {
    /// The WebAssembly module to compile.
    pub input: PathBuf,
    /// Where to write the precompiled module.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The compiler to use (must match the server's; tiered makes Cranelift code, what a
    /// tiered server ends up running).
    #[arg(long, env = "WASMLOOP_WASM_COMPILER", value_enum, default_value_t = config::DEFAULT_WASM_COMPILER)]
    pub wasm_compiler: config::WasmCompiler,
    /// Set by a server that compiles in a child process: the module goes to stdout, errors
    /// are printed bare, the child dies with the server, and `background` lowers its
    /// priority and compiles on one core.
    #[arg(long, hide = true, value_enum)]
    pub for_server: Option<config::ChildRole>,
    /// The server's pid (with --for-server): a child whose server is gone gives up.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
    /// Write a signed artifact instead: a zip of the module, its precompiled code and a
    /// signature with this key (from `wasmloop keygen`). Runtimes that --trust-key its verify
    /// key load the code without compiling; others compile the module inside.
    #[arg(long, env = "WASMLOOP_SIGN_KEY", value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
}

impl CompileArgs {
    /// The memory cap is the server's business: it leaves the machine code unchanged
    /// (a module compiled under a 1 MiB cap and one under 256 MiB are the same bytes), so
    /// compiling takes no cap.
    pub fn engine_settings(&self) -> config::EngineSettings {
        config::EngineSettings {
            memory_cap: config::DEFAULT_MAX_MEMORY_BYTES,
            codegen: self.wasm_compiler.final_tier(),
            // Compiling makes no instances.
            instances: 1,
        }
    }
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// The settings of the runtime itself, shared by `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// Folder in which each /init unpacks its action into a fresh folder [default: the system temp dir].
    #[arg(long, env = "WASMLOOP_ACTION_DIR")]
    pub action_dir: Option<PathBuf>,
    /// Compiler hook run as `COMPILER <main> <srcdir> <bindir>` for uploads that are not executables.
    #[arg(long, env = "OW_COMPILER")]
    pub compiler: Option<PathBuf>,
    /// When non-empty, actions must write {"ok":true} on their result channel once ready.
    #[arg(long, env = "OW_WAIT_FOR_ACK")]
    pub wait_for_ack: Option<String>,
    /// When non-empty, the action's bin/exec.env must hold this value.
    #[arg(long, env = "OW_EXECUTION_ENV")]
    pub execution_env: Option<String>,
    /// When non-empty, /init errors are written to the logs and the client gets a generic message.
    #[arg(long, env = "OW_LOG_INIT_ERROR", num_args = 0..=1, default_missing_value = "1")]
    pub log_init_error: Option<String>,
    /// Largest /init body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "WASMLOOP_MAX_INIT_BYTES", default_value_t = config::DEFAULT_MAX_INIT_BYTES)]
    pub max_init_bytes: usize,
    /// Largest /run body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "WASMLOOP_MAX_RUN_BYTES", default_value_t = config::DEFAULT_MAX_RUN_BYTES)]
    pub max_run_bytes: usize,
    /// Longest result line an action may return, in bytes; longer ones get 502.
    #[arg(long, env = "WASMLOOP_MAX_RESULT_BYTES", default_value_t = config::DEFAULT_MAX_RESULT_BYTES)]
    pub max_result_bytes: usize,
    /// Most entries an uploaded archive may hold.
    #[arg(long, env = "WASMLOOP_MAX_ARCHIVE_ENTRIES", default_value_t = config::DEFAULT_MAX_ARCHIVE_ENTRIES)]
    pub max_archive_entries: usize,
    /// Most bytes an uploaded archive may unpack to.
    #[arg(long, env = "WASMLOOP_MAX_UNPACKED_BYTES", default_value_t = config::DEFAULT_MAX_UNPACKED_BYTES)]
    pub max_unpacked_bytes: u64,
    /// How long an action may take to acknowledge start-up (e.g. 500ms, 60s, 2m).
    #[arg(long, env = "WASMLOOP_ACK_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_ACK_TIMEOUT)]
    pub ack_timeout: Duration,
    /// How long a native action without ack must stay alive after spawning to count as
    /// started; after that, it has started once it reads its stdin (or after 1 s alive).
    #[arg(long, env = "WASMLOOP_START_PROBE", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_START_PROBE)]
    pub start_probe: Duration,
    /// How long the OW_COMPILER hook, or compiling a WebAssembly module, may take.
    #[arg(long, env = "WASMLOOP_COMPILE_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_COMPILE_TIMEOUT)]
    pub compile_timeout: Duration,
    /// Cap on each WebAssembly instance's linear memory, in bytes; growing past it traps
    /// [default: 256 MiB, or less so that --concurrency instances fit within the container's
    /// memory limit (cgroup v1 or v2) with room left for the runtime].
    #[arg(long, env = "WASMLOOP_MAX_MEMORY_BYTES")]
    pub max_memory_bytes: Option<usize>,
    /// Which compiler makes machine code of WebAssembly modules: tiered serves Winch's
    /// code (fast to make) until Cranelift's (fast to run) is ready; see docs/deploying.md.
    #[arg(long, env = "WASMLOOP_WASM_COMPILER", value_enum, default_value_t = config::DEFAULT_WASM_COMPILER)]
    pub wasm_compiler: config::WasmCompiler,
    /// Folder for compiled WebAssembly modules, reused across /inits and restarts [default: <temp dir>/wasmloop-cache].
    #[arg(long, env = "WASMLOOP_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every module afresh; keep nothing on disk.
    #[arg(long, env = "WASMLOOP_NO_CACHE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_cache: bool,
    /// How many instances (wasm) or children (native) of the action run activations in
    /// parallel; each keeps its own state.
    #[arg(long, env = "WASMLOOP_CONCURRENCY", default_value_t = config::DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Activations one instance (wasm) or child (native) serves before a fresh one replaces
    /// it: 1 gives every activation a fresh instance, with nothing left over from the one
    /// before; the fresh one is made while the last answer goes out. 0: no limit (each
    /// instance lives as long as the action, keeping its state between activations).
    #[arg(long, env = "WASMLOOP_MAX_ACTIVATIONS_PER_INSTANCE", value_name = "N",
          default_value_t = config::DEFAULT_MAX_ACTIVATIONS_PER_INSTANCE)]
    pub max_activations_per_instance: u32,
    /// Replace an instance (or child) whose memory grew past this many bytes (a wasm
    /// instance's linear memories; a child's resident set) once its activation has ended;
    /// the activation itself is answered as usual [default: never].
    #[arg(long, env = "WASMLOOP_RECYCLE_ABOVE_MEMORY", value_name = "BYTES")]
    pub recycle_above_memory: Option<u64>,
    /// How many activations may wait when every instance is busy; beyond that, 429 with `Retry-After: 1`.
    #[arg(long, env = "WASMLOOP_MAX_QUEUE", default_value_t = config::DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Stop any activation that runs longer than this (e.g. 30s), even without a deadline.
    #[arg(long, env = "WASMLOOP_TIMEOUT", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// After SIGTERM, how long in-flight activations may still run before the action is killed.
    #[arg(long, env = "WASMLOOP_SHUTDOWN_TIMEOUT", value_parser = humantime::parse_duration,
          default_value = config::DEFAULT_SHUTDOWN_TIMEOUT)]
    pub shutdown_timeout: Duration,
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
    #[command(flatten)]
    pub outbound: OutboundArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Accept modules precompiled by `wasmloop compile`. Their machine code runs unchecked:
    /// only for uploads you trust.
    #[arg(long, env = "WASMLOOP_ALLOW_PRECOMPILED", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_precompiled: bool,
    /// Which backends may run an upload, comma-separated: an image for sandboxed actions
    /// sets `wasm,component`, and a native executable is then refused at /init instead of
    /// running with the container's privileges.
    #[arg(
        long,
        env = "WASMLOOP_BACKENDS",
        value_name = "LIST",
        value_enum,
        value_delimiter = ',',
        default_value = config::DEFAULT_BACKENDS
    )]
    pub backends: Vec<config::Backend>,
    /// Files (and folders) each WebAssembly instance may hold open; past it, opening one
    /// fails in the guest ("too many open files") and the logs name this cap.
    #[arg(long, env = "WASMLOOP_MAX_INSTANCE_FILES", default_value_t = config::DEFAULT_MAX_INSTANCE_FILES)]
    pub max_instance_files: usize,
    /// Sockets each WebAssembly component may hold open, HTTP requests' connections among
    /// them; past it, connecting fails in the guest and the logs name this cap.
    #[arg(long, env = "WASMLOOP_MAX_INSTANCE_SOCKETS", default_value_t = config::DEFAULT_MAX_INSTANCE_SOCKETS)]
    pub max_instance_sockets: usize,
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
        Ok(Config {
            trust_keys: crate::signing::read_trusted(&self.trust.trust_keys)?,
            ..self.to_config_untrusting()
        })
    }

    /// The settings without the trusted keys, which `-compile` (only packing an upload)
    /// never reads.
    pub fn to_config_untrusting(&self) -> Config {
        let defaults = Config::default();
        Config {
            action_dir: self
                .action_dir
                .clone()
                .unwrap_or(defaults.action_dir.clone()),
            compiler: hook(&self.compiler),
            wait_for_ack: non_empty(&self.wait_for_ack),
            execution_env: non_empty(&self.execution_env),
            log_init_error: non_empty(&self.log_init_error).is_some(),
            inherited_env: inherited_ow_env(),
            path_env: std::env::var("PATH").ok(),
            allow_reinit: defaults.allow_reinit,
            built_in_action: defaults.built_in_action.clone(),
            max_init_bytes: self.max_init_bytes,
            max_run_bytes: self.max_run_bytes,
            max_result_bytes: self.max_result_bytes,
            max_archive_entries: self.max_archive_entries,
            max_unpacked_bytes: self.max_unpacked_bytes,
            ack_timeout: self.ack_timeout,
            start_probe: self.start_probe,
            compile_timeout: self.compile_timeout,
            background_compile_timeout: self.compile_timeout,
            max_memory_bytes: memory_cap(self.max_memory_bytes, usize::from(self.concurrency)),
            wasm_compiler: self.wasm_compiler,
            cache_dir: cache_dir(&self.cache_dir, self.no_cache, &defaults),
            allow_precompiled: self.allow_precompiled,
            trust_keys: Vec::new(),
            allow_outbound: self.outbound.allow_outbound.clone(),
            concurrency: usize::from(self.concurrency),
            max_activations_per_instance: self.max_activations_per_instance,
            recycle_above_memory: self.recycle_above_memory,
            max_queue: self.max_queue,
            timeout: self.timeout,
            shutdown_timeout: self.shutdown_timeout,
            log_format: self.log_format,
            // A log pipeline (json) is an operator's, never the platform's canonical default.
            hints: self.hints || self.log_format == crate::logs::LogFormat::Json,
            sentinels: defaults.sentinels,
            one_shot: false,
            backends: self.backends.clone(),
            max_instance_files: self.max_instance_files,
            max_instance_sockets: self.max_instance_sockets,
            compile_exe: defaults.compile_exe.clone(),
            guest_descriptors: config::guest_descriptors(
                config::raise_open_file_limit(),
                usize::from(self.concurrency),
            ),
        }
    }
}

/// The compiler hook, if set to something (OpenWhisk treats an empty variable as unset).
fn hook(flag: &Option<PathBuf>) -> Option<PathBuf> {
    flag.clone().filter(|p| !p.as_os_str().is_empty())
}

/// The compile cache's folder: the flag's, the default, or none with `--no-cache`.
fn cache_dir(flag: &Option<PathBuf>, no_cache: bool, defaults: &Config) -> Option<PathBuf> {
    if no_cache {
        None
    } else {
        flag.clone().or(defaults.cache_dir.clone())
    }
}

/// The flag's cap, or one that fits `instances` instances in the container's memory limit.
fn memory_cap(flag: Option<usize>, instances: usize) -> usize {
    flag.unwrap_or_else(|| {
        let limit = crate::memory::container_limit();
        let cap = crate::memory::default_cap(limit, instances, config::DEFAULT_MAX_MEMORY_BYTES);
        if let Some(limit) = limit {
            tracing::debug!(
                limit,
                instances,
                cap,
                "wasm memory cap from the container's limit"
            );
        }
        cap
    })
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
                Some(Command::Run(run)) => run.to_config(),
                _ => panic!("neither serve nor run"),
            }
            .unwrap()
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
    fn run_has_a_timeout_by_default_and_no_server_flags() {
        let cli = Cli::try_parse_from(["wasmloop", "run", "a.wasm"]).unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        let config = run.to_config().unwrap();
        assert_eq!(config.timeout, Some(Duration::from_secs(30)));
        assert_eq!(config.wasm_compiler, config::WasmCompiler::Tiered);
        assert!(!config.sentinels);
        assert!(Cli::try_parse_from(["wasmloop", "run", "a.wasm", "--max-queue", "3"]).is_err());
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
