//! `wasmloop bench --compare`: one action in every form, compiler and instance lifetime, measured for choosing between them.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use indicatif::ProgressBar;
use tempfile::TempDir;
use wasmloop_common::excerpt;

use crate::harness;
use crate::load::{
    Options, Payload, Target, conditions, host_now, measure, path_of, resolve_url, wrong,
};
use crate::peer::WasmtimeServe;
use crate::report::{
    self, Backend, Cold, Comparison, Compiler, Form, Lifetime, Protocol, Server, Source, Spread,
    Variant,
};
use crate::serve::{self, Running, Served, child_pids, held_bytes};
use crate::stats::spread;

/// The connection counts every variant is measured at.
const CONNECTIONS: [usize; 2] = [1, 8];

/// The WebAssembly compilers compared: the optimizing one and the baseline one (`tiered`,
/// the default, starts as the second and ends as the first).
const COMPILERS: [Option<Compiler>; 2] = [Some(Compiler::Cranelift), Some(Compiler::Winch)];

/// A /run body that crashes the action, to time the next answer after a crash; none:
/// natively, its process is killed instead.
pub struct Crash {
    pub body: Option<Bytes>,
    /// Whether the user gave it (else it is the examples' hello's, which another action
    /// may just answer: the crash is then not measured, rather than the run failed).
    pub given: bool,
}

/// One way of serving the action, before it is measured: its variant, and the file.
struct Plan(Variant, PathBuf);

impl Plan {
    fn label(&self) -> String {
        self.0.label.clone()
    }

    fn payload(&self, options: &Options) -> Payload {
        options.payload.for_form(self.0.form)
    }

    fn args(&self, concurrency: u16) -> Vec<String> {
        let Plan(v, file) = self;
        serve::server_args(v.form, file, v.compiler, v.lifetime, concurrency)
    }

    fn peer(&self) -> bool {
        self.0.form.server == Server::WasmtimeServe
    }

    /// The flags of its own compile cache, in `scratch`.
    fn cache(&self, scratch: &TempDir) -> Vec<String> {
        let name = format!("cache-{}", self.label().replace(' ', "-"));
        let dir = scratch.path().join(name).display().to_string();
        vec!["--cache-dir".to_owned(), dir]
    }
}

