//! `wasmloop bench --compare`: one action on every backend, compiler and instance lifetime, measured for choosing between them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use indicatif::ProgressBar;

use super::report::{
    Backend, Cold, Comparison, Compiler, Conditions, Host, Lifetime, Source, Spread, Variant, Warm,
};
use super::{
    Driven, Payload, Rounds, Served, Target, child_pids, held_bytes, in_rounds, resident_bytes,
};
use crate::stats::spread;

/// The connection counts every variant is measured at.
const CONNECTIONS: [usize; 2] = [1, 8];

/// The WebAssembly compilers compared: the optimizing one and the baseline one (`tiered`,
/// the default, starts as the second and ends as the first).
const COMPILERS: [Compiler; 2] = [Compiler::Cranelift, Compiler::Winch];

pub struct CompareOptions {
    pub hits: usize,
    pub warmup: usize,
    pub rounds: usize,
    pub cold_runs: usize,
    pub concurrency: u16,
    pub module: Option<PathBuf>,
    pub component: Option<PathBuf>,
    pub native: Option<PathBuf>,
    /// An HTTP component: measured beside `wasmtime serve` running the same file.
    pub http: Option<PathBuf>,
    /// wasmtime's CLI, for the HTTP component's peer.
    pub wasmtime: PathBuf,
    pub payload: Payload,
    /// A /run body that crashes the action; none: natively, its process is killed instead.
    pub crash_body: Option<Bytes>,
    /// Whether the user gave it (else it is the examples' hello's, which another action
    /// may just answer: the crash is then not measured, rather than the run failed).
    pub crash_body_given: bool,
    pub out: Option<PathBuf>,
    /// Named in the report's conditions.
    pub build: crate::Build,
}

/// One way of serving the action, before it is measured.
struct Plan {
    backend: Backend,
    compiler: Option<Compiler>,
    fresh: bool,
    file: PathBuf,
}

impl Plan {
    /// Its row of the report, before anything is measured.
    fn variant(&self) -> Variant {
        let lifetime = if self.fresh {
            Lifetime::Fresh
        } else {
            Lifetime::Persistent
        };
        Variant::named(self.backend, self.compiler, lifetime)
    }

    fn label(&self) -> String {
        self.variant().label
    }

    /// How its server takes the hello and answers.
    fn shape(&self) -> crate::Shape {
        match self.backend {
            Backend::Http => crate::Shape::WebAction,
            Backend::HttpPlain | Backend::WasmtimeServe => crate::Shape::Bare,
            _ => crate::Shape::Hello,
        }
    }

    /// Where its server takes an activation: `/run`, or any path of a plain HTTP server.
    fn path(&self) -> &'static str {
        match self.backend {
            Backend::HttpPlain | Backend::WasmtimeServe => "/",
            _ => "/run",
        }
    }

    /// The flags of a server for this plan (its cache folder aside).
    fn server_args(&self, concurrency: u16) -> Vec<String> {
        let mut args = vec!["--concurrency".to_owned(), concurrency.to_string()];
        if let Some(compiler) = self.compiler {
            args.extend(["--wasm-compiler".to_owned(), compiler.to_string()]);
        }
        if self.fresh {
            args.extend(["--max-activations-per-instance".to_owned(), "1".to_owned()]);
        }
        if self.backend == Backend::HttpPlain {
            args.extend(crate::plain_args(&self.file));
        }
        args
    }
}

