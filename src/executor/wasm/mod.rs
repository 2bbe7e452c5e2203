//! The WebAssembly backend: wasmtime instances of an action (kept, or fresh per activation), fed
//! request lines on their WASI stdin and answering on their stdout. The only code touching wasmtime.

mod artifact;
mod cache;
mod code;
mod command;
mod compile;
pub mod component;
pub mod descriptors;
mod engine;
pub mod environ;
mod instance;
pub mod memory_cap;
mod module;
pub mod renew;
mod settings;
mod snapshot;
pub mod streams;
pub mod ticker;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::InstancePre;
use wasmtime_wasi::p2::bindings::CommandPre;

pub use artifact::{is_elf, precompile, sign_beside};
use crate::action::detect::elf_named_wasm;
use cache::{CompileCache, WasmDigest};
pub use code::{
    Code, HANDLER_EXPORT, P3_HANDLER_EXPORT, RUN_EXPORT, Side, each_top_level, is_component,
    serves_p3, top_level_exports,
};
pub use command::{COMPILE, CompileArgs};
use compile::{CompileChild, check_command};
pub use compile::{CompileError, EXIT_NOT_FOR_WINCH, compile_here};
use component::ComponentHost;
pub use engine::{Engines, WasmEngine, artifact_engine_id, pooled_config};
pub use instance::{Instance, exit_reason, guest_store, preopen_action};
use module::ModuleHost;
pub use settings::{
    ChildRole, Codegen, CompilerArgs, DEFAULT_MAX_INSTANCE_FILES, DEFAULT_MAX_INSTANCE_SOCKETS,
    DEFAULT_MAX_MEMORY_BYTES, DEFAULT_WASM_COMPILER, EngineSettings, FLAGS, WasmArgs,
    WasmCompiler, WasmSettings, engine_settings, most_instances,
};

use super::pool::{Pool, PoolSize, Reporting, Worker};
use super::registry::{Backend, Claim, Registration, Shared, StartFuture};
use super::{StartError, StartSpec};
use crate::action::{Entry, Prepared};
use crate::config::Config;
use crate::outbound::AllowList;

/// The module side of the WebAssembly backend.
pub const MODULES: Registration = Registration {
    name: "wasm",
    runs: "WebAssembly module (WASI preview 1)",
    made: "a module (Rust: `cargo build --target wasm32-wasip1`)",
    make: |config, shared| WasmBackend::make(Side::Module, config, shared),
};

/// The component side of the WebAssembly backend.
pub const COMPONENTS: Registration = Registration {
    name: "component",
    runs: "WebAssembly component (WASI 0.2)",
    made: "a component (Rust: `cargo build --target wasm32-wasip2`)",
    make: |config, shared| WasmBackend::make(Side::Component, config, shared),
};

/// Whether an entry point is WebAssembly to compile: named as such (`exec.wasm`,
/// `<main>.wasm`, whatever it holds: an ELF file there is told as a mistake), or an `exec`
/// that starts as WebAssembly does. Code precompiled from it is an ELF file, told apart by
/// `Side::of_precompiled`.
pub fn is_webassembly(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
        || crate::action::starts_with(path, &[crate::action::detect::WASM_MAGIC])
}

/// One side of the WebAssembly backend, with the engines both sides share.
struct WasmBackend {
    side: Side,
    engines: Arc<Engines>,
    /// The keys whose signed artifacts' code it loads (`--trust-key`).
    trust_keys: Vec<ed25519_dalek::VerifyingKey>,
}

impl WasmBackend {
    fn make(side: Side, config: &Config, shared: &mut Shared) -> Arc<dyn Backend> {
        let metrics = shared.metrics.clone();
        let engines = shared.get_or_make(|| Engines::new(config, metrics));
        let trust_keys = WasmSettings::of(config).trust_keys.clone();
        Arc::new(WasmBackend {
            side,
            engines,
            trust_keys,
        })
    }
}