/// The plans for the forms given: every compiler of a WebAssembly form, each persistent
/// and fresh; an HTTP component also served as plain HTTP, and by its peer.
fn plans(forms: &[(Backend, PathBuf)]) -> anyhow::Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for (backend, file) in forms {
        if !file.is_file() {
            bail!(
                "{} (the {backend} form) is not a file: give the action's path (--wasm, \
                 --component, --native, --http), or build the examples first (see the README)",
                file.display(),
            );
        }
        let compilers: &[Option<Compiler>] = match backend {
            Backend::Native => &[None],
            _ => &COMPILERS,
        };
        // An HTTP component both as OpenWhisk's /run and as plain HTTP, the request itself,
        // then the same file under wasmtime's own server, reused and fresh.
        let served: &[(Form, &[Option<Compiler>])] = match backend {
            Backend::Http => &[
                (Form::ours(Backend::Http), compilers),
                (Form::HTTP_PLAIN, compilers),
                (Form::PEER, &[None]),
            ],
            _ => &[(Form::ours(*backend), compilers)],
        };
        for (form, compilers) in served {
            for compiler in *compilers {
                for lifetime in [Lifetime::Persistent, Lifetime::Fresh] {
                    let variant = Variant::of(*form, *compiler, lifetime);
                    plans.push(Plan(variant, file.clone()));
                }
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

/// A server of ours for `plan` at `concurrency`, with `extra` flags, over the variant's
/// own compile cache, initialized.
fn ours(
    plan: &Plan,
    concurrency: u16,
    extra: &[&str],
    scratch: &TempDir,
) -> anyhow::Result<Served> {
    let mut args = plan.args(concurrency);
    args.extend(plan.cache(scratch));
    args.extend(extra.iter().map(|&flag| flag.to_owned()));
    serve::ours(&plan.1, plan.0.form, &args, &SET_BY_FLAGS)
}

/// A server of `plan`, initialized: what the warm rounds measure.
fn warm_server(plan: &Plan, options: &Options, scratch: &TempDir) -> anyhow::Result<Running> {
    let reuse = plan.0.lifetime == Lifetime::Persistent;
    Ok(match plan.peer() {
        true => Running::Peer(WasmtimeServe::start(&options.wasmtime, &plan.1, reuse)?),
        false => Running::Ours(ours(plan, options.concurrency, &[], scratch)?),
    })
}

/// One request to a server of `plan`: stops the comparison, naming the variant, the
/// answer and the expected one, when the answer is not what every answer must be.
fn check_answers(plan: &Plan, options: &Options, scratch: &TempDir) -> anyhow::Result<()> {
    let server = warm_server(plan, options, scratch)?;
    let payload = plan.payload(options);
    let (addr, path) = (server.addr(), path_of(plan.0.form));
    let reply = harness::request(addr, "POST", path, &payload.body(0))?;
    let expected = payload.expected(0);
    if let Some(wrong) = wrong(reply.status, &reply.content(), expected.as_deref()) {
        bail!(
            "{}: its first answer was {wrong}, so nothing was measured and no report written. \
             Check --body and --expect (or the action)",
            plan.label()
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
    options: &Options,
    scratch: &TempDir,
) -> anyhow::Result<(Option<f64>, Option<u64>)> {
    use std::io::{Read, Seek};
    if plan.peer() {
        return Ok((None, None));
    }
    let mut server = ours(plan, 1, &["--log-format", "json"], scratch)?;
    let payload = plan.payload(options);
    for n in 0..REPORTED {
        server.request("POST", path_of(plan.0.form), &payload.body(n))?;
    }
    // Each report is out before its answer.
    let mut logs = String::new();
    server.logs.rewind()?;
    server.logs.read_to_string(&mut logs)?;
    Ok(from_reports(&logs))
}

/// The median `cpuMs` (as µs) and the largest `memoryBytes` of the report records in
/// `logs`, the first activation's left out (it may carry the start's lazy work).
fn from_reports(logs: &str) -> (Option<f64>, Option<u64>) {
    let records = logs
        .lines()
        .flat_map(serde_json::from_str::<serde_json::Value>);
    let reports = records.filter_map(|record| record.get("report").cloned());
    let reports: Vec<serde_json::Value> = reports.skip(1).collect();
    let mut cpu: Vec<f64> = reports.iter().filter_map(|r| r["cpuMs"].as_f64()).collect();
    cpu.sort_by(f64::total_cmp);
    let memory = reports.iter().filter_map(|r| r["memoryBytes"].as_u64());
    let memory = memory.max();
    (cpu.get(cpu.len() / 2).map(|ms| ms * 1e3), memory)
}

/// `runs` timings of `once`, in ms.
fn timed(runs: usize, once: impl FnMut() -> anyhow::Result<Duration>) -> anyhow::Result<Spread> {
    let millis = std::iter::repeat_with(once).take(runs);
    let millis: Vec<f64> = millis
        .map(|took| Ok(took?.as_secs_f64() * 1e3))
        .collect::<anyhow::Result<_>>()?;
    Ok(spread(&millis))
}

/// Cold `/init`s of `plan`'s form and compiler: each on a fresh server, compiled, from a
/// warm compile cache, and from a signed artifact (natively: started). A server that
/// takes no /init (plain HTTP, the peer) is timed from its start to its first answer.
fn cold(plan: &Plan, options: &Options, scratch: &TempDir) -> anyhow::Result<Vec<Cold>> {
    if plan.0.form.protocol == Protocol::Plain {
        return first_answers(plan, options, scratch);
    }
    let (runs, file) = (options.cold_runs, &plan.1);
    let cold = |source, millis| Cold::new(source, millis, runs);
    let code = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let args = plan.args(1);
    let launch = |extra: &[String]| start(&[&args[..], extra].concat());
    let init = |extra: &[String], code: &[u8]| timed(runs, || launch(extra)?.init(code, file));
    let no_cache = ["--no-cache".to_owned()];
    if plan.0.compiler.is_none() {
        return Ok(vec![cold(Source::Start, init(&no_cache, &code)?)]);
    }
    let compiled = init(&no_cache, &code)?;
    // One /init fills the cache; the runs then load from it.
    let cache = plan.cache(scratch);
    launch(&cache)?.init(&code, file)?;
    let cached = init(&cache, &code)?;

    let (keys, label) = (scratch.path().join("keys"), plan.label().replace(' ', "-"));
    let (sign, artifact) = (keys.join("sign.key"), scratch.path().join(label + ".zip"));
    if !sign.is_file() {
        wasmloop(&["keygen".as_ref(), keys.as_os_str()])?;
    }
    let compiler = plan.0.compiler.unwrap_or(Compiler::Cranelift).name();
    let flags = ["compile", "--wasm-compiler", compiler, "--output"].map(OsStr::new);
    let paths = [
        artifact.as_os_str(),
        "--sign-key".as_ref(),
        sign.as_os_str(),
    ];
    wasmloop(&[&flags[..], &paths, &[file.as_os_str()]].concat())?;
    let signed_code = std::fs::read(&artifact)?;
    let verify = keys.join("verify.key").display().to_string();
    let trust = ["--no-cache".to_owned(), "--trust-key".to_owned(), verify];
    let signed = init(&trust, &signed_code)?;
    // The same servers' floor: what receiving the artifact's upload costs them.
    let spoilt = harness::spoilt_init_body(&signed_code, wasmloop_common::DEFAULT_MAIN);
    let receive = timed(runs, || {
        let server = launch(&trust)?;
        let began = Instant::now();
        let reply = harness::request(server.addr, "POST", "/init", spoilt.as_bytes())?;
        let took = began.elapsed();
        anyhow::ensure!(
            reply.status == 400,
            "an /init of a spoilt upload got {} `{}`, not 400",
            reply.status,
            reply.text().trim()
        );
        Ok(took)
    })?;
    Ok(vec![
        cold(Source::Compiled, compiled),
        cold(Source::Cache, cached),
        cold(Source::Signed, signed),
        cold(Source::Receive, receive),
    ])
}

/// The cold starts of a server that takes no /init, its action built in (ours as plain
/// HTTP, or the peer): from starting it to its first answer, compiling, then from a
/// compile cache filled by a start before. Our server's socket is bound before it starts,
/// and it accepts once the action is loaded: the first request waits in the backlog,
/// nothing is polled.
fn first_answers(plan: &Plan, options: &Options, scratch: &TempDir) -> anyhow::Result<Vec<Cold>> {
    let payload = plan.payload(options);
    let (body, expected) = (payload.body(0), payload.expected(0));
    let (peer, expected) = (plan.peer(), expected.as_deref());
    let first = |flags: &[String]| -> anyhow::Result<Duration> {
        if peer {
            let wasmtime = &options.wasmtime;
            return WasmtimeServe::first_answer(wasmtime, &plan.1, flags, &body, expected);
        }
        let started = Instant::now();
        let mut server = start(&[&plan.args(1)[..], flags].concat())?;
        let reply = server.request("POST", path_of(plan.0.form), &body)?;
        let took = started.elapsed();
        if let Some(wrong) = wrong(reply.status, &reply.content(), expected) {
            let label = plan.label();
            bail!("{label}: a fresh server's first answer was {wrong}");
        }
        Ok(took)
    };
    // wasmtime's own cache, configured by a file, in a folder of this comparison's.
    let (uncached, cached) = if peer {
        let config = scratch.path().join("wasmtime-cache.toml");
        let folder = scratch.path().join("wasmtime-cache").display().to_string();
        std::fs::write(&config, format!("[cache]\ndirectory = {folder:?}\n"))?;
        let cached = format!("cache-config={}", config.display());
        let option = |value: String| vec!["-C".to_owned(), value];
        (option("cache=n".to_owned()), option(cached))
    } else {
        (vec!["--no-cache".to_owned()], plan.cache(scratch))
    };
    let runs = options.cold_runs;
    let compiled = timed(runs, || first(&uncached))?;
    first(&cached)?;
    let cached = timed(runs, || first(&cached))?;
    let cold = |source, millis| Cold::new(source, millis, runs);
    Ok(vec![
        cold(Source::FirstAnswer, compiled),
        cold(Source::FirstCached, cached),
    ])
}

/// Runs this wasmloop with `args`, failing with its output.
fn wasmloop(args: &[&OsStr]) -> anyhow::Result<()> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    crate::source::run(command.args(args).stdin(Stdio::null()))
}

/// The time from a crash to the next right answer, over `runs` crashes: the crash is
/// the crash body's activation, or (natively, without one) a SIGKILL of the action's
/// process. None where neither can crash it.
fn crash_to_answer(
    server: &Running,
    plan: &Plan,
    crash: &Crash,
    payload: &Payload,
    runs: usize,
) -> anyhow::Result<Option<Spread>> {
    // A plain HTTP server takes the request itself: a /run body that crashes the action
    // is no request of its.
    let (Running::Ours(server), Protocol::OpenWhisk) = (server, plan.0.form.protocol) else {
        return Ok(None);
    };
    let mut millis = Vec::new();
    for n in 0..runs {
        // From the crash itself: a restart that waits for the next request shows here.
        let mut started = Instant::now();
        let mut crashed = false;
        if let Some(body) = &crash.body {
            let reply = harness::request(server.addr, "POST", "/run", body)?;
            if reply.status == 200 && crash.given {
                let said = excerpt(&reply.body, 200);
                bail!("--crash-body did not crash the action: it answered 200 `{said}`");
            }
            crashed = reply.status != 200;
        }
        if !crashed {
            // Natively a crash can be made from outside: the action's process is killed.
            // A fresh child per activation is started on arrival: none to kill between.
            let children = child_pids(server.child.id());
            if plan.0.form.backend != Some(Backend::Native) || children.is_empty() {
                return Ok(None);
            }
            started = Instant::now();
            for pid in children {
                let pid = rustix::process::Pid::from_raw(pid as i32).context("a pid")?;
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        // A process killed between activations may not be seen dead before the next one
        // is sent to it: that one fails too, as it would on the platform. The next right
        // answer ends the measurement.
        let mut reply = harness::request(server.addr, "POST", "/run", &payload.body(n))?;
        for _ in 0..3 {
            if reply.status == 200 {
                break;
            }
            reply = harness::request(server.addr, "POST", "/run", &payload.body(n))?;
        }
        let took = started.elapsed();
        if reply.status != 200 {
            let (status, body) = (reply.status, excerpt(&reply.body, 200));
            bail!("after a crash, the next activations answered {status} `{body}`");
        }
        millis.push(took.as_secs_f64() * 1e3);
    }
    Ok(Some(spread(&millis)))
}

/// Measures every plan of `forms` and returns the comparison (and writes its report with
/// `--out`).
pub async fn run(
    options: &Options,
    forms: &[(Backend, PathBuf)],
    crash: &Crash,
) -> anyhow::Result<Comparison> {
    if options.hits == 0 || options.cold_runs == 0 {
        bail!("--hits and --cold-runs must be at least 1");
    }
    let plans = plans(forms)?;
    let before = host_now();
    let scratch = tempfile::tempdir()?;
    // A wrong --body or --expect makes every figure meaningless: told in seconds, before
    // the cold runs, from one server of the first variant (its cache serves it later).
    check_answers(&plans[0], options, &scratch)?;
    let progress = ProgressBar::new_spinner();
    progress.set_message("cold starts on fresh servers");
    let mut colds = Vec::new();
    for plan in &plans {
        // A fresh instance per activation changes nothing at a server's start.
        colds.push(match plan.0.lifetime {
            Lifetime::Fresh => Vec::new(),
            _ => cold(plan, options, &scratch)?,
        });
    }

    // Every warm server stays up until the end: the rounds go through them in turns.
    let (mut servers, mut after_init) = (Vec::new(), Vec::new());
    for plan in &plans {
        let server = warm_server(plan, options, &scratch)?;
        after_init.push(server.pid().and_then(serve::resident_bytes));
        servers.push(server);
    }
    // Read once every server runs, as after the load: the pages they share count the same.
    let held_by = |server: &Running| server.pid().and_then(held_bytes);
    let held = |servers: &[Running]| servers.iter().map(held_by).collect::<Vec<_>>();
    let held_after_init = held(&servers);
    let target = |(plan, server): (&Plan, &Running)| Target {
        label: plan.label(),
        addr: server.addr(),
        path: path_of(plan.0.form).into(),
        check: true,
        pid: server.pid(),
        payload: plan.payload(options),
    };
    let targets: Vec<Target> = plans.iter().zip(&servers).map(target).collect();
    progress.finish_and_clear();
    // Wrong answers stop the run: figures of wrong answers compare nothing.
    let measured = measure(options, &targets, &CONNECTIONS, true).await?;
    let after_load = held(&servers);

    // Instances beyond the first exist only where the server may run them at once, and
    // only a persistent one keeps them.
    let extra = usize::from(options.concurrency).min(CONNECTIONS[1]) - 1;
    let mut variants = Vec::new();
    for (at, (plan, (warm, driven))) in plans.iter().zip(measured).enumerate() {
        let per_extra = match (held_after_init[at], after_load[at]) {
            (Some(before), Some(after)) if extra > 0 && plan.0.lifetime == Lifetime::Persistent => {
                Some(after.saturating_sub(before) / extra as u64)
            }
            _ => None,
        };
        let payload = plan.payload(options);
        let crash = crash_to_answer(&servers[at], plan, crash, &payload, options.cold_runs)?;
        let (reported_cpu_us, reported_memory) = reported(plan, options, &scratch)?;
        variants.push(Variant {
            warm,
            cold: std::mem::take(&mut colds[at]),
            resident_after_init: after_init[at],
            resident_per_extra_instance: per_extra,
            crash_to_answer_ms: crash,
            reported_cpu_us,
            reported_memory,
            errors: driven.errors,
            first_wrong: driven.first_wrong,
            ..plan.0.clone()
        });
    }
    drop(servers);
    let mut comparison = Comparison::of(conditions(options, before), variants);
    if plans.iter().any(Plan::peer) {
        let note = crate::peer::script_note(&options.wasmtime);
        comparison.notes.extend(note);
    }
    write(options, &comparison)?;
    Ok(comparison)
}

/// With `--out`, the report's files: report.html and compare.csv.
fn write(options: &Options, comparison: &Comparison) -> anyhow::Result<()> {
    let Some(dir) = &options.out else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("report.html"), report::html(comparison))?;
    std::fs::write(dir.join("compare.csv"), report::csv(comparison))?;
    Ok(())
}

/// Measures a running server's /run (`--url`) the same way, as one variant.
pub async fn url(options: &Options, url: &str) -> anyhow::Result<Comparison> {
    let (addr, path) = resolve_url(url).await?;
    let before = host_now();
    let target = Target::url(addr, &path, &options.payload);
    let targets = std::slice::from_ref(&target);
    let mut measured = measure(options, targets, &CONNECTIONS, true).await?;
    let (warm, driven) = measured.remove(0);
    let variant = Variant {
        label: format!("url {path}"),
        warm,
        errors: driven.errors,
        first_wrong: driven.first_wrong,
        ..Variant::of(Form::URL, None, Lifetime::AsServed)
    };
    let comparison = Comparison::of(conditions(options, before), vec![variant]);
    write(options, &comparison)?;
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
