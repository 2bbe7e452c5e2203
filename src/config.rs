//! Runtime settings and their defaults: the one place where a default value lives.

use std::path::PathBuf;
use std::time::Duration;

/// Where the server listens unless told otherwise (the reference proxy uses `:8080`).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// The platform caps an action at 48 MB; base64 grows it by 4/3 and JSON adds a little.
pub const DEFAULT_MAX_INIT_BYTES: usize = 72 * 1024 * 1024;
/// The platform caps a payload at 1 MB (5 MB on some deployments); leave ample room.
pub const DEFAULT_MAX_RUN_BYTES: usize = 16 * 1024 * 1024;
/// A result line longer than this is refused rather than buffered without bound.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;
/// Archives with more entries than this are refused (a 48 MB zip of empty files is ~1M entries).
pub const DEFAULT_MAX_ARCHIVE_ENTRIES: usize = 10_000;
/// Unpacked archives larger than this are refused (decompression bombs).
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 512 * 1024 * 1024;
/// How long a child may take to write its ack (the reference waits forever).
pub const DEFAULT_ACK_TIMEOUT: &str = "60s";
/// How long the `OW_COMPILER` hook, or compiling a wasm module, may run.
pub const DEFAULT_COMPILE_TIMEOUT: &str = "10m";
/// The platform may send up to 500 activations at once to one container: queue twice that.
pub const DEFAULT_MAX_QUEUE: usize = 1024;
/// How long one activation of `wasmloop run` may take unless told otherwise: a mistake
/// that makes an action wait forever must not hang a terminal.
pub const DEFAULT_RUN_TIMEOUT: &str = "30s";
/// How long a request's body may take to arrive: a client that sends it slower holds a
/// connection and a buffer, never longer than this.
pub const DEFAULT_BODY_READ_TIMEOUT: &str = "60s";
/// `--header-read-timeout` under `--protocol http` (hyper's own default).
pub const DEFAULT_HTTP_HEADER_READ_TIMEOUT: &str = "30s";
/// How long in-flight activations may finish after SIGTERM (platforms wait ~10 s, then kill).
pub const DEFAULT_SHUTDOWN_TIMEOUT: &str = "8s";
/// `--drain-period` under `--protocol http`: a Kubernetes Service keeps routing to a pod
/// for a while after SIGTERM (until its readiness probe has failed `failureThreshold`
/// times, 3 by default, and the endpoints have caught up): with a 2 s probe, 6 s and a
/// margin. With the shutdown timeout it fits Kubernetes' default 30 s grace period.
pub const DEFAULT_HTTP_DRAIN_PERIOD: &str = "15s";
/// Activations an instance (or child) serves before a fresh one replaces it: 0 is no
/// limit, the ActionLoop's persistent model.
pub const DEFAULT_MAX_ACTIVATIONS_PER_INSTANCE: u32 = 0;
/// Instances (or children) of an action at once: one, as the platform's own runtimes.
pub const DEFAULT_CONCURRENCY: u16 = 1;
/// The entry point name an `/init` without `main` gets, as the platform's default.
pub use wasmloop_common::DEFAULT_MAIN;
/// Our own executable, as the kernel keeps it.
pub const SELF_EXE: &str = "/proc/self/exe";
/// Liveness and readiness under either protocol: paths no action is ever given.
pub const HEALTH_PATH: &str = "/.well-known/wasmloop/health";
pub const READY_PATH: &str = "/.well-known/wasmloop/ready";
/// `--protocol http`: how long a request may take unless `--timeout` says (no platform
/// sends a deadline there).
pub const DEFAULT_HTTP_TIMEOUT: &str = "60s";
/// What `__OW_PROXY_VERSION` tells an action.
pub const PROXY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The error of a compile stopped by `--compile-timeout`, for sources and modules alike.
pub fn compile_timed_out(timeout: Duration) -> String {
    format!(
        "compiling took longer than {} (see --compile-timeout)",
        humantime::format_duration(timeout)
    )
}

/// Durations are written as text (`500ms`, `60s`) so that `--help` shows them as typed;
/// this reads one of the defaults above.
pub fn duration(text: &str) -> Duration {
    humantime::parse_duration(text).expect("the default durations above are well-formed")
}