/// The plans for the forms given: every compiler of a WebAssembly form, each persistent
/// and fresh; an HTTP component also served as plain HTTP, and by its peer.
fn plans(options: &CompareOptions) -> anyhow::Result<Vec<Plan>> {
    let forms = [
        (Backend::Module, &options.module),
        (Backend::Component, &options.component),
        (Backend::Native, &options.native),
        (Backend::Http, &options.http),
    ];
    let mut plans = Vec::new();
    for (backend, file) in forms {
        let Some(file) = file else { continue };
        if !file.is_file() {
            bail!(
                "{} (the {} form) is not a file: give the action's path (--wasm, --component, \
                 --native, --http), or build the examples first (see the README)",
                file.display(),
                backend.name()
            );
        }
        let compilers: &[Compiler] = match backend {
            Backend::Native => &[],
            _ => &COMPILERS,
        };
        // An HTTP component both as OpenWhisk's /run and as plain HTTP, the request itself,
        // as its peer below takes it.
        let served: &[Backend] = match backend {
            Backend::Http => &[Backend::Http, Backend::HttpPlain],
            _ => &[backend],
        };
        for &backend in served {
            let mut add = |compiler| {
                for fresh in [false, true] {
                    plans.push(Plan {
                        backend,
                        compiler,
                        fresh,
                        file: file.clone(),
                    });
                }
            };
            if compilers.is_empty() {
                add(None);
            }
            for compiler in compilers {
                add(Some(*compiler));
            }
        }
        // The same file under wasmtime's own server, reused and fresh.
        if backend == Backend::Http {
            for fresh in [false, true] {
                plans.push(Plan {
                    backend: Backend::WasmtimeServe,
                    compiler: None,
                    fresh,
                    file: file.clone(),
                });
            }
        }
    }
    if plans.is_empty() {
        bail!("nothing to compare: give at least one of --wasm, --component, --native");
    }
    Ok(plans)
}

/// The variables a comparison's servers are started without: their flags say what each
/// server is, and the environment must not say otherwise.
const SET_BY_FLAGS: [&str; 7] = [
    "WASMLOOP_PROTOCOL",
    "WASMLOOP_ACTION",
    "WASMLOOP_NO_CACHE",
    "WASMLOOP_CACHE_DIR",
    "WASMLOOP_WASM_COMPILER",
    "WASMLOOP_CONCURRENCY",
    "WASMLOOP_MAX_ACTIVATIONS_PER_INSTANCE",
];

/// A fresh server with `args`, not yet initialized.
fn start(args: &[String]) -> anyhow::Result<Served> {
    Served::start(args, &SET_BY_FLAGS)
}

/// A variant's warm server: ours, or the HTTP component's peer.
enum Server {
    Ours(Served),
    Peer(crate::peer::WasmtimeServe),
}

impl Server {
    fn addr(&self) -> SocketAddr {
        match self {
            Server::Ours(served) => served.addr,
            Server::Peer(peer) => peer.addr,
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Server::Ours(served) => served.child.id(),
            Server::Peer(peer) => peer.pid(),
        }
    }
}

/// One request to a server of `plan`: stops the comparison, naming the variant, the
/// answer and the expected one, when the answer is not what every answer must be.
fn check_answers(plan: &Plan, options: &CompareOptions, scratch: &Scratch) -> anyhow::Result<()> {
    let server = warm_server(plan, options, scratch)?;
    let payload = &options.payload.shaped(plan.shape());
    let path = plan.path();
    let reply = crate::harness::request(server.addr(), "POST", path, &payload.body(0))?;
    let expected = payload.expected(0);
    let content = reply.content();
    let right = reply.status == 200 && expected.as_ref().is_none_or(|e| *e == content);
    if !right {
        let wanted = match &expected {
            Some(e) => format!("200 `{}`", wasmloop_common::excerpt(e, 200)),
            None => "a 200".to_owned(),
        };
        bail!(
            "{}: its first answer was {} `{}`, expected {wanted}, so nothing was measured and \
             no report written. Check --body and --expect (or the action)",
            plan.label(),
            reply.status,
            wasmloop_common::excerpt(&content, 200)
        );
    }
    Ok(())
}

/// Activations whose own reports `reported` reads.
const REPORTED: usize = 40;

