//! `wasmloop bench`: the backends compared over real HTTP keep-alive connections, against `wasmloop serve` processes.
//!
//! - `command`: the subcommand's flags and what it runs.
//! - `harness`: start a `wasmloop serve` process and `/init` an action in it (also what the
//!   runtime's integration tests use).
//! - this module: the hello rows (`--rows`), their servers, the load and its table.
//! - `compare`: one action across backends, compilers and lifetimes; `source`: a project
//!   built into each form; `report`: the comparison as a table, CSV and an HTML page.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use tokio::net::TcpStream;

/// Which wasmloop build measures: the runtime's, which the bench crate cannot read from
/// its own build (the commit is found by the runtime's build script).
#[derive(Debug, Clone, Copy)]
pub struct Build {
    pub version: &'static str,
    pub commit: Option<&'static str>,
}

pub mod command;
pub mod compare;
pub mod cpu;
pub mod harness;
pub mod peer;
pub mod report;
pub mod source;
pub mod stats;

/// One way of serving the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Row {
    /// The WebAssembly hello in a persistent instance.
    Wasm,
    /// The native hello as a persistent child fed over pipes.
    Pipe,
    /// A fresh native process per activation, given the input as its first argument.
    Exec,
    /// The Python launcher with a hello `main.py`, as a persistent child.
    Python,
    /// The Rust hello built as a WASI 0.2 component, in a persistent instance.
    Component,
    /// The Python hello as a component (componentize-py: CPython inside the sandbox).
    PythonComponent,
    /// A path with no action behind it: what HTTP alone costs.
    Floor,
    /// The wasm hello asked to log a second line (both on stderr, as wasm logs).
    WasmLogs,
    /// The native hello asked to log a line on stdout as well as on stderr.
    PipeLogs,
    /// The WebAssembly hello, a fresh instance per activation
    /// (`--max-activations-per-instance 1`), made ahead while the last answer goes out.
    WasmFresh,
    /// The Rust hello component, a fresh instance per activation.
    ComponentFresh,
    /// The native hello, a fresh child per activation, started on its activation's arrival (its
    /// environment then holds the activation's values).
    PipeFresh,
    /// The hello as an HTTP component (wasi:http/proxy), its instance kept: each /run one
    /// request, answered with the web-action result.
    Http,
    /// The HTTP hello, a fresh instance per activation.
    HttpFresh,
    /// The same HTTP component under `wasmtime serve`, an instance reused for every
    /// request (`--max-instance-reuse-count`): the peer of `http`.
    WasmtimeServe,
    /// The same HTTP component under `wasmtime serve` as it runs by default: a new instance
    /// per request. The peer of `http-fresh`.
    WasmtimeServeFresh,
    /// The HTTP component under `wasmloop serve --protocol http`: the request itself, on
    /// any path, as `wasmtime serve` gets it, its instance kept.
    HttpPlain,
    /// The same, a fresh instance per request.
    HttpPlainFresh,
    /// The WebAssembly (stdio) hello under `--protocol http`: a web action's value in, its
    /// result out as the response.
    WasmPlain,
    /// The `wasm` row with the metrics on (`--metrics-listen`): what counting costs.
    WasmMetrics,
}

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Wasm => "wasm",
            Row::Pipe => "pipe",
            Row::Exec => "exec",
            Row::Python => "python",
            Row::Component => "component",
            Row::PythonComponent => "python-component",
            Row::Floor => "floor",
            Row::WasmLogs => "wasm-logs",
            Row::PipeLogs => "pipe-logs",
            Row::WasmFresh => "wasm-fresh",
            Row::ComponentFresh => "component-fresh",
            Row::PipeFresh => "pipe-fresh",
            Row::Http => "http",
            Row::HttpFresh => "http-fresh",
            Row::WasmtimeServe => "wasmtime-serve",
            Row::WasmtimeServeFresh => "wasmtime-serve-fresh",
            Row::HttpPlain => "http-plain",
            Row::HttpPlainFresh => "http-plain-fresh",
            Row::WasmPlain => "wasm-plain",
            Row::WasmMetrics => "wasm-metrics",
        }
    }
}

