//! The WebAssembly backend: wasmtime instances of an action (kept, or fresh per activation), fed
//! request lines on their WASI stdin and answering on their stdout. The only code touching wasmtime.

mod cache;
mod code;
mod compile;
mod component;
pub mod descriptors;
mod engine;
mod environ;
mod memory_cap;
mod module;
mod streams;
mod ticker;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::{InstancePre, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use cache::{CompileCache, WasmDigest};
use code::Code;
pub use code::{Side, is_component};
use compile::{CompileChild, check_command};
pub use compile::{CompileError, EXIT_NOT_FOR_WINCH, compile_here};
use component::{ComponentHost, Outbound};
pub use engine::{Engines, WasmEngine, artifact_engine_id, pooled_config};
use environ::Environ;
use memory_cap::MemoryCap;
use module::ModuleHost;
use streams::{GuestStderr, GuestStdin, GuestStdout, StdioOut};

use super::lines::{LineTooLong, NoAnswer};
use super::pool::{End, Pool, PoolSize, Reporting, Start, Worker};
use super::registry::{Backend, Registration, Shared, StartFuture};
use super::{RunError, StartError, StartSpec, parse_ack};
use crate::action::{Entry, Prepared};
use crate::config::{ChildRole, Config, EngineSettings};
use crate::outbound::AllowList;

/// The module side of the WebAssembly backend.
pub const MODULES: Registration = Registration {
    name: "wasm",
    runs: "WebAssembly module (WASI preview 1)",
    refused: "Build it as a component (Rust: --target wasm32-wasip2), or add wasm to the setting",
    make: |config, shared| WasmBackend::make(Side::Module, config, shared),
};

/// The component side of the WebAssembly backend.
pub const COMPONENTS: Registration = Registration {
    name: "component",
    runs: "WebAssembly component (WASI 0.2)",
    refused: "Build it as a module (Rust: --target wasm32-wasip1), or add component to the setting",
    make: |config, shared| WasmBackend::make(Side::Component, config, shared),
};

/// One side of the WebAssembly backend, with the engines both sides share.
struct WasmBackend {
    side: Side,
    engines: Arc<Engines>,
}

impl WasmBackend {
    fn make(side: Side, config: &Config, shared: &mut Shared) -> Arc<dyn Backend> {
        let engines = shared.get_or_make(|| Engines::new(config));
        Arc::new(WasmBackend { side, engines })
    }
}

impl Backend for WasmBackend {
    fn claims(&self, entry: &Entry) -> bool {
        let side = match entry {
            Entry::Native(exec) => Side::of_precompiled(exec),
            Entry::Wasm(path) => Some(Side::of_file(path)),
            Entry::Signed(code) => Some(Side::of_file(&code.path())),
        };
        side == Some(self.side)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        spec: StartSpec,
        config: &'a Config,
        size: PoolSize,
    ) -> StartFuture<'a> {
        Box::pin(async move {
            let source = match &prepared.entry {
                Entry::Native(exec) => {
                    if !config.wasm.allow_precompiled {
                        return Err(StartError::Unsupported(
                            "this is a precompiled WebAssembly module; loading one runs its \
                             machine code unchecked, so it is accepted only with \
                             --allow-precompiled"
                                .to_owned(),
                        ));
                    }
                    Source::Precompiled(exec)
                }
                Entry::Signed(code) => Source::Signed(code),
                Entry::Wasm(path) => Source::Wasm {
                    path,
                    // Only the file the upload was written to has it.
                    sha256: prepared.wasm_sha256.as_deref(),
                },
            };
            // An archive's folder is the guest's read-only `/action`; a bare module sees
            // nothing.
            let preopen = prepared.archive.then(|| prepared.bin_dir.clone());
            let pool = start(source, spec, preopen, config, &self.engines, size).await?;
            Ok(pool as Arc<dyn super::Executor>)
        })
    }

    /// The engines, made before the server accepts: measured, 1.9-2.4 ms for a hello
    /// from the compile cache against 2.7-3.2 ms made on demand.
    fn warm(&self) {
        let (first, then) = self.engines.tiers();
        for codegen in std::iter::once(first).chain(then) {
            let _ = self.engines.engine(codegen);
        }
    }

    fn trust(&self, keys: &[ed25519_dalek::VerifyingKey]) -> Option<crate::signing::Trust> {
        self.engines.trust(keys)
    }
}