/// What the activations' own reports say `plan` costs: the median CPU time of one (µs)
/// and its instance's memory, read from a server of its own with `--log-format json`
/// (whose activations each end their logs with a report), never from the measured ones,
/// whose logs stay text. None for the peer, which writes no such report.
fn reported(
    plan: &Plan,
    options: &CompareOptions,
    scratch: &Scratch,
) -> anyhow::Result<(Option<f64>, Option<u64>)> {
    use std::io::{Read, Seek};
    if plan.backend == Backend::WasmtimeServe {
        return Ok((None, None));
    }
    let mut server = ours(plan, 1, &["--log-format", "json"], scratch)?;
    let payload = options.payload.shaped(plan.shape());
    for n in 0..REPORTED {
        crate::harness::request(server.addr, "POST", plan.path(), &payload.body(n))?;
    }
    // Each report is out before its answer.
    let mut logs = String::new();
    server.logs.rewind()?;
    server.logs.read_to_string(&mut logs)?;
    drop(server);
    Ok(from_reports(&logs))
}

/// The median `cpuMs` (as µs) and the largest `memoryBytes` of the report records in
/// `logs`, the first activation's left out (it may carry the start's lazy work).
fn from_reports(logs: &str) -> (Option<f64>, Option<u64>) {
    let reports: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|record| record.get("report").cloned())
        .skip(1)
        .collect();
    let mut cpu: Vec<f64> = reports
        .iter()
        .filter_map(|r| r["cpuMs"].as_f64())
        .map(|ms| ms * 1e3)
        .collect();
    cpu.sort_by(f64::total_cmp);
    let median = (!cpu.is_empty()).then(|| cpu[cpu.len() / 2]);
    let memory = reports
        .iter()
        .filter_map(|r| r["memoryBytes"].as_u64())
        .max();
    (median, memory)
}

/// A server of `plan` over the variant's own compile cache, initialized: what the warm
/// rounds measure.
fn warm_server(plan: &Plan, options: &CompareOptions, scratch: &Scratch) -> anyhow::Result<Server> {
    if plan.backend == Backend::WasmtimeServe {
        let peer = crate::peer::WasmtimeServe::start(&options.wasmtime, &plan.file, !plan.fresh)?;
        return Ok(Server::Peer(peer));
    }
    Ok(Server::Ours(ours(plan, options.concurrency, &[], scratch)?))
}

/// A server of ours for `plan` at `concurrency`, with `extra` flags, over the variant's
/// own compile cache, initialized.
fn ours(
    plan: &Plan,
    concurrency: u16,
    extra: &[&str],
    scratch: &Scratch,
) -> anyhow::Result<Served> {
    let cache = scratch.cache(&plan.label().replace(' ', "-"));
    let mut args = plan.server_args(concurrency);
    args.extend(["--cache-dir".to_owned(), cache.display().to_string()]);
    args.extend(extra.iter().map(|&flag| flag.to_owned()));
    let mut server = start(&args)?;
    // A plain HTTP server loads its action as it starts; the others are /init'ed.
    if plan.backend == Backend::HttpPlain {
        server.ready(&plan.file)?;
    } else {
        server.init(&std::fs::read(&plan.file)?, &plan.file)?;
    }
    Ok(server)
}

/// Where the compile cache, keys and artifacts of one comparison live.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn cache(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("cache-{name}"))
    }
}

