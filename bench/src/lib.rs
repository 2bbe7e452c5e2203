//! `wasmloop bench`: the backends compared over real HTTP keep-alive connections, against `wasmloop serve` processes.
//!
//! - `command`: the subcommand's flags and what it runs.
//! - `rows`: the examples' hellos, each served one way (`--rows`); `compare`: one action in
//!   every form, compiler and lifetime (`--compare`), its forms built by `source`.
//! - `load`: the requests, their answers and the rounds every figure is measured in,
//!   with `stats` and `cpu`; `serve`: the servers measured, ours and the peer (`peer`).
//! - `harness`: start a `wasmloop serve` process and `/init` an action in it (also what the
//!   runtime's integration tests use).
//! - `report`: what a run measured, as a table, CSV and an HTML page.

/// Which wasmloop build measures: the runtime's, which the bench crate cannot read from
/// its own build (the commit is found by the runtime's build script).
#[derive(Debug, Clone, Copy)]
pub struct Build {
    pub version: &'static str,
    pub commit: Option<&'static str>,
}

/// A test's expected output, `bench/tests/golden/{name}`: data reviewed as such.
#[cfg(test)]
macro_rules! golden {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/", $name))
    };
}

pub mod command;
pub mod compare;
pub mod cpu;
pub mod harness;
pub mod load;
pub mod peer;
pub mod report;
pub mod rows;
pub mod serve;
pub mod source;
pub mod stats;
