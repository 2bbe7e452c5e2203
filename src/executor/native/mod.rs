//! The native backend: a long-lived child process fed requests on stdin, answering on fd 3.

mod diagnose;
mod log_tap;
mod settings;
mod spawn;

pub use settings::{FLAGS, NativeSettings};

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use super::lines::{LineError, LineReader, NoAnswer};
use super::pool::{Job, Pool, PoolSize, Reporting, Start, Worker};
use super::registry::{Backend, Claim, Registration, StartFuture};
use super::{AbortOnDrop, RunError, StartError, StartSpec, parse_ack};
use crate::action::{Entry, Prepared};
use crate::config::Config;
use diagnose::InputWatch;
use log_tap::LogTap;
use spawn::{Child, spawn};

/// Why a child could not be set up: the native backend's own ways of not starting (the
/// contract's, an early exit or a bad ack, are `StartError`'s).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The process could not be spawned (missing file, not executable, bad format); the
    /// cause says which, and what to change. Nothing ran, so nothing "exited": the cause
    /// alone is said.
    #[error("{cause}")]
    Spawn {
        #[source]
        error: std::io::Error,
        cause: String,
    },
    #[error("cannot set up the pipes to the action: {0}")]
    Pipe(#[source] std::io::Error),
}

impl super::BackendFailure for SpawnError {}

/// How long to wait for an exit status once the result channel has closed, and for a
/// result already written by a child that has exited.
const EXIT_GRACE: Duration = Duration::from_millis(100);

/// How long a child without ack may take to reach its first read of stdin before it
/// counts as started anyway (one that waits for input another way, such as Node.js's
/// epoll, is never seen reading).
const READY_WAIT: Duration = Duration::from_secs(1);

/// How many times an activation looks for its answer before waiting for the reactor.
const SPIN_POLLS: usize = 64;

/// The native backend: any executable or script, as a child process over pipes. Last in
/// the registry: it claims whatever executable the WebAssembly backends did not.
pub const NATIVE: Registration = Registration {
    name: "native",
    runs: "native executable or script",
    made: "a native executable or script",
    make: |config, shared| {
        let settings = config.backends.get::<NativeSettings>().cloned();
        Arc::new(Native(settings.unwrap_or_default(), shared.metrics.clone()))
    },
};

/// The native backend keeps nothing of its own between actions but its settings, and
/// where it counts.
struct Native(NativeSettings, Option<Arc<crate::metrics::Metrics>>);

impl Backend for Native {
    /// Any file, as loosely as a claim can be: the WebAssembly backends' claims on
    /// theirs are closer (a file that does not start is its start error to tell).
    fn claims(&self, entry: &Entry) -> Option<Claim> {
        matches!(entry, Entry::File(_)).then_some(Claim::AnyFile)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        spec: StartSpec,
        config: &'a Config,
        size: PoolSize,
    ) -> StartFuture<'a> {
        Box::pin(async move {
            let Entry::File(exec) = &prepared.entry else {
                return Err(StartError::Unsupported(
                    "not a native executable".to_owned(),
                ));
            };
            let spec = NativeSpec {
                exec: exec.clone(),
                start: spec,
                pipe_size: pipe_size(size.workers),
                start_probe: self.0.start_probe,
            };
            let pool: Arc<Pool<Process>> = Pool::start(spec, size, Reporting::of(config, self.1.clone())).await?;
            Ok(pool as Arc<dyn super::Executor>)
        })
    }
}

/// What starts a child: the executable and the common start-up settings.
pub struct NativeSpec {
    pub exec: PathBuf,
    pub start: StartSpec,
    /// The capacity asked for each pipe to a child (see `pipe_size`).
    pub pipe_size: usize,
    /// `--start-probe`.
    pub start_probe: Duration,
}