/// Everything the runtime needs to know, resolved once at start-up, grouped by what each
/// part governs. Making one does nothing to the process: `fit_to_host` (where a server or
/// a local run starts) raises the open-file limit and reads the container's memory limit.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// What HTTP bodies, uploads and answers may weigh.
    pub limits: Limits,
    /// How an upload becomes a started action.
    pub action: ActionSettings,
    /// Each backend folder's own settings, read from its own flags: the config names none
    /// of them.
    pub backends: Backends,
    /// The instances (or children) of an action and the activations that wait for them.
    pub pool: PoolSettings,
    /// What the runtime writes on the container's streams besides the action's lines.
    pub logs: LogSettings,
    /// How requests reach the action.
    pub protocol: Protocol,
}

/// How requests reach the action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// OpenWhisk's ActionLoop: POST /init with the code, POST /run for each activation.
    #[default]
    #[value(name = "openwhisk")]
    OpenWhisk,
    /// Every request on every path goes to the built-in action (--action) as HTTP, as
    /// Kubernetes, Knative Serving and Cloud Run send it: an OpenWhisk web action's value
    /// in, its result out as the response.
    Http,
}

/// A backend folder's own settings, which its flags fill (`executor::registry::Flags`):
/// kept in `Config` by their type, so that this module names no backend.
pub trait BackendSettings: std::any::Any + Send + Sync + std::fmt::Debug + CloneSettings {
    /// Fits them to the host, where a server or a local run starts: `descriptors` are what
    /// the runtime leaves its guests of the open-file limit, `instances` how many of the
    /// action run at once.
    fn fit_to_host(&mut self, _descriptors: usize, _instances: usize) {}
}

/// `Clone` for boxed settings (`Config` is cloned whole).
pub trait CloneSettings {
    fn clone_box(&self) -> Box<dyn BackendSettings>;
}

impl<T: BackendSettings + Clone> CloneSettings for T {
    fn clone_box(&self) -> Box<dyn BackendSettings> {
        Box::new(self.clone())
    }
}

/// The backends' settings, one value per type.
#[derive(Debug, Default)]
pub struct Backends(Vec<Box<dyn BackendSettings>>);

impl Clone for Backends {
    fn clone(&self) -> Self {
        Backends(self.0.iter().map(|s| s.clone_box()).collect())
    }
}

impl Backends {
    /// The settings of type `T`, as their flags were read (`None` where none were: a
    /// `Config::default()`, which a backend reads as its defaults).
    pub fn get<T: BackendSettings>(&self) -> Option<&T> {
        self.0
            .iter()
            .find_map(|s| (&**s as &dyn std::any::Any).downcast_ref())
    }

    /// The settings of type `T`, made with their defaults if none were read.
    pub fn get_mut<T: BackendSettings + Default>(&mut self) -> &mut T {
        let at = match self
            .0
            .iter()
            .position(|s| (&**s as &dyn std::any::Any).is::<T>())
        {
            Some(at) => at,
            None => {
                self.0.push(Box::new(T::default()));
                self.0.len() - 1
            }
        };
        (&mut *self.0[at] as &mut dyn std::any::Any)
            .downcast_mut()
            .unwrap_or_else(|| unreachable!("found by its type just above"))
    }
}

/// Caps on what a request, an upload or an answer may weigh.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long a request's body may take to arrive (408 past it).
    pub body_read_timeout: Duration,
    /// How long a request's head may take to arrive (the connection is closed past it).
    pub header_read_timeout: Option<Duration>,
    pub max_init_bytes: usize,
    pub max_run_bytes: usize,
    pub max_result_bytes: usize,
    pub max_archive_entries: usize,
    pub max_unpacked_bytes: u64,
}

