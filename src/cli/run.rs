//! `wasmloop run`: one action run locally, its inputs and what each request line carries, with the groups of `serve`'s flags that apply.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ActivationArgs, NameArgs, UploadArgs, parse_key_value};
use crate::config::{self, Config};
use crate::executor::registry;

/// `wasmloop run`: one local process running one action, with the groups of `serve`'s
/// settings that apply to it. Its `--timeout` has a default: a mistake that makes an
/// action wait forever must not hang a terminal.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("timeout", |arg| arg
    .default_value(config::DEFAULT_RUN_TIMEOUT)
    .help("Stop an activation (and the start-up) that takes longer than this (e.g. 500ms, 2m)")))]
#[command(mut_arg("action_name", |arg| arg
    .help("The action name the request lines name [default: /NAMESPACE/ and the file's \
           name without its extension]")))]
pub struct RunArgs {
    /// The action: a .wasm module, a native executable or script, or a zip / tar.gz.
    pub file: PathBuf,
    /// The action's entry point name (picks `<main>.wasm` in an archive).
    #[arg(long, default_value = config::DEFAULT_MAIN)]
    pub main: String,
    /// An environment variable for the action, as KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// The action's input (its `value`); without it, JSON values are read one per line from stdin.
    #[arg(long)]
    pub input: Option<String>,
    /// Ask the action to acknowledge its start with {"ok":true} on its result channel, as
    /// runtime images with OW_WAIT_FOR_ACK do (a launcher that cannot start then says why).
    #[arg(long)]
    pub wait_for_ack: bool,
    /// The activation id every input's request line carries [default: a fresh 32-hex-digit
    /// id for each, as the platform gives].
    #[arg(long, value_name = "ID")]
    pub activation_id: Option<String>,
    /// The namespace the request lines name.
    #[arg(long, default_value = "_")]
    pub namespace: String,
    #[command(flatten)]
    pub name: NameArgs,
    /// Send each input line as the whole request line, as it is (for testing the raw
    /// contract); otherwise each input is the `value` of a request line that also carries
    /// `activation_id`, `deadline` (now + --timeout), `namespace` and `action_name`.
    #[arg(long, conflicts_with_all = ["activation_id", "action_name"])]
    pub raw: bool,
    #[command(flatten)]
    pub activations: ActivationArgs,
    #[command(flatten)]
    pub upload: UploadArgs,
    #[command(flatten)]
    pub backends: registry::BackendArgs,
}

impl RunArgs {
    /// How long one activation (and the start-up) may take: `--timeout` always has a
    /// value under `run`.
    pub fn timeout(&self) -> Duration {
        self.activations
            .timeout
            .unwrap_or_else(|| config::duration(config::DEFAULT_RUN_TIMEOUT))
    }

    /// What each request line carries besides the input.
    pub fn context(&self) -> crate::local_run::RequestContext {
        let stem = self
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "action".to_owned());
        crate::local_run::RequestContext {
            activation_id: self.activation_id.clone(),
            action_name: self
                .name
                .action_name
                .clone()
                .unwrap_or_else(|| format!("/{}/{stem}", self.namespace)),
            namespace: self.namespace.clone(),
            timeout: self.timeout(),
            raw: self.raw,
        }
    }

    /// The run's settings, `verbose` asking for each input's report; fails on a trusted
    /// key that cannot be read.
    pub fn to_config(&self, verbose: bool) -> anyhow::Result<Config> {
        let mut config = Config::default();
        let timeout = self.timeout();
        config.logs.reports = verbose;
        self.upload.apply(&mut config.action, &mut config.limits);
        self.activations.apply(&mut config, timeout);
        self.backends.read(&mut config.backends, true)?;
        config.action.wait_for_ack = self.wait_for_ack.then(|| "1".to_owned());
        config.action.one_shot = true;
        config.pool.timeout = Some(timeout);
        config.logs.sentinels = false;
        // A person at a terminal, not a platform's log reader.
        config.logs.hints = true;
        Ok(config)
    }
}