pub struct RowOptions {
    pub hits: usize,
    pub warmup: usize,
    pub connections: usize,
    /// The servers' `--concurrency`: instances (or children) serving at once.
    pub concurrency: u16,
    pub rows: Vec<Row>,
    pub wasm: PathBuf,
    pub native: PathBuf,
    pub python: PathBuf,
    pub component: PathBuf,
    pub python_component: PathBuf,
    /// The HTTP component the `http` and `wasmtime-serve` rows serve.
    pub http: PathBuf,
    /// The `wasmtime` executable the `wasmtime-serve` rows run.
    pub wasmtime: PathBuf,
    pub url: Option<String>,
    pub out: Option<PathBuf>,
    pub payload: Payload,
    /// Named in the conditions.
    pub build: Build,
}

/// What each request sends, and what its answer must be.
#[derive(Default, Clone)]
pub struct Payload {
    /// Whole /run bodies, sent in turn; none: the hello's `{"value":{"name":"bench<N>"}}`.
    pub bodies: Vec<Bytes>,
    /// The answer every request must get; none: the greeting for the hello's body, and
    /// any 200 for bodies of one's own.
    pub expect: Option<Bytes>,
    /// The hello's body asks it to log a line more (the `-logs` rows).
    pub logs: bool,
    /// How the hello is asked and answers, where no body of one's own is given.
    pub shape: Shape,
}

/// How a server takes the hello's request and gives its greeting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A /run body, answered with the greeting line.
    #[default]
    Hello,
    /// A /run body, answered by an HTTP component: the greeting as a web action's body.
    WebAction,
    /// The arguments themselves as the request's body, the greeting as the response's (a
    /// wasi:http host's own server: `wasmtime serve`).
    Bare,
    /// The arguments as the request's body, the hello's greeting line as the response (a
    /// stdio hello under `--protocol http`: the JSON body's fields are its parameters).
    BareToHello,
}

impl Payload {
    /// The same requests, for a server that takes and answers them as `shape` says.
    pub fn shaped(&self, shape: Shape) -> Payload {
        Payload {
            shape,
            ..self.clone()
        }
    }

    fn body(&self, n: usize) -> Bytes {
        match self.bodies.len() {
            0 if matches!(self.shape, Shape::Bare | Shape::BareToHello) => {
                Bytes::from(format!("{{\"name\":\"bench{n}\"}}"))
            }
            0 if self.logs => Bytes::from(format!(
                "{{\"value\":{{\"name\":\"bench{n}\",\"logs\":true}}}}"
            )),
            0 => Bytes::from(format!("{{\"value\":{{\"name\":\"bench{n}\"}}}}")),
            len => self.bodies[n % len].clone(),
        }
    }

    /// The answer request `n` must get, if it is known.
    fn expected(&self, n: usize) -> Option<Bytes> {
        match (&self.expect, self.bodies.is_empty()) {
            (Some(expect), _) => Some(expect.clone()),
            (None, true) => {
                let greeting = greeting(&format!("bench{n}"));
                let bare = greeting.trim_end();
                Some(Bytes::from(match self.shape {
                    Shape::Hello | Shape::BareToHello => greeting,
                    Shape::Bare => bare.to_owned(),
                    Shape::WebAction => format!(
                        "{}\n",
                        serde_json::json!({
                            "body": bare,
                            "headers": {"content-type": "application/json"},
                            "statusCode": 200,
                        })
                    ),
                }))
            }
            (None, false) => None,
        }
    }
}

/// A `wasmloop serve` of our own, on a socket we bind and hand down, its output discarded.
struct Served {
    child: Child,
    addr: SocketAddr,
    /// The server's logs, read back only to say why it died.
    logs: std::fs::File,
}

