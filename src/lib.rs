//! wasmloop: an OpenWhisk ActionLoop runtime. A request's path through the modules:
//!
//! - `cli`, `config`: settings from flags and environment, and their defaults.
//! - `server`: the HTTP server and its routes; `handlers`: `/init`, `/run`, other paths.
//! - `runtime`: the action slot that `/init` fills and `/run` uses.
//! - `protocol`: the ActionLoop wire types, fixed messages and the log sentinel.
//! - `error`: the one error type and its status codes.
//! - `action`: an upload turned into a startable folder (decode, detect, unpack, compile).
//! - `signing`: the signed-artifact format (keys, what is signed, verification), handed
//!   the trusted keys and engine id: it knows nothing of wasmtime.
//! - `executor`: the `Executor` trait, which `executor::slot::Slot` implements for both
//!   backends (a pool of workers: queue, deadlines, restarts, each activation's end and
//!   sentinels); `executor::native` drives a child process over pipes, `executor::wasm` a
//!   wasmtime instance over its WASI stdio, `executor::lines` frames requests and results as
//!   JSON lines, `executor::diagnose` tells why a child does not answer or start.
//! - `outbound`: the allow-list of where components may connect; `memory`: the container's
//!   memory limit and the wasm cap it allows.
//! - `local`: `wasmloop run`, the same path without HTTP.
//! - `bench`: `wasmloop bench`, the backends compared over real HTTP (cargo feature `bench`).
//!
//! The arrows point one way (no module uses one that uses it):
//! `server` → `handlers` → `runtime` → `executor` → `action` → `signing`; `error` sits
//! beside `runtime` and names `action`'s and `executor`'s errors; `config`, `protocol`,
//! `outbound` and `memory` are used from above and use nothing above them; `local`, `cli`
//! and `bench` are at the top, beside `main`.

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