/// The pipe capacity for a pool of `workers` children. A 64 KiB pipe (the default) moves
/// a 1 MiB request in 16 turns of writer and reader; 1 MiB (the default `pipe-max-size`)
/// in one, which made a 1 MiB echo faster. The pages are only used while data is in
/// the pipe, but capacity counts against the user's `pipe-user-pages-soft` (64 MiB), past
/// which the user's new pipes get a page or two: a pool takes at most 16 MiB of it.
pub fn pipe_size(workers: usize) -> usize {
    const BUDGET: usize = 16 << 20;
    (BUDGET / (2 * workers.max(1))).clamp(64 << 10, 1 << 20)
}

impl Worker for Process {
    type Spec = NativeSpec;

    /// Only a checked start waits out the start probe: it tells `/init` about an action
    /// that cannot start, and a successor's action has started before; one that dies at
    /// once fails its activation like any child that dies, and the next gets a fresh one.
    /// Its ack, if asked for, is still read.
    async fn start(spec: &NativeSpec, how: Start<'_>) -> Result<Self, StartError> {
        match how {
            Start::Checked => Process::spawn(spec, &[], true).await,
            Start::Ahead => Process::spawn(spec, &[], false).await,
            Start::OnArrival(context) => {
                let env: Vec<_> = context.env().collect();
                Process::spawn(spec, &env, false).await
            }
        }
    }

    /// A child's environment is fixed as it starts: one made ahead could not have its
    /// activation's values, so a fresh child starts on its activation's arrival.
    const FRESH_STARTS_ON_ARRIVAL: bool = true;

    fn is_alive(&mut self) -> bool {
        self.child.seems_alive()
    }

    fn discard_stray_output(&mut self) -> Option<Bytes> {
        self.results.discard_pending()
    }

    fn others_queued(&mut self, queued: bool) {
        self.alone = !queued;
    }

    /// Its resident set, from /proc (read only when `--recycle-above-memory` asks).
    fn memory_bytes(&mut self) -> Option<u64> {
        wasmloop_common::process::resident_bytes(u32::try_from(self.child.pid()).ok()?)
    }

    fn attribute(&mut self, labels: std::sync::Arc<crate::logs::Labels>) {
        self.attribution.set(labels);
    }

    fn attribution(&self) -> Option<&crate::logs::Attribution> {
        Some(&self.attribution)
    }

    async fn activate(&mut self, job: Job) -> Result<Bytes, RunError> {
        let (line, _) = job.into_line()?;
        self.stdout.forget_lines();
        self.exchange(&line, self.max_result).await
    }

    /// Its logs, an unfinished last line included, are out before the sentinels.
    fn end_activation(&mut self, close: super::pool::Close) {
        self.stdout.finish();
        self.stderr.finish();
        close.write();
    }

    /// Its peak resident set (`VmHWM`), for the activation's report.
    fn peak_memory_bytes(&mut self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// The child's CPU time, all its threads (its process clock), for the report.
    fn cpu_time(&mut self) -> Option<std::time::Duration> {
        wasmloop_common::process::cpu_time(u32::try_from(self.child.pid()).ok()?)
    }
}

/// A running child and the pipes we hold to it. Dropping it kills the child and
/// everything in its process group.
pub struct Process {
    child: Child,
    stdin: pipe::Sender,
    results: LineReader<pipe::Receiver>,
    stdout: Arc<LogTap>,
    stderr: Arc<LogTap>,
    _pumps: [AbortOnDrop; 2],
    /// The activation its log lines belong to.
    attribution: crate::logs::Attribution,
    /// `--max-result-bytes`.
    max_result: usize,
    /// No activation queues behind the current one (`others_queued`).
    alone: bool,
}

impl Drop for Process {
    /// What it logged last is not lost with it.
    fn drop(&mut self) {
        self.stdout.finish();
        self.stderr.finish();
    }
}

/// A pipe whose both ends close on exec, so other children never inherit them.
fn cloexec_pipe(size: usize) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // Best effort: the kernel may refuse the size (pipe-max-size, per-user limits).
    let _ = rustix::pipe::fcntl_setpipe_size(&write, size);
    Ok((read, write))
}