impl Served {
    /// Why a set-up request failed: the server's exit and its last log lines if it died.
    fn explain(&mut self, error: anyhow::Error) -> anyhow::Error {
        use std::io::{Read, Seek};
        // A refused connection can arrive a moment before the dying server is reapable.
        let mut status = None;
        for _ in 0..20 {
            status = self.child.try_wait().ok().flatten();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let Some(status) = status else {
            return error;
        };
        let mut logs = String::new();
        let _ = self.logs.rewind();
        let _ = self.logs.read_to_string(&mut logs);
        let tail: Vec<&str> = logs.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        anyhow::anyhow!(
            "the wasmloop serve that bench started exited ({status}) before answering /init; \
             its last log lines:\n{}",
            tail.join("\n")
        )
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// A `wasmloop serve` with `args`, without the variables named in `unset`, not yet
    /// initialized.
    fn start(args: &[String], unset: &[&str]) -> anyhow::Result<Served> {
        let logs = tempfile::tempfile()?;
        let mut launch = crate::harness::Launch::new(std::env::current_exe()?, 3);
        let command = launch
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logs.try_clone()?);
        for name in unset {
            command.env_remove(name);
        }
        command.args(args);
        let (child, addr) = launch.spawn().context("cannot start wasmloop serve")?;
        Ok(Served { child, addr, logs })
    }

    /// Initializes the server with `code` (from the file `what`), in how long.
    fn init(&mut self, code: &[u8], what: &Path) -> anyhow::Result<Duration> {
        // Made before the clock starts: base64 and JSON of a 25 MB component take the
        // client ~100 ms, which are no part of the server's cold start.
        let body = crate::harness::init_body(code, wasmloop_common::DEFAULT_MAIN);
        let started = Instant::now();
        let answer = match crate::harness::request(self.addr, "POST", "/init", body.as_bytes()) {
            Ok(answer) => answer.text(),
            Err(error) => return Err(self.explain(error.into())),
        };
        let took = started.elapsed();
        if answer != "{\"ok\":true}\n" {
            bail!("cannot initialize {}: {answer}", what.display());
        }
        Ok(took)
    }
}

/// A server with `args`, initialized with the action in `file`.
fn serve(file: &Path, args: &[String]) -> anyhow::Result<Served> {
    let bytes = std::fs::read(file).with_context(|| {
        format!(
            "cannot read {} (build the examples first: see the README)",
            file.display()
        )
    })?;
    let mut served = Served::start(args, &[])?;
    served.init(&bytes, file)?;
    Ok(served)
}

/// A server of plain HTTP (`--protocol http`) with the action in `file` built in: it is
/// loaded before the server accepts, so the first request waits for it in the backlog.
fn serve_plain(file: &Path, args: &[String]) -> anyhow::Result<Served> {
    anyhow::ensure!(
        file.is_file(),
        "{} is missing (build the examples first: see the README)",
        file.display()
    );
    let plain = plain_args(file);
    let mut served = Served::start(&[args, &plain[..]].concat(), &[])?;
    served.ready(file)?;
    Ok(served)
}

/// The flags that make a server serve `file` as plain HTTP, built in.
fn plain_args(file: &Path) -> [String; 4] {
    [
        "--protocol".to_owned(),
        "http".to_owned(),
        "--action".to_owned(),
        file.display().to_string(),
    ]
}

impl Served {
    /// Waits until a plain HTTP server has loaded its action (`file`): its resident set is
    /// read after that, as an /init'ed server's is.
    fn ready(&mut self, file: &Path) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            match crate::harness::request(self.addr, "GET", "/.well-known/wasmloop/ready", b"") {
                Ok(reply) if reply.status == 200 => return Ok(()),
                Ok(_) if started.elapsed() < Duration::from_secs(120) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(reply) => bail!(
                    "the plain HTTP server of {} never became ready: {}",
                    file.display(),
                    reply.text()
                ),
                Err(error) => return Err(self.explain(error.into())),
            }
        }
    }
}

