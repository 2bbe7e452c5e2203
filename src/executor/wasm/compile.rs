//! Compiling modules in a child process (`wasmloop compile --for-server`), and what it does.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use wasmtime::component::Component;
use wasmtime::{Engine, ExternType, Module};

use super::cache::{CompileCache, WasmDigest, store_in_cache};
use super::code::{Code, check_component_runs, is_component};
use super::engine::{WasmEngine, engine_config};
use super::{ChildRole, Codegen, EngineSettings};

/// Why a compile child made no module.
#[derive(Debug)]
pub struct CompileError {
    pub message: String,
    /// Winch cannot compile this module but Cranelift can: worth another try with it.
    pub not_for_winch: bool,
    /// It was stopped at its limit (`--compile-timeout`, or an `/init`'s deadline).
    pub timed_out: Option<Duration>,
}

impl CompileError {
    pub fn fatal(message: String) -> Self {
        CompileError {
            message,
            not_for_winch: false,
            timed_out: None,
        }
    }

    /// What the start of an action fails with: a timeout is told apart by its kind.
    pub fn into_start_error(self) -> crate::executor::StartError {
        match self.timed_out {
            Some(limit) => super::WasmError::CompileTimedOut(limit).into(),
            None => super::WasmError::Compile(self.message).into(),
        }
    }
}

/// The exit status by which a compile child says "not with Winch, but with Cranelift".
pub const EXIT_NOT_FOR_WINCH: i32 = 3;

/// How a server runs a compile child: `wasmloop compile --for-server`, our own executable,
/// which writes the compiled module on its stdout.
#[derive(Debug, Clone, Copy)]
pub struct CompileChild {
    pub role: ChildRole,
    /// When the compile must be done by (all tries of one `/init` share it).
    pub deadline: tokio::time::Instant,
    /// The `--compile-timeout` the deadline comes from, for the message.
    pub timeout: Duration,
    /// Say on stderr, in this format, that the code was compiled and whether it was kept
    /// (under `ActionSettings::one_shot`).
    pub tell: Option<crate::logs::LogFormat>,
}

impl CompileChild {
    /// Compiles the module in `wasm` (whose digest is `digest`) for `engine` in this child
    /// process, which keeps the compiler's memory and code pages out of this one (a long-lived server
    /// would otherwise keep them long after a single compile) and survives a compiler
    /// crash. With a `cache`, the result is kept there (best effort).
    pub async fn compile(
        self,
        engine: &WasmEngine,
        wasm: &Path,
        digest: &WasmDigest,
        cache: Option<&CompileCache>,
    ) -> Result<Code, CompileError> {
        let (began, tell) = (std::time::Instant::now(), self.tell);
        let background = matches!(self.role, ChildRole::Background);
        let compiled = self.run(&engine.compiler, wasm, engine.settings).await?;
        if let Some(metrics) = &engine.metrics {
            metrics.compiled(engine.settings.codegen.name(), background, began.elapsed());
        }
        let cached = cache.map(|cache| cache.entry(engine, digest));
        let (settings, engine) = (engine.settings, engine.engine.clone());
        let (module, kept) = tokio::task::spawn_blocking(move || {
            // Mapped from the cache file when there is one: its code is then file-backed
            // memory, shared with other processes loading the same file.
            if let Some(path) = cached.filter(|path| store_in_cache(&compiled, path)) {
                // SAFETY: the file holds what our own executable just compiled.
                if let Ok(code) = unsafe { Code::deserialize_file(&engine, &path) } {
                    return Ok((code, Some(path)));
                }
            }
            // SAFETY: the bytes are what our own executable just compiled.
            unsafe { Code::deserialize(&engine, &compiled) }.map(|code| (code, None))
        })
        .await
        .map_err(|e| CompileError::fatal(format!("loading the compiled module stopped: {e}")))?
        .map_err(|e| CompileError::fatal(format!("cannot load the compiled module: {e:#}")))?;
        if let Some(format) = tell {
            let kept = match kept {
                Some(path) => format!("; kept for the next run in {}", path.display()),
                None => " (no compile cache: --no-cache, or no usable --cache-dir)".to_owned(),
            };
            crate::protocol::log_stderr(
                format,
                &format!(
                    "wasmloop: compiled the action with {} in {:.1} s{kept}",
                    settings.codegen.name(),
                    began.elapsed().as_secs_f64()
                ),
            );
        }
        tracing::debug!(
            wasm = %wasm.display(),
            codegen = settings.codegen.name(),
            "module compiled"
        );
        Ok(module)
    }

