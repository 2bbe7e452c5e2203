//! The smaller subcommands' flags: `wasmloop new`, `wasmloop keygen`, and the reference proxy's `-compile`.

use std::path::PathBuf;

use clap::Args;

use super::RuntimeArgs;

#[derive(Debug, Clone, Args)]
#[command(arg_required_else_help = true)]
pub struct NewArgs {
    /// The action's language.
    #[arg(value_enum, required_unless_present = "list")]
    pub language: Option<crate::new_project::Language>,
    /// The folder to make (it must not exist, or be empty).
    #[arg(required_unless_present = "list")]
    pub dir: Option<PathBuf>,
    /// Say what each template makes, and make nothing.
    #[arg(long)]
    pub list: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeygenArgs {
    /// The folder to write sign.key and verify.key into (an existing key is never replaced).
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct OwCompileArgs {
    /// The action's entry point name, passed to the compiler.
    pub main: String,
    /// The action's environment, as a JSON object (the reference's `-env`).
    #[arg(long)]
    pub env_json: Option<String>,
    /// With --sign-key, a WebAssembly upload's precompiled code is signed into the zip.
    #[command(flatten)]
    pub sign: crate::signing::SignArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}
