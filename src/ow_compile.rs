//! The reference proxy's `-compile MAIN`: an upload unpacked and compiled as `/init` would, its folder zipped back (signed, given a key).

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value};

use crate::config::Config;

/// The reference proxy's `-compile MAIN`: `bytes` go through the same unpack and compile
/// steps as an `/init` upload, and the resulting `bin/` folder comes back as a zip.
pub async fn compile_to_zip(
    bytes: Vec<u8>,
    main: &str,
    env_json: Option<&str>,
    config: &Config,
    sign_key: Option<&Path>,
) -> anyhow::Result<Vec<u8>> {
    let env: Map<String, Value> = match env_json {
        Some(text) => serde_json::from_str(text).context("-env is not a JSON object")?,
        None => Map::new(),
    };
    let env = crate::executor::action_env(config, main, crate::protocol::env_pairs(&env));
    let upload = crate::action::Upload {
        bytes: bytes.into(),
        main,
    };
    let registry = crate::executor::registry::Registry::new(config, None);
    let prepared =
        crate::action::prepare_as_configured(upload, &env, config, registry.trust()).await?;
    // The operator's signing step: the code for the engine a runtime of this build serves
    // with, and its signature, beside the module (docs/deploying.md).
    if let Some(key) = sign_key {
        registry.sign(&prepared, &crate::signing::read_signing_key(key)?)?;
    }
    crate::action::pack::zip_folder(&prepared.bin_dir)
}