impl Process {
    /// Starts the child with the action's environment and `activation`'s values.
    async fn spawn(
        native: &NativeSpec,
        activation: &[(String, String)],
        probe: bool,
    ) -> Result<Process, StartError> {
        let (exec, spec) = (&native.exec, &native.start);
        let (results_read, results_write) =
            cloexec_pipe(native.pipe_size).map_err(SpawnError::Pipe)?;
        let (stdin_read, stdin_write) = cloexec_pipe(native.pipe_size).map_err(SpawnError::Pipe)?;
        let (stdout_read, stdout_write) =
            cloexec_pipe(native.pipe_size).map_err(SpawnError::Pipe)?;
        // The default capacity: logs come in lines, and the pump drains them as they come.
        let (stderr_read, stderr_write) = cloexec_pipe(64 << 10).map_err(SpawnError::Pipe)?;
        let env = if activation.is_empty() {
            std::borrow::Cow::Borrowed(&spec.env)
        } else {
            std::borrow::Cow::Owned([spec.env.as_slice(), activation].concat())
        };
        let outputs = spawn::Outputs {
            fd3: &results_write,
            stdout: &stdout_write,
            stderr: &stderr_write,
        };
        let child = spawn(exec, &env, &stdin_read, &outputs).map_err(|error| {
            let cause = diagnose::spawn_failure(exec, &spec.main, &error);
            let message = format!("wasmloop: cannot start the action: {cause}");
            crate::logs::runtime_line(spec.log_format, Some(&spec.about), &message);
            SpawnError::Spawn { error, cause }
        })?;
        // Our copies of the child's ends must go, or we would never see end-of-file on
        // fd 3 (nor the child on its stdin).
        drop((stdin_read, results_write, stdout_write, stderr_write));
        let stdin = pipe::Sender::from_owned_fd(stdin_write).map_err(SpawnError::Pipe)?;
        let receiver = pipe::Receiver::from_owned_fd(results_read).map_err(SpawnError::Pipe)?;
        let attribution = crate::logs::Attribution::new(spec.log_format);
        let (stdout, stdout_pump) = LogTap::start(
            stdout_read,
            crate::logs::Stream::Stdout,
            attribution.clone(),
        )
        .map_err(SpawnError::Pipe)?;
        let (stderr, stderr_pump) = LogTap::start(
            stderr_read,
            crate::logs::Stream::Stderr,
            attribution.clone(),
        )
        .map_err(SpawnError::Pipe)?;
        let mut process = Process {
            child,
            stdin,
            results: LineReader::new(receiver),
            stdout,
            stderr,
            _pumps: [stdout_pump, stderr_pump],
            attribution,
            max_result: spec.max_result_bytes,
            alone: true,
        };
        if spec.wait_for_ack {
            process.wait_for_ack(spec).await?;
        } else if probe {
            process.probe(native.start_probe).await?;
        }
        Ok(process)
    }

    /// Without an ack, a child has started once it waits for its first request, or when
    /// still alive `READY_WAIT` after spawning: whichever comes first, and never before
    /// `probe` has passed. A launcher whose action fails to load (a Python syntax error,
    /// say) exits within that time, and `/init` says so instead of every `/run` later.
    async fn probe(&mut self, probe: Duration) -> Result<(), StartError> {
        let pid = self.child.pid();
        let waited = async {
            // tokio's timer counts whole milliseconds and rounds up, which made the probe
            // overrun, and the probe is much of a native /init's cost. A blocking-pool
            // thread sleeps to the microsecond.
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(probe)).await;
            let ready = tokio::time::Instant::now() + READY_WAIT.saturating_sub(probe);
            while !diagnose::reading_stdin(pid) && tokio::time::Instant::now() < ready {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            status = self.child.wait() => {
                tracing::debug!(?status, "the action exited during start-up");
                let mut detail = status.ok().map(diagnose::exit_hint);
                // A launcher may have said why on its result channel before leaving.
                if let Ok(Some(line)) = self.results.try_read_line_now(4096)
                    && let Ok(said) = serde_json::from_slice::<serde_json::Value>(&line)
                    && let Some(error) = said["error"].as_str()
                {
                    detail = Some(format!(
                        "{}; it said: {error}",
                        detail.unwrap_or_else(|| "it exited".to_owned())
                    ));
                }
                Err(StartError::Exited(detail))
            }
            () = waited => Ok(()),
        }
    }