/// Why WebAssembly could not be made ready to run, by kind; the text is each kind's own.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be made (the host refused the pool's address space, say).
    #[error("{0:#}")]
    Engine(wasmtime::Error),
    /// The code is not a WASI command; the text says what it is instead.
    #[error("{0}")]
    NotACommand(String),
    #[error("cannot link the module: {0:#}")]
    LinkModule(wasmtime::Error),
    #[error("cannot link the component: {0:#} (wasmloop provides WASI 0.2 and wasi:http)")]
    LinkComponent(wasmtime::Error),
    #[error("cannot preopen {} as /action: {error:#}", dir.display())]
    Preopen {
        dir: PathBuf,
        error: wasmtime::Error,
    },
    /// The compiler's own message.
    #[error("{0}")]
    Compile(String),
    /// Compiled, precompiled or signed code that does not load here; the text says why.
    #[error("{0}")]
    Load(String),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The thread loading the code panicked or was stopped.
    #[error("loading the module stopped: {0}")]
    Interrupted(tokio::task::JoinError),
}

/// Where the module comes from.
pub enum Source<'a> {
    /// WebAssembly bytes, compiled (or taken from the compile cache); their SHA-256 if
    /// known already.
    Wasm {
        path: &'a Path,
        sha256: Option<&'a str>,
    },
    /// A module precompiled by `wasmloop compile`.
    Precompiled(&'a Path),
    /// A signed artifact's code, verified as it was unpacked.
    Signed(&'a crate::signing::SignedCode),
}

/// Everything an instance is made from; restarts take microseconds from the `InstancePre`.
pub struct WasmSpec {
    engine: Arc<WasmEngine>,
    pre: Pre,
    start: StartSpec,
    /// The action's environment, which every instance's guest reads (`Environ`).
    env: Arc<[(String, String)]>,
    preopen: Option<PathBuf>,
    outbound: Arc<AllowList>,
    descriptors: descriptors::Caps,
}

/// Code linked against WASI, ready to instantiate.
enum Pre {
    Module(InstancePre<ModuleHost>),
    Component(CommandPre<ComponentHost>),
}

/// What linking needs besides the code: shared by the first start and the upgrade.
#[derive(Clone)]
struct Link {
    start: StartSpec,
    preopen: Option<PathBuf>,
    outbound: Arc<AllowList>,
    descriptors: descriptors::Caps,
}

/// Compiles (or loads) the module and starts its first instance: what `/init` does. With
/// a tiered compiler the first code is the quick one, and the optimized code replaces it
/// once a background compile has made it.
pub async fn start(
    source: Source<'_>,
    start: StartSpec,
    preopen: Option<PathBuf>,
    config: &Config,
    engines: &Engines,
    size: PoolSize,
) -> Result<Arc<Pool<Instance>>, StartError> {
    let final_engine = engines.engine(engines.final_tier())?;
    let linking = Link {
        start,
        preopen,
        outbound: Arc::new(config.wasm.allow_outbound.clone()),
        descriptors: descriptors::Caps {
            files: config.wasm.max_instance_files,
            sockets: config.wasm.max_instance_sockets,
            shared: descriptors::Shared::new(config.wasm.guest_descriptors),
        },
    };
    let serve = |engine, code: Code, linking: Link| async move {
        let spec = link(engine, &code, linking)?;
        Pool::start(spec, size, Reporting::of(config)).await
    };
    let (wasm, sha256) = match source {
        Source::Precompiled(path) => {
            let module = blocking({
                let (engine, path) = (final_engine.clone(), path.to_owned());
                move || engine.load_precompiled(&path).map_err(WasmError::Load)
            })
            .await?;
            return serve(final_engine, module, linking).await;
        }
        Source::Signed(code) => {
            let code = blocking({
                let (engine, path) = (final_engine.clone(), code.path());
                move || engine.load_signed(&path).map_err(WasmError::Load)
            })
            .await?;
            tracing::debug!("signed precompiled code loaded: nothing to compile");
            return serve(final_engine, code, linking).await;
        }
        Source::Wasm { path, sha256 } => (path, sha256),
    };
    // Named as WebAssembly, built for Linux: compiling it would only say its header is wrong.
    if blocking({
        let path = wasm.to_owned();
        move || Ok(is_elf(&path))
    })
    .await?
    {
        let name = wasm.file_name().unwrap_or_default().to_string_lossy();
        return Err(WasmError::NotACommand(elf_named_wasm(&name)).into());
    }
    // The child compiles from the file: here its bytes are only needed for their digest.
    let digest = match sha256 {
        Some(hex) => WasmDigest(hex.to_owned()),
        None => {
            blocking({
                let path = wasm.to_owned();
                move || {
                    WasmDigest::of_file(&path).map_err(|source| WasmError::Read { path, source })
                }
            })
            .await?
        }
    };
    let cache = config.wasm.cache_dir.as_deref().and_then(CompileCache::at);
    let lookup = |engine: &Arc<WasmEngine>| {
        let (engine, digest, cache) = (engine.clone(), digest.clone(), cache.clone());
        blocking(move || Ok(cache.and_then(|cache| cache.load(&engine, &digest))))
    };
    let child = CompileChild {
        role: ChildRole::Foreground,
        deadline: tokio::time::Instant::now() + config.action.compile_timeout,
        timeout: config.action.compile_timeout,
        tell: config.action.one_shot.then_some(config.logs.format),
    };
    let compile_error = CompileError::into_start_error;
    // The final code may be in the cache already: then there is nothing to tier.
    if let Some(code) = lookup(&final_engine).await? {
        return serve(final_engine, code, linking).await;
    }
    let (first, then) = engines.tiers();
    let compile_final = || child.compile(&final_engine, wasm, &digest, cache.as_ref());
    if then.is_none() {
        let code = compile_final().await.map_err(compile_error)?;
        return serve(final_engine.clone(), code, linking).await;
    }
    let quick_engine = engines.engine(first)?;
    // A one-shot run (`wasmloop run`) ends before a tier-up could: its quick code is what
    // it serves and keeps, for the next run. A server's is soon replaced, and a later
    // /init finds the final code instead.
    let one_shot = config.action.one_shot;
    if one_shot && let Some(code) = lookup(&quick_engine).await? {
        return serve(quick_engine, code, linking).await;
    }
    let quick_cache = cache.as_ref().filter(|_| one_shot);
    let code = match child
        .compile(&quick_engine, wasm, &digest, quick_cache)
        .await
    {
        Ok(code) => code,
        // Winch lacks some proposals Cranelift has: then Cranelift's code serves at once.
        Err(e) if e.not_for_winch => {
            tracing::debug!(
                error = e.message,
                "not for the quick compiler: compiling optimized code"
            );
            let code = compile_final().await.map_err(compile_error)?;
            return serve(final_engine.clone(), code, linking).await;
        }
        Err(e) => return Err(compile_error(e)),
    };
    if one_shot {
        return serve(quick_engine, code, linking).await;
    }
    let slot = serve(quick_engine, code, linking.clone()).await?;
    let later = Upgrade {
        engine: final_engine,
        wasm: wasm.to_owned(),
        digest,
        cache,
        // Its own time, from now: nobody waits for it, and the /init's deadline (which
        // may have shortened the foreground's) is no concern of it.
        child: CompileChild {
            role: ChildRole::Background,
            deadline: tokio::time::Instant::now() + config.action.background_compile_timeout,
            timeout: config.action.background_compile_timeout,
            tell: None,
        },
        linking,
    };
    // Stopped (with its compile child) when the action goes.
    let upgrade = tokio::spawn(later.run(Arc::downgrade(&slot)));
    slot.keep_helper(upgrade.abort_handle());
    Ok(slot)
}

/// The background half of a tiered start: the optimized code, and instances made from it.
struct Upgrade {
    engine: Arc<WasmEngine>,
    wasm: PathBuf,
    digest: WasmDigest,
    cache: Option<CompileCache>,
    child: CompileChild,
    linking: Link,
}

impl Upgrade {
    async fn run(self, slot: std::sync::Weak<Pool<Instance>>) {
        let compiled = self
            .child
            .compile(&self.engine, &self.wasm, &self.digest, self.cache.as_ref())
            .await
            .map_err(CompileError::into_start_error);
        let upgraded = match compiled.and_then(|code| link(self.engine, &code, self.linking)) {
            Ok(spec) => match slot.upgrade() {
                Some(slot) => slot.upgrade(spec).await,
                None => return,
            },
            Err(e) => Err(e),
        };
        match upgraded {
            Ok(swapped) => tracing::debug!(
                swapped,
                "optimized code ready: new instances run it; those that have served keep theirs"
            ),
            // The quick code keeps serving: slower, but it works.
            Err(e) => tracing::debug!(error = %e, "no optimized code: keeping the quick code"),
        }
    }
}

/// Checks that the code is a command and links it against WASI.
fn link(engine: Arc<WasmEngine>, code: &Code, linking: Link) -> Result<WasmSpec, StartError> {
    let pre = match code {
        Code::Module(module) => {
            check_command(module).map_err(WasmError::NotACommand)?;
            let pre = engine
                .linker
                .instantiate_pre(module)
                .map_err(WasmError::LinkModule)?;
            Pre::Module(pre)
        }
        Code::Component(component) => {
            code::check_component_command(&engine.engine, component)
                .map_err(WasmError::NotACommand)?;
            let pre = engine
                .components
                .instantiate_pre(component)
                .and_then(CommandPre::new)
                .map_err(WasmError::LinkComponent)?;
            Pre::Component(pre)
        }
    };
    Ok(WasmSpec {
        engine,
        pre,
        env: Arc::from(linking.start.env.clone()),
        start: linking.start,
        preopen: linking.preopen,
        outbound: linking.outbound,
        descriptors: linking.descriptors,
    })
}

/// File work and deserializing take a millisecond or so: off the async workers.
async fn blocking<T: Send + 'static>(
    job: impl FnOnce() -> Result<T, WasmError> + Send + 'static,
) -> Result<T, StartError> {
    Ok(tokio::task::spawn_blocking(job)
        .await
        .map_err(WasmError::Interrupted)??)
}

