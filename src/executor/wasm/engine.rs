//! The wasmtime engines (one per compiler in use): configuration, the WASI linker, the
//! epoch ticker, and modules from the compile cache or from a compile child.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, Linker, Module,
    PoolingAllocationConfig, Precompiled, ResourceLimiter, Strategy,
};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::stdio::DirectStdio;
use super::streams::{GuestStderr, GuestStdin, GuestStdout};
use crate::config::{ChildRole, Codegen, EngineSettings};

/// How often the epoch advances while guests run: they yield to other tasks (and so meet
/// their deadlines) at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// With no guest running for this long, the epoch stops advancing until one runs again.
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// One thread advances every engine's epoch, and only while guests run: an idle container
/// wakes no CPU (with a thread per engine it took 100 wake-ups a second each).
pub mod ticker {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Mutex, OnceLock};
    use std::thread::Thread;
    use std::time::Instant;

    use wasmtime::{Engine, EngineWeak};

    use super::{EPOCH_TICK, IDLE_AFTER};

    static ENGINES: Mutex<Vec<EngineWeak>> = Mutex::new(Vec::new());
    static THREAD: OnceLock<Thread> = OnceLock::new();
    /// Guests running now, and how many times one started running.
    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    static PARKED: AtomicBool = AtomicBool::new(false);

    pub(super) fn add(engine: &Engine) -> wasmtime::Result<()> {
        // Under the lock: engines made at the same time must not start two tickers.
        let mut engines = crate::lock(&ENGINES);
        if THREAD.get().is_none() {
            let thread = std::thread::Builder::new()
                .name("wasmloop-epoch".to_owned())
                .spawn(tick)
                .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker: {e}"))?;
            let _ = THREAD.set(thread.thread().clone());
        }
        engines.push(engine.weak());
        Ok(())
    }

    /// Marks a guest as running until the guard is dropped.
    pub fn running() -> Running {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        STARTS.fetch_add(1, Ordering::SeqCst);
        if PARKED.load(Ordering::SeqCst)
            && let Some(thread) = THREAD.get()
        {
            thread.unpark();
        }
        Running(())
    }

    pub struct Running(());

    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn tick() {
        let mut last_busy = Instant::now();
        let mut starts = STARTS.load(Ordering::SeqCst);
        loop {
            for engine in crate::lock(&ENGINES).iter().filter_map(EngineWeak::upgrade) {
                engine.increment_epoch();
            }
            let now_starts = STARTS.load(Ordering::SeqCst);
            if RUNNING.load(Ordering::SeqCst) > 0 || now_starts != starts {
                last_busy = Instant::now();
                starts = now_starts;
            }
            if last_busy.elapsed() < IDLE_AFTER {
                std::thread::sleep(EPOCH_TICK);
                continue;
            }
            // Parked only if no guest started since the check: `running` either sees the
            // flag and unparks, or is seen here.
            PARKED.store(true, Ordering::SeqCst);
            if RUNNING.load(Ordering::SeqCst) == 0 && STARTS.load(Ordering::SeqCst) == starts {
                std::thread::park();
            }
            PARKED.store(false, Ordering::SeqCst);
            last_busy = Instant::now();
        }
    }
}

/// Instance slots the pooling allocator reserves up front (live instances plus restarts).
const POOL_SLOTS: u32 = 128;

/// What each store holds.
pub struct Host {
    pub wasi: WasiP1Ctx,
    pub limits: MemoryCap,
    /// The guest's stdio, also read and written directly (see `stdio`).
    pub stdin: GuestStdin,
    pub stdout: GuestStdout,
    pub stderr: GuestStderr,
    pub stdio: DirectStdio,
}

/// Caps an instance's linear memory. Growing past the cap traps (the activation fails,
/// the next gets a fresh instance) with a message that names the cap and the flag: a
/// `memory.grow` that quietly returns -1 makes most guests abort with a vaguer one.
pub struct MemoryCap(pub usize);

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.0 {
            wasmtime::bail!(
                "the instance's memory would grow to {desired} bytes, past its cap of {} bytes \
                 ({} MiB): raise --max-memory-bytes, or make the action use less",
                self.0,
                self.0 >> 20
            );
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context("the host could not grow the instance's memory"))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|max| desired <= max))
    }
}

pub struct WasmEngine {
    pub engine: Engine,
    pub linker: Linker<Host>,
    pub settings: EngineSettings,
}