    async fn run(
        self,
        program: &Path,
        wasm: &Path,
        settings: EngineSettings,
    ) -> Result<Vec<u8>, CompileError> {
        let mut command = tokio::process::Command::new(program);
        command
            .arg("compile")
            .arg("--for-server")
            .arg(self.role.name())
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .arg("--wasm-compiler")
            .arg(settings.codegen.name())
            .arg("--output")
            .arg("-")
            .arg(wasm)
            // Its stderr is the error message: no diagnostics of ours in it.
            .env_remove("RUST_LOG")
            .env_remove("OW_DEBUG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let timed_out = || CompileError {
            timed_out: Some(self.timeout),
            ..CompileError::fatal(crate::config::compile_timed_out(self.timeout))
        };
        let output = command.output();
        let finished = match self.role {
            ChildRole::Foreground => tokio::time::timeout_at(self.deadline, output)
                .await
                .map_err(|_| timed_out())?,
            // Nobody waits for it, and a frozen container (`docker pause`) would otherwise
            // find its limit spent the moment it thaws: only running time counts.
            ChildRole::Background => {
                let left = self.deadline - tokio::time::Instant::now();
                tokio::select! {
                    output = output => output,
                    () = running_time(left) => return Err(timed_out()),
                }
            }
        }
        .map_err(|e| CompileError::fatal(format!("cannot start the compiler: {e}")))?;
        if finished.status.success() {
            return Ok(finished.stdout);
        }
        let message = String::from_utf8_lossy(&finished.stderr).trim().to_owned();
        Err(CompileError {
            message: if message.is_empty() {
                format!("the compiler failed ({})", finished.status)
            } else {
                message
            },
            not_for_winch: finished.status.code() == Some(EXIT_NOT_FOR_WINCH),
            timed_out: None,
        })
    }
}

/// Completes once `limit` has passed while the process was running: the clock is read in
/// one-second steps, and a step that took much longer (the container was frozen, or the
/// machine suspended) counts as two seconds.
pub(super) async fn running_time(limit: Duration) {
    const STEP: Duration = Duration::from_secs(1);
    let mut counted = Duration::ZERO;
    while counted < limit {
        let step = STEP.min(limit - counted);
        let before = tokio::time::Instant::now();
        tokio::time::sleep(step).await;
        counted += before.elapsed().min(2 * step);
    }
}