/// How an upload is unpacked, checked and started.
#[derive(Debug, Clone)]
pub struct ActionSettings {
    /// Folder under which each `/init` gets a fresh folder of its own.
    pub dir: PathBuf,
    /// `OW_COMPILER`: the hook that turns sources into `bin/exec`.
    pub compiler_hook: Option<PathBuf>,
    /// Our own `PATH`, which the compiler hook (and only it) gets.
    pub path_env: Option<String>,
    /// `OW_WAIT_FOR_ACK` (non-empty): children announce readiness with `{"ok":true}`.
    pub wait_for_ack: Option<String>,
    /// `OW_EXECUTION_ENV` (non-empty): `bin/exec.env` must hold this value.
    pub execution_env: Option<String>,
    /// The runtime's own `__OW_*` variables, passed on to every action.
    pub inherited_env: Vec<(String, String)>,
    /// `--action`: the image's own action file and its `main`, installed at start-up.
    pub built_in: Option<(PathBuf, String)>,
    /// What the built-in action is called in log lines and reports (`--action-name`).
    pub name: Option<String>,
    /// `-debug` of the reference proxy: allow more than one `/init`.
    pub allow_reinit: bool,
    pub ack_timeout: Duration,
    pub compile_timeout: Duration,
    /// `--compile-timeout` for the background compile of a tiered start, which an
    /// `/init`'s deadline does not shorten.
    pub background_compile_timeout: Duration,
    /// The backends an upload may run on, by name (`--backends`); others are refused at
    /// `/init`. `None`: every one registered (`executor::registry::BACKENDS`).
    pub backends: Option<Vec<&'static str>>,
    /// The runtime serves one local run and ends (`wasmloop run`): a background tier-up
    /// would never finish, so a tiered compiler's quick code is what it serves and keeps in
    /// the compile cache for the next run; and each compile is told on stderr, where a
    /// person reads.
    pub one_shot: bool,
}

/// How many instances (or children) run an action, for how long, and who waits.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// How many instances (wasm) or children (native) of the action may run at once.
    pub concurrency: usize,
    /// Activations one instance (or child) serves before it is replaced by a fresh one
    /// (0: no limit).
    pub max_activations_per_instance: u32,
    /// An instance (or child) holding more memory than this after an activation is
    /// replaced by a fresh one (`--recycle-above-memory`).
    pub recycle_above_memory: Option<u64>,
    /// How many activations may wait for one when all are busy; more get 429.
    pub max_queue: usize,
    /// Runtime-wide cap on one activation (the request's own deadline may be earlier).
    pub timeout: Option<Duration>,
    /// How long in-flight activations may still run after SIGTERM (after the drain period).
    pub shutdown_timeout: Duration,
    /// After SIGTERM, how long requests are still served while readiness answers 503
    /// (`--drain-period`, under `--protocol http`; none under OpenWhisk's, whose invoker
    /// reads a 503 as "place it elsewhere").
    pub drain_period: Duration,
}

/// What goes on the container's stdout and stderr besides the action's own lines.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// How the action's log lines (and the runtime's own) are written.
    pub format: crate::logs::LogFormat,
    /// Explain on stderr an answer that is not a JSON object or array (what it was, what to
    /// change). Off where the platform reads stderr as the action's logs and its runtime
    /// tests expect only the action's own lines there; on under `wasmloop run`, `-debug`,
    /// `-v`, `--log-format json` and `--hints`.
    pub hints: bool,
    /// Mark the end of each activation's logs (off for `wasmloop run`, which has no platform).
    pub sentinels: bool,
    /// `OW_LOG_INIT_ERROR` (non-empty): init errors go to the logs, the client gets a generic text.
    pub log_init_error: bool,
    /// End each activation's logs with its report (time, CPU, memory, instance): under
    /// `--log-format json` as a record, under `wasmloop run -v` as a line.
    pub reports: bool,
}

/// The open-file limit Linux starts a process with: what `Config::default` assumes until
/// `fit_to_host` looks.
pub const USUAL_OPEN_FILE_LIMIT: u64 = 1024;

/// What the runtime leaves its guests of an open-file limit of `nofile`: it keeps 128,
/// and 4 per instance or child (pipes, connections), for accepting connections, logging
/// and starting replacements, but never more than half.
pub fn guest_descriptors(nofile: u64, concurrency: usize) -> usize {
    let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
    let reserve = concurrency
        .saturating_mul(4)
        .saturating_add(128)
        .min(nofile / 2);
    nofile - reserve
}

/// The process's open-file limit: its soft limit, raised to the hard one (Linux starts
/// processes at 1024 whatever the hard limit allows). Done once, at start-up.
pub fn raise_open_file_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    if let Some(hard) = getrlimit(Resource::Nofile).maximum {
        let raised = Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        // Refused (a hard limit lowered since, say), the soft limit stays as it was.
        let _ = setrlimit(Resource::Nofile, raised);
    }
    open_file_limit()
}

