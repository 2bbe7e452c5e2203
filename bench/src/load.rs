//! The load: each request and the answer it must get, sent over keep-alive connections in rounds taken in turns across the targets, and the host it ran on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::net::TcpStream;
use wasmloop_common::excerpt;

use crate::report::{Backend, Conditions, Form, Host, Protocol, Warm};
use crate::{cpu, stats};

/// What a run of the rows or of a comparison is asked to do.
pub struct Options {
    pub hits: usize,
    pub warmup: usize,
    /// Slices each target's hits are measured in, taken in turns across the targets.
    pub rounds: usize,
    /// Fresh servers per cold start figure (none for the rows).
    pub cold_runs: usize,
    /// The servers' `--concurrency`: instances (or children) serving at once.
    pub concurrency: u16,
    pub payload: Payload,
    /// The `wasmtime` executable the peer runs.
    pub wasmtime: PathBuf,
    pub out: Option<PathBuf>,
    /// Named in the conditions.
    pub build: crate::Build,
}

/// What each request sends, and what its answer must be.
#[derive(Clone)]
pub struct Payload {
    /// Whole /run bodies, sent in turn; none: the hello's `{"value":{"name":"bench<N>"}}`.
    pub bodies: Vec<Bytes>,
    /// The answer every request must get; none: the greeting for the hello's body, and
    /// any 200 for bodies of one's own.
    pub expect: Option<Bytes>,
    /// The hello's body asks it to log a line more (the `-logs` rows).
    pub logs: bool,
    /// Whose server takes the hello's requests, and so how they are asked and answered.
    pub form: Form,
}

/// Where a server of `form` takes an activation: `/run`, or any path of a plain HTTP server.
pub fn path_of(form: Form) -> &'static str {
    match form.protocol {
        Protocol::OpenWhisk => "/run",
        Protocol::Plain => "/",
    }
}

impl Payload {
    /// The same requests, for a server of `form`.
    pub fn for_form(&self, form: Form) -> Payload {
        Payload {
            form,
            ..self.clone()
        }
    }

    /// Request `n`: a /run body, or as plain HTTP the arguments themselves (a wasi:http
    /// host's own server, or a stdio hello whose parameters are the JSON body's fields).
    pub fn body(&self, n: usize) -> Bytes {
        let logs = if self.logs { ",\"logs\":true" } else { "" };
        match self.bodies.len() {
            0 if self.form.protocol == Protocol::Plain => {
                format!("{{\"name\":\"bench{n}\"}}").into()
            }
            0 => format!("{{\"value\":{{\"name\":\"bench{n}\"{logs}}}}}").into(),
            len => self.bodies[n % len].clone(),
        }
    }

    /// The answer request `n` must get, if it is known: the greeting line, or from an HTTP
    /// component the greeting itself, as a web action's body behind /run.
    pub fn expected(&self, n: usize) -> Option<Bytes> {
        let greeting = format!("{{\"message\":\"Hello, bench{n}!\"}}\n");
        let bare = greeting.trim_end();
        let web = serde_json::json!({
            "body": bare,
            "headers": {"content-type": "application/json"},
            "statusCode": 200,
        });
        let hello = match (self.form.backend, self.form.protocol) {
            (Some(Backend::Http), Protocol::OpenWhisk) => format!("{web}\n"),
            (Some(Backend::Http), Protocol::Plain) => bare.to_owned(),
            _ => greeting.clone(),
        };
        let hello = self.bodies.is_empty().then(|| hello.into());
        self.expect.clone().or(hello)
    }
}

/// A wrong answer as messages quote it: "500 `oops`, expected 200 `{...}`" (or "a 200"
/// where the answer is not known).
pub fn quoted(status: u16, answer: &[u8], expected: Option<&[u8]>) -> String {
    let wanted = match expected {
        Some(e) => format!("200 `{}`", excerpt(e, 200)),
        None => "a 200".to_owned(),
    };
    format!("{status} `{}`, expected {wanted}", excerpt(answer, 200))
}

/// Whether `answer` (with `status`) is what every answer must be: a 200, with `expected`
/// where that is known; else it, quoted.
pub fn wrong(status: u16, answer: &[u8], expected: Option<&[u8]>) -> Option<String> {
    (status != 200 || expected.is_some_and(|e| e != answer))
        .then(|| quoted(status, answer, expected))
}

/// Where one variant's requests go.
pub struct Target {
    pub label: String,
    pub addr: SocketAddr,
    /// Shared with the connections' tasks.
    pub path: Arc<str>,
    /// Whether each answer is checked (not the floor's, which answers nothing).
    pub check: bool,
    /// The server's process, if it is one of ours.
    pub pid: Option<u32>,
    /// What it is sent, and must answer.
    pub payload: Payload,
}

