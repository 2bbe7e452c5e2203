//! One instance of a module or component: made from its spec, run to its first read, fed one line per activation.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use super::component::{self, Outbound};
use super::engine::WasmEngine;
use super::environ::Environ;
use super::memory_cap::MemoryCap;
use super::module::ModuleHost;
use super::renew::Renewal;
use super::streams::{GuestStderr, GuestStdin, GuestStdout, StdioOut};
use super::{Pre, WasmError, WasmSpec, descriptors, ticker};
use crate::executor::lines::{LineTooLong, NoAnswer};
use crate::last_words;
use crate::executor::pool::{Close, Job, Start, Worker};
use crate::executor::{RunError, StartError, StartSpec, parse_ack};

impl Worker for Instance {
    type Spec = WasmSpec;

    /// Every start is the same: an instance from the `InstancePre`, checked by running
    /// its guest to its first read; a fresh one learns its activation's values later
    /// (`Environ`).
    async fn start(spec: &WasmSpec, _: Start<'_>) -> Result<Self, StartError> {
        Instance::start(spec).await
    }

    fn can_renew(&self) -> bool {
        self.ended.is_none() && self.renewing.as_ref().is_some_and(Renewing::possible)
    }

    /// A module's instance whose code allows it goes back to the state it was made in
    /// (`renew`), and its guest starts again, as far as a new one would have.
    async fn renew(&mut self, spec: &WasmSpec) -> bool {
        self.renew_in_place(spec).await
    }

    fn is_alive(&mut self) -> bool {
        self.ended.is_none()
    }

    fn discard_stray_output(&mut self) -> Option<Bytes> {
        self.stdout.discard()
    }

    fn memory_bytes(&mut self) -> Option<u64> {
        Some(self.memory.load(std::sync::atomic::Ordering::Relaxed) as u64)
    }

    async fn activate(&mut self, job: Job) -> Result<Bytes, RunError> {
        let (line, context) = job.into_line()?;
        self.settle().await;
        // The result's cap is the stdout stream's own, set when the instance was made.
        let result = self.exchange(line, &context).await;
        // Lines it wrote after its answer, before waiting for the next request, go to the
        // logs of this activation (ahead of its own log lines, held back below). When the
        // line taken is no result, what follows is more likely the real one: the instance
        // is replaced, and `report_not_json` tells the logs.
        if let Ok(line) = &result
            && let Some(stray) = self.stdout.discard()
            && crate::executor::lines::is_json_result(line)
        {
            crate::executor::lines::report_stray(&|m| self.attribution.say(m), &stray);
        }
        result
    }

    fn attribute(&mut self, labels: std::sync::Arc<crate::logs::Labels>) {
        self.attribution.set(labels);
    }

    fn attribution(&self) -> Option<&crate::logs::Attribution> {
        Some(&self.attribution)
    }

    fn end_activation(&mut self, close: Close) {
        close.write_stdout();
        if let Some(denials) = &self.denials
            && let Some(line) = crate::lock(denials).left_out()
        {
            self.stderr.note(&line);
        }
        self.stderr.flush_with(close.stderr_tail());
        self.descriptors.new_activation();
    }
}

/// `_start` running in its store: it owns the instance.
type Guest = Pin<Box<dyn Future<Output = wasmtime::Result<()>> + Send>>;

/// One running instance. Its `_start` is polled by whoever waits on it (the start, then
/// each activation), not by a task of its own: between activations the guest is parked
/// on its stdin anyway, and running it inside the activation's own poll saves the two
/// task wake-ups (guest, then activation) that otherwise cost tens of microseconds each
/// on a small machine. Dropping the instance drops `_start`, the store and the instance.
pub struct Instance {
    stdin: GuestStdin,
    stdout: GuestStdout,
    stderr: GuestStderr,
    guest: Guest,
    /// How `_start` ended, once it has (it must not be polled again).
    ended: Option<String>,
    /// A component's refusals left out of its logs, told at the end of each activation.
    denials: Option<Arc<Mutex<crate::outbound::DenialLog>>>,
    /// What it holds open, against its caps.
    descriptors: descriptors::Descriptors,
    /// Its engine's ticker, kept running while the guest runs.
    ticker: ticker::Ticker,
    /// The bytes of its linear memories.
    memory: Arc<std::sync::atomic::AtomicUsize>,
    /// What its guest reads as its environment.
    environ: Environ,
    /// The activation its log lines belong to.
    attribution: crate::logs::Attribution,
    /// How its guest is asked to start again in place (a module's; see `Renewing`).
    renewing: Option<Renewing>,
}