/// Cold `/init`s of `plan`'s backend and compiler: each on a fresh server, compiled, from
/// a warm compile cache, and from a signed artifact (natively: started). A server that
/// takes no /init (plain HTTP, the peer) is timed from its start to its first answer.
fn cold(plan: &Plan, options: &CompareOptions, scratch: &Scratch) -> anyhow::Result<Vec<Cold>> {
    match plan.backend {
        Backend::HttpPlain => return plain_cold(plan, options, scratch),
        Backend::WasmtimeServe => return peer_cold(plan, options, scratch),
        _ => {}
    }
    let code = std::fs::read(&plan.file)
        .with_context(|| format!("cannot read {}", plan.file.display()))?;
    let args = plan.server_args(1);
    let runs = |extra: &[String], code: &[u8]| -> anyhow::Result<Spread> {
        let mut millis = Vec::new();
        for _ in 0..options.cold_runs {
            let mut server = start(&[&args[..], extra].concat())?;
            millis.push(server.init(code, &plan.file)?.as_secs_f64() * 1e3);
        }
        Ok(spread(&millis))
    };
    let cold = |source: Source, millis| Cold {
        source,
        millis,
        runs: options.cold_runs,
    };
    if plan.compiler.is_none() {
        return Ok(vec![cold(
            Source::Start,
            runs(&["--no-cache".to_owned()], &code)?,
        )]);
    }
    let compiled = runs(&["--no-cache".to_owned()], &code)?;

    let cache = scratch.cache(&plan.label().replace(' ', "-"));
    let cache_args = ["--cache-dir".to_owned(), cache.display().to_string()];
    // One /init fills the cache; the runs then load from it.
    start(&[&args[..], &cache_args].concat())?.init(&code, &plan.file)?;
    let cached = runs(&cache_args, &code)?;

    let keys = scratch.dir.path().join("keys");
    if !keys.join("sign.key").is_file() {
        wasmloop(&["keygen".as_ref(), keys.as_os_str()])?;
    }
    let artifact = scratch
        .dir
        .path()
        .join(format!("{}.zip", plan.label().replace(' ', "-")));
    wasmloop(&[
        "compile".as_ref(),
        plan.file.as_os_str(),
        "--output".as_ref(),
        artifact.as_os_str(),
        "--sign-key".as_ref(),
        keys.join("sign.key").as_os_str(),
        "--wasm-compiler".as_ref(),
        plan.compiler.unwrap_or(Compiler::Cranelift).name().as_ref(),
    ])?;
    let signed_code = std::fs::read(&artifact)?;
    let trust = [
        "--no-cache".to_owned(),
        "--trust-key".to_owned(),
        keys.join("verify.key").display().to_string(),
    ];
    let signed = runs(&trust, &signed_code)?;
    // The same servers' floor: what receiving the artifact's upload costs them.
    let spoilt = crate::harness::spoilt_init_body(&signed_code, wasmloop_common::DEFAULT_MAIN);
    let mut receive = Vec::new();
    for _ in 0..options.cold_runs {
        let server = start(&[&args[..], &trust].concat())?;
        let began = Instant::now();
        let reply = crate::harness::request(server.addr, "POST", "/init", spoilt.as_bytes())?;
        receive.push(began.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            reply.status == 400,
            "an /init of a spoilt upload got {} `{}`, not 400",
            reply.status,
            reply.text().trim()
        );
    }
    Ok(vec![
        cold(Source::Compiled, compiled),
        cold(Source::Cache, cached),
        cold(Source::Signed, signed),
        cold(Source::Receive, spread(&receive)),
    ])
}

/// The request a cold server's first answer is timed by, and the answer it must give.
fn first_request(plan: &Plan, options: &CompareOptions) -> (Bytes, Option<Bytes>) {
    let payload = options.payload.shaped(plan.shape());
    (payload.body(0), payload.expected(0))
}

/// Stops the comparison unless `reply` is what a first answer must be.
fn check_first(
    plan: &Plan,
    reply: &crate::harness::Reply,
    expected: Option<&Bytes>,
) -> anyhow::Result<()> {
    let content = reply.content();
    if reply.status != 200 || expected.is_some_and(|e| *e != content) {
        bail!(
            "{}: a fresh server's first answer was {} `{}`, expected {}",
            plan.label(),
            reply.status,
            wasmloop_common::excerpt(&content, 200),
            expected.map_or_else(
                || "a 200".to_owned(),
                |e| format!("200 `{}`", wasmloop_common::excerpt(e, 200))
            )
        );
    }
    Ok(())
}

