//! Artifacts made ahead of a server: precompiled modules and signed zips.

use std::path::Path;

use super::compile;
use super::engine::artifact_engine_id;
use super::EngineSettings;

/// Whether the file at `path` is a Linux executable (ELF).
pub fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && crate::action::detect::detect(&magic) == crate::action::detect::Kind::Elf
}

/// Makes `module` (a file) a signed artifact's folder: its precompiled code for the engine
/// `settings` make (`exec.cwasm.lz4`) and the signature (`exec.sig`), written beside it.
pub fn sign_beside(
    module: &Path,
    settings: EngineSettings,
    key: &ed25519_dalek::SigningKey,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    let settings = EngineSettings {
        concurrent: super::code::serves_p3(&bytes),
        ..settings
    };
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
