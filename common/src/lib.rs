//! What the runtime and `wasmloop bench` share, so that both measure and quote alike.
//!
//! - `process`: a process's CPU clock and its resident set, as the kernel counts them.
//! - `text`: `excerpt`, bytes quoted on one line of a message.

pub mod process;
pub mod text;

pub use text::excerpt;

/// The entry point an `/init` names unless told otherwise: the platform's default.
pub const DEFAULT_MAIN: &str = "main";
