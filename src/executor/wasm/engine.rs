//! The wasmtime engines a runtime uses (one per compiler): their configuration, their WASI
//! linkers, and the `Engines` value that owns them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig, Strategy};

use super::code::Code;
use super::component::{self, ComponentHost};
use super::module::{self, ModuleHost};
use super::ticker::Ticker;
use super::{StartError, WasmError};
use super::{Codegen, EngineSettings, WasmCompiler};

/// Core instances one component may be made of.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
/// Linear memories one instance may have: a module has one; a component one per core
/// module that defines its own (most have one or two).
const MEMORIES_PER_INSTANCE: u32 = 4;

/// Of each linear memory and table slot, what stays resident between instances (only
/// where pages written can be told from the others; otherwise all of it would be zeroed).
pub(super) const KEEP_RESIDENT_MEMORY: usize = 4 << 20;
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

pub struct WasmEngine {
    pub engine: Engine,
    pub linker: Linker<ModuleHost>,
    pub components: wasmtime::component::Linker<ComponentHost>,
    pub settings: EngineSettings,
    /// Its compatibility id (`engine_id`): what the compile cache and signed artifacts
    /// name, computed once.
    pub id: String,
    /// Advances the engine's epoch while its guests run.
    pub ticker: Ticker,
    /// The `wasmloop` executable whose `compile --for-server` compiles for this engine.
    pub compiler: PathBuf,
    /// Where its compiles, cache lookups and refused connections are counted.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// The engines of one runtime, made from its settings: each compiler's engine is made
/// once (the server makes them before it accepts) and lives as long as the runtime.
/// Nothing here is process-wide, so runtimes with other settings can share a process.
pub struct Engines {
    /// What every engine's pool is sized for and caps its memories at; the compiler is
    /// each engine's own.
    settings: EngineSettings,
    /// The compilers the runtime's code comes from.
    wasm_compiler: WasmCompiler,
    /// One per compiler (`Codegen::index`). A failure (the pool's address space refused,
    /// say) is not kept: the next `/init` tries again.
    made: Mutex<[Option<Arc<WasmEngine>>; 2]>,
    /// The id signed artifacts name for the engine the final code is made with.
    artifact_id: OnceLock<Result<String, String>>,
    ticker: Ticker,
    compiler: PathBuf,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Engines {
    /// Signs the module at `module` for the final tier's engine (`-compile --sign-key`):
    /// its code and signature beside it, for runtimes of this build that trust `key`.
    pub fn sign_beside(
        &self,
        module: &Path,
        key: &ed25519_dalek::SigningKey,
    ) -> anyhow::Result<()> {
        super::sign_beside(module, self.settings, key)
    }

    /// Where the activations of actions on these engines are counted.
    pub fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        self.metrics.clone()
    }

