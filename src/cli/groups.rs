//! The runtime's groups of flags, shared by `serve` and `run` (and `-compile`): each fills one part of `Config`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::{self, Config};
use crate::executor::registry;

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
    pub(super) fn apply(&self, action: &mut config::ActionSettings, limits: &mut config::Limits) {
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
    pub(super) fn apply(&self, config: &mut Config, start: Duration) {
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

/// What the action is called: `serve`'s built-in action in log lines and reports; under
/// `run`, in the request lines too. One flag, whose help each command words for itself.
#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// What log lines and reports call the built-in action (their `action` in json), as
    /// OpenWhisk names an action [default: the --action file's name without its extension].
    #[arg(long, env = "WASMLOOP_ACTION_NAME", value_name = "NAME")]
    pub action_name: Option<String>,
}
