//! The hello rows (`--rows`): the examples' hellos, each served one way, measured side by side.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::load::{Options, Payload, Target, conditions, host_now, measure, path_of};
use crate::peer::WasmtimeServe;
use crate::report::{self, Backend, Comparison, Form, Lifetime, Protocol, Server, Variant};
use crate::serve::{self, Running};

/// Which of the examples' hellos a row serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hello {
    Rust,
    Python,
}

/// What a row does beside serving its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    Nothing,
    /// The hello is asked to log a line more.
    Logs,
    /// The server counts, its metrics on (`--metrics-listen`).
    Metrics,
    /// A path with no action behind it, on the hello's server: what HTTP alone costs.
    Floor,
}

/// One way of serving a hello: who serves which form of it, through which protocol, how
/// long an instance lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// As `--rows`, the table and the CSV name it.
    pub name: &'static str,
    help: &'static str,
    pub form: Form,
    pub lifetime: Lifetime,
    pub hello: Hello,
    pub extra: Extra,
}

impl Row {
    /// The row `--rows` calls `name`.
    pub fn named(name: &str) -> Row {
        let row = ROWS.iter().find(|row| row.name == name);
        *row.expect("a row of the table")
    }

    /// Whether its server is started as `other`'s is, so that one serves both.
    fn shares_server_with(&self, other: &Row) -> bool {
        let server = |r: &Row| (r.form, r.lifetime, r.hello, r.extra == Extra::Metrics);
        server(self) == server(other)
    }
}

