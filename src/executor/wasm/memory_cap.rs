//! The cap on an instance's linear memory, which module and component stores alike hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::ResourceLimiter;

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