impl Target {
    /// A server someone else runs (`--url`): its answers are checked if `--expect` says
    /// what they must be.
    pub fn url(addr: SocketAddr, path: &str, payload: &Payload) -> Target {
        Target {
            label: "url".to_owned(),
            addr,
            path: path.into(),
            check: payload.expect.is_some(),
            pid: None,
            payload: payload.clone(),
        }
    }
}

/// What one `drive` measured.
#[derive(Default)]
pub struct Driven {
    micros: Vec<f64>,
    elapsed: Duration,
    pub errors: usize,
    pub first_wrong: Option<String>,
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
/// answer must be a 200 with what the payload expects.
async fn drive(
    target: &Target,
    hits: usize,
    connections: usize,
    progress: &ProgressBar,
) -> anyhow::Result<Driven> {
    let (addr, check) = (target.addr, target.check);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (next, progress) = (next.clone(), progress.clone());
        let (path, payload) = (target.path.clone(), target.payload.clone());
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
                    let request = hyper::Request::post(&*path)
                        .header("host", "bench")
                        .header("content-type", "application/json")
                        .body(Full::new(payload.body(n)))?;
                    let sent = Instant::now();
                    let response = sender.send_request(request).await?;
                    let status = response.status().as_u16();
                    let answer = response.into_body().collect().await?.to_bytes();
                    driven.micros.push(sent.elapsed().as_secs_f64() * 1e6);
                    let expected = check.then(|| payload.expected(n)).flatten();
                    let right = expected.as_ref().is_none_or(|e| *e == answer);
                    if !(200..300).contains(&status) || !right {
                        driven.errors += 1;
                        let quote = || quoted(status, &answer, expected.as_deref());
                        driven.first_wrong.get_or_insert_with(quote);
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

/// The error of a run stopped by wrong answers: whose, what they were, what to change.
fn wrong_answers(target: &Target, driven: &Driven, progress: &ProgressBar) -> anyhow::Error {
    progress.finish_and_clear();
    anyhow::anyhow!(
        "{}: {} of {} answers were wrong, so nothing was measured and no report written; \
         the first was {}. Check --body and --expect (or the action)",
        target.label,
        driven.errors,
        driven.micros.len().max(driven.errors),
        driven.first_wrong.as_deref().unwrap_or("not recorded")
    )
}

/// One target's slices at one connection count, summed.
#[derive(Default)]
struct Slices {
    sum: Driven,
    /// Each round's p50, p99 and rate.
    rounds: Vec<[f64; 3]>,
    /// The CPU the server used in each round: none where a reading failed (someone else's,
    /// or gone), which leaves the sum of them none.
    server: Vec<Option<Duration>>,
    client: Duration,
}

/// The one engine of the rows and the comparison, at each of `counts` connections: every
/// target warmed up, then measured in turns, a slice of its hits at a time, so that drift
/// over the run (other load, CPU frequency) falls on every target alike instead of on
/// whichever ran during it, which keeps the ratios between them honest. Each round's p50,
/// p99 and rate are kept for the spread, and the CPU the slices took; per target, a
/// `Warm` per count, and its wrong answers. With `stop_on_wrong`, wrong answers stop the
/// run once the warm-up (or, without one, the first round) has met them: figures of wrong
/// answers compare nothing (the comparison's way; the rows count them to the end, as the
/// reference's table does, under a bar that shows their rate).
pub async fn measure(
    options: &Options,
    targets: &[Target],
    counts: &[usize],
    stop_on_wrong: bool,
) -> anyhow::Result<Vec<(Vec<Warm>, Driven)>> {
    let total = counts.len() * targets.len() * (options.warmup + options.hits);
    let progress = &ProgressBar::new(total as u64);
    if !stop_on_wrong {
        let bar = ProgressStyle::with_template("{prefix:>7} [{bar:30}] {pos}/{len} {per_sec}");
        progress.set_style(bar.expect("a valid template").progress_chars("=> "));
        progress.set_prefix("bench");
    }
    let mut out: Vec<(Vec<Warm>, Driven)> = targets.iter().map(|_| Default::default()).collect();
    for &connections in counts {
        for target in targets {
            let warmed = drive(target, options.warmup, connections, progress).await?;
            if stop_on_wrong && warmed.errors > 0 {
                return Err(wrong_answers(target, &warmed, progress));
            }
        }
        let rounds = options.rounds.clamp(1, options.hits.max(1));
        let mut all: Vec<Slices> = targets.iter().map(|_| Slices::default()).collect();
        for round in 0..rounds {
            let share = options.hits / rounds + usize::from(round < options.hits % rounds);
            for (target, slices) in targets.iter().zip(&mut all) {
                // Read around the load alone: between slices the server serves nobody.
                let server_before = target.pid.and_then(cpu::server);
                let client_before = cpu::client();
                let mut driven = drive(target, share, connections, progress).await?;
                slices.client += cpu::client().saturating_sub(client_before);
                let server = server_before.zip(target.pid.and_then(cpu::server));
                let used = server.map(|(before, now)| now.saturating_sub(before));
                slices.server.push(used);
                if stop_on_wrong && round == 0 && options.warmup == 0 && driven.errors > 0 {
                    return Err(wrong_answers(target, &driven, progress));
                }
                driven.micros.sort_by(f64::total_cmp);
                slices.rounds.push([
                    stats::percentile(&driven.micros, 50.0),
                    stats::percentile(&driven.micros, 99.0),
                    driven.micros.len() as f64 / driven.elapsed.as_secs_f64(),
                ]);
                slices.sum.add(driven);
            }
        }
        for ((warms, checked), mut slices) in out.iter_mut().zip(all) {
            let (sum, rounds) = (&mut slices.sum, &slices.rounds);
            sum.micros.sort_by(f64::total_cmp);
            // Wrong answers were served too: every request counts.
            let requests = sum.micros.len();
            let column = |k: usize| stats::spread(&rounds.iter().map(|f| f[k]).collect::<Vec<_>>());
            let server: Option<Duration> = slices.server.iter().copied().sum();
            warms.push(Warm {
                connections,
                micros: std::mem::take(&mut sum.micros),
                p50: column(0),
                p99: column(1),
                per_second: column(2),
                server_cpu_us: server.and_then(|used| cpu::per_request(used, requests)),
                client_cpu_us: cpu::per_request(slices.client, requests),
            });
            checked.add(slices.sum);
        }
    }
    progress.finish_and_clear();
    Ok(out)
}

/// The address and path `--url` names.
pub async fn resolve_url(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let url: hyper::Uri = url.parse().context("--url is not a URL")?;
    let host = url.authority().context("--url needs a host and port")?;
    let addr = tokio::net::lookup_host(host.as_str())
        .await?
        .next()
        .context("--url: no address")?;
    Ok((addr, url.path().to_owned()))
}

/// The host now: its load average, and how long a fixed CPU task takes it (five runs of
/// ten million steps).
pub fn host_now() -> Host {
    let load = std::fs::read_to_string("/proc/loadavg").ok();
    let load = load.and_then(|l| l.split_whitespace().next()?.parse().ok());
    let millis: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            // A xorshift chain: each step needs the one before, so nothing can skip it.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for i in 0..10_000_000 {
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
        reference_ms: Some(stats::spread(&millis)),
    }
}

/// A run's conditions: the build, the machine, the host before (`before`) and now, and
/// what the run was asked to do.
pub fn conditions(options: &Options, before: Host) -> Conditions {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find_map(|l| l.strip_prefix("model name"));
    let model = model.and_then(|rest| Some(rest.split_once(':')?.1.trim()));
    let cpu_model = model.unwrap_or("unknown").to_owned();
    let processors = cpuinfo.lines().filter(|l| l.starts_with("processor"));
    let online = processors.count();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let payload = &options.payload;
    Conditions {
        version: options.build.version.to_owned(),
        commit: options.build.commit.unwrap_or("unknown").to_owned(),
        cpu_model,
        cpus,
        pinned: online > cpus,
        online,
        before,
        after: host_now(),
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        hits: options.hits,
        rounds: options.rounds,
        concurrency: options.concurrency,
        body: excerpt(&payload.body(0), 200),
        body_given: !payload.bodies.is_empty(),
        expect: payload.expect.as_deref().map(|e| excerpt(e, 200)),
        cold_runs: options.cold_runs,
    }
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
    (poll_ns.trim() == "0" && cpus >= 2).then(|| {
        format!(
            "note: this machine is a VM whose idle CPUs halt at once ({HALT_POLL_NS} is 0), so \
             waking a process on an idle CPU goes through the hypervisor (~15 µs on a \
             Firecracker VM). Unpinned rows then vary from run to run with where the scheduler \
             puts the client, the server and a child. To compare the code, pin the run \
             (`taskset -c 0`); to measure as on a host that polls first, write the kernel's \
             default, 200000, to that file.\n"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