/// A plain HTTP server's cold starts (`--protocol http --action`): from starting it to its
/// first answer, compiling the component, then from a compile cache filled before. Its
/// socket is bound before it starts, and it accepts once the action is loaded: the first
/// request waits in the backlog, nothing is polled.
fn plain_cold(
    plan: &Plan,
    options: &CompareOptions,
    scratch: &Scratch,
) -> anyhow::Result<Vec<Cold>> {
    let args = plan.server_args(1);
    let (body, expected) = first_request(plan, options);
    let first = |extra: &[String]| -> anyhow::Result<f64> {
        let started = Instant::now();
        let mut server = start(&[&args[..], extra].concat())?;
        let reply = crate::harness::request(server.addr, "POST", plan.path(), &body)
            .map_err(|error| server.explain(error.into()))?;
        let took = started.elapsed();
        check_first(plan, &reply, expected.as_ref())?;
        Ok(took.as_secs_f64() * 1e3)
    };
    let runs = |extra: &[String]| -> anyhow::Result<Spread> {
        let millis = (0..options.cold_runs)
            .map(|_| first(extra))
            .collect::<anyhow::Result<Vec<f64>>>()?;
        Ok(spread(&millis))
    };
    let compiled = runs(&["--no-cache".to_owned()])?;
    let cache = scratch.cache(&plan.label().replace(' ', "-"));
    let cache_args = ["--cache-dir".to_owned(), cache.display().to_string()];
    // One start fills the cache; the runs then load from it.
    first(&cache_args)?;
    let cached = runs(&cache_args)?;
    Ok(first_answers(compiled, cached, options.cold_runs))
}

/// The peer's cold starts, timed as a plain HTTP server's of ours: `wasmtime serve` from
/// its start to its first answer, compiling (`-C cache=n`), then from its own compile
/// cache, in a folder of this comparison's, filled before.
fn peer_cold(
    plan: &Plan,
    options: &CompareOptions,
    scratch: &Scratch,
) -> anyhow::Result<Vec<Cold>> {
    let (body, expected) = first_request(plan, options);
    let runs = |flags: &[String]| -> anyhow::Result<Spread> {
        let mut millis = Vec::new();
        for _ in 0..options.cold_runs {
            let took = crate::peer::WasmtimeServe::first_answer(
                &options.wasmtime,
                &plan.file,
                flags,
                &body,
                expected.as_deref(),
            )?;
            millis.push(took.as_secs_f64() * 1e3);
        }
        Ok(spread(&millis))
    };
    let compiled = runs(&["-C".to_owned(), "cache=n".to_owned()])?;
    let config = scratch.dir.path().join("wasmtime-cache.toml");
    let folder = scratch.dir.path().join("wasmtime-cache");
    std::fs::write(
        &config,
        format!("[cache]\ndirectory = {:?}\n", folder.display().to_string()),
    )?;
    let cached_flags = [
        "-C".to_owned(),
        format!("cache-config={}", config.display()),
    ];
    crate::peer::WasmtimeServe::first_answer(
        &options.wasmtime,
        &plan.file,
        &cached_flags,
        &body,
        expected.as_deref(),
    )?;
    let cached = runs(&cached_flags)?;
    Ok(first_answers(compiled, cached, options.cold_runs))
}

/// A server's two cold starts to a first answer: compiling, then from a filled cache.
fn first_answers(compiled: Spread, cached: Spread, runs: usize) -> Vec<Cold> {
    vec![
        Cold {
            source: Source::FirstAnswer,
            millis: compiled,
            runs,
        },
        Cold {
            source: Source::FirstCached,
            millis: cached,
            runs,
        },
    ]
}

/// Runs this wasmloop with `args`, failing with its output.
fn wasmloop(args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
    super::source::run(
        std::process::Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::null()),
    )
}

