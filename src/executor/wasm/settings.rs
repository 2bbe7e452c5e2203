//! The WebAssembly backends' settings, their defaults and their flags: compilers, the compile cache, trust, and each instance's caps.

use std::path::PathBuf;

use clap::Args;

use crate::config::Config;

/// Each WebAssembly instance's linear memory is capped at this.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Files one WebAssembly instance may hold open, and sockets (HTTP connections among
/// them): four instances fit in the invoker's `nofile=1024` with room for the runtime.
pub const DEFAULT_MAX_INSTANCE_FILES: usize = 64;
pub const DEFAULT_MAX_INSTANCE_SOCKETS: usize = 128;
/// The compiler unless told otherwise: `/init` answers soon, and the code gets fast.
pub const DEFAULT_WASM_COMPILER: WasmCompiler = WasmCompiler::Tiered;
/// WebAssembly's compilers, cache and caps.
#[derive(Debug, Clone)]
pub struct WasmSettings {
    /// Cap on each instance's linear memory; `None` until `fit_to_host` fits the default
    /// to the container's memory limit (`DEFAULT_MAX_MEMORY_BYTES` without one).
    pub max_memory_bytes: Option<usize>,
    /// Which compiler turns WebAssembly into machine code.
    pub compiler: WasmCompiler,
    /// Where compiled WebAssembly modules are kept between `/init`s (`None`: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Accept modules precompiled by `wasmloop compile` (their machine code is trusted).
    pub allow_precompiled: bool,
    /// Verify keys of signed artifacts whose precompiled code may be loaded (`--trust-key`),
    /// read once at start-up.
    pub trust_keys: Vec<ed25519_dalek::VerifyingKey>,
    /// Where WebAssembly components may connect and send HTTP requests (empty: nowhere).
    pub allow_outbound: crate::outbound::AllowList,
    /// Files each instance may hold open.
    pub max_instance_files: usize,
    /// Sockets (and HTTP connections) each instance may hold open.
    pub max_instance_sockets: usize,
    /// The `wasmloop` executable that compile children run: our own, even if its file was
    /// replaced or removed since we started (a program embedding the runtime names one).
    pub compile_exe: PathBuf,
    /// Descriptors the process may hold before guests are refused more: the open-file
    /// limit less what the runtime keeps for itself (`guest_descriptors`), as
    /// `fit_to_host` finds it.
    pub guest_descriptors: usize,
}

impl WasmSettings {
    /// The settings `config` holds, or the defaults where no flags were read.
    pub fn of(config: &Config) -> std::borrow::Cow<'_, WasmSettings> {
        match config.backends.get::<WasmSettings>() {
            Some(settings) => std::borrow::Cow::Borrowed(settings),
            None => std::borrow::Cow::Owned(WasmSettings::default()),
        }
    }
}

impl crate::config::BackendSettings for WasmSettings {
    /// Guests get the open-file limit's `descriptors` the runtime leaves them, and the
    /// default memory cap fits the container's memory limit among `instances` instances.
    fn fit_to_host(&mut self, descriptors: usize, instances: usize) {
        self.guest_descriptors = descriptors;
        if self.max_memory_bytes.is_none() {
            let limit = crate::memory::container_limit();
            let cap = crate::memory::default_cap(limit, instances, DEFAULT_MAX_MEMORY_BYTES);
            if let Some(limit) = limit {
                tracing::debug!(
                    limit,
                    instances,
                    cap,
                    "wasm memory cap from the container's limit"
                );
            }
            self.max_memory_bytes = Some(cap);
        }
    }
}

/// How WebAssembly becomes machine code. A cold `/init` is almost all compiling, and
/// wasmtime's two compilers trade its time against the speed of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WasmCompiler {
    /// Winch first, so that `/init` answers soon; Cranelift meanwhile, in the background.
    /// Instances made once its code is ready run it (restarts, pool growth, and instances
    /// that have not served yet); one that has served keeps its state, and its code.
    Tiered,
    /// Optimizing: the fastest code, the slowest compile.
    Cranelift,
    /// Baseline, single pass: compiles several times faster, runs slower code.
    Winch,
}