/// Whether the file at `path` is a Linux executable (ELF).
pub fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && crate::action::detect::detect(&magic) == crate::action::detect::Kind::Elf
}

/// What to do about a Linux executable named as WebAssembly (`name`), which is never run
/// natively: its name says what its author meant.
pub fn elf_named_wasm(name: &str) -> String {
    format!(
        "{name} is a Linux executable (ELF), not WebAssembly: build it for WebAssembly \
         (`cargo build --target wasm32-wasip1`, `GOOS=wasip1 GOARCH=wasm go build`, `clang \
         --target=wasm32-wasi`), or, to run it natively, name it `exec` (in a zip) or give it \
         a name without `.wasm`"
    )
}

/// Makes `module` (a file) a signed artifact's folder: its precompiled code for the engine
/// `settings` make (`exec.cwasm.zst`) and the signature (`exec.sig`), written beside it.
pub fn sign_beside(
    module: &Path,
    settings: EngineSettings,
    key: &ed25519_dalek::SigningKey,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    let code = precompile(&bytes, settings).map_err(anyhow::Error::msg)?;
    let engine =
        artifact_engine_id(settings).map_err(|e| anyhow::anyhow!("cannot make the engine: {e}"))?;
    let dir = module.parent().context("the module has no folder")?;
    let packed = crate::signing::pack(&code)?;
    let signature = crate::signing::sign(key, &bytes, &packed, &engine);
    std::fs::write(dir.join(crate::signing::SIGNATURE_ENTRY), signature)?;
    std::fs::write(dir.join(crate::signing::CODE_ENTRY), packed)?;
    Ok(())
}

