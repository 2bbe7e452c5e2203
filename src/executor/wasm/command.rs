//! `wasmloop compile`, the WebAssembly folder's own subcommand: a module compiled (or signed) ahead of a server, and a server's compile child.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::{ChildRole, CompilerArgs, EngineSettings};

/// Compiles a WebAssembly module ahead of time (`wasmloop compile`), or serves a server
/// as its compile child (`--for-server`).
pub const COMPILE: crate::executor::registry::Subcommand = crate::executor::registry::Subcommand {
    name: "compile",
    // The about text after the flags: a flattened group's own doc would replace it.
    declare: || {
        CompileArgs::augment_args(clap::Command::new("compile"))
            .about(
                "Compile a WebAssembly module ahead of time, for `wasmloop serve \
                 --allow-precompiled`, or signed with --sign-key for servers that `wasmloop serve \
                 --trust-key` the signer",
            )
            .long_about(None)
    },
    run: |matches| compile(&<CompileArgs as clap::FromArgMatches>::from_arg_matches(matches)?),
};

#[derive(Debug, Clone, Args)]
pub struct CompileArgs {
    /// The WebAssembly module to compile.
    pub input: PathBuf,
    /// Where to write the precompiled module.
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub compiler: CompilerArgs,
    /// Set by a server that compiles in a child process: the module goes to stdout, errors
    /// are printed bare, the child dies with the server, and `background` lowers its
    /// priority and compiles on one core.
    #[arg(long, hide = true, value_enum)]
    pub for_server: Option<ChildRole>,
    /// The server's pid (with --for-server): a child whose server is gone gives up.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
    #[command(flatten)]
    pub sign: crate::signing::SignArgs,
}

impl CompileArgs {
    /// The memory cap is the server's business: it leaves the machine code unchanged
    /// (a module compiled under a 1 MiB cap and one under 256 MiB are the same bytes), so
    /// compiling takes no cap.
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            memory_cap: super::DEFAULT_MAX_MEMORY_BYTES,
            codegen: self.compiler.wasm_compiler.final_tier(),
            // Compiling makes no instances.
            instances: 1,
            // Set by what is compiled (`compile_here`).
            concurrent: false,
        }
    }
}

fn compile(args: &CompileArgs) -> anyhow::Result<()> {
    if let Some(role) = args.for_server {
        compile_for_server(args, role);
    }
    let bytes = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let settings = args.engine_settings();
    let written = match &args.sign.sign_key {
        None => {
            let compiled = super::precompile(&bytes, settings)
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.input.display()))?;
            std::fs::write(&args.output, compiled)
        }
        // A zip any runtime can serve (`exec.wasm` is its entry point), with the signed
        // code beside the module: the same folder `-compile` zips.
        Some(key) => {
            let key = crate::signing::read_signing_key(key)?;
            let folder = tempfile::tempdir()?;
            let module = folder.path().join("exec.wasm");
            std::fs::write(&module, &bytes)?;
            super::sign_beside(&module, settings, &key)
                .with_context(|| args.input.display().to_string())?;
            std::fs::write(&args.output, crate::action::pack::zip_folder(folder.path())?)
        }
    };
    written.with_context(|| format!("cannot write {}", args.output.display()))
}

/// A server's compile child: it dies with the server, yields the CPU to it when working in
/// the background, writes the compiled module on stdout and reports a failure as the bare
/// message the server passes on.
fn compile_for_server(args: &CompileArgs, role: ChildRole) -> ! {
    use std::io::Write;
    // The death signal comes when the thread that spawned us ends: an async worker of the
    // server, which lives as long as the server does.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // The server may have gone before the line above took effect.
    let parent = rustix::process::getppid().map(|pid| pid.as_raw_pid() as u32);
    if args.parent_pid.is_some_and(|pid| parent != Some(pid)) {
        std::process::exit(1);
    }
    if role == ChildRole::Background {
        let _ = rustix::process::setpriority_process(None, 10);
    }
    // In the background, one core: the server's activations keep the others.
    let parallel = role == ChildRole::Foreground;
    let compiled = std::fs::read(&args.input)
        .map_err(|e| {
            super::CompileError::fatal(format!("cannot read {}: {e}", args.input.display()))
        })
        .and_then(|bytes| super::compile_here(&bytes, args.engine_settings(), parallel));
    match compiled {
        Ok(compiled) => {
            let mut stdout = std::io::stdout().lock();
            let written = stdout.write_all(&compiled).and_then(|()| stdout.flush());
            std::process::exit(if written.is_ok() { 0 } else { 1 })
        }
        Err(e) => {
            eprint!("{}", e.message);
            let code = if e.not_for_winch {
                super::EXIT_NOT_FOR_WINCH
            } else {
                1
            };
            std::process::exit(code)
        }
    }
}