/// What a compile child does: compile `bytes` for an engine with `settings`, serialized.
/// `parallel`: on every core (for an `/init` waiting), or on one (in the background).
pub fn compile_here(
    bytes: &[u8],
    settings: EngineSettings,
    parallel: bool,
) -> Result<Vec<u8>, CompileError> {
    let settings = EngineSettings {
        concurrent: super::code::serves_p3(bytes),
        ..settings
    };
    // Made once and thrown away: no instance pool, no epoch ticker (neither changes the code).
    let mut config = engine_config(settings, false);
    config.parallel_compilation(parallel);
    let engine = Engine::new(&config).map_err(|e| CompileError::fatal(format!("{e:#}")))?;
    let component = is_component(bytes);
    let not_valid = |e: wasmtime::Error| {
        let message = if component {
            format!("invalid WebAssembly component: {e:#}")
        } else {
            format!("invalid WebAssembly module: {e:#}")
        };
        // Winch lacks some proposals Cranelift has: say so when that is the only problem.
        let cranelift = EngineSettings {
            codegen: Codegen::Cranelift,
            ..settings
        };
        let not_for_winch = settings.codegen == Codegen::Winch
            && Engine::new(&engine_config(cranelift, false)).is_ok_and(|engine| {
                if component {
                    Component::new(&engine, bytes).is_ok()
                } else {
                    Module::validate(&engine, bytes).is_ok()
                }
            });
        CompileError {
            message,
            not_for_winch,
            timed_out: None,
        }
    };
    let (snapshot, renewable);
    let mut bytes = bytes;
    if !component && super::snapshot::wanted(bytes) {
        snapshot = super::snapshot::take(&engine, bytes, settings)
            .map_err(CompileError::fatal)?;
        bytes = &snapshot;
    }
    if !component {
        // An invalid module is left to the compile below to explain.
        match super::renew::exported(bytes) {
            Ok(exported) => {
                renewable = exported;
                bytes = &renewable;
            }
            Err(why) => tracing::debug!(why = %why, "instances of this module cannot be renewed in place"),
        }
    }
    let code = if component {
        let component = Component::new(&engine, bytes).map_err(not_valid)?;
        check_component_runs(&engine, &component).map_err(CompileError::fatal)?;
        Code::Component(component)
    } else {
        let module = Module::new(&engine, bytes).map_err(not_valid)?;
        check_command(&module).map_err(CompileError::fatal)?;
        Code::Module(module)
    };
    code.serialize()
        .map_err(|e| CompileError::fatal(format!("cannot serialize the compiled code: {e:#}")))
}

/// A command module: exports `_start` taking and returning nothing. Without one, the
/// message says what the module is instead, which tells how it was built wrong.
pub fn check_command(module: &Module) -> Result<(), String> {
    match module.get_export("_start") {
        Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => Ok(()),
        Some(_) => Err("the module's `_start` export is not a function of no arguments".to_owned()),
        None if module.imports().any(|import| import.module() == "gojs") => Err(
            "the module was built by Go for a browser (GOOS=js: it imports `gojs`), not for \
             WASI: build it with `GOOS=wasip1 GOARCH=wasm go build`"
                .to_owned(),
        ),
        None => {
            let functions: Vec<&str> = module
                .exports()
                .filter(|export| matches!(export.ty(), ExternType::Func(_)))
                .map(|export| export.name())
                .collect();
            Err(if functions.is_empty() {
                "the module exports no `_start`: build it as a WASI command (a program with a \
                 `main`: `cargo build --target wasm32-wasip1` of a binary crate, `clang \
                 --target=wasm32-wasi` of a C file with `main`, `GOOS=wasip1 GOARCH=wasm go \
                 build` of package main)"
                    .to_owned()
            } else {
                format!(
                    "the module exports no `_start`: it is a library (it exports {}), not a \
                     command. Build a program with a `main` instead: in Rust a binary crate \
                     (`src/main.rs`, no `crate-type = [\"cdylib\"]`), in C a file with \
                     `main` built without `-mexec-model=reactor` or `-nostartfiles`, in Go \
                     package main without `-buildmode=c-shared` (or with it, on wasmloop's Go \
                     SDK, whose reactor also exports `wizer-initialize` and `wasmloop-serve`)",
                    quoted_list(&functions, 4)
                )
            })
        }
    }
}

/// Up to `most` names, back-quoted, and how many more.
fn quoted_list(names: &[&str], most: usize) -> String {
    let shown: Vec<String> = names.iter().take(most).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(most) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn time_spent_frozen_does_not_count_against_a_background_compile() {
        let start = tokio::time::Instant::now();
        let mut limit = std::pin::pin!(running_time(Duration::from_secs(5)));
        assert!(poll_once(&mut limit).is_pending());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(poll_once(&mut limit).is_pending());
        // Frozen for ten minutes in the middle of a step: it counts as two seconds.
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(
            poll_once(&mut limit).is_pending(),
            "the freeze used up the limit"
        );
        // The two seconds left still run out.
        limit.await;
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_secs(602) && elapsed < Duration::from_secs(605),
            "{elapsed:?}"
        );
    }

    fn poll_once<F: std::future::Future>(
        f: &mut std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        f.as_mut().poll(&mut std::task::Context::from_waker(waker))
    }
}
