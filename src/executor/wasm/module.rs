//! The module side of the WebAssembly backend: what a module's store holds, and its WASI preview 1 linker with the instance's caps.

use wasmtime::{Engine, Linker};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::descriptors;
use super::memory_cap::MemoryCap;

/// What each store holds.
pub struct ModuleHost {
    pub wasi: WasiP1Ctx,
    pub limits: MemoryCap,
    /// The files it holds, against its cap.
    pub descriptors: descriptors::Descriptors,
    /// Folders preopened for it: descriptors it holds without opening them.
    pub preopens: usize,
    /// What it reads as its environment.
    pub environ: super::environ::Environ,
}

/// WASI preview 1, with the instance's own environment (`environ`) and its cap on open
/// files.
pub fn linker(engine: &Engine) -> wasmtime::Result<Linker<ModuleHost>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |host: &mut ModuleHost| &mut host.wasi)?;
    // The stock WASI functions, with our streams behind fds 0-2. A direct path of our
    // own for fd_read and fd_write on them (re-implementing wasmtime-wasi's glue) was
    // measured against this: it gained too little of a hello activation's time to be
    // worth owning wasmtime-wasi's internals. In instructions it gains more (callgrind;
    // much of it in the two fd_writes' blocking_write_and_flush, which boxes a future per
    // readiness check and copies each buffer): where the microseconds get scarcer than
    // the code, fd_write on fds 1 and 2 is the place.
    count_opened_files(&mut linker)?;
    super::environ::serve_to_modules(&mut linker, |host| &host.environ)?;
    Ok(linker)
}

/// `path_open`, the only way a module opens a descriptor, held to the instance's cap on
/// open files (`descriptors`): past it, the guest gets `mfile` ("too many open files").
fn count_opened_files(linker: &mut Linker<ModuleHost>) -> wasmtime::Result<()> {
    use wasmtime::{AsContextMut, Caller, Extern};
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::p1::types::Errno;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::{self as p1, WasiSnapshotPreview1};
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_open",
        |mut caller: Caller<'_, ModuleHost>,
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