/// Warm latencies of every target at `connections`: the rows' engine (`in_rounds`).
async fn warm(
    targets: &[Target],
    payload: &Payload,
    options: &CompareOptions,
    connections: usize,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<(Warm, Driven)>> {
    let payloads = crate::Payloads::new(payload);
    let payload_of = |target: &Target| payloads.of(target);
    let plan = Rounds {
        warmup: options.warmup,
        hits: options.hits,
        rounds: options.rounds,
        connections,
        stop_on_wrong: true,
    };
    in_rounds(targets, payload_of, plan, progress).await
}

/// The time from a crash to the next right answer, over `runs` crashes: the crash is
/// `crash_body`'s activation, or (natively, without one) a SIGKILL of the action's process.
fn crash_to_answer(
    server: &Server,
    backend: Backend,
    crash_body: Option<&Bytes>,
    crash_body_given: bool,
    payload: &Payload,
    runs: usize,
) -> anyhow::Result<Option<Spread>> {
    // A plain HTTP server takes the request itself: a /run body that crashes the action
    // is no request of its.
    let (Server::Ours(server), false) = (server, backend == Backend::HttpPlain) else {
        return Ok(None);
    };
    let payload = &payload.shaped(match backend {
        Backend::Http => crate::Shape::WebAction,
        _ => crate::Shape::Hello,
    });
    let mut millis = Vec::new();
    for n in 0..runs {
        // From the crash itself: a restart that waits for the next request shows here.
        let mut started = Instant::now();
        let mut crashed = false;
        if let Some(body) = crash_body {
            let reply = crate::harness::request(server.addr, "POST", "/run", body)?;
            if reply.status == 200 && crash_body_given {
                bail!(
                    "--crash-body did not crash the action: it answered 200 `{}`",
                    wasmloop_common::excerpt(reply.body.as_ref(), 200)
                );
            }
            crashed = reply.status != 200;
        }
        if !crashed {
            // Natively a crash can be made from outside: the action's process is killed.
            if backend != Backend::Native {
                return Ok(None);
            }
            let children = child_pids(server.child.id());
            // A fresh child per activation is started on arrival: none to kill between.
            if children.is_empty() {
                return Ok(None);
            }
            started = Instant::now();
            for pid in children {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid as i32).context("a pid")?,
                    rustix::process::Signal::KILL,
                );
            }
        }
        // A process killed between activations may not be seen dead before the next one
        // is sent to it: that one fails too, as it would on the platform. The next right
        // answer ends the measurement.
        let mut reply = crate::harness::request(server.addr, "POST", "/run", &payload.body(n))?;
        for _ in 0..3 {
            if reply.status == 200 {
                break;
            }
            reply = crate::harness::request(server.addr, "POST", "/run", &payload.body(n))?;
        }
        let took = started.elapsed();
        if reply.status != 200 {
            bail!(
                "after a crash, the next activations answered {} `{}`",
                reply.status,
                wasmloop_common::excerpt(reply.body.as_ref(), 200)
            );
        }
        millis.push(took.as_secs_f64() * 1e3);
    }
    Ok(Some(spread(&millis)))
}

/// Runs of the host's reference task per reading, and the task's steps.
const REFERENCE_RUNS: usize = 5;
const REFERENCE_STEPS: u64 = 10_000_000;

/// The host now: its load average, and how long a fixed CPU task takes it.
pub(crate) fn host_now() -> Host {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok());
    let millis: Vec<f64> = (0..REFERENCE_RUNS)
        .map(|_| {
            let started = Instant::now();
            // A xorshift chain: each step needs the one before, so nothing can skip it.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for i in 0..REFERENCE_STEPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x = x.wrapping_add(i);
            }
            std::hint::black_box(x);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    Host {
        load,
        reference_ms: Some(spread(&millis)),
    }
}

/// The run's conditions, for the report, with the host as the run found it (`before`) and
/// as it is now.
fn conditions(options: &CompareOptions, before: Host) -> Conditions {
    conditions_of(
        &options.build,
        Asked {
            hits: options.hits,
            rounds: options.rounds,
            concurrency: options.concurrency,
            body: wasmloop_common::excerpt(&options.payload.body(0), 200),
            body_given: !options.payload.bodies.is_empty(),
            expect: options
                .payload
                .expect
                .as_deref()
                .map(|e| wasmloop_common::excerpt(e, 200)),
            cold_runs: options.cold_runs,
        },
        before,
    )
}

