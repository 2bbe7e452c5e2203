//! wasmloop: an OpenWhisk ActionLoop runtime. A request's path through the modules:
//!
//! - `cli`, `config`: settings from flags and environment, and their defaults.
//! - `server`: the HTTP server and its routes; `handlers`: `/init`, `/run`, other paths.
//! - `runtime`: the action slot that `/init` fills and `/run` uses.
//! - `protocol`: the ActionLoop wire types, fixed messages and the log sentinel.
//! - `error`: the one error type and its status codes.
//! - `action`: an upload turned into a startable folder (decode, detect, unpack, compile).
//! - `executor`: the `Executor` trait, which `executor::slot::Slot` implements for both
//!   backends (a pool of workers: queue, deadlines, restarts, each activation's end and
//!   sentinels); `executor::native` drives a child process over pipes, `executor::wasm` a
//!   wasmtime instance over its WASI stdio, `executor::lines` frames requests and results as
//!   JSON lines, `executor::diagnose` tells why a child does not answer or start.
//! - `local`: `wasmloop run`, the same path without HTTP.
//! - `bench`: `wasmloop bench`, the backends compared over real HTTP (cargo feature `bench`).

pub mod action;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod executor;
pub mod handlers;
pub mod local;
pub mod memory;
pub mod outbound;
pub mod protocol;
pub mod runtime;
pub mod server;
pub mod signing;

/// `bytes` in lower-case hex: digests in cache names, keys and signatures.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Locks `mutex`, also after a panic while it was held: everything kept behind these
/// locks is plain data (lists, buffers, stream states) that stays usable.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