/// One of wasmtime's compilers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Codegen {
    Cranelift,
    Winch,
}

impl Codegen {
    pub fn name(self) -> &'static str {
        match self {
            Codegen::Cranelift => "cranelift",
            Codegen::Winch => "winch",
        }
    }

    /// Its place in a table of one entry per compiler.
    pub fn index(self) -> usize {
        match self {
            Codegen::Cranelift => 0,
            Codegen::Winch => 1,
        }
    }
}

/// How a server uses a compile child (`wasmloop compile --for-server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChildRole {
    /// An `/init` waits for it.
    Foreground,
    /// It makes code to replace what already serves: it must not slow the serving down.
    Background,
}

impl ChildRole {
    pub fn name(self) -> &'static str {
        match self {
            ChildRole::Foreground => "foreground",
            ChildRole::Background => "background",
        }
    }
}

impl WasmCompiler {
    /// The compiler whose code serves first, and the one whose code replaces it later.
    pub fn tiers(self) -> (Codegen, Option<Codegen>) {
        match self {
            WasmCompiler::Tiered => (Codegen::Winch, Some(Codegen::Cranelift)),
            WasmCompiler::Cranelift => (Codegen::Cranelift, None),
            WasmCompiler::Winch => (Codegen::Winch, None),
        }
    }

    /// The compiler whose code an action ends up running: what the compile cache and
    /// precompiled modules hold.
    pub fn final_tier(self) -> Codegen {
        let (first, then) = self.tiers();
        then.unwrap_or(first)
    }
}

/// What the wasm engine for `codegen`'s code is made with.
pub fn engine_settings(config: &Config, codegen: Codegen) -> EngineSettings {
    EngineSettings {
        memory_cap: WasmSettings::of(config)
            .max_memory_bytes
            .unwrap_or(DEFAULT_MAX_MEMORY_BYTES),
        codegen,
        instances: most_instances(config),
        concurrent: false,
    }
}

/// The most instances of one engine alive at once: each of `--concurrency` workers
/// (a restart comes after the worker it replaces is gone), plus the one a tier-up
/// makes before it swaps out an idle worker; with re-init allowed (`-debug`), twice
/// that, as an old action's instances live until its last activation ends.
pub fn most_instances(config: &Config) -> u32 {
    let per_action = config.pool.concurrency.max(1).saturating_add(1);
    let actions = if config.action.allow_reinit { 2 } else { 1 };
    u32::try_from(per_action.saturating_mul(actions)).unwrap_or(u32::MAX)
}

/// The settings of a wasm engine: its compiler (code made by another cannot be loaded),
/// the memory cap of its instances and how many of them its pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    pub memory_cap: usize,
    pub codegen: Codegen,
    /// Instance slots the pooling allocator reserves (see `most_instances`).
    pub instances: u32,
    /// It runs WASI 0.3 components (component-model async, many calls at once in one
    /// instance). A setting code is compiled under: such code loads only in such engines,
    /// and the others, with it off, keep the ids their cached and signed code names.
    pub concurrent: bool,
}

impl Default for WasmSettings {
    fn default() -> Self {
        WasmSettings {
            max_memory_bytes: None,
            compiler: DEFAULT_WASM_COMPILER,
            cache_dir: Some(crate::config::default_cache_dir()),
            allow_precompiled: false,
            trust_keys: Vec::new(),
            allow_outbound: crate::outbound::AllowList::default(),
            max_instance_files: DEFAULT_MAX_INSTANCE_FILES,
            max_instance_sockets: DEFAULT_MAX_INSTANCE_SOCKETS,
            compile_exe: PathBuf::from(crate::config::SELF_EXE),
            guest_descriptors: crate::config::guest_descriptors(crate::config::USUAL_OPEN_FILE_LIMIT, 1),
        }
    }
}