/// Between an instance and its guest: whether the guest's instance can be renewed in place
/// (known once it is made), and the instance's request that it be.
#[derive(Clone, Default)]
struct Renewing(Arc<RenewingState>);

#[derive(Default)]
struct RenewingState {
    refused: std::sync::atomic::AtomicBool,
    asked: std::sync::atomic::AtomicBool,
}

impl Renewing {
    fn refuse(&self) {
        self.0.refused.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn possible(&self) -> bool {
        !self.0.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn ask(&self) {
        self.0.asked.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs `call` to its end, or, once a renewal is asked for, drops it (the guest's
    /// stack unwinds) and returns `None`. The asker polls the guest right after asking.
    async fn unless_asked<F: Future>(&self, call: F) -> Option<F::Output> {
        let mut call = std::pin::pin!(call);
        std::future::poll_fn(|cx| {
            if self.0.asked.swap(false, std::sync::atomic::Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            call.as_mut().poll(cx).map(Some)
        })
        .await
    }
}

impl Instance {
    async fn start(wasm: &WasmSpec) -> Result<Instance, StartError> {
        let (engine, spec) = (&wasm.engine, &wasm.start);
        let attribution = crate::logs::Attribution::new(spec.log_format);
        let stdio = Stdio {
            stdin: GuestStdin::default(),
            stdout: GuestStdout::new(spec.max_result_bytes, attribution.clone()),
            stderr: GuestStderr::new(attribution.clone()),
            main: spec.main.clone(),
            preopen: wasm.preopen.clone(),
        };
        let (stdin, stdout, stderr) = (
            stdio.stdin.clone(),
            stdio.stdout.clone(),
            stdio.stderr.clone(),
        );
        let mut wasi = stdio.wasi()?;
        let environ = Environ::new(wasm.env.clone(), spec.fresh, !spec.wait_for_ack);
        let memory = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let limits = MemoryCap {
            cap: engine.settings.memory_cap,
            total: memory.clone(),
        };
        let mut denials = None;
        let mut renewing = None;
        let held = descriptors::Descriptors::new(wasm.descriptors, stderr.clone());
        let preopens = usize::from(wasm.preopen.is_some());
        let guest: Guest = match &wasm.pre {
            Pre::Module(pre) => {
                let host = ModuleHost {
                    wasi: wasi.build_p1(),
                    limits,
                    descriptors: held.clone(),
                    preopens,
                    environ: environ.clone(),
                };
                let mut store = guest_store(engine, host, |host| &mut host.limits);
                let (pre, baseline) = (pre.clone(), wasm.baseline.clone());
                let asked = Renewing::default();
                renewing = Some(asked.clone());
                Box::pin(async move {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                    let most = super::engine::KEEP_RESIDENT_MEMORY;
                    let Some(renewal) = Renewal::of(&mut store, &instance, &baseline, most) else {
                        asked.refuse();
                        return start.call_async(&mut store, ()).await;
                    };
                    loop {
                        if let Some(ended) = asked.unless_asked(start.call_async(&mut store, ())).await {
                            return ended;
                        }
                        // What it wrote, it wrote under the activation before: anything
                        // failing now ends it (it is replaced), as a trap would.
                        renewal.reset(&mut store).map_err(wasmtime::Error::msg)?;
                        stdio.stdin.renew();
                        stdio.stderr.renew();
                        let host = store.data_mut();
                        host.environ.renew();
                        host.wasi = stdio.wasi().map_err(wasmtime::Error::msg)?.build_p1();
                        store.set_epoch_deadline(1);
                    }
                })
            }
            Pre::Component(pre) => {
                let outbound = Outbound::new(
                    wasm.outbound.clone(),
                    stderr.clone(),
                    held.clone(),
                    wasm.engine.metrics.clone(),
                );
                outbound.gate_sockets(&mut wasi);
                denials = Some(outbound.denials());
                let host = component::host(
                    wasi.build(),
                    outbound,
                    limits,
                    preopens,
                    environ.clone(),
                );
                let mut store = guest_store(engine, host, |host| &mut host.limits);
                let pre = pre.clone();
                Box::pin(async move {
                    let command = pre.instantiate_async(&mut store).await?;
                    match command.wasi_cli_run().call_run(&mut store).await? {
                        Ok(()) => Ok(()),
                        // What `exit(1)` from a guest's main gives, and what an uncaught
                        // exception in componentize-py's or componentize-js's `run` gives.
                        Err(()) => Err(RunReturnedError.into()),
                    }
                })
            }
        };
        let mut instance = Instance {
            stdin,
            stdout,
            stderr,
            guest,
            ended: None,
            denials,
            descriptors: held,
            ticker: engine.ticker.clone(),
            memory,
            environ,
            attribution,
            renewing,
        };
        tracing::debug!(codegen = engine.settings.codegen.name(), "instance started");
        instance.start_guest(spec).await.map(|()| instance)
    }

    /// Runs the guest until it has started: acknowledged, or waiting for input.
    async fn start_guest(&mut self, spec: &StartSpec) -> Result<(), StartError> {
        let ticking = self.ticker.running();
        let started = if spec.wait_for_ack {
            self.wait_for_ack(spec).await
        } else {
            self.wait_until_idle(spec).await
        };
        drop(ticking);
        // What the guest logged while starting is out before /init answers.
        self.stderr.flush();
        started
    }

    /// Makes the instance as good as a new one, if its guest can be renewed in place: its
    /// call is abandoned, its memories and globals are put back, and it starts again with
    /// a new WASI context, up to where a new instance would wait for its activation.
    /// False if it cannot (a component, a module whose code or memory does not allow it):
    /// then it is no longer usable.
    async fn renew_in_place(&mut self, wasm: &WasmSpec) -> bool {
        let Some(renewing) = self.renewing.as_ref().filter(|_| self.can_renew()) else {
            return false;
        };
        renewing.ask();
        if let Some(stray) = self.stdout.discard() {
            crate::executor::lines::report_stray(&|m| self.attribution.say(m), &stray);
        }
        match self.start_guest(&wasm.start).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "the instance could not be renewed in place");
                self.ended.get_or_insert_with(|| e.to_string());
                false
            }
        }
    }

    /// Runs the guest as far as it can go now, noting if `_start` has ended.
    fn poll_guest(&mut self, cx: &mut Context<'_>) {
        if self.ended.is_none()
            && let Poll::Ready(result) = self.guest.as_mut().poll(cx)
        {
            self.ended = Some(exit_reason(result, &self.stderr));
            self.stderr.flush();
        }
    }

    /// The guest goes on later: what it logged so far is out meanwhile, whole lines only.
    fn later<T>(&self) -> Poll<T> {
        self.stderr.flush_lines();
        Poll::Pending
    }

    /// Without an ack, the guest is started once it first waits for input (or, fresh, for
    /// its activation's values: see `Environ`).
    async fn wait_until_idle(&mut self, spec: &StartSpec) -> Result<(), StartError> {
        let idle = std::future::poll_fn(|cx| {
            self.poll_guest(cx);
            match &self.ended {
                Some(detail) => Poll::Ready(Err(WasmError::GuestExited {
                    detail: detail.clone(),
                }
                .into())),
                None if self.stdin.has_waited() || self.environ.is_waiting() => Poll::Ready(Ok(())),
                None => self.later(),
            }
        });
        // A guest runs only while someone polls it: one still busy here would go on with
        // its start-up in the first activation, and one stuck there would fail every one.
        tokio::time::timeout(spec.ack_timeout, idle)
            .await
            .unwrap_or(Err(WasmError::StillStarting(spec.ack_timeout).into()))
    }

    async fn wait_for_ack(&mut self, spec: &StartSpec) -> Result<(), StartError> {
        let ack = std::future::poll_fn(|cx| {
            self.poll_guest(cx);
            // An ack written just before the guest ended still counts.
            if let Some(line) = self.stdout.take_line() {
                return Poll::Ready(match line {
                    Ok(line) => parse_ack(&line),
                    Err(LineTooLong(max)) => Err(StartError::AckNotJson(format!(
                        "line longer than {max} bytes"
                    ))),
                });
            }
            match &self.ended {
                Some(reason) => {
                    tracing::debug!(reason, "the guest exited before its ack");
                    Poll::Ready(Err(StartError::AckAbrupt))
                }
                None => self.later(),
            }
        });
        tokio::time::timeout(spec.ack_timeout, ack)
            .await
            .unwrap_or(Err(StartError::AckTimeout(spec.ack_timeout)))
    }

    /// Runs the guest back to its read of stdin, if its last answer came before it got
    /// there: a guest that yielded (an epoch tick) between two writes, its answer and a
    /// stray line, writes the stray one here, where it is discarded as stray, instead of
    /// ahead of the next answer. A guest still busy with the last activation's work holds
    /// this one back meanwhile (within its deadline), as a busy instance does.
    async fn settle(&mut self) {
        // Where a guest waits between activations (a fresh one may wait for its values).
        let parked =
            |me: &Self| me.ended.is_some() || me.stdin.is_waiting() || me.environ.is_waiting();
        if parked(self) {
            return;
        }
        let _ticking = self.ticker.running();
        std::future::poll_fn(|cx| {
            self.poll_guest(cx);
            if parked(self) {
                Poll::Ready(())
            } else {
                self.later()
            }
        })
        .await;
        if let Some(stray) = self.stdout.discard() {
            crate::executor::lines::report_stray(&|m| self.attribution.say(m), &stray);
        }
    }

    async fn exchange(
        &mut self,
        line: Vec<u8>,
        context: &crate::context::Context,
    ) -> Result<Bytes, RunError> {
        let _ticking = self.ticker.running();
        self.environ.arrive(context);
        self.stdin.push(Bytes::from(line));
        std::future::poll_fn(|cx| {
            self.poll_guest(cx);
            // Whatever the guest could do is done: its answer is there or it is waiting
            // (a busy guest yields every epoch tick and wakes this task to go on). A result
            // written just before the guest ended still counts.
            match (self.stdout.take_line(), &self.ended) {
                (Some(Ok(line)), _) => Poll::Ready(Ok(line)),
                (Some(Err(LineTooLong(max))), _) => Poll::Ready(Err(RunError::ResultTooLong(max))),
                (None, Some(reason)) => Poll::Ready(Err(RunError::Exited(Some(reason.clone())))),
                // Back at its stdin with the request taken and no answer: only the next
                // request could wake it, and that waits for this answer.
                (None, None) if self.stdin.is_waiting() => {
                    Poll::Ready(Err(RunError::NoAnswer(NoAnswer {
                        channel: "stdout",
                        partial: self.stdout.partial(),
                        stdout_line: None,
                    })))
                }
                (None, None) => self.later(),
            }
        })
        .await
    }
}

impl Drop for Instance {
    /// Stopped mid-activation (past its deadline), the guest may hold a partial log line.
    fn drop(&mut self) {
        self.stderr.flush();
    }
}

/// What a guest's WASI context is made of, kept to make another when it is renewed.
struct Stdio {
    stdin: GuestStdin,
    stdout: GuestStdout,
    stderr: GuestStderr,
    main: String,
    preopen: Option<std::path::PathBuf>,
}

impl Stdio {
    /// A WASI context over these streams, with `main` as the only argument and the
    /// action's folder as `/action` (read-only) if it has one.
    fn wasi(&self) -> Result<WasiCtxBuilder, WasmError> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(self.stdin.clone())
            .stdout(StdioOut(self.stdout.clone()))
            .stderr(StdioOut(self.stderr.clone()))
            .args(&[&self.main]);
        preopen_action(&mut wasi, self.preopen.as_ref())?;
        Ok(wasi)
    }
}

/// The action's folder, if it has one, as the guest's `/action`, read-only.
pub fn preopen_action(
    wasi: &mut WasiCtxBuilder,
    dir: Option<&std::path::PathBuf>,
) -> Result<(), WasmError> {
    if let Some(dir) = dir {
        wasi.preopened_dir(dir, "/action", FsPerms::ReadOnly)
            .map_err(|error| WasmError::Preopen {
                dir: dir.clone(),
                error,
            })?;
    }
    Ok(())
}

/// A store for one instance, module or component: its memory capped by `cap`, and yielding
/// every epoch tick, so one busy guest cannot hold a worker thread.
pub fn guest_store<T: Send + 'static>(
    engine: &WasmEngine,
    host: T,
    cap: fn(&mut T) -> &mut MemoryCap,
) -> Store<T> {
    let mut store = Store::new(&engine.engine, host);
    store.limiter(move |host| cap(host));
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
    store
}

