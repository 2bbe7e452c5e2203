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
    PoolingAllocationConfig, Precompiled, StoreLimits, Strategy,
};
use wasmtime_wasi::p1::WasiP1Ctx;

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
        ENGINES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(engine.weak());
        if THREAD.get().is_none() {
            let thread = std::thread::Builder::new()
                .name("wasmloop-epoch".to_owned())
                .spawn(tick)
                .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker: {e}"))?;
            let _ = THREAD.set(thread.thread().clone());
        }
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
            for engine in ENGINES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter_map(EngineWeak::upgrade)
            {
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
    pub limits: StoreLimits,
}

pub struct WasmEngine {
    pub engine: Engine,
    pub linker: Linker<Host>,
    pub memory_cap: usize,
    settings: EngineSettings,
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
        ticker::add(&engine)?;
        Ok(Arc::new(WasmEngine {
            engine,
            linker,
            memory_cap: settings.memory_cap,
            settings,
        }))
    }

    /// The module compiled from `bytes` for this engine, if the compile cache holds it.
    pub fn cached(&self, bytes: &[u8], cache_dir: Option<&Path>) -> Option<Module> {
        let path = cache_dir?.join(self.cache_name(bytes));
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

    /// Compiles the module in `wasm` (whose bytes are `bytes`) in a child process, which
    /// keeps the compiler's memory and code pages out of this one (a long-lived server
    /// would otherwise keep ~9 MiB of them for a single compile) and survives a compiler
    /// crash. The result goes to the compile cache.
    pub async fn compile(
        &self,
        wasm: &Path,
        bytes: &[u8],
        cache_dir: Option<&Path>,
        child: CompileChild,
    ) -> Result<Module, String> {
        let dir = cache_dir.map_or_else(std::env::temp_dir, Path::to_owned);
        // Written aside and renamed into the cache, so that a reader never sees half a file.
        let output = std::fs::create_dir_all(&dir)
            .and_then(|()| tempfile::NamedTempFile::new_in(&dir))
            .map_err(|e| {
                format!(
                    "cannot make room for the compiled module in {}: {e}",
                    dir.display()
                )
            })?;
        child.run(wasm, output.path(), self.settings).await?;
        // SAFETY: our own executable just wrote this file, for these settings.
        let module = unsafe { Module::deserialize_file(&self.engine, output.path()) }
            .map_err(|e| format!("cannot load the compiled module: {e:#}"))?;
        tracing::debug!(
            bytes = bytes.len(),
            codegen = self.settings.codegen.name(),
            "module compiled"
        );
        if let Some(dir) = cache_dir
            && let Err(e) = output.persist(dir.join(self.cache_name(bytes)))
        {
            // Only the next /init of these bytes pays for it: it compiles again.
            tracing::debug!(error = %e.error, "cannot write the compile cache");
        }
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
    /// loaded by an engine that could have written it.
    fn cache_name(&self, bytes: &[u8]) -> String {
        let digest = Sha256::digest(bytes);
        let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}-{:016x}.cwasm", engine_hash.finish())
    }
}

/// How a server runs a compile child: `wasmloop compile --for-server`, our own executable.
#[derive(Debug, Clone, Copy)]
pub struct CompileChild {
    pub role: ChildRole,
    pub timeout: Duration,
}

impl CompileChild {
    async fn run(self, wasm: &Path, output: &Path, settings: EngineSettings) -> Result<(), String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the wasmloop executable to compile with: {e}"))?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("compile")
            .arg("--for-server")
            .arg(self.role.name())
            .arg("--wasm-compiler")
            .arg(settings.codegen.name())
            .arg("--max-memory-bytes")
            .arg(settings.memory_cap.to_string())
            .arg("--output")
            .arg(output)
            .arg(wasm)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let finished = tokio::time::timeout(self.timeout, command.output())
            .await
            .map_err(|_| {
                format!(
                    "compiling took longer than {} (see --compile-timeout)",
                    humantime::format_duration(self.timeout)
                )
            })?
            .map_err(|e| format!("cannot start the compiler: {e}"))?;
        if finished.status.success() {
            return Ok(());
        }
        let message = String::from_utf8_lossy(&finished.stderr).trim().to_owned();
        Err(if message.is_empty() {
            format!("the compiler failed ({})", finished.status)
        } else {
            message
        })
    }
}

/// What a compile child does: compile `bytes` for an engine with `settings`, serialized.
pub fn compile_here(bytes: &[u8], settings: EngineSettings) -> Result<Vec<u8>, String> {
    // Made once and thrown away: no instance pool, no epoch ticker (neither changes the code).
    let engine = Engine::new(&config(settings, false)).map_err(|e| format!("{e:#}"))?;
    let module =
        Module::new(&engine, bytes).map_err(|e| format!("invalid WebAssembly module: {e:#}"))?;
    check_command(&module)?;
    module
        .serialize()
        .map_err(|e| format!("cannot serialize the module: {e:#}"))
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
