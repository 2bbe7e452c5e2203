//! The process-wide wasmtime engine: its configuration, the WASI linker, the epoch ticker,
//! and module loading through the on-disk compile cache.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, Linker, Module,
    PoolingAllocationConfig, Precompiled, StoreLimits, Strategy,
};
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::config::{EngineSettings, WasmCompiler};

/// How often the epoch advances: guests yield to other tasks (and, later, meet their
/// deadlines) at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

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
}

fn config(settings: EngineSettings, pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.strategy(match settings.compiler {
        WasmCompiler::Cranelift => Strategy::Cranelift,
        WasmCompiler::Winch => Strategy::Winch,
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
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("wasmloop-epoch".to_owned())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker: {e}"))?;
        Ok(Arc::new(WasmEngine {
            engine,
            linker,
            memory_cap: settings.memory_cap,
        }))
    }

    /// Compiles `bytes`, or loads what an earlier compile of the same bytes by a compatible
    /// engine left in `cache_dir`.
    pub fn load(&self, bytes: &[u8], cache_dir: Option<&Path>) -> Result<Module, String> {
        let cached = cache_dir.map(|dir| dir.join(format!("{}.cwasm", self.cache_key(bytes))));
        if let Some(path) = cached.as_deref().filter(|p| p.is_file()) {
            // SAFETY: the cache folder holds only what `store_in_cache` wrote, from modules
            // this process compiled; the file name ties it to these bytes and this engine.
            match unsafe { Module::deserialize_file(&self.engine, path) } {
                Ok(module) => {
                    tracing::debug!(path = %path.display(), "module loaded from the compile cache");
                    return Ok(module);
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "ignoring a bad cache entry")
                }
            }
        }
        let module = Module::new(&self.engine, bytes)
            .map_err(|e| format!("invalid WebAssembly module: {e:#}"))?;
        tracing::debug!(bytes = bytes.len(), "module compiled");
        // Serializing, writing and trimming the heap take milliseconds /init need not wait for.
        let compiled = module.clone();
        std::thread::spawn(move || {
            if let Some(path) = cached {
                store_in_cache(&compiled, &path);
            }
            release_freed_memory();
        });
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
    fn cache_key(&self, bytes: &[u8]) -> String {
        let digest = Sha256::digest(bytes);
        let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}-{:016x}", engine_hash.finish())
    }
}

/// Compiling (in parallel) and serializing leave freed memory in several malloc arenas,
/// which the process keeps for reuse (see `main`): hand it back, or a long-lived runtime
/// keeps the peak of one compile as its resident size.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Best effort: a cache that cannot be written only costs the next `/init` a compile.
fn store_in_cache(module: &Module, path: &Path) {
    let write = || -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let bytes = module.serialize().map_err(std::io::Error::other)?;
        // Written aside and renamed, so that a reader never sees half a file.
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::fs::write(tmp.path(), bytes)?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::debug!(path = %path.display(), error = %e, "cannot write the compile cache");
    }
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