/// What a run was asked to do, as its conditions record it.
pub(crate) struct Asked {
    pub hits: usize,
    pub rounds: usize,
    pub concurrency: u16,
    pub body: String,
    pub body_given: bool,
    pub expect: Option<String>,
    pub cold_runs: usize,
}

/// A run's conditions: the build, the machine, the host before (`before`) and now, and
/// what the run was asked to do.
pub(crate) fn conditions_of(build: &crate::Build, asked: Asked, before: Host) -> Conditions {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or_else(
            || "unknown".to_owned(),
            |(_, model)| model.trim().to_owned(),
        );
    let online = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    Conditions {
        version: build.version.to_owned(),
        commit: build.commit.unwrap_or("unknown").to_owned(),
        cpu_model,
        cpus,
        pinned: online > cpus,
        online,
        before,
        after: host_now(),
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        hits: asked.hits,
        rounds: asked.rounds,
        concurrency: asked.concurrency,
        body: asked.body,
        body_given: asked.body_given,
        expect: asked.expect,
        cold_runs: asked.cold_runs,
    }
}

/// Measures every plan and returns the comparison (and writes its report with `out`).
pub async fn run(options: CompareOptions) -> anyhow::Result<Comparison> {
    if options.hits == 0 || options.cold_runs == 0 {
        bail!("--hits and --cold-runs must be at least 1");
    }
    let plans = plans(&options)?;
    let before = host_now();
    let scratch = Scratch {
        dir: tempfile::tempdir()?,
    };
    // A wrong --body or --expect makes every figure meaningless: told in seconds, before
    // the cold runs, from one server of the first variant (its cache serves it later).
    check_answers(&plans[0], &options, &scratch)?;
    let progress = ProgressBar::new_spinner();
    progress.set_message("cold starts on fresh servers");
    let mut colds = Vec::new();
    for plan in &plans {
        // A fresh instance per activation changes nothing at a server's start.
        colds.push(if plan.fresh {
            Vec::new()
        } else {
            cold(plan, &options, &scratch)?
        });
    }

    // Every warm server stays up until the end: the rounds go through them in turns.
    let mut servers = Vec::new();
    let mut after_init = Vec::new();
    for plan in &plans {
        let server = warm_server(plan, &options, &scratch)?;
        after_init.push(resident_bytes(server.pid()));
        servers.push(server);
    }
    // Read once every server runs, as after the load: the pages they share count the same.
    let held_after_init: Vec<Option<u64>> = servers.iter().map(|s| held_bytes(s.pid())).collect();
    let targets: Vec<Target> = plans
        .iter()
        .zip(&servers)
        .map(|(plan, server)| Target {
            label: plan.label(),
            addr: server.addr(),
            path: plan.path().into(),
            check: true,
            logs: false,
            pid: Some(server.pid()),
            shape: plan.shape(),
            // Read per variant below, with every server up.
            resident_after_init: None,
        })
        .collect();
    let total = CONNECTIONS.len() * targets.len() * (options.warmup + options.hits);
    progress.finish_and_clear();
    let progress = ProgressBar::new(total as u64);
    let mut warms: Vec<Vec<Warm>> = plans.iter().map(|_| Vec::new()).collect();
    let mut checked: Vec<Driven> = plans.iter().map(|_| Driven::default()).collect();
    let mut after_load = Vec::new();
    for connections in CONNECTIONS {
        let measured = warm(&targets, &options.payload, &options, connections, &progress).await?;
        for (at, (warm, driven)) in measured.into_iter().enumerate() {
            warms[at].push(warm);
            checked[at].add(driven);
        }
        after_load = servers.iter().map(|s| held_bytes(s.pid())).collect();
    }
    progress.finish_and_clear();

    let mut variants = Vec::new();
    for (at, plan) in plans.iter().enumerate() {
        // Instances beyond the first exist only where the server may run them at once,
        // and only a persistent one keeps them.
        let extra = usize::from(options.concurrency).min(*CONNECTIONS.last().unwrap_or(&1)) - 1;
        let per_extra = match (held_after_init[at], after_load.get(at).copied().flatten()) {
            (Some(before), Some(after)) if extra > 0 && !plan.fresh => {
                Some(after.saturating_sub(before) / extra as u64)
            }
            _ => None,
        };
        let crash = crash_to_answer(
            &servers[at],
            plan.backend,
            options.crash_body.as_ref(),
            options.crash_body_given,
            &options.payload,
            options.cold_runs,
        )?;
        let (reported_cpu_us, reported_memory) = reported(plan, &options, &scratch)?;
        let driven = &mut checked[at];
        variants.push(Variant {
            warm: std::mem::take(&mut warms[at]),
            cold: std::mem::take(&mut colds[at]),
            resident_after_init: after_init[at],
            resident_per_extra_instance: per_extra,
            crash_to_answer_ms: crash,
            reported_cpu_us,
            reported_memory,
            errors: driven.errors,
            first_wrong: driven.first_wrong.take(),
            ..plan.variant()
        });
    }
    drop(servers);
    let mut comparison = Comparison {
        conditions: conditions(&options, before),
        variants,
        notes: Vec::new(),
    };
    comparison.notes = super::report::overlap_notes(&comparison);
    if plans.iter().any(|p| p.backend == Backend::WasmtimeServe) {
        comparison
            .notes
            .extend(crate::peer::script_note(&options.wasmtime));
    }
    if let Some(dir) = &options.out {
        write(dir, &comparison)?;
    }
    Ok(comparison)
}

