//! The wasmtime engines (one per compiler in use): their configuration and WASI linker.

use std::path::Path;
use std::sync::Arc;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, PoolingAllocationConfig, Strategy,
};

use super::code::Code;
use super::component::{self, ComponentHost};
use super::descriptors;
use super::host::Host;
use super::ticker;
use crate::config::{Codegen, EngineSettings};

/// Core instances one component may be made of.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
/// Linear memories one instance may have: a module has one; a component one per core
/// module that defines its own (most have one or two).
const MEMORIES_PER_INSTANCE: u32 = 4;

pub struct WasmEngine {
    pub engine: Engine,
    pub linker: Linker<Host>,
    pub components: wasmtime::component::Linker<ComponentHost>,
    pub settings: EngineSettings,
}

pub(super) fn config(settings: EngineSettings, pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
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
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// `path_open`, the only way a module opens a descriptor, held to the instance's cap on
/// open files (`descriptors`): past it, the guest gets `mfile` ("too many open files").
fn count_opened_files(linker: &mut Linker<Host>) -> wasmtime::Result<()> {
    use wasmtime::{AsContextMut, Caller, Extern};
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::p1::types::Errno;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::{self as p1, WasiSnapshotPreview1};
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_open",
        |mut caller: Caller<'_, Host>,
         (dir, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
            i32,
        )| {
            Box::new(async move {
                // As wasmtime-wasi's own glue does before each call.
                let fuel = caller.as_context_mut().hostcall_fuel();
                let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
                    wasmtime::bail!("the module exports no memory for WASI to use");
                };
                let (bytes, host) = memory.data_and_store_mut(&mut caller);
                let files = descriptors::live::<wasmtime_wasi::filesystem::Descriptor>(
                    host.wasi.ctx().table,
                )
                .saturating_sub(host.preopens);
                if host.descriptors.admit_file(files).is_err() {
                    return Ok(i32::from(u16::from(Errno::Mfile)));
                }
                host.wasi.set_hostcall_fuel(fuel);
                let mut memory = wiggle::GuestMemory::Unshared(bytes);
                p1::path_open(
                    &mut host.wasi,
                    &mut memory,
                    dir,
                    dirflags,
                    path,
                    path_len,
                    oflags,
                    base,
                    inheriting,
                    fdflags,
                    opened,
                )
                .await
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

impl WasmEngine {
    pub fn new(settings: EngineSettings) -> wasmtime::Result<Arc<WasmEngine>> {
        // The pool reserves address space for every slot; hosts with strict overcommit
        // refuse that, and then instances are allocated one by one instead.
        let engine = Engine::new(&config(settings, true)).or_else(|e| {
            tracing::info!(
                error = %e,
                instances = settings.instances,
                "the host refused the address space of an instance pool this large: \
                 instances are allocated on demand instead (slower to start)"
            );
            Engine::new(&config(settings, false))
        })?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host: &mut Host| &mut host.wasi)?;
        // The stock WASI functions, with our streams behind fds 0-2. A direct path of our
        // own for fd_read and fd_write on them (re-implementing wasmtime-wasi's glue) was
        // measured against this, pinned to one CPU, 30,000 hello activations, twice each:
        // 47,313 and 47,707 req/s against 46,718 and 46,259 (about 0.5 µs, 2%, of a 20 µs
        // activation); not worth owning wasmtime-wasi's internals. In instructions it is
        // more (callgrind, server side of a warm hello activation: 35,400 with the direct
        // path, 43,600 without; ~4,000 of them in the two fd_writes' blocking_write_and_flush,
        // which boxes a future per readiness check and copies each buffer): where the
        // microseconds get scarcer than the code, fd_write on fds 1 and 2 is the place.
        count_opened_files(&mut linker)?;
        let components = component::linker(&engine)?;
        ticker::add(&engine)?;
        Ok(Arc::new(WasmEngine {
            engine,
            linker,
            components,
            settings,
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