fn config(settings: EngineSettings, pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.strategy(match settings.codegen {
        Codegen::Cranelift => Strategy::Cranelift,
        Codegen::Winch => Strategy::Winch,
    });
    if pooling {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(POOL_SLOTS)
            .total_memories(POOL_SLOTS)
            .total_tables(POOL_SLOTS)
            .total_stacks(POOL_SLOTS)
            .max_memory_size(settings.memory_cap);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

impl WasmEngine {
    pub fn new(settings: EngineSettings) -> wasmtime::Result<Arc<WasmEngine>> {
        // The pool reserves address space for every slot; hosts with strict overcommit
        // refuse that, and then instances are allocated one by one instead.
        let engine = Engine::new(&config(settings, true)).or_else(|e| {
            tracing::debug!(error = %e, "no pooling allocator: falling back to on-demand");
            Engine::new(&config(settings, false))
        })?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host: &mut Host| &mut host.wasi)?;
        super::stdio::add_to_linker(&mut linker)?;
        ticker::add(&engine)?;
        Ok(Arc::new(WasmEngine {
            engine,
            linker,
            settings,
        }))
    }

    /// The module with `digest` compiled for this engine, if the compile cache holds it.
    pub fn cached(&self, digest: &WasmDigest, cache_dir: Option<&Path>) -> Option<Module> {
        let path = cache_dir?.join(self.cache_name(digest));
        if !path.is_file() {
            return None;
        }
        // SAFETY: the cache folder holds only what compile children of this program wrote;
        // the file name ties it to these bytes and this engine's settings.
        match unsafe { Module::deserialize_file(&self.engine, &path) } {
            Ok(module) => {
                tracing::debug!(path = %path.display(), "module loaded from the compile cache");
                Some(module)
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "ignoring a bad cache entry");
                None
            }
        }
    }

    /// Compiles the module in `wasm` (whose digest is `digest`) in a child process, which
    /// keeps the compiler's memory and code pages out of this one (a long-lived server
    /// would otherwise keep ~9 MiB of them for a single compile) and survives a compiler
    /// crash. With `cache_dir`, the result is kept there (best effort).
    pub async fn compile(
        &self,
        wasm: &Path,
        digest: &WasmDigest,
        cache_dir: Option<&Path>,
        child: CompileChild,
    ) -> Result<Module, CompileError> {
        let compiled = child.run(wasm, self.settings).await?;
        let engine = self.engine.clone();
        let cached = cache_dir.map(|dir| dir.join(self.cache_name(digest)));
        let module = tokio::task::spawn_blocking(move || {
            // Mapped from the cache file when there is one: its code is then file-backed
            // memory, shared with other processes loading the same file.
            if let Some(path) = cached.filter(|path| store_in_cache(&compiled, path)) {
                // SAFETY: the file holds what our own executable just compiled.
                if let Ok(module) = unsafe { Module::deserialize_file(&engine, &path) } {
                    return Ok(module);
                }
            }
            // SAFETY: the bytes are what our own executable just compiled.
            unsafe { Module::deserialize(&engine, &compiled) }
        })
        .await
        .map_err(|e| CompileError::fatal(format!("loading the compiled module stopped: {e}")))?
        .map_err(|e| CompileError::fatal(format!("cannot load the compiled module: {e:#}")))?;
        tracing::debug!(
            wasm = %wasm.display(),
            codegen = self.settings.codegen.name(),
            "module compiled"
        );
        Ok(module)
    }

    /// A module precompiled by `wasmloop compile` (only with `--allow-precompiled`).
    pub fn load_precompiled(&self, path: &Path) -> Result<Module, String> {
        // SAFETY: the operator opted in with --allow-precompiled, vouching for the bytes;
        // wasmtime still checks that they were made by a compatible engine.
        unsafe { Module::deserialize_file(&self.engine, path) }
            .map_err(|e| format!("cannot load the precompiled module: {e:#}"))
    }

    /// The wasm's hash and the engine's compatibility hash: a cache entry is only ever
    /// loaded by an engine that could have written it. SHA-256 for both: `DefaultHasher`'s
    /// algorithm may change with a Rust release, and every entry would silently miss.
    fn cache_name(&self, digest: &WasmDigest) -> String {
        let mut engine_hash = StableHasher(Sha256::new());
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        format!("{}-{:016x}.cwasm", digest.0, engine_hash.finish())
    }
}

/// A WebAssembly module's SHA-256, in hex: what names its compiled code in the cache.
/// Taken once per `/init`, so that neither the bytes nor their hashing are kept around for
/// the later, background compile.
#[derive(Debug, Clone)]
pub struct WasmDigest(String);

impl WasmDigest {
    pub fn of(bytes: &[u8]) -> Self {
        WasmDigest(hex(&Sha256::digest(bytes)))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Feeds what `Hash` writes into SHA-256, whose output is the same on every build.
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stable_hasher_gives_the_same_value_on_every_build() {
        let mut hasher = StableHasher(Sha256::new());
        ("wasmloop", 48u32, [1u8, 2, 3]).hash(&mut hasher);
        // The first 8 bytes of SHA-256 over what `Hash` writes: b"wasmloop\xff", 48 as a
        // little-endian u32, the array's length as a u64, then its bytes (as computed by
        // Python's hashlib).
        assert_eq!(format!("{:016x}", hasher.finish()), "69bf6eaae43fb72a");
    }
}

/// Whether `dir` can be trusted to hold compiled code, which is loaded and run unchecked:
/// ours (or root's), and writable by nobody else. Made (private) if missing. The default
/// folder is under the shared temp dir, where anyone could have made it first.
pub fn usable_cache_dir(dir: &Path) -> bool {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    match std::fs::metadata(dir) {
        Ok(meta)
            if meta.is_dir()
                && (meta.uid() == me || meta.uid() == 0)
                && meta.mode() & 0o022 == 0 =>
        {
            true
        }
        Ok(_) => {
            tracing::debug!(dir = %dir.display(), "not using the compile cache: others could write to it");
            false
        }
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "not using the compile cache");
            false
        }
    }
}