impl Backend for WasmBackend {
    /// A module, or a component, by its format (an HTTP component is claimed more closely
    /// by its own backend).
    fn claims(&self, entry: &Entry) -> Option<Claim> {
        let side = match entry {
            Entry::File(path) if is_webassembly(path) => Some(Side::of_file(path)),
            Entry::File(path) => Side::of_precompiled(path),
            Entry::Signed(code) => Some(Side::of_file(&code.path())),
        };
        (side == Some(self.side)).then_some(Claim::Format)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        spec: StartSpec,
        config: &'a Config,
        size: PoolSize,
    ) -> StartFuture<'a> {
        start_prepared(StdioWorld, prepared, spec, config, &self.engines, size)
    }

    fn warm(&self) {
        self.engines.warm();
    }

    fn trust(&self) -> Option<crate::signing::Trust> {
        self.engines.trust(&self.trust_keys)
    }

    fn sign(&self, prepared: &Prepared, key: &ed25519_dalek::SigningKey) -> anyhow::Result<()> {
        match &prepared.entry {
            Entry::File(module) if is_webassembly(module) => self.engines.sign_beside(module, key),
            _ => Ok(()),
        }
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
    /// The component imports interfaces no host of this runtime provides.
    #[error(
        "the component imports what wasmloop does not provide: {}. wasmloop gives components \
         WASI 0.2 (wasi:cli, wasi:io, wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets) \
         and wasi:http; build it without the others (Spin's SDK imports fermyon:spin/*: write \
         the handler on the `wasi` crate's wasi:http/proxy world instead)",
        .0.join(", ")
    )]
    MissingImports(Vec<String>),
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
    /// Compiling the module was stopped at its limit.
    #[error("{}", crate::config::compile_timed_out(*.0))]
    CompileTimedOut(std::time::Duration),
    /// The guest was still in its start-up code when the bound ran out.
    #[error(
        "the guest was still running its start-up code after {} and had not read its input: \
         a guest must reach its first read of stdin within --ack-timeout (is it stuck in a loop \
         before it?)",
        humantime::format_duration(*.0)
    )]
    StillStarting(std::time::Duration),
    /// The guest ended before it was up; the text says how.
    #[error("{}: {detail}", crate::protocol::MSG_COMMAND_EXITED)]
    GuestExited { detail: String },
}

impl crate::executor::BackendFailure for WasmError {
    fn timed_out(&self) -> bool {
        matches!(
            self,
            WasmError::CompileTimedOut(_) | WasmError::StillStarting(_)
        )
    }
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

impl<'a> Source<'a> {
    /// Where the code of what `/init` unpacked comes from (its entry is WebAssembly, or
    /// code precompiled from it): precompiled code only with `--allow-precompiled`.
    pub fn of(prepared: &'a Prepared, config: &Config) -> Result<Source<'a>, StartError> {
        Ok(match &prepared.entry {
            Entry::File(path) if is_webassembly(path) => Source::Wasm {
                path,
                // Only the file the upload was written to has it.
                sha256: prepared.wasm_sha256.as_deref(),
            },
            Entry::File(exec) => {
                if !WasmSettings::of(config).allow_precompiled {
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
        })
    }
}

/// Starts what `/init` unpacked as world `W`, its code from wherever it came: an
/// archive's folder is the guest's read-only `/action`; a bare module sees nothing.
pub fn start_prepared<'a, W: World>(
    world: W,
    prepared: &'a Prepared,
    spec: StartSpec,
    config: &'a Config,
    engines: &'a Engines,
    size: PoolSize,
) -> StartFuture<'a> {
    Box::pin(async move {
        let source = Source::of(prepared, config)?;
        let preopen = prepared.archive.then(|| prepared.bin_dir.clone());
        let pool = start(world, source, spec, preopen, config, engines, size).await?;
        Ok(pool as Arc<dyn super::Executor>)
    })
}

/// What code is linked as and run by: the stdio contract's world (`StdioWorld`), or another
/// world a backend of its own serves, with what that backend's settings give its instances.
/// Compiling, the cache, signed code and tiering are the same for every world.
pub trait World: Clone + Send + Sync + 'static {
    /// The code, linked and checked, that instances are made from.
    type Pre: Send + Sync + 'static;
    /// What runs an instance's activations.
    type Worker: Worker<Spec = WasmSpec<Self::Pre>>;
    /// Checks that the code is of this world and links it.
    fn link(&self, engine: &WasmEngine, code: &Code) -> Result<Self::Pre, WasmError>;
}

/// The stdio contract: a WASI command (a module's `_start`, a component's `wasi:cli/run`).
#[derive(Clone)]
pub struct StdioWorld;

impl World for StdioWorld {
    type Pre = Pre;
    type Worker = Instance;

    fn link(&self, engine: &WasmEngine, code: &Code) -> Result<Pre, WasmError> {
        Ok(match code {
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
                    .map_err(|e| unlinked(&engine.engine, component, e))?;
                Pre::Component(CommandPre::new(pre).map_err(WasmError::LinkComponent)?)
            }
        })
    }
}

/// Everything an instance is made from; restarts take microseconds from the `InstancePre`.
pub struct WasmSpec<P = Pre> {
    pub engine: Arc<WasmEngine>,
    pub pre: P,
    pub start: StartSpec,
    /// The action's environment, which every instance's guest reads (`Environ`).
    pub env: Arc<[(String, String)]>,
    pub preopen: Option<PathBuf>,
    pub outbound: Arc<AllowList>,
    pub descriptors: descriptors::Caps,
    /// What a module's instances are renewed to, taken from the first.
    baseline: Arc<std::sync::OnceLock<Arc<renew::Baseline>>>,
}

