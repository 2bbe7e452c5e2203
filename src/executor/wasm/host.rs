//! What each store holds: the guest's WASI context (its stdio among it) and its memory cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::ResourceLimiter;
use wasmtime_wasi::p1::WasiP1Ctx;

/// What each store holds.
pub struct ModuleHost {
    pub wasi: WasiP1Ctx,
    pub limits: MemoryCap,
    /// The files it holds, against its cap.
    pub descriptors: super::descriptors::Descriptors,
    /// Folders preopened for it: descriptors it holds without opening them.
    pub preopens: usize,
    /// What it reads as its environment.
    pub environ: super::environ::Environ,
}

/// Caps an instance's linear memory. Growing past the cap traps (the activation fails,
/// the next gets a fresh instance) with a message that names the cap and the flag: a
/// `memory.grow` that quietly returns -1 makes most guests abort with a vaguer one.
pub struct MemoryCap {
    pub cap: usize,
    /// The bytes of all its linear memories, as they were made and grown: read by the
    /// instance's owner, outside the store (`--recycle-above-memory`).
    pub total: Arc<AtomicUsize>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            wasmtime::bail!(
                "the instance's memory would grow to {desired} bytes, past its cap of {} bytes \
                 ({} MiB): raise --max-memory-bytes, or make the action use less",
                self.cap,
                self.cap >> 20
            );
        }
        // Asked for a memory's first size too (from 0), so the sum is every memory's size.
        self.total
            .fetch_add(desired.saturating_sub(current), Ordering::Relaxed);
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