    pub fn new(
        config: &crate::config::Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Engines {
        let wasm = super::WasmSettings::of(config);
        Engines {
            settings: super::engine_settings(config, wasm.compiler.final_tier()),
            wasm_compiler: wasm.compiler,
            made: Mutex::new([None, None]),
            artifact_id: OnceLock::new(),
            ticker: Ticker::default(),
            compiler: wasm.compile_exe.clone(),
            metrics,
        }
    }

    /// Engines for WASI 0.3 components (`EngineSettings::concurrent`), their own: code
    /// compiled for them loads nowhere else. One compiler, the final one (a quick tier's
    /// code, replaced later, would restart instances that many activations share).
    pub fn concurrent(
        config: &crate::config::Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Engines {
        let mut engines = Engines::new(config, metrics);
        engines.settings.concurrent = true;
        engines.wasm_compiler = match engines.wasm_compiler {
            WasmCompiler::Tiered => WasmCompiler::Cranelift,
            single => single,
        };
        engines
    }

    /// The compiler whose code serves first, and the one whose code replaces it later.
    pub fn tiers(&self) -> (Codegen, Option<Codegen>) {
        self.wasm_compiler.tiers()
    }

    /// The compiler whose code an action ends up running.
    pub fn final_tier(&self) -> Codegen {
        self.wasm_compiler.final_tier()
    }

    /// The engine for `codegen`'s code, made on first use.
    pub fn engine(&self, codegen: Codegen) -> Result<Arc<WasmEngine>, StartError> {
        made_once(&self.made, codegen.index(), || {
            WasmEngine::new(
                EngineSettings {
                    codegen,
                    ..self.settings
                },
                &self.ticker,
                &self.compiler,
                self.metrics.clone(),
            )
        })
    }

    /// Makes the engines of every tier, before the server accepts, so that the first
    /// `/init` (a hello from the compile cache, say) does not wait for them. A failure is
    /// the first `/init`'s to report.
    pub fn warm(&self) {
        let (first, then) = self.tiers();
        for codegen in std::iter::once(first).chain(then) {
            let _ = self.engine(codegen);
        }
    }

    /// What signed artifacts this runtime loads the code of: those `keys` signed for the
    /// engine its final code is made with (none without a key).
    pub fn trust(&self, keys: &[ed25519_dalek::VerifyingKey]) -> Option<crate::signing::Trust> {
        (!keys.is_empty()).then(|| crate::signing::Trust {
            keys: keys.to_vec(),
            engine: self
                .artifact_id
                .get_or_init(|| {
                    artifact_engine_id(EngineSettings {
                        codegen: self.final_tier(),
                        ..self.settings
                    })
                })
                .clone()
                .unwrap_or_else(|e| format!("(no engine: {e})")),
        })
    }
}

/// What `made[index]` holds, or what `make` makes, kept only if it worked.
fn made_once<T>(
    made: &Mutex<[Option<Arc<T>>; 2]>,
    index: usize,
    make: impl FnOnce() -> wasmtime::Result<Arc<T>>,
) -> Result<Arc<T>, StartError> {
    let mut made = crate::lock(made);
    if let Some(found) = &made[index] {
        return Ok(found.clone());
    }
    let fresh = make().map_err(WasmError::Engine)?;
    made[index] = Some(fresh.clone());
    Ok(fresh)
}

/// The id of the engine code compiled with `settings` is for: what a signed artifact
/// names, and what a runtime compares with its own.
pub fn artifact_engine_id(settings: EngineSettings) -> Result<String, String> {
    // Compile children use this configuration (no pool: it does not change the code).
    Engine::new(&engine_config(settings, false))
        .map(|engine| engine_id(&engine))
        .map_err(|e| format!("{e:#}"))
}

/// The engine's compatibility hash in hex: code compiled by one engine loads in another
/// with the same id (wasmtime version, compiler, its settings). SHA-256: `DefaultHasher`'s
/// algorithm may change with a Rust release, and every cache entry would silently miss.
fn engine_id(engine: &Engine) -> String {
    let mut hasher = StableHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    // Code compiled before modules were snapshotted at their start-up (`snapshot`), or
    // before they exported their state for renewals (`renew`), is not what this runtime
    // would make of the same module: neither cached nor signed code of it is taken.
    "snapshot: wizer-initialize, wasmloop-serve; renew: wasmloop-memory-, wasmloop-global-"
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
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

/// The configuration a server's engine has for `settings`, its instance pool included:
/// for measuring wasmtime alone with the runtime's settings (`examples/wasmtime_floor.rs`).
pub fn pooled_config(settings: EngineSettings) -> wasmtime::Config {
    engine_config(settings, true)
}

pub(super) fn engine_config(settings: EngineSettings, pooling: bool) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    // On by default once wasmtime is built with component-model-async (for the p3
    // backend): left on everywhere, it would change every engine's id.
    config.concurrency_support(settings.concurrent);
    // A trap's message is all an activation's error and the logs show; capturing the wasm
    // stack also runs each time a fresh instance is dropped mid-read (`future dropped`).
    config.wasm_backtrace_max_frames(None);
    config.strategy(match settings.codegen {
        Codegen::Cranelift => Strategy::Cranelift,
        Codegen::Winch => Strategy::Winch,
    });
    if pooling {
        let mut pool = PoolingAllocationConfig::new();
        // Sized from the settings: a pool too small hands activations its own error
        // ("maximum concurrent limit ... reached"). Each slot is address space reserved
        // (a memory's is 4 GiB and a guard), not memory used; a host that refuses that
        // much gets instances allocated on demand instead (`WasmEngine::new`).
        let slots = settings.instances.max(1);
        // A component is several core instances (CPython in componentize-py: a dozen),
        // most without a memory of their own; slots without memories cost little.
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .total_memories(slots.saturating_mul(MEMORIES_PER_INSTANCE))
            .max_memories_per_component(MEMORIES_PER_INSTANCE)
            .total_tables(slots.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .total_stacks(slots)
            .max_memory_size(settings.memory_cap);
        // A fresh instance per activation (`--max-activations-per-instance 1`) takes a slot
        // each time. Reset with `madvise`, a slot's pages fault in again on the next
        // instance and every reset flushes the TLB: about half a fresh module's cost. With
        // PAGEMAP_SCAN (Linux 6.7) only the pages the guest wrote are copied back, and
        // they stay resident: a slot keeps at most this much of its last guest's memory.
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(wasmtime::Enabled::Yes)
                .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
                .table_keep_resident(KEEP_RESIDENT_TABLE);
        }
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

impl WasmEngine {
    pub fn new(
        settings: EngineSettings,
        ticker: &Ticker,
        compiler: &Path,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> wasmtime::Result<Arc<WasmEngine>> {
        // The pool reserves address space for every slot; hosts with strict overcommit
        // refuse that, and then instances are allocated one by one instead.
        // A concurrent engine's instance takes many calls at once, each on a stack of its
        // own that the pool would have to hold for every one: its instances (few, and kept
        // for many requests) are allocated on demand.
        let pooling = !settings.concurrent;
        let engine = Engine::new(&engine_config(settings, pooling)).or_else(|e| {
            tracing::info!(
                error = %e,
                instances = settings.instances,
                "the host refused the address space of an instance pool this large: \
                 instances are allocated on demand instead (slower to start)"
            );
            Engine::new(&engine_config(settings, false))
        })?;
        let linker = module::linker(&engine)?;
        let components = component::linker(&engine)?;
        ticker.add(&engine)?;
        Ok(Arc::new(WasmEngine {
            id: engine_id(&engine),
            engine,
            linker,
            components,
            settings,
            ticker: ticker.clone(),
            compiler: compiler.to_owned(),
            metrics,
        }))
    }

    /// Code precompiled by `wasmloop compile` (only with `--allow-precompiled`).
    pub fn load_precompiled(&self, path: &Path) -> Result<Code, String> {
        // SAFETY: the operator opted in with --allow-precompiled, vouching for the bytes;
        // wasmtime still checks that they were made by a compatible engine.
        let kind = match Engine::detect_precompiled_file(path) {
            Ok(Some(wasmtime::Precompiled::Component)) => "component",
            _ => "module",
        };
        unsafe { Code::deserialize_file(&self.engine, path) }
            .map_err(|e| format!("cannot load the precompiled {kind}: {e:#}"))
    }

    /// Loads a signed artifact's code, mapped from the sealed memory file it was checked in.
    pub fn load_signed(&self, path: &Path) -> Result<Code, String> {
        // SAFETY: signed by a key the operator trusts, for this engine, and sealed since.
        unsafe { Code::deserialize_file(&self.engine, path) }.map_err(|e| {
            format!(
                "the signed code verified but does not load ({e:#}): make the artifact again \
                 with this runtime's `wasmloop compile --sign-key`"
            )
        })
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

    #[test]
    fn code_for_wasi_0_3_components_is_made_for_engines_of_its_own() {
        // Concurrency on only where it is needed: the others' ids, and so every cached and
        // signed artifact made before WASI 0.3 was compiled in, stay as they were.
        for codegen in [Codegen::Cranelift, Codegen::Winch] {
            let id = |concurrent| {
                artifact_engine_id(EngineSettings {
                    memory_cap: 1 << 30,
                    codegen,
                    instances: 1,
                    concurrent,
                })
                .unwrap()
            };
            assert_ne!(id(true), id(false), "{codegen:?}");
        }
    }

    #[test]
    fn an_engine_that_failed_to_build_is_tried_again_and_one_that_worked_is_kept() {
        let made = Mutex::new([None, None]);
        let failed = made_once(&made, 1, || Err(wasmtime::format_err!("no address space")));
        let Err(StartError::Backend(failed)) = failed else {
            panic!("not a backend's failure");
        };
        assert!(
            matches!(failed.downcast_ref(), Some(WasmError::Engine(e)) if e.to_string() == "no address space")
        );
        assert_eq!(*made_once(&made, 1, || Ok(Arc::new(7))).unwrap(), 7);
        let kept = made_once(&made, 1, || Ok(Arc::new(9))).unwrap();
        assert_eq!(*kept, 7, "made once");
        // The other compiler gets an engine of its own.
        assert_eq!(*made_once(&made, 0, || Ok(Arc::new(8))).unwrap(), 8);
    }
}
