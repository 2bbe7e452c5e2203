//! What each store holds: the guest's WASI context, its stdio, and its memory cap.

use wasmtime::{Memory, ResourceLimiter};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::streams::{GuestStderr, GuestStdin, GuestStdout};

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

/// What the direct stdio path (`stdio.rs`) needs in each store.
#[derive(Default)]
pub struct DirectStdio {
    /// The guest's memory, looked up by name once instead of on every call.
    pub memory: Option<Memory>,
    /// Once the guest closes or renumbers fd 0, 1 or 2, every write takes the general path,
    /// which knows what its descriptors have become.
    pub moved: bool,
}