/// Which compiler makes WebAssembly's machine code: the same flag for `serve`, `run` and
/// `compile`.
#[derive(Debug, Clone, Args)]
pub struct CompilerArgs {
    /// Which compiler makes machine code of WebAssembly modules: tiered serves Winch's
    /// code (fast to make) until Cranelift's (fast to run) is ready, and `compile` makes
    /// Cranelift's, what a tiered server ends up running; see docs/deploying.md.
    #[arg(long, env = "WASMLOOP_WASM_COMPILER", value_enum, default_value_t = DEFAULT_WASM_COMPILER)]
    pub wasm_compiler: WasmCompiler,
}

/// WebAssembly's cache, trust and caps: the same flags for `serve` and `run`.
#[derive(Debug, Clone, Args)]
pub struct WasmArgs {
    #[command(flatten)]
    pub compiler: CompilerArgs,
    /// Cap on each WebAssembly instance's linear memory, in bytes; growing past it traps
    /// [default: 256 MiB, or less so that the action's instances fit within the container's
    /// memory limit (cgroup v1 or v2) with room left for the runtime].
    #[arg(long, env = "WASMLOOP_MAX_MEMORY_BYTES")]
    pub max_memory_bytes: Option<usize>,
    /// Folder for compiled WebAssembly modules, reused across /inits and restarts [default: <temp dir>/wasmloop-cache].
    #[arg(long, env = "WASMLOOP_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every module afresh; keep nothing on disk.
    #[arg(long, env = "WASMLOOP_NO_CACHE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_cache: bool,
    /// Accept modules precompiled by `wasmloop compile`. Their machine code runs unchecked:
    /// only for uploads you trust.
    #[arg(long, env = "WASMLOOP_ALLOW_PRECOMPILED", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_precompiled: bool,
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
    /// Files (and folders) each WebAssembly instance may hold open; past it, opening one
    /// fails in the guest ("too many open files") and the logs name this cap.
    #[arg(long, env = "WASMLOOP_MAX_INSTANCE_FILES", default_value_t = DEFAULT_MAX_INSTANCE_FILES)]
    pub max_instance_files: usize,
    /// Sockets each WebAssembly component may hold open, HTTP requests' connections among
    /// them; past it, connecting fails in the guest and the logs name this cap.
    #[arg(long, env = "WASMLOOP_MAX_INSTANCE_SOCKETS", default_value_t = DEFAULT_MAX_INSTANCE_SOCKETS)]
    pub max_instance_sockets: usize,
}

/// Declares them and reads them into `WasmSettings`.
pub const FLAGS: crate::executor::registry::Flags = crate::executor::registry::Flags {
    declare: <WasmArgs as Args>::augment_args,
    read: |matches, backends, trusting| {
        let args = <WasmArgs as clap::FromArgMatches>::from_arg_matches(matches)?;
        let wasm = backends.get_mut::<WasmSettings>();
        args.apply(wasm);
        if trusting {
            wasm.trust_keys = crate::signing::read_trusted(&args.trust_keys)?;
        }
        Ok(())
    },
};

impl WasmArgs {
    fn apply(&self, wasm: &mut WasmSettings) {
        wasm.compiler = self.compiler.wasm_compiler;
        wasm.max_memory_bytes = self.max_memory_bytes;
        wasm.cache_dir = if self.no_cache {
            None
        } else {
            Some(
                self.cache_dir
                    .clone()
                    .unwrap_or_else(crate::config::default_cache_dir),
            )
        };
        wasm.allow_precompiled = self.allow_precompiled;
        wasm.allow_outbound = self.allow_outbound.clone();
        wasm.max_instance_files = self.max_instance_files;
        wasm.max_instance_sockets = self.max_instance_sockets;
    }
}

