//! `wasmloop run`: invoke an action locally through the same executors, without HTTP.

use std::path::Path;

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::config::{Config, WasmCompiler};
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
    // One short process: no point serving quick code first and replacing the instance
    // (and its state) halfway through the inputs.
    if config.wasm_compiler == WasmCompiler::Tiered {
        config.wasm_compiler = WasmCompiler::Cranelift;
    }
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

/// The reference proxy's `-compile MAIN`: `bytes` go through the same unpack and compile
/// steps as an `/init` upload, and the resulting `bin/` folder comes back as a zip.
pub async fn compile_to_zip(
    bytes: Vec<u8>,
    main: &str,
    env_json: Option<&str>,
    config: &Config,
) -> anyhow::Result<Vec<u8>> {
    let env: Map<String, Value> = match env_json {
        Some(text) => serde_json::from_str(text).context("-env is not a JSON object")?,
        None => Map::new(),
    };
    let env = crate::executor::action_env(config, crate::protocol::env_pairs(&env));
    let upload = crate::action::Upload { bytes, main };
    let prepared = crate::action::prepare_as_configured(upload, &env, config).await?;
    zip_folder(&prepared.bin_dir)
}

/// A zip of everything under `dir`, modes and links kept.
fn zip_folder(dir: &Path) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut pending = vec![dir.to_owned()];
    while let Some(folder) = pending.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&folder)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = path.strip_prefix(dir)?.to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path)?;
            let options = zip::write::SimpleFileOptions::default()
                .unix_permissions(meta.permissions().mode() & 0o777);
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path)?;
                zip.add_symlink(name, target.to_string_lossy(), options)?;
            } else if meta.is_dir() {
                zip.add_directory(name, options)?;
                pending.push(path);
            } else {
                zip.start_file(name, options)?;
                std::io::copy(&mut std::fs::File::open(&path)?, &mut zip)?;
            }
        }
    }
    Ok(zip.finish()?.into_inner())
}
