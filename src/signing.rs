//! Signed artifacts: precompiled code trusted for who signed it (Ed25519), not for who uploaded it.
//!
//! An artifact is a zip of `exec.wasm` (the module or component), `exec.cwasm` (its code,
//! precompiled for one engine) and `exec.sig`. The signature covers the code's SHA-256, the
//! module's SHA-256 and the engine's compatibility hash: a runtime that trusts the key and
//! runs that engine loads the code; any other runtime compiles `exec.wasm`, as for a zip.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

/// The artifact's entries, beside the module.
pub const CODE_ENTRY: &str = "exec.cwasm";
pub const SIGNATURE_ENTRY: &str = "exec.sig";
/// What a signature is over comes after this, so that it means nothing anywhere else.
const CONTEXT: &[u8] = b"wasmloop signed artifact v1\0";

/// `wasmloop keygen DIR`: `DIR/sign.key` (secret, mode 0600) and `DIR/verify.key`.
pub fn keygen(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (sign, verify) = (dir.join("sign.key"), dir.join("verify.key"));
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut seed))
        .context("cannot read /dev/urandom")?;
    let key = SigningKey::from_bytes(&seed);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&sign)
        .with_context(|| {
            format!(
                "cannot create {} (an existing key is never overwritten)",
                sign.display()
            )
        })?;
    writeln!(file, "{SIGN_KEY} {}", crate::hex(&seed))?;
    std::fs::write(
        &verify,
        format!(
            "{VERIFY_KEY} {}\n",
            crate::hex(key.verifying_key().as_bytes())
        ),
    )
    .with_context(|| format!("cannot write {}", verify.display()))?;
    Ok((sign, verify))
}

/// What each key file starts with, so that one given where the other belongs is told apart.
const SIGN_KEY: &str = "wasmloop-sign-key";
const VERIFY_KEY: &str = "wasmloop-verify-key";

pub fn read_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    Ok(SigningKey::from_bytes(&read_key(path, SIGN_KEY)?))
}

pub fn read_verify_key(path: &Path) -> anyhow::Result<VerifyingKey> {
    VerifyingKey::from_bytes(&read_key(path, VERIFY_KEY)?)
        .with_context(|| format!("{} is not an Ed25519 verify key", path.display()))
}

fn read_key(path: &Path, kind: &str) -> anyhow::Result<[u8; 32]> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the key {}", path.display()))?;
    let (found, key) = text.trim().split_once(' ').unwrap_or(("", text.trim()));
    if found != kind && [SIGN_KEY, VERIFY_KEY].contains(&found) {
        bail!(
            "{} is a {}, where a {} belongs: --sign-key takes sign.key, --trust-key \
             verify.key (both made by `wasmloop keygen`)",
            path.display(),
            found.trim_start_matches("wasmloop-").replace('-', " "),
            kind.trim_start_matches("wasmloop-").replace('-', " ")
        );
    }
    let bytes = unhex(key)
        .filter(|b| found == kind && b.len() == 32)
        .with_context(|| {
            format!(
                "{} is not a key made by `wasmloop keygen` (`{kind}` and 64 hex digits)",
                path.display()
            )
        })?;
    Ok(bytes.try_into().expect("32 bytes"))
}

/// Makes `module` (a file) a signed artifact's folder: its precompiled code for the engine
/// `settings` make (`exec.cwasm`) and the signature (`exec.sig`), written beside it.
pub fn sign_beside(
    module: &Path,
    settings: crate::config::EngineSettings,
    key: &SigningKey,
) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    let code = crate::executor::wasm::precompile(&bytes, settings).map_err(anyhow::Error::msg)?;
    let engine = crate::executor::wasm::artifact_engine_id(settings)
        .map_err(|e| anyhow::anyhow!("cannot make the engine: {e}"))?;
    let dir = module.parent().context("the module has no folder")?;
    std::fs::write(dir.join(CODE_ENTRY), &code)?;
    std::fs::write(dir.join(SIGNATURE_ENTRY), sign(key, &bytes, &code, &engine))?;
    Ok(())
}