/// A row a line: its help (its doc lines, as `--help` shows them), then `name = server
/// backend protocol lifetime hello extra`.
macro_rules! rows {
    ($($(#[doc = $help:literal])+ $name:literal = $server:ident $backend:ident $protocol:ident $lifetime:ident $hello:ident $extra:ident;)*) => {
        [$(Row {
            name: $name,
            help: concat!($($help),+),
            form: Form { server: Server::$server, backend: Some(Backend::$backend), protocol: Protocol::$protocol },
            lifetime: Lifetime::$lifetime,
            hello: Hello::$hello,
            extra: Extra::$extra,
        },)*]
    };
}

/// The rows, in the order `--help` lists them.
pub const ROWS: [Row; 20] = rows! {
    /// The WebAssembly hello in a persistent instance.
    "wasm" = Wasmloop Module OpenWhisk Persistent Rust Nothing;
    /// The native hello as a persistent child fed over pipes.
    "pipe" = Wasmloop Native OpenWhisk Persistent Rust Nothing;
    /// A fresh native process per activation, given the input as its first argument.
    "exec" = Exec Native OpenWhisk Fresh Rust Nothing;
    /// The Python launcher with a hello `main.py`, as a persistent child.
    "python" = Wasmloop Native OpenWhisk Persistent Python Nothing;
    /// The Rust hello built as a WASI 0.2 component, in a persistent instance.
    "component" = Wasmloop Component OpenWhisk Persistent Rust Nothing;
    /// The Python hello as a component (componentize-py: CPython inside the sandbox).
    "python-component" = Wasmloop Component OpenWhisk Persistent Python Nothing;
    /// A path with no action behind it: what HTTP alone costs.
    "floor" = Wasmloop Module OpenWhisk Persistent Rust Floor;
    /// The wasm hello asked to log a second line (both on stderr, as wasm logs).
    "wasm-logs" = Wasmloop Module OpenWhisk Persistent Rust Logs;
    /// The native hello asked to log a line on stdout as well as on stderr.
    "pipe-logs" = Wasmloop Native OpenWhisk Persistent Rust Logs;
    /// The WebAssembly hello, a fresh instance per activation
    /// (`--max-activations-per-instance 1`), made ahead while the last answer goes out.
    "wasm-fresh" = Wasmloop Module OpenWhisk Fresh Rust Nothing;
    /// The Rust hello component, a fresh instance per activation.
    "component-fresh" = Wasmloop Component OpenWhisk Fresh Rust Nothing;
    /// The native hello, a fresh child per activation, started on its activation's arrival
    /// (its environment then holds the activation's values).
    "pipe-fresh" = Wasmloop Native OpenWhisk Fresh Rust Nothing;
    /// The hello as an HTTP component (wasi:http/proxy), its instance kept: each /run one
    /// request, answered with the web-action result.
    "http" = Wasmloop Http OpenWhisk Persistent Rust Nothing;
    /// The HTTP hello, a fresh instance per activation.
    "http-fresh" = Wasmloop Http OpenWhisk Fresh Rust Nothing;
    /// The same HTTP component under `wasmtime serve`, an instance reused for every request
    /// (`--max-instance-reuse-count`): the peer of `http`.
    "wasmtime-serve" = WasmtimeServe Http Plain Persistent Rust Nothing;
    /// The same HTTP component under `wasmtime serve` as it runs by default: a new instance
    /// per request. The peer of `http-fresh`.
    "wasmtime-serve-fresh" = WasmtimeServe Http Plain Fresh Rust Nothing;
    /// The HTTP component under `wasmloop serve --protocol http`: the request itself, on any
    /// path, as `wasmtime serve` gets it, its instance kept.
    "http-plain" = Wasmloop Http Plain Persistent Rust Nothing;
    /// The same, a fresh instance per request.
    "http-plain-fresh" = Wasmloop Http Plain Fresh Rust Nothing;
    /// The WebAssembly (stdio) hello under `--protocol http`: a web action's value in, its
    /// result out as the response.
    "wasm-plain" = Wasmloop Module Plain Persistent Rust Nothing;
    /// The `wasm` row with the metrics on (`--metrics-listen`): what counting costs.
    "wasm-metrics" = Wasmloop Module OpenWhisk Persistent Rust Metrics;
};

impl clap::ValueEnum for Row {
    fn value_variants<'a>() -> &'a [Self] {
        &ROWS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        // As clap's derive shows a doc line: trimmed, without its final full stop.
        let help = self.help.trim().trim_end_matches('.');
        Some(clap::builder::PossibleValue::new(self.name).help(help))
    }
}

/// The hellos' files.
pub struct Files {
    pub wasm: PathBuf,
    pub native: PathBuf,
    pub python: PathBuf,
    pub component: PathBuf,
    pub python_component: PathBuf,
    /// The HTTP component, which the `wasmtime-serve` rows serve too.
    pub http: PathBuf,
}

impl Files {
    fn of(&self, row: &Row) -> &Path {
        match (row.form.backend, row.hello) {
            (Some(Backend::Module), _) => &self.wasm,
            (Some(Backend::Native), Hello::Rust) => &self.native,
            (Some(Backend::Native), Hello::Python) => &self.python,
            (Some(Backend::Component), Hello::Rust) => &self.component,
            (Some(Backend::Component), Hello::Python) => &self.python_component,
            _ => &self.http,
        }
    }
}

/// Measures `rows` at `connections`, or the server at `url`, as a comparison without cold
/// starts (one table and one CSV writer for both), and writes its files with `--out`.
pub async fn run(
    options: &Options,
    rows: &[Row],
    files: &Files,
    connections: usize,
    url: Option<&str>,
) -> anyhow::Result<Comparison> {
    if options.hits == 0 || connections == 0 {
        bail!("--hits and --connections must be at least 1");
    }
    let before = host_now();
    // Every server stays up until the end: the rows are measured in turns.
    let mut servers: Vec<(Row, Running)> = Vec::new();
    let mut targets = Vec::new();
    let mut variants = Vec::new();
    if let Some(url) = url {
        let (addr, path) = crate::load::resolve_url(url).await?;
        targets.push(Target::url(addr, &path, &options.payload));
        variants.push(Variant::of(Form::URL, None, Lifetime::AsServed));
    }
    for row in rows.iter().filter(|_| url.is_none()) {
        let file = files.of(row);
        let at = match servers.iter().position(|(r, _)| r.shares_server_with(row)) {
            Some(at) => at,
            None => {
                servers.push((*row, start(row, file, options).await?));
                servers.len() - 1
            }
        };
        let server = &servers[at].1;
        let floor = row.extra == Extra::Floor;
        targets.push(Target {
            label: row.name.to_owned(),
            addr: server.addr(),
            path: if floor { "/floor" } else { path_of(row.form) }.into(),
            check: !floor,
            pid: server.pid(),
            payload: Payload {
                logs: row.extra == Extra::Logs,
                ..options.payload.for_form(row.form)
            },
        });
        variants.push(Variant {
            resident_after_init: server.pid().and_then(serve::resident_bytes),
            ..Variant::of(row.form, None, row.lifetime)
        });
    }
    let measured = measure(options, &targets, &[connections], false).await?;
    drop(servers);
    for ((variant, target), (warm, driven)) in variants.iter_mut().zip(&targets).zip(measured) {
        variant.label.clone_from(&target.label);
        variant.row = true;
        variant.warm = warm;
        variant.errors = driven.errors;
        variant.first_wrong = driven.first_wrong;
    }
    let comparison = Comparison::of(conditions(options, before), variants);
    if let Some(dir) = &options.out {
        write(dir, &comparison)?;
    }
    Ok(comparison)
}

/// The server of `row`, serving `file`.
async fn start(row: &Row, file: &Path, options: &Options) -> anyhow::Result<Running> {
    let persistent = row.lifetime == Lifetime::Persistent;
    Ok(match row.form.server {
        Server::Exec => Running::Exec(serve::exec(file.to_owned()).await?),
        Server::WasmtimeServe => {
            Running::Peer(WasmtimeServe::start(&options.wasmtime, file, persistent)?)
        }
        Server::Wasmloop | Server::Url => {
            let (form, lifetime) = (row.form, row.lifetime);
            let mut args = serve::server_args(form, file, None, lifetime, options.concurrency);
            if row.extra == Extra::Metrics {
                // An address of its own for each server's metrics; nobody scrapes them here.
                args.extend(["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()]);
            }
            Running::Ours(serve::ours(file, form, &args, &[])?)
        }
    })
}

/// The rows' files: bench.csv (the comparison's CSV writer) and latency.svg, the report's
/// latency chart at the rows' connection count.
fn write(dir: &Path, rows: &Comparison) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("bench.csv"), report::csv(rows))?;
    let path = dir.join("latency.svg");
    std::fs::write(&path, report::latency_svg(rows))
        .with_context(|| format!("cannot write {}", path.display()))
}