/// The `exec` row's server: a fresh process per activation, as the old Docker skeleton did.
async fn serve_exec(native: PathBuf) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let native = Arc::new(native);
    let app = axum::Router::new().fallback(move |body: Bytes| {
        let native = native.clone();
        async move {
            let value = serde_json::from_slice::<Value>(&body)
                .map(|v| v["value"].to_string())
                .unwrap_or_default();
            match tokio::process::Command::new(native.as_ref())
                .arg(value)
                .stderr(Stdio::null())
                .output()
                .await
            {
                Ok(output) => (axum::http::StatusCode::OK, output.stdout),
                Err(e) => (
                    axum::http::StatusCode::BAD_GATEWAY,
                    e.to_string().into_bytes(),
                ),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

fn greeting(name: &str) -> String {
    format!("{{\"message\":\"Hello, {name}!\"}}\n")
}

/// What one `drive` measured.
#[derive(Default)]
struct Driven {
    micros: Vec<f64>,
    elapsed: Duration,
    errors: usize,
    first_wrong: Option<String>,
}

impl Driven {
    fn add(&mut self, other: Driven) {
        self.micros.extend(other.micros);
        self.elapsed += other.elapsed;
        self.errors += other.errors;
        self.first_wrong = self.first_wrong.take().or(other.first_wrong);
    }
}

/// Sends `hits` requests over `connections` keep-alive connections; with `check`, each
/// answer must be a 200 with what `payload` expects.
async fn drive(
    target: &Target,
    payload: &Payload,
    hits: usize,
    connections: usize,
    progress: &ProgressBar,
) -> anyhow::Result<Driven> {
    let (addr, check) = (target.addr, target.check);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (next, progress, payload) = (next.clone(), progress.clone(), payload.clone());
        let path = target.path.clone();
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            // The connection is driven in this task, not spawned: with one task per
            // connection the client is one thread at 1 connection, like wrk, and the
            // kernel places it the same way for every row. Two tasks could land on one
            // thread or on two, which made medians jump between ~20 and ~90 µs from one
            // run (or row) to the next on a 2-CPU machine.
            let requests = async move {
                let mut driven = Driven::default();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= hits {
                        break;
                    }
                    let request = Request::post(&*path)
                        .header("host", "bench")
                        .header("content-type", "application/json")
                        .body(Full::new(payload.body(n)))?;
                    let sent = Instant::now();
                    let response = sender.send_request(request).await?;
                    let status = response.status();
                    let answer = response.into_body().collect().await?.to_bytes();
                    driven.micros.push(sent.elapsed().as_secs_f64() * 1e6);
                    let expected = check.then(|| payload.expected(n)).flatten();
                    let right = expected.as_ref().is_none_or(|e| *e == answer);
                    if !status.is_success() || (check && !right) {
                        driven.errors += 1;
                        driven.first_wrong.get_or_insert_with(|| {
                            let shown = |b: &[u8]| wasmloop_common::excerpt(b, 200);
                            let wanted = match &expected {
                                Some(e) => format!("200 `{}`", shown(e)),
                                None => "a 200".to_owned(),
                            };
                            format!(
                                "{} `{}`, expected {wanted}",
                                status.as_u16(),
                                shown(&answer)
                            )
                        });
                    }
                    progress.inc(1);
                }
                // Dropping the sender here, even after an error, lets the connection end.
                anyhow::Ok(driven)
            };
            let (connection, requests) = tokio::join!(connection, requests);
            let driven = requests?;
            connection?;
            anyhow::Ok(driven)
        }));
    }
    let mut all = Driven::default();
    for task in tasks {
        all.add(task.await??);
    }
    all.elapsed = started.elapsed();
    Ok(all)
}

/// One run's requests in each way a target takes them, made once for the whole run.
struct Payloads {
    hello: Payload,
    logged: Payload,
    web: Payload,
    bare: Payload,
    bare_to_hello: Payload,
}

impl Payloads {
    fn new(payload: &Payload) -> Payloads {
        Payloads {
            hello: payload.clone(),
            logged: Payload {
                logs: true,
                ..payload.clone()
            },
            web: payload.shaped(Shape::WebAction),
            bare: payload.shaped(Shape::Bare),
            bare_to_hello: payload.shaped(Shape::BareToHello),
        }
    }

    /// What `target` is sent, and must answer.
    fn of(&self, target: &Target) -> &Payload {
        match target.shape {
            Shape::WebAction => &self.web,
            Shape::Bare => &self.bare,
            Shape::BareToHello => &self.bare_to_hello,
            Shape::Hello if target.logs => &self.logged,
            Shape::Hello => &self.hello,
        }
    }
}

/// Where one row's requests go.
struct Target {
    label: String,
    addr: SocketAddr,
    /// Shared with the connections' tasks.
    path: Arc<str>,
    /// Whether each answer is checked (not the floor's, which answers nothing).
    check: bool,
    /// Whether its requests ask the hello to log more.
    logs: bool,
    /// The server's process, if it is one of ours.
    pid: Option<u32>,
    /// How it takes the hello, if not as the runtime's rows do.
    shape: Shape,
    /// Its server's resident set once the action was initialized (none for a server
    /// someone else runs).
    resident_after_init: Option<u64>,
}

impl Target {
    /// A server someone else runs (`--url`): its answers are checked if `--expect` says
    /// what they must be.
    fn url(addr: SocketAddr, path: &str, payload: &Payload) -> Target {
        Target {
            label: "url".to_owned(),
            addr,
            path: path.into(),
            check: payload.expect.is_some(),
            logs: false,
            pid: None,
            shape: Shape::Hello,
            resident_after_init: None,
        }
    }
}

/// How many slices each row's hits are measured in.
const ROUNDS: usize = 10;