/// The process's open-file limit as it stands (its soft limit).
pub fn open_file_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// Instances (or children) at once unless `--concurrency` says: one under OpenWhisk's
/// protocol (its invoker sends one activation at a time, as to the platform's own
/// runtimes); under `--protocol http`, where many connections arrive at once and some
/// activations wait on the network, two per CPU.
pub fn default_concurrency(protocol: Protocol, cpus: usize) -> usize {
    match protocol {
        Protocol::OpenWhisk => usize::from(DEFAULT_CONCURRENCY),
        Protocol::Http => 2 * cpus.max(1),
    }
}

/// Threads serving HTTP and running instances unless `--threads` says: one per activation
/// that can run at once, at most one per CPU. With one, every hop between the connection,
/// the activation and the instance stays on one thread (a second idle worker gets woken by
/// each of them: many more context switches per request, and more CPU per activation on
/// a 2-core machine).
pub fn default_threads(concurrency: usize, cpus: usize) -> usize {
    concurrency.min(cpus).max(1)
}

impl Config {
    /// Under `--protocol http`, what no platform provides there: a drain after SIGTERM
    /// (`drain_period`, or the default), a deadline, a bound on a request head's time
    /// (unless `head_given`), and no sentinels.
    pub fn serve_plain_http(&mut self, drain_period: Option<Duration>, head_given: bool) {
        self.pool.drain_period =
            drain_period.unwrap_or_else(|| duration(DEFAULT_HTTP_DRAIN_PERIOD));
        // The sentinels mark an activation's logs for OpenWhisk's invoker; no platform
        // reads them here.
        self.logs.sentinels = false;
        // No platform sends a deadline here: an action that never answers must not hold
        // its connection forever.
        self.pool
            .timeout
            .get_or_insert_with(|| duration(DEFAULT_HTTP_TIMEOUT));
        // A client that never finishes its request's head must not hold a connection.
        if !head_given {
            self.limits.header_read_timeout = Some(duration(DEFAULT_HTTP_HEADER_READ_TIMEOUT));
        }
    }

    /// Fits the settings to the process and the machine it runs on, where a server (or a
    /// local run) starts: raises the open-file limit to its hard limit and leaves guests
    /// what the runtime does not keep, and fits the default memory cap to the container's
    /// memory limit.
    pub fn fit_to_host(&mut self) {
        let descriptors = guest_descriptors(raise_open_file_limit(), self.pool.concurrency);
        for settings in &mut self.backends.0 {
            settings.fit_to_host(descriptors, self.pool.concurrency);
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_read_timeout: duration(DEFAULT_BODY_READ_TIMEOUT),
            header_read_timeout: None,
            max_init_bytes: DEFAULT_MAX_INIT_BYTES,
            max_run_bytes: DEFAULT_MAX_RUN_BYTES,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_archive_entries: DEFAULT_MAX_ARCHIVE_ENTRIES,
            max_unpacked_bytes: DEFAULT_MAX_UNPACKED_BYTES,
        }
    }
}

impl Default for ActionSettings {
    fn default() -> Self {
        ActionSettings {
            dir: std::env::temp_dir(),
            compiler_hook: None,
            path_env: None,
            wait_for_ack: None,
            execution_env: None,
            inherited_env: Vec::new(),
            built_in: None,
            name: None,
            allow_reinit: false,
            ack_timeout: duration(DEFAULT_ACK_TIMEOUT),
            compile_timeout: duration(DEFAULT_COMPILE_TIMEOUT),
            background_compile_timeout: duration(DEFAULT_COMPILE_TIMEOUT),
            backends: None,
            one_shot: false,
        }
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            concurrency: usize::from(DEFAULT_CONCURRENCY),
            max_activations_per_instance: DEFAULT_MAX_ACTIVATIONS_PER_INSTANCE,
            recycle_above_memory: None,
            max_queue: DEFAULT_MAX_QUEUE,
            timeout: None,
            shutdown_timeout: duration(DEFAULT_SHUTDOWN_TIMEOUT),
            drain_period: Duration::ZERO,
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: crate::logs::LogFormat::Text,
            hints: false,
            sentinels: true,
            log_init_error: false,
            reports: false,
        }
    }
}

/// The compile cache's folder unless told otherwise.
pub fn default_cache_dir() -> PathBuf {
    std::env::temp_dir().join("wasmloop-cache")
}
