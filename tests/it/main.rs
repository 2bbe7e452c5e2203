//! wasmloop's integration tests: one binary (each extra one would relink), one module per area.

mod contract;
mod examples;
mod native;
mod support;
mod uploads;
