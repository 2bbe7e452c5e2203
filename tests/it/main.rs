//! wasmloop's integration tests: one binary (each extra one would relink), one module per area.

#[macro_use]
mod support;

mod answers;
mod authoring;
mod backends;
mod bench_report;
mod built_in;
mod canonical;
mod component;
mod contract;
mod deploy;
mod dropin;
mod examples;
mod faults;
mod flags;
mod http;
mod image;
mod lifecycle;
mod lifetimes;
mod limits;
mod local;
mod logs;
mod metrics;
mod mistakes;
mod plain_http;
mod pool;
mod reports;
mod signed;
mod uploads;
mod wasip3;
mod wasm;