/// A component's `wasi:cli/run` returned its error.
#[derive(Debug, thiserror::Error)]
#[error("the component's run returned an error")]
struct RunReturnedError;

/// How `_start` ended, in words for the `command exited: ...` error; `stderr` holds what
/// the guest logged.
pub fn exit_reason(result: wasmtime::Result<()>, stderr: &GuestStderr) -> String {
    match result {
        Ok(()) => "the guest returned from _start".to_owned(),
        Err(e) => {
            use wasmtime::component::ResourceTableError;
            // What the guest said as it crashed: its language's own report (a panic's
            // message and place, an uncaught exception), or else its last line.
            let crash = stderr.crash();
            let said = || match &crash {
                Some(words) => format!("; it logged `{}`", last_words::quoted(words)),
                None => stderr.last_line().map_or_else(String::new, |line| {
                    format!("; its last log line: `{}`", last_words::quoted(&line))
                }),
            };
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                // Go's runtime exits (status 2) after a panic nothing recovered.
                let reported = crash.as_ref().map_or_else(String::new, |_| said());
                return format!("exit status: {}{reported}", exit.0);
            }
            if e.is::<RunReturnedError>() {
                return format!(
                    "exit status: 1 (an uncaught exception in Python or JavaScript, or \
                     `exit(1)`){}",
                    said()
                );
            }
            if let Some(trap) = e.downcast_ref::<Trap>() {
                // How a guest that panicked (Rust's `panic = "abort"` on wasm), called
                // `abort()` (C) or otherwise gave up ends.
                if *trap == Trap::UnreachableCodeReached {
                    return format!("the action panicked or aborted ({trap}){}", said());
                }
                return trap.to_string();
            }
            // The top level is "error while executing at wasm backtrace: ..." with the
            // whole backtrace; the cause says what happened.
            let cause = e.root_cause().to_string();
            match e.downcast_ref::<ResourceTableError>() {
                Some(ResourceTableError::Full) => format!(
                    "the component holds {} WASI resources (files, streams, sockets, HTTP \
                     requests, bodies and headers), the most one instance may: drop those it \
                     is done with",
                    component::MAX_RESOURCES
                ),
                Some(ResourceTableError::HasChildren) => format!(
                    "{cause}: the component dropped a WASI resource before those made from it \
                     (a stream before its pollable, a body before its stream); drop children \
                     first"
                ),
                _ => cause,
            }
        }
    }
}
