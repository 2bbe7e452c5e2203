//! The WebAssembly backend: one long-lived wasmtime instance per action, fed request lines
//! on its WASI stdin and answering on its stdout. The only code that touches wasmtime.

mod engine;
mod streams;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::{InstancePre, Module, Store, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use engine::{Host, check_command};
pub use engine::{WasmEngine, is_precompiled};
use streams::{GuestStderr, GuestStdin, GuestStdout, LineTooLong, Output};

use super::slot::{Slot, Worker};
use super::{RunError, StartError, StartSpec, parse_ack};
use crate::config::EngineSettings;

/// The engine, made on first use so that native-only deployments never reserve its pool.
pub fn engine(settings: EngineSettings) -> Result<Arc<WasmEngine>, StartError> {
    static ENGINE: OnceLock<Result<Arc<WasmEngine>, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| WasmEngine::new(settings).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(StartError::Wasm)
}

/// Where the module comes from.
pub enum Source<'a> {
    /// WebAssembly bytes, compiled (or taken from the compile cache).
    Wasm {
        path: &'a Path,
        cache_dir: Option<&'a Path>,
    },
    /// A module precompiled by `wasmloop compile`.
    Precompiled(&'a Path),
}

/// Everything an instance is made from; restarts take microseconds from the `InstancePre`.
pub struct WasmSpec {
    engine: Arc<WasmEngine>,
    pre: InstancePre<Host>,
    start: StartSpec,
    preopen: Option<PathBuf>,
}

/// Instances of one module, one at a time.
pub type WasmExecutor = Slot<Instance>;

/// Compiles (or loads) the module and links it: what `/init` does before the first instance.
pub async fn prepare(
    engine: Arc<WasmEngine>,
    source: Source<'_>,
    start: StartSpec,
    preopen: Option<PathBuf>,
) -> Result<WasmSpec, StartError> {
    let module = load(&engine, source).await?;
    check_command(&module).map_err(StartError::Wasm)?;
    let pre = engine
        .linker
        .instantiate_pre(&module)
        .map_err(|e| StartError::Wasm(format!("cannot link the module: {e:#}")))?;
    Ok(WasmSpec {
        engine,
        pre,
        start,
        preopen,
    })
}

async fn load(engine: &Arc<WasmEngine>, source: Source<'_>) -> Result<Module, StartError> {
    let engine = engine.clone();
    let job: Box<dyn FnOnce() -> Result<Module, String> + Send> = match source {
        Source::Wasm { path, cache_dir } => {
            let bytes = std::fs::read(path)
                .map_err(|e| StartError::Wasm(format!("cannot read {}: {e}", path.display())))?;
            let cache_dir = cache_dir.map(Path::to_owned);
            Box::new(move || engine.load(&bytes, cache_dir.as_deref()))
        }
        Source::Precompiled(path) => {
            let path = path.to_owned();
            Box::new(move || engine.load_precompiled(&path))
        }
    };
    // Compiling takes from milliseconds to seconds of CPU: keep it off the async workers.
    tokio::task::spawn_blocking(job)
        .await
        .map_err(|e| StartError::Wasm(format!("compiling stopped: {e}")))?
        .map_err(StartError::Wasm)
}

/// Compiles a module ahead of time for `--allow-precompiled` uploads.
pub fn precompile(bytes: &[u8], settings: EngineSettings) -> Result<Vec<u8>, String> {
    let engine = WasmEngine::new(settings).map_err(|e| format!("{e:#}"))?;
    let module = engine.load(bytes, None)?;
    check_command(&module)?;
    // A serialized module is what precompiling produces: no need to compile twice.
    module
        .serialize()
        .map_err(|e| format!("cannot serialize the module: {e:#}"))
}

impl Worker for Instance {
    type Spec = WasmSpec;

    async fn start(spec: &WasmSpec) -> Result<Self, StartError> {
        Instance::start(
            &spec.engine,
            &spec.pre,
            &spec.start,
            spec.preopen.as_deref(),
        )
        .await
    }

    fn is_alive(&mut self) -> bool {
        self.ended.is_none()
    }