/// How targets are measured: warmed up, then `hits` requests each over `connections`, in
/// `rounds` slices taken in turns across the targets.
#[derive(Debug, Clone, Copy)]
struct Rounds {
    warmup: usize,
    hits: usize,
    rounds: usize,
    connections: usize,
    /// Wrong answers stop the run once the warm-up (or, without one, the first round) has
    /// met them: figures of wrong answers compare nothing (the comparison's way; the rows
    /// count them to the end, as the reference's table does).
    stop_on_wrong: bool,
}

/// The error of a run stopped by wrong answers: whose, what they were, what to change.
fn wrong_answers(target: &Target, driven: &Driven) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: {} of {} answers were wrong, so nothing was measured and no report written; \
         the first was {}. Check --body and --expect (or the action)",
        target.label,
        driven.errors,
        driven.micros.len().max(driven.errors),
        driven.first_wrong.as_deref().unwrap_or("not recorded")
    )
}

/// The CPU a target's measured slices took, summed over the rounds.
#[derive(Default)]
struct Used {
    server: Duration,
    /// A reading failed (the server is someone else's, or went): no server figure.
    server_unknown: bool,
    client: Duration,
}

/// The one engine of the rows and the comparison: every target warmed up, then measured
/// in turns, a slice of its hits at a time, so that drift over the run (other load, CPU
/// frequency) falls on every target alike instead of on whichever ran during it, which
/// keeps the ratios between them honest. Each round's p50, p99 and rate are kept for the
/// spread; the latencies come back sorted.
async fn in_rounds<'p>(
    targets: &[Target],
    payload_of: impl Fn(&Target) -> &'p Payload,
    plan: Rounds,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<(report::Warm, Driven)>> {
    for target in targets {
        let payload = payload_of(target);
        let warmed = drive(target, payload, plan.warmup, plan.connections, progress).await?;
        if plan.stop_on_wrong && warmed.errors > 0 {
            progress.finish_and_clear();
            return Err(wrong_answers(target, &warmed));
        }
    }
    let rounds = plan.rounds.clamp(1, plan.hits.max(1));
    let mut all: Vec<(Driven, Vec<[f64; 3]>, Used)> =
        targets.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        let share = plan.hits / rounds + usize::from(round < plan.hits % rounds);
        for (target, (sum, figures, used)) in targets.iter().zip(&mut all) {
            let payload = payload_of(target);
            // Read around the load alone: between slices the server serves nobody.
            let server_before = target.pid.and_then(cpu::server);
            let client_before = cpu::client();
            let mut driven = drive(target, payload, share, plan.connections, progress).await?;
            used.client += cpu::client().saturating_sub(client_before);
            match (server_before, target.pid.and_then(cpu::server)) {
                (Some(before), Some(after)) => used.server += after.saturating_sub(before),
                _ => used.server_unknown = true,
            }
            if plan.stop_on_wrong && round == 0 && plan.warmup == 0 && driven.errors > 0 {
                progress.finish_and_clear();
                return Err(wrong_answers(target, &driven));
            }
            driven.micros.sort_by(f64::total_cmp);
            figures.push([
                stats::percentile(&driven.micros, 50.0),
                stats::percentile(&driven.micros, 99.0),
                driven.micros.len() as f64 / driven.elapsed.as_secs_f64(),
            ]);
            sum.add(driven);
        }
    }
    Ok(all
        .into_iter()
        .map(|(mut sum, figures, used)| {
            sum.micros.sort_by(f64::total_cmp);
            // Wrong answers were served too: every request counts.
            let requests = sum.micros.len();
            let column =
                |k: usize| stats::spread(&figures.iter().map(|f| f[k]).collect::<Vec<_>>());
            let warm = report::Warm {
                connections: plan.connections,
                micros: std::mem::take(&mut sum.micros),
                p50: column(0),
                p99: column(1),
                per_second: column(2),
                server_cpu_us: (!used.server_unknown)
                    .then(|| cpu::per_request(used.server, requests))
                    .flatten(),
                client_cpu_us: cpu::per_request(used.client, requests),
            };
            (warm, sum)
        })
        .collect())
}

