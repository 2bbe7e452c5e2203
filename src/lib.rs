//! wasmloop: an OpenWhisk ActionLoop runtime. The workspace holds this crate, the runtime,
//! and `bench/` (`wasmloop-bench`), the benchmark, which drives `wasmloop serve` processes
//! over HTTP and which the binary includes with the `bench` feature (off in the image).
//! A request's path through this crate's modules:
//!
//! - `cli`, `config`: flags and environment resolved into one `Config`, in one fallible
//!   step (`ServeArgs::to_config`); a file per subcommand, each flag declared once, in
//!   groups that `serve` and `run` share; a backend folder's flags are its own, flattened
//!   as `executor::registry::BackendArgs`, its settings kept in `Config::backends` by type.
//!   Every default and policy lives in `config`; `Config::fit_to_host` (where a server or
//!   a local run starts) is the only part that asks the system.
//! - `server`: the HTTP server (`app` builds the router, `run` serves it), over `linger`'s
//!   connections, which close without losing an early answer; `handlers`: `/init`, `/run`,
//!   other paths.
//! - `runtime`: the action slot that `/init` fills and `/run` uses; it holds the backend
//!   registry (`executor::registry::Registry`), made from its `Config`, and the metrics.
//!   Its `Action::activate` is the edge: a `/run` body is read there, once, into a
//!   `context::Context` and a payload (the body as one line, or its value for an action
//!   that takes requests), the `executor::Activation` every layer below takes as it is;
//!   the answer comes back with its outcome, read once where the pool took it.
//! - `context`: one activation's context (ids, names, deadline, traceparent, the
//!   environment a launcher sets), read in one pass or made by `plain_http` as it is.
//! - `metrics`: the Prometheus metrics, made by `main` and handed down (runtime, registry,
//!   backends): nothing is process-wide.
//! - `protocol`: the ActionLoop wire types, fixed messages, JSON responses and the log
//!   sentinel; `logs`: the action's lines, whole and attributed, in the configured format;
//!   `last_words`: the crash report (a panic, an abort) among an action's last lines.
//! - `error`: the one error type and its status codes.
//! - `action`: an upload turned into a startable folder (decode, detect, unpack, and
//!   `hook`, the `OW_COMPILER` compiler hook), its entry point file found by the contract's
//!   names alone (which backend runs it, each backend says: `Backend::claims`); `pack`,
//!   a folder zipped back.
//! - `signing`: the signed-artifact format (keys, what is signed, verification, the code's
//!   frames), handed the trusted keys and engine id: it knows nothing of wasmtime.
//! - `executor`: the `Executor` seam the runtime holds.
//!   - `executor::registry`: the backends, listed once (`BACKENDS`), with their folders'
//!     flags (`FLAGS`) and subcommands (`COMMANDS`): `--backends` takes their names, an
//!     upload starts on the first that claims it, and the messages about a backend are its
//!     entry's. A backend is a folder under `executor/` with one `Registration` and one
//!     `Backend` implementation; adding one is that folder and a line in `backends!`. Its
//!     own ways of failing to start are an error type of its folder (a `BackendFailure`),
//!     carried as `StartError::Backend`; `StartError`'s other variants are the contract's
//!     and the runtime's, named by no backend.
//!   - `executor::pool`: what every backend shares: `Pool<W>`, the one `Executor`, runs
//!     activations on workers of one backend: admitted (`admission`), given a worker
//!     (`lifecycle`), their logs ended (`ending`) with a report (`reports`); a backend's
//!     worker is a `Worker` (`worker`).
//!   - `executor::lines`: JSON-lines framing and the one capped line splitter.
//!   - `executor::native/`: the native backend, a child process over pipes (spawning,
//!     its stdout tap, why a child does not start or answer, its flag).
//!   - `executor::wasm/`: the WebAssembly backends, modules and components in wasmtime
//!     (engines, compile children, the compile cache, WASI streams, descriptor caps, the
//!     outbound gate, their settings and flags, `wasmloop compile`), its start generic
//!     over a `World`.
//!   - `executor::http/`: the HTTP component backend, a `World` on the wasm folder's
//!     start, its activations' values made requests by `web_action`.
//!   - `executor::http_p3/`: the WASI 0.3 HTTP backend (on with `--wasip3`), a `World` on
//!     the wasm folder's start with engines of its own, several activations sharing an
//!     instance through wasmtime-wasi-http's handler (its pool's workers are lanes into it).
//! - `outbound`: the allow-list of where components may connect; `memory`: the container's
//!   memory limit and the wasm cap it allows.
//! - `local_run`: `wasmloop run`, the same path without HTTP; `ow_compile`: the reference's
//!   `-compile`; `new_project`: `wasmloop new`.
//! - `signals`: SIGTERM and Ctrl-C, told apart, for the server and a local run alike.
//! - `web_action`: OpenWhisk's web-action convention both ways (a value as an HTTP request,
//!   a response as a result; media types, base64), used by the HTTP backend and by
//!   `plain_http`: `--protocol http`, a plain request as a web action's activation and its
//!   result as the response.
//!
//! The arrows point one way (no module uses one that uses it; `../shared/tools/structure.sh`
//! finds no circle): `server` → `linger`, `handlers` → `runtime` → `executor` → `action` →
//! `signing`; `error` sits beside `runtime` and names `action`'s and `executor`'s errors;
//! `config`, `protocol`, `context`, `web_action`, `logs`, `metrics`, `outbound`, `memory`
//! and `signals` are used from above and use nothing above them; `local_run`, `ow_compile`, `new_project` and `cli` are
//! at the top, beside `main`.

pub mod action;
pub mod cli;
pub mod config;
pub mod context;
pub mod error;
pub mod executor;
pub mod handlers;
pub mod last_words;
pub mod linger;
pub mod local_run;
pub mod logs;
pub mod memory;
pub mod metrics;
pub mod new_project;
pub mod outbound;
pub mod ow_compile;
pub mod plain_http;
pub mod protocol;
pub mod runtime;
pub mod server;
pub mod signals;
pub mod signing;
pub mod web_action;

/// `bytes` in lower-case hex: digests in cache names, keys and signatures.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Locks `mutex`, also after a panic while it was held: everything kept behind these
/// locks is plain data (lists, buffers, stream states) that stays usable.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