    fn discard_stray_output(&mut self) {
        self.stdout.discard();
    }

    async fn activate(&mut self, line: Vec<u8>, _max_result: usize) -> Result<Bytes, RunError> {
        // The cap is the stdout stream's own, set when the instance was made.
        let result = self.exchange(line).await;
        self.stderr.flush();
        result
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
}

impl Instance {
    async fn start(
        engine: &WasmEngine,
        pre: &InstancePre<Host>,
        spec: &StartSpec,
        preopen: Option<&Path>,
    ) -> Result<Instance, StartError> {
        let stdin = GuestStdin::default();
        let stdout = GuestStdout::new(spec.max_result_bytes);
        let stderr = GuestStderr::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(stdin.clone())
            .stdout(Output(stdout.clone()))
            .stderr(Output(stderr.clone()))
            .envs(&spec.env)
            .args(&[&spec.main]);
        if let Some(dir) = preopen {
            wasi.preopened_dir(dir, "/action", FsPerms::ReadOnly)
                .map_err(|e| {
                    StartError::Wasm(format!(
                        "cannot preopen {} as /action: {e:#}",
                        dir.display()
                    ))
                })?;
        }
        let limits = StoreLimitsBuilder::new()
            .memory_size(engine.memory_cap)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(
            &engine.engine,
            Host {
                wasi: wasi.build_p1(),
                limits,
            },
        );
        store.limiter(|host| &mut host.limits);
        // Every tick a running guest yields, so one busy guest cannot hold a worker thread.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
        let pre = pre.clone();
        let guest = Box::pin(async move {
            let instance = pre.instantiate_async(&mut store).await?;
            let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
            start.call_async(&mut store, ()).await
        });
        let mut instance = Instance {
            stdin,
            stdout,
            stderr,
            guest,
            ended: None,
        };
        let started = if spec.wait_for_ack {
            instance.wait_for_ack(spec).await
        } else {
            instance.wait_until_idle(spec).await
        };
        // What the guest logged while starting is out before /init answers.
        instance.stderr.flush();
        started.map(|()| instance)
    }

    /// Runs the guest as far as it can go now, noting if `_start` has ended.
    fn poll_guest(&mut self, cx: &mut Context<'_>) {
        if self.ended.is_none()
            && let Poll::Ready(result) = self.guest.as_mut().poll(cx)
        {
            self.ended = Some(exit_reason(result));
        }
        if self.ended.is_some() {
            self.stderr.flush();
        } else {
            self.stderr.flush_lines();
        }
    }

    /// Without an ack, the guest is started once it first waits for input.
    async fn wait_until_idle(&mut self, spec: &StartSpec) -> Result<(), StartError> {
        let idle = std::future::poll_fn(|cx| {
            self.poll_guest(cx);
            match &self.ended {
                Some(detail) => Poll::Ready(Err(StartError::GuestExited {
                    detail: detail.clone(),
                })),
                None if self.stdin.has_waited() => Poll::Ready(Ok(())),
                None => Poll::Pending,
            }
        });
        // Still busy, but alive: as for a native child, alive counts as started. The rest
        // of its start-up then runs in the first activation.
        tokio::time::timeout(spec.ack_timeout, idle)
            .await
            .unwrap_or(Ok(()))
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
                None => Poll::Pending,
            }
        });
        tokio::time::timeout(spec.ack_timeout, ack)
            .await
            .unwrap_or(Err(StartError::AckTimeout(spec.ack_timeout)))
    }

    async fn exchange(&mut self, line: Vec<u8>) -> Result<Bytes, RunError> {
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
                (None, None) => Poll::Pending,
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

/// How `_start` ended, in words for the `command exited: ...` error.
fn exit_reason(result: wasmtime::Result<()>) -> String {
    match result {
        Ok(()) => "the guest returned from _start".to_owned(),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                format!("exit status: {}", exit.0)
            } else if let Some(trap) = e.downcast_ref::<Trap>() {
                trap.to_string()
            } else {
                // The top level is "error while executing at wasm backtrace: ..." with the
                // whole backtrace; the cause says what happened.
                e.root_cause().to_string()
            }
        }
    }
}