/// The rows' latencies, measured by `in_rounds`, each row a variant of the report.
async fn measure(targets: &[Target], options: &RowOptions) -> anyhow::Result<Vec<report::Variant>> {
    let total = targets.len() * (options.warmup + options.hits);
    let progress = ProgressBar::new(total as u64);
    progress.set_style(
        ProgressStyle::with_template("{prefix:>7} [{bar:30}] {pos}/{len} {per_sec}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    progress.set_prefix("bench");
    let payloads = Payloads::new(&options.payload);
    let payload_of = |t: &Target| payloads.of(t);
    let plan = Rounds {
        warmup: options.warmup,
        hits: options.hits,
        rounds: ROUNDS,
        connections: options.connections,
        stop_on_wrong: false,
    };
    let measured = in_rounds(targets, payload_of, plan, &progress).await?;
    progress.finish_and_clear();
    Ok(targets
        .iter()
        .zip(measured)
        .map(|(t, (warm, driven))| {
            let lifetime = if t.pid.is_none() {
                report::Lifetime::AsServed
            } else if t.label.ends_with("-fresh") || t.label == "exec" {
                report::Lifetime::Fresh
            } else {
                report::Lifetime::Persistent
            };
            report::Variant {
                label: t.label.clone(),
                warm: vec![warm],
                errors: driven.errors,
                first_wrong: driven.first_wrong,
                resident_after_init: t.resident_after_init,
                ..report::Variant::named(report::Backend::Row, None, lifetime)
            }
        })
        .collect())
}

/// The rows as a comparison without cold starts: one table and one CSV writer for both.
fn rows_measured(
    options: &RowOptions,
    before: report::Host,
    variants: Vec<report::Variant>,
) -> report::Comparison {
    let asked = compare::Asked {
        hits: options.hits,
        rounds: ROUNDS,
        concurrency: options.concurrency,
        body: wasmloop_common::excerpt(&options.payload.body(0), 200),
        body_given: !options.payload.bodies.is_empty(),
        expect: options
            .payload
            .expect
            .as_deref()
            .map(|e| wasmloop_common::excerpt(e, 200)),
        cold_runs: 0,
    };
    let mut comparison = report::Comparison {
        conditions: compare::conditions_of(&options.build, asked, before),
        variants,
        notes: Vec::new(),
    };
    comparison.notes = report::overlap_notes(&comparison);
    comparison
}

/// The address and path `--url` names.
pub async fn resolve_url(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let url: hyper::Uri = url.parse().context("--url is not a URL")?;
    let host = url
        .authority()
        .context("--url needs a host and port")?
        .as_str()
        .to_owned();
    let addr = tokio::net::lookup_host(&host)
        .await?
        .next()
        .context("--url: no address")?;
    Ok((addr, url.path().to_owned()))
}

pub async fn run(options: RowOptions) -> anyhow::Result<report::Comparison> {
    if options.hits == 0 || options.connections == 0 {
        bail!("--hits and --connections must be at least 1");
    }
    let before = compare::host_now();
    if let Some(url) = &options.url {
        let (addr, path) = resolve_url(url).await?;
        let target = Target::url(addr, &path, &options.payload);
        let rows = measure(&[target], &options).await?;
        let comparison = rows_measured(&options, before, rows);
        if let Some(dir) = &options.out {
            write_outputs(dir, &comparison)?;
        }
        return Ok(comparison);
    }
    // Every server stays up until the end: the rows are measured in turns.
    let mut servers = Vec::new();
    let args = ["--concurrency".to_owned(), options.concurrency.to_string()];
    let fresh = [
        &args[..],
        &["--max-activations-per-instance".to_owned(), "1".to_owned()],
    ]
    .concat();
    // An address of its own for each server's metrics; nobody scrapes them here.
    let metered = [
        &args[..],
        &["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()],
    ]
    .concat();
    let mut wasm = None;
    let mut targets = Vec::new();
    let mut peers = Vec::new();
    for row in &options.rows {
        let mut server = None;
        let mut pid = None;
        let (addr, path, check) = match row {
            Row::Wasm | Row::Floor | Row::WasmLogs => {
                let at = match wasm {
                    Some(at) => at,
                    None => {
                        servers.push(serve(&options.wasm, &args)?);
                        wasm = Some(servers.len() - 1);
                        servers.len() - 1
                    }
                };
                let addr = servers[at].addr;
                server = Some(at);
                if *row == Row::Floor {
                    (addr, "/floor", false)
                } else {
                    (addr, "/run", true)
                }
            }
            Row::Pipe
            | Row::PipeLogs
            | Row::Python
            | Row::Component
            | Row::PythonComponent
            | Row::WasmFresh
            | Row::ComponentFresh
            | Row::PipeFresh
            | Row::WasmMetrics => {
                let file = match row {
                    Row::Pipe | Row::PipeLogs | Row::PipeFresh => &options.native,
                    Row::Python => &options.python,
                    Row::Component | Row::ComponentFresh => &options.component,
                    Row::WasmFresh | Row::WasmMetrics => &options.wasm,
                    _ => &options.python_component,
                };
                let lifetime = match row {
                    Row::WasmFresh | Row::ComponentFresh | Row::PipeFresh => &fresh,
                    Row::WasmMetrics => &metered,
                    _ => &args[..],
                };
                let served = serve(file, lifetime)?;
                let addr = served.addr;
                servers.push(served);
                server = Some(servers.len() - 1);
                (addr, "/run", true)
            }
            Row::Http | Row::HttpFresh => {
                let lifetime = if *row == Row::Http { &args[..] } else { &fresh };
                servers.push(serve(&options.http, lifetime)?);
                server = Some(servers.len() - 1);
                (servers[servers.len() - 1].addr, "/", true)
            }
            Row::HttpPlain | Row::HttpPlainFresh | Row::WasmPlain => {
                let file = if *row == Row::WasmPlain {
                    &options.wasm
                } else {
                    &options.http
                };
                let lifetime = if *row == Row::HttpPlainFresh {
                    &fresh
                } else {
                    &args[..]
                };
                servers.push(serve_plain(file, lifetime)?);
                server = Some(servers.len() - 1);
                (servers[servers.len() - 1].addr, "/", true)
            }
            Row::WasmtimeServe | Row::WasmtimeServeFresh => {
                let reuse = *row == Row::WasmtimeServe;
                let peer = peer::WasmtimeServe::start(&options.wasmtime, &options.http, reuse)?;
                pid = Some(peer.pid());
                let addr = peer.addr;
                peers.push(peer);
                (addr, "/", true)
            }
            Row::Exec => (serve_exec(options.native.clone()).await?, "/run", true),
        };
        let shape = match row {
            Row::Http | Row::HttpFresh => Shape::WebAction,
            Row::WasmtimeServe | Row::WasmtimeServeFresh | Row::HttpPlain | Row::HttpPlainFresh => {
                Shape::Bare
            }
            Row::WasmPlain => Shape::BareToHello,
            _ => Shape::Hello,
        };
        // Our server takes the activation at /run whatever the action.
        let path = if shape == Shape::WebAction {
            "/run"
        } else {
            path
        };
        targets.push(Target {
            label: row.label().to_owned(),
            addr,
            path: path.into(),
            check,
            logs: matches!(row, Row::WasmLogs | Row::PipeLogs),
            pid: server.map(|at| servers[at].child.id()).or(pid),
            shape,
            resident_after_init: server
                .map(|at| servers[at].child.id())
                .or(pid)
                .and_then(resident_bytes),
        });
    }
    let rows = measure(&targets, &options).await?;
    drop(servers);
    drop(peers);
    let comparison = rows_measured(&options, before, rows);
    if let Some(dir) = &options.out {
        write_outputs(dir, &comparison)?;
    }
    Ok(comparison)
}

/// What `pid` and its descendants hold resident now (Linux; `None` elsewhere).
fn resident_bytes(pid: u32) -> Option<u64> {
    let own = wasmloop_common::process::resident_bytes(pid)?;
    let children: u64 = child_pids(pid).into_iter().filter_map(resident_bytes).sum();
    Some(own + children)
}

/// What `pid` and its children hold in memory, each page counted once however many
/// mappings share it (the proportional set size, PSS). The resident set counts a page
/// once per mapping: every instance of a component maps its memory image from the same
/// file, and those pages, in memory once, were counted once per instance (the Python
/// hello's +7.2 MiB per extra instance in RSS is +1.4 MiB in PSS, and in the memory
/// cgroup's charge alike). A page shared with another process counts in part, so compare
/// only figures read while the same processes run.
fn held_bytes(pid: u32) -> Option<u64> {
    let own = proportional_bytes(pid)?;
    let children: u64 = child_pids(pid).into_iter().filter_map(held_bytes).sum();
    Some(own + children)
}

/// `pid`'s proportional set size.
fn proportional_bytes(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kib = rollup
        .lines()
        .find_map(|line| line.strip_prefix("Pss:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib << 10)
}

/// The processes `pid` started.
fn child_pids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Where a Linux guest says how long an idle CPU polls before halting.
const HALT_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// A warning for a run whose numbers depend more on the host than on wasmloop: a VM guest
/// whose idle CPUs halt at once, measured across more than one CPU.
pub fn idle_cpu_note() -> Option<String> {
    let poll_ns = std::fs::read_to_string(HALT_POLL_NS).ok()?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    halt_polling_note(&poll_ns, cpus)
}

/// Measured on a 2-vCPU Firecracker guest with `guest_halt_poll_ns` 0: with the client and
/// server on one CPU, a pipe child on the other added 27 µs to the floor, against 11 µs on
/// theirs; unpinned, the floor moved between 29 and 74 µs over five runs. With 200000 it
/// moved between 19 and 31 µs over nine: placement still matters, the hypervisor less.
fn halt_polling_note(poll_ns: &str, cpus: usize) -> Option<String> {
    if poll_ns.trim() != "0" || cpus < 2 {
        return None;
    }
    Some(format!(
        "note: this machine is a VM whose idle CPUs halt at once ({HALT_POLL_NS} is 0), so \
         waking a process on an idle CPU goes through the hypervisor (~15 µs on a Firecracker \
         VM). Unpinned rows then vary from run to run with where the scheduler puts the \
         client, the server and a child. To compare the code, pin the run (`taskset -c 0`); \
         to measure as on a host that polls first, write the kernel's default, 200000, to \
         that file.\n"
    ))
}

/// The rows' files: bench.csv (the comparison's CSV writer) and latency.svg.
fn write_outputs(dir: &Path, rows: &report::Comparison) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("bench.csv"), report::csv(rows))?;
    plot(&dir.join("latency.svg"), rows)
}

/// Latency against percentile, one line per row: the report's chart, at the rows'
/// connection count.
fn plot(path: &Path, rows: &report::Comparison) -> anyhow::Result<()> {
    let curves: Vec<report::Curve> = rows
        .variants
        .iter()
        .filter_map(|row| {
            Some(report::Curve {
                label: &row.label,
                dashed: row.lifetime == report::Lifetime::Fresh,
                warm: row.warm.first()?,
            })
        })
        .collect();
    let connections = rows
        .variants
        .iter()
        .find_map(|row| row.warm.first())
        .map_or(1, |warm| warm.connections);
    std::fs::write(path, report::latency_svg(curves, connections))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_mapped_twice_counts_twice_in_the_resident_set_and_once_in_pss() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; 8 << 20]).unwrap();
        let map = |file: &std::fs::File| {
            // SAFETY: a private, read-only mapping of a file this test owns.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    8 << 20,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    std::os::fd::AsRawFd::as_raw_fd(file),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            // Every page read, so mapped.
            // SAFETY: within the mapping just made.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, 8 << 20) };
            assert_eq!(
                bytes.iter().step_by(4096).map(|b| *b as u64).sum::<u64>(),
                7 * 2048
            );
            at
        };
        let me = std::process::id();
        let rss = |pid| {
            let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
            let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
            pages * 4096
        };
        let (rss_before, pss_before) = (rss(me), proportional_bytes(me).unwrap());
        let (one, two) = (map(&file), map(&file));
        let (rss_after, pss_after) = (rss(me), proportional_bytes(me).unwrap());
        // SAFETY: the mappings made above, no longer read.
        unsafe {
            libc::munmap(one, 8 << 20);
            libc::munmap(two, 8 << 20);
        }
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        let (rss_grew, pss_grew) = (mib(rss_after - rss_before), mib(pss_after - pss_before));
        assert!(rss_grew > 15.0, "RSS grew {rss_grew} MiB");
        assert!((7.0..12.0).contains(&pss_grew), "PSS grew {pss_grew} MiB");
    }

    #[test]
    fn a_guest_that_halts_idle_cpus_at_once_is_pointed_out_unless_pinned() {
        let note = halt_polling_note("0\n", 2).expect("a note for 0 across two CPUs");
        assert!(
            note.contains("taskset -c 0") && note.contains("200000"),
            "{note}"
        );
        assert_eq!(halt_polling_note("0\n", 1), None, "pinned to one CPU");
        assert_eq!(
            halt_polling_note("200000\n", 2),
            None,
            "the kernel's default"
        );
    }
}