/// Code linked against WASI as a command, ready to instantiate.
pub enum Pre {
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
pub async fn start<W: World>(
    world: W,
    source: Source<'_>,
    start: StartSpec,
    preopen: Option<PathBuf>,
    config: &Config,
    engines: &Engines,
    size: PoolSize,
) -> Result<Arc<Pool<W::Worker>>, StartError> {
    let final_engine = engines.engine(engines.final_tier())?;
    let wasm = WasmSettings::of(config);
    let linking = Link {
        start,
        preopen,
        outbound: Arc::new(wasm.allow_outbound.clone()),
        descriptors: descriptors::Caps {
            files: wasm.max_instance_files,
            sockets: wasm.max_instance_sockets,
            shared: descriptors::Shared::new(wasm.guest_descriptors),
        },
    };
    let world = &world;
    let serve = |engine, code: Code, linking: Link| async move {
        let spec = link(world, engine, &code, linking)?;
        Pool::start(spec, size, Reporting::of(config, engines.metrics())).await
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
    let cache = WasmSettings::of(config)
        .cache_dir
        .as_deref()
        .and_then(|dir| CompileCache::at(dir, config.logs.format));
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
    // /init finds the final code instead; but the quick code a run kept (the same cache
    // and key) saves a server's /init its compile too, and the final code follows as
    // after any quick start.
    let one_shot = config.action.one_shot;
    let quick_cache = cache.as_ref().filter(|_| one_shot);
    let kept = lookup(&quick_engine).await?;
    let compiled = match kept {
        Some(code) => Ok(code),
        None => {
            child
                .compile(&quick_engine, wasm, &digest, quick_cache)
                .await
        }
    };
    let code = match compiled {
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
    let later = Upgrade::<W> {
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
        world: world.clone(),
    };
    // Stopped (with its compile child) when the action goes.
    let upgrade = tokio::spawn(later.run(Arc::downgrade(&slot)));
    slot.keep_helper(upgrade.abort_handle());
    Ok(slot)
}

/// The background half of a tiered start: the optimized code, and instances made from it.
struct Upgrade<W> {
    engine: Arc<WasmEngine>,
    wasm: PathBuf,
    digest: WasmDigest,
    cache: Option<CompileCache>,
    child: CompileChild,
    linking: Link,
    world: W,
}

impl<W: World> Upgrade<W> {
    async fn run(self, slot: std::sync::Weak<Pool<W::Worker>>) {
        let compiled = self
            .child
            .compile(&self.engine, &self.wasm, &self.digest, self.cache.as_ref())
            .await
            .map_err(CompileError::into_start_error);
        let metrics = self.engine.metrics.clone();
        let upgraded = match compiled.and_then(|code| link(&self.world, self.engine, &code, self.linking)) {
            Ok(spec) => match slot.upgrade() {
                Some(slot) => slot.upgrade(spec).await,
                None => return,
            },
            Err(e) => Err(e),
        };
        if upgraded.is_ok()
            && let Some(metrics) = &metrics
        {
            metrics.tiered_up();
        }
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

/// The interfaces wasmloop gives components (WASI 0.2's; see `component::linker`).
const PROVIDED: &[&str] = &[
    "wasi:cli/",
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:filesystem/",
    "wasi:sockets/",
    "wasi:http/",
];

/// Why a component did not link: every import it has that no host here provides, or
/// wasmtime's own reason when all of them are (a version or a type that does not match).
pub fn unlinked(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    error: wasmtime::Error,
) -> WasmError {
    let missing: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !(PROVIDED.iter().any(|p| name.starts_with(p)) && name.contains("@0.2.")))
        .map(str::to_owned)
        .collect();
    if missing.is_empty() {
        return WasmError::LinkComponent(error);
    }
    WasmError::MissingImports(missing)
}

/// Checks that the code is of the world `W` and links it against WASI.
fn link<W: World>(
    world: &W,
    engine: Arc<WasmEngine>,
    code: &Code,
    linking: Link,
) -> Result<WasmSpec<W::Pre>, StartError> {
    let pre = world.link(&engine, code)?;
    Ok(WasmSpec {
        engine,
        pre,
        env: Arc::from(linking.start.env.clone()),
        start: linking.start,
        preopen: linking.preopen,
        outbound: linking.outbound,
        descriptors: linking.descriptors,
        baseline: Arc::default(),
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