/// The report's files: report.html and compare.csv.
pub fn write(dir: &Path, comparison: &Comparison) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("report.html"), super::report::html(comparison))?;
    std::fs::write(dir.join("compare.csv"), super::report::csv(comparison))?;
    Ok(())
}

/// Measures a running server's /run (`--url`) the same way, as one variant.
pub async fn url(
    options: &CompareOptions,
    addr: SocketAddr,
    path: &str,
) -> anyhow::Result<Comparison> {
    let before = host_now();
    let target = Target::url(addr, path, &options.payload);
    let progress = ProgressBar::new((CONNECTIONS.len() * (options.warmup + options.hits)) as u64);
    let mut warms = Vec::new();
    let mut checked = Driven::default();
    for connections in CONNECTIONS {
        for (warm, driven) in warm(
            std::slice::from_ref(&target),
            &options.payload,
            options,
            connections,
            &progress,
        )
        .await?
        {
            warms.push(warm);
            checked.add(driven);
        }
    }
    progress.finish_and_clear();
    let comparison = Comparison {
        conditions: conditions(options, before),
        variants: vec![Variant {
            label: format!("url {}", path),
            warm: warms,
            errors: checked.errors,
            first_wrong: checked.first_wrong,
            ..Variant::named(Backend::Url, None, Lifetime::AsServed)
        }],
        notes: Vec::new(),
    };
    if let Some(dir) = &options.out {
        write(dir, &comparison)?;
    }
    Ok(comparison)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reports_give_the_median_cpu_and_the_largest_memory_after_the_first() {
        let logs = [
            r#"{"message":"a line of the action's"}"#,
            r#"{"report":{"wallMs":9.0,"cpuMs":8.0,"memoryBytes":999999,"instance":"fresh"}}"#,
            r#"{"report":{"wallMs":1.0,"cpuMs":0.030,"memoryBytes":1000,"instance":"reused"}}"#,
            r#"{"report":{"wallMs":1.0,"cpuMs":0.050,"memoryBytes":3000,"instance":"reused"}}"#,
            r#"{"report":{"wallMs":1.0,"cpuMs":0.040,"memoryBytes":2000,"instance":"reused"}}"#,
            "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX",
        ]
        .join("\n");
        let (cpu, memory) = from_reports(&logs);
        assert!((cpu.unwrap() - 40.0).abs() < 1e-9, "{cpu:?}");
        assert_eq!(memory, Some(3000));
        assert_eq!(from_reports("no reports\n"), (None, None));
    }
}