/// Writes a compiled module into the cache, aside and renamed so that a reader never sees
/// half a file. A cache that cannot be written only costs the next `/init` a compile.
fn store_in_cache(compiled: &[u8], path: &Path) -> bool {
    let write = || -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut file, compiled)?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    match write() {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "cannot write the compile cache");
            false
        }
    }
}

/// Why a compile child made no module.
#[derive(Debug)]
pub struct CompileError {
    pub message: String,
    /// Winch cannot compile this module but Cranelift can: worth another try with it.
    pub not_for_winch: bool,
}

impl CompileError {
    fn fatal(message: String) -> Self {
        CompileError {
            message,
            not_for_winch: false,
        }
    }
}

/// The exit status by which a compile child says "not with Winch, but with Cranelift".
pub const EXIT_NOT_FOR_WINCH: i32 = 3;

/// How a server runs a compile child: `wasmloop compile --for-server`, our own executable,
/// which writes the compiled module on its stdout.
#[derive(Debug, Clone, Copy)]
pub struct CompileChild {
    pub role: ChildRole,
    /// When the compile must be done by (all tries of one `/init` share it).
    pub deadline: tokio::time::Instant,
    /// The `--compile-timeout` the deadline comes from, for the message.
    pub timeout: Duration,
}

impl CompileChild {
    async fn run(self, wasm: &Path, settings: EngineSettings) -> Result<Vec<u8>, CompileError> {
        // Our own executable, even if its file was replaced or removed since we started.
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg("compile")
            .arg("--for-server")
            .arg(self.role.name())
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .arg("--wasm-compiler")
            .arg(settings.codegen.name())
            .arg("--output")
            .arg("-")
            .arg(wasm)
            // Its stderr is the error message: no diagnostics of ours in it.
            .env_remove("RUST_LOG")
            .env_remove("OW_DEBUG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let finished = tokio::time::timeout_at(self.deadline, command.output())
            .await
            .map_err(|_| CompileError::fatal(crate::config::compile_timed_out(self.timeout)))?
            .map_err(|e| CompileError::fatal(format!("cannot start the compiler: {e}")))?;
        if finished.status.success() {
            return Ok(finished.stdout);
        }
        let message = String::from_utf8_lossy(&finished.stderr).trim().to_owned();
        Err(CompileError {
            message: if message.is_empty() {
                format!("the compiler failed ({})", finished.status)
            } else {
                message
            },
            not_for_winch: finished.status.code() == Some(EXIT_NOT_FOR_WINCH),
        })
    }
}

/// What a compile child does: compile `bytes` for an engine with `settings`, serialized.
/// `parallel`: on every core (for an `/init` waiting), or on one (in the background).
pub fn compile_here(
    bytes: &[u8],
    settings: EngineSettings,
    parallel: bool,
) -> Result<Vec<u8>, CompileError> {
    // Made once and thrown away: no instance pool, no epoch ticker (neither changes the code).
    let mut config = config(settings, false);
    config.parallel_compilation(parallel);
    let engine = Engine::new(&config).map_err(|e| CompileError::fatal(format!("{e:#}")))?;
    let module = Module::new(&engine, bytes).map_err(|e| {
        let message = format!("invalid WebAssembly module: {e:#}");
        // Winch lacks some proposals Cranelift has: say so when that is the only problem.
        let cranelift = EngineSettings {
            codegen: Codegen::Cranelift,
            ..settings
        };
        let not_for_winch = settings.codegen == Codegen::Winch
            && Engine::new(&self::config(cranelift, false))
                .is_ok_and(|engine| Module::validate(&engine, bytes).is_ok());
        CompileError {
            message,
            not_for_winch,
        }
    })?;
    check_command(&module).map_err(CompileError::fatal)?;
    module
        .serialize()
        .map_err(|e| CompileError::fatal(format!("cannot serialize the module: {e:#}")))
}

/// Whether `path` holds a module precompiled by wasmtime (an ELF file, not an executable).
pub fn is_precompiled(path: &Path) -> bool {
    matches!(
        Engine::detect_precompiled_file(path),
        Ok(Some(Precompiled::Module))
    )
}

/// A command module: exports `_start` taking and returning nothing.
pub fn check_command(module: &Module) -> Result<(), String> {
    match module.get_export("_start") {
        Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => Ok(()),
        Some(_) => Err("the module's `_start` export is not a function of no arguments".to_owned()),
        None => Err(
            "the module exports no `_start`: build it as a WASI command (wasm32-wasip1)".to_owned(),
        ),
    }
}