/// The text of `exec.sig`: which key signed, for which engine, and the signature.
pub fn sign(key: &SigningKey, module: &[u8], code: &[u8], engine: &str) -> String {
    let signature = key.sign(&message(&Sha256::digest(module), code, engine));
    format!(
        "{{\"key\":\"{}\",\"engine\":\"{engine}\",\"signature\":\"{}\"}}\n",
        crate::hex(key.verifying_key().as_bytes()),
        crate::hex(&signature.to_bytes())
    )
}

/// Whether `code` may be loaded: signed by one of `trusted` for `engine`, over `module`
/// (given by its SHA-256 in hex). The error says why not, for the logs.
pub fn verify(
    signature_file: &[u8],
    module_sha256: &str,
    code: &[u8],
    engine: &str,
    trusted: &[VerifyingKey],
) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct File {
        key: String,
        engine: String,
        signature: String,
    }
    let file: File = serde_json::from_slice(signature_file)
        .map_err(|e| format!("{SIGNATURE_ENTRY} is not a signature file: {e}"))?;
    if file.engine != engine {
        return Err(format!(
            "the code was compiled for another engine ({}, this one is {engine}): another \
             wasmtime version or compiler",
            file.engine
        ));
    }
    let key = trusted
        .iter()
        .find(|k| crate::hex(k.as_bytes()) == file.key)
        .ok_or_else(|| format!("signed by a key this runtime does not trust ({})", file.key))?;
    let module = unhex(module_sha256).ok_or("bad module digest")?;
    let signature = unhex(&file.signature)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
        .ok_or("the signature is not 64 bytes of hex")?;
    key.verify(&message(&module, code, engine), &signature)
        .map_err(|_| {
            "the signature does not match the code (altered, or signed for other code)".to_owned()
        })
}

fn message(module_sha256: &[u8], code: &[u8], engine: &str) -> Vec<u8> {
    let mut message = CONTEXT.to_vec();
    message.extend_from_slice(module_sha256);
    message.extend_from_slice(&Sha256::digest(code));
    message.extend_from_slice(engine.as_bytes());
    message
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads every trusted key, at start-up (so that a typo fails loudly, and once).
pub fn read_trusted(paths: &[PathBuf]) -> anyhow::Result<Vec<VerifyingKey>> {
    paths.iter().map(|p| read_verify_key(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_key_code_module_and_engine() {
        let dir = tempfile::tempdir().unwrap();
        let (sign_path, verify_path) = keygen(dir.path()).unwrap();
        let key = read_signing_key(&sign_path).unwrap();
        let trusted = vec![read_verify_key(&verify_path).unwrap()];
        let module_sha = crate::hex(&Sha256::digest(b"module"));
        let file = sign(&key, b"module", b"code", "engine-a");
        assert_eq!(
            verify(file.as_bytes(), &module_sha, b"code", "engine-a", &trusted),
            Ok(())
        );
        let altered = verify(file.as_bytes(), &module_sha, b"c0de", "engine-a", &trusted);
        assert!(altered.unwrap_err().contains("does not match"));
        let other_module = crate::hex(&Sha256::digest(b"other"));
        assert!(
            verify(
                file.as_bytes(),
                &other_module,
                b"code",
                "engine-a",
                &trusted
            )
            .is_err()
        );
        let engine = verify(file.as_bytes(), &module_sha, b"code", "engine-b", &trusted);
        assert!(engine.unwrap_err().contains("another engine"));
        let other = SigningKey::from_bytes(&[7; 32]);
        let stranger = vec![other.verifying_key()];
        let untrusted = verify(file.as_bytes(), &module_sha, b"code", "engine-a", &stranger);
        assert!(untrusted.unwrap_err().contains("does not trust"));
        // One key where the other belongs is told apart.
        let swapped = read_signing_key(&verify_path).unwrap_err().to_string();
        assert!(
            swapped.contains("is a verify key, where a sign key belongs"),
            "{swapped}"
        );
        let swapped = read_verify_key(&sign_path).unwrap_err().to_string();
        assert!(
            swapped.contains("is a sign key, where a verify key belongs"),
            "{swapped}"
        );
        // A key is never overwritten.
        assert!(keygen(dir.path()).is_err());
        let mode = std::fs::metadata(&sign_path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }
}