/// Compiles a module ahead of time (`wasmloop compile`, and a server's compile children).
pub fn precompile(bytes: &[u8], settings: EngineSettings) -> Result<Vec<u8>, String> {
    compile::compile_here(bytes, settings, true).map_err(|e| e.message)
}

impl Worker for Instance {
    type Spec = WasmSpec;

    /// Every start is the same: an instance from the `InstancePre`, checked by running
    /// its guest to its first read; a fresh one learns its activation's values later
    /// (`Environ`).
    async fn start(spec: &WasmSpec, _: Start<'_>) -> Result<Self, StartError> {
        Instance::start(spec).await
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

    async fn activate(&mut self, line: Vec<u8>) -> Result<Bytes, RunError> {
        self.settle().await;
        // The result's cap is the stdout stream's own, set when the instance was made.
        let result = self.exchange(line).await;
        // Lines it wrote after its answer, before waiting for the next request, go to the
        // logs of this activation (ahead of its own log lines, held back below). When the
        // line taken is no result, what follows is more likely the real one: the instance
        // is replaced, and `report_not_json` tells the logs.
        if let Ok(line) = &result
            && let Some(stray) = self.stdout.discard()
            && super::lines::is_json_result(line)
        {
            super::lines::report_stray(self.attribution.format(), &stray);
        }
        result
    }

    fn attribute(&mut self, labels: crate::logs::Labels) {
        self.attribution.set(labels);
    }

    fn end_activation(&mut self, end: End) {
        end.write_stdout();
        if let Some(denials) = &self.denials
            && let Some(line) = crate::lock(denials).left_out()
        {
            self.stderr.note(&line);
        }
        self.stderr.flush_with(end.stderr_tail());
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
}

impl Instance {
    async fn start(wasm: &WasmSpec) -> Result<Instance, StartError> {
        let (engine, spec) = (&wasm.engine, &wasm.start);
        let stdin = GuestStdin::default();
        let stdout = GuestStdout::new(spec.max_result_bytes, spec.log_format);
        let attribution = crate::logs::Attribution::new(spec.log_format);
        let stderr = GuestStderr::new(attribution.clone());
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(stdin.clone())
            .stdout(StdioOut(stdout.clone()))
            .stderr(StdioOut(stderr.clone()))
            .args(&[&spec.main]);
        let environ = Environ::new(wasm.env.clone(), spec.fresh, !spec.wait_for_ack);
        if let Some(dir) = &wasm.preopen {
            wasi.preopened_dir(dir, "/action", FsPerms::ReadOnly)
                .map_err(|error| WasmError::Preopen {
                    dir: dir.clone(),
                    error,
                })?;
        }
        let memory = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let limits = MemoryCap {
            cap: engine.settings.memory_cap,
            total: memory.clone(),
        };
        let mut denials = None;
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
                let pre = pre.clone();
                Box::pin(async move {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                    start.call_async(&mut store, ()).await
                })
            }
            Pre::Component(pre) => {
                let outbound = Outbound::new(wasm.outbound.clone(), stderr.clone(), held.clone());
                outbound.gate_sockets(&mut wasi);
                denials = Some(outbound.denials());
                let mut table = wasmtime::component::ResourceTable::new();
                table.set_max_capacity(component::MAX_RESOURCES);
                let mut http = wasmtime_wasi_http::WasiHttpCtx::new();
                http.set_field_size_limit(component::MAX_FIELDS_BYTES);
                let host = ComponentHost {
                    wasi: wasi.build(),
                    table,
                    http,
                    outbound,
                    limits,
                    preopens,
                    environ: environ.clone(),
                };
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
        };
        tracing::debug!(codegen = engine.settings.codegen.name(), "instance started");
        let ticking = engine.ticker.running();
        let started = if spec.wait_for_ack {
            instance.wait_for_ack(spec).await
        } else {
            instance.wait_until_idle(spec).await
        };
        drop(ticking);
        // What the guest logged while starting is out before /init answers.
        instance.stderr.flush();
        started.map(|()| instance)
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
                Some(detail) => Poll::Ready(Err(StartError::GuestExited {
                    detail: detail.clone(),
                })),
                None if self.stdin.has_waited() || self.environ.is_waiting() => Poll::Ready(Ok(())),
                None => self.later(),
            }
        });
        // A guest runs only while someone polls it: one still busy here would go on with
        // its start-up in the first activation, and one stuck there would fail every one.
        tokio::time::timeout(spec.ack_timeout, idle)
            .await
            .unwrap_or(Err(StartError::StillStarting(spec.ack_timeout)))
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
            super::lines::report_stray(self.attribution.format(), &stray);
        }
    }

    async fn exchange(&mut self, line: Vec<u8>) -> Result<Bytes, RunError> {
        let _ticking = self.ticker.running();
        self.environ.arrive(&line);
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

/// A store for one instance, module or component: its memory capped by `cap`, and yielding
/// every epoch tick, so one busy guest cannot hold a worker thread.
fn guest_store<T: Send + 'static>(
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
fn exit_reason(result: wasmtime::Result<()>, stderr: &GuestStderr) -> String {
    match result {
        Ok(()) => "the guest returned from _start".to_owned(),
        Err(e) => {
            use wasmtime::component::ResourceTableError;
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return format!("exit status: {}", exit.0);
            }
            let last_line = || {
                stderr.last_line().map_or_else(String::new, |line| {
                    format!("; its last log line: `{}`", line.escape_debug())
                })
            };
            if e.is::<RunReturnedError>() {
                return format!(
                    "exit status: 1 (an uncaught exception in Python or JavaScript, or \
                     `exit(1)`){}",
                    last_line()
                );
            }
            if let Some(trap) = e.downcast_ref::<Trap>() {
                // How a guest that panicked (Rust's `panic = "abort"` on wasm), called
                // `abort()` (C) or otherwise gave up ends. What it said last tells why (a
                // panic's message and place, say).
                if *trap == Trap::UnreachableCodeReached {
                    return format!("the action panicked or aborted ({trap}){}", last_line());
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