    async fn wait_for_ack(&mut self, spec: &StartSpec) -> Result<(), StartError> {
        let line = tokio::select! {
            // An ack written just before exiting still counts: read first.
            biased;
            line = self.results.read_line(spec.max_result_bytes) => line,
            _ = self.child.wait() => Err(LineError::Eof),
            _ = tokio::time::sleep(spec.ack_timeout) => {
                return Err(StartError::AckTimeout(spec.ack_timeout));
            }
        };
        let line = match line {
            Ok(line) => line,
            Err(LineError::Eof | LineError::Io(_)) => return Err(StartError::AckAbrupt),
            Err(too_long @ LineError::TooLong(_)) => {
                return Err(StartError::AckNotJson(too_long.to_string()));
            }
        };
        parse_ack(&line)
    }

    async fn exchange(&mut self, line: &[u8], max: usize) -> Result<Bytes, RunError> {
        if self.stdin.write_all(line).await.is_err() {
            // EPIPE: the child is gone (or closed its stdin, which is as bad).
            return Err(RunError::Exited(self.exit_detail().await));
        }
        // Most actions answer within microseconds: look for the answer a few times, letting
        // other tasks run in between, before parking this worker until the reactor wakes
        // it. A parked thread takes tens of microseconds to wake on a loaded small machine.
        // When nothing queues behind it, the first look also yields the CPU: the child our
        // write woke is often queued on this very CPU, and the scheduler does not always
        // let it preempt us, so it waited out all the looks (pinned to one CPU, some
        // activations took far longer; with the yield that slow tail is gone). Under load it
        // would hand the CPU to other threads instead, which cut the pipe's requests per
        // second at 8 connections.
        for poll in 0..SPIN_POLLS {
            match self.results.try_read_line_now(max) {
                Ok(Some(result)) => return Ok(result),
                Ok(None) => {
                    if poll == 0 && self.alone {
                        std::thread::yield_now();
                    }
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
        let waiting = InputWatch::new(self.child.pid(), self.stdin.as_fd());
        let read = tokio::select! {
            biased;
            read = self.results.read_line(max) => read,
            () = waiting.until_waiting() => {
                // It may have answered just before going back to its read.
                if let Ok(Some(result)) = self.results.try_read_line_now(max) {
                    return Ok(result);
                }
                return Err(RunError::NoAnswer(NoAnswer {
                    channel: "fd 3",
                    partial: self.results.pending(),
                    stdout_line: self.stdout.last_line(),
                }));
            }
            status = self.child.wait() => {
                tracing::debug!(?status, "the action exited during an activation");
                // A result written just before exiting is still in the pipe.
                tokio::time::timeout(EXIT_GRACE, self.results.read_line(max))
                    .await
                    .unwrap_or(Err(LineError::Eof))
            }
        };
        match read {
            Ok(result) => Ok(result),
            Err(LineError::TooLong(max)) => Err(RunError::ResultTooLong(max)),
            Err(LineError::Eof | LineError::Io(_)) => {
                Err(RunError::Exited(self.exit_detail().await))
            }
        }
    }

    /// How the child ended, when it has (a child that only closed fd 3 is killed), with
    /// the crash its stderr reports (Go's `panic: ...`, an assertion) if it reports one.
    async fn exit_detail(&mut self) -> Option<String> {
        match tokio::time::timeout(EXIT_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => Some(match self.stderr.crash() {
                Some(words) => format!("{status}; it logged `{}`", crate::last_words::quoted(&words)),
                None => status.to_string(),
            }),
            _ => Some("the action closed its result channel (fd 3)".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pools_get_megabyte_pipes_and_large_ones_stay_within_budget() {
        assert_eq!(pipe_size(1), 1 << 20);
        assert_eq!(pipe_size(8), 1 << 20);
        assert_eq!(pipe_size(16), 512 << 10);
        assert_eq!(pipe_size(32), 256 << 10);
        assert_eq!(pipe_size(500), 64 << 10);
    }
}

