//! `wasmloop run`: invoke an action locally through the same executors, without HTTP.

use std::path::Path;

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::config::Config;
use crate::runtime::Runtime;

/// Where the inputs come from.
pub enum Inputs {
    One(String),
    /// JSON values, one per line.
    Stdin,
}

/// Initializes the action in `file`, then runs it once per input, printing each result
/// line on stdout. Stops at the first failure, which becomes the error.
pub async fn run(
    file: &Path,
    main: &str,
    env: Vec<(String, String)>,
    inputs: Inputs,
    mut config: Config,
) -> anyhow::Result<()> {
    config.sentinels = false;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let env: Map<String, Value> = env
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let init = json!({ "value": {
        "code": base64::engine::general_purpose::STANDARD.encode(&bytes),
        "binary": true,
        "main": main,
        "env": env,
    }});
    let runtime = Runtime::new(config);
    runtime
        .init(init.to_string().as_bytes())
        .await
        .map_err(|e| anyhow::anyhow!("cannot initialize {}: {e}", file.display()))?;
    let action = runtime
        .action()
        .context("the action vanished after /init")?;

    let mut stdout = tokio::io::stdout();
    let mut activate = async |input: &str| -> anyhow::Result<()> {
        let value: Value = serde_json::from_str(input)
            .with_context(|| format!("the input is not JSON: {input}"))?;
        let result = action
            .activate(json!({ "value": value }).to_string().as_bytes())
            .await?;
        stdout.write_all(&result).await?;
        if !result.ends_with(b"\n") {
            stdout.write_all(b"\n").await?;
        }
        stdout.flush().await?;
        Ok(())
    };
    match inputs {
        Inputs::One(input) => activate(&input).await?,
        Inputs::Stdin => {
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut any = false;
            while let Some(line) = lines.next_line().await? {
                if !line.trim().is_empty() {
                    any = true;
                    activate(&line).await?;
                }
            }
            if !any {
                bail!("no input: give --input JSON, or JSON values one per line on stdin");
            }
        }
    }
    runtime.shutdown();
    Ok(())
}
