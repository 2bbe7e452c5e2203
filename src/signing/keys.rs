//! The signer's keys: made by `wasmloop keygen`, read from their files by `compile --sign-key` and `serve --trust-key`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ed25519_dalek::{SigningKey, VerifyingKey};

use super::unhex;

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

/// Why a key file could not be read, and for a refusal, what to change.
pub(super) fn unreadable_key(path: &Path, error: &std::io::Error) -> String {
    let mut message = format!("cannot read the key {}: {error}", path.display());
    if error.kind() == std::io::ErrorKind::PermissionDenied {
        // `keygen` makes sign.key readable by its owner only, and the image runs as uid
        // 10001: a key mounted from the host belongs to someone else there.
        message.push_str(&format!(
            ". It must be readable by the user wasmloop runs as (uid {}); from the image, \
             run it as the key's owner: `docker run --user \"$(id -u)\" ...`",
            rustix::process::getuid().as_raw()
        ));
    }
    message
}

pub(super) fn read_key(path: &Path, kind: &str) -> anyhow::Result<[u8; 32]> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| anyhow::Error::msg(unreadable_key(path, &error)))?;
    let (found, key) = text.trim().split_once(' ').unwrap_or(("", text.trim()));
    if found != kind && [SIGN_KEY, VERIFY_KEY].contains(&found) {
        bail!(
            "{} is a {}, where a {} belongs: sign.key goes to `wasmloop compile --sign-key`, \
             verify.key to `wasmloop serve --trust-key` or `wasmloop run --trust-key` (both \
             made by `wasmloop keygen`)",
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

/// Reads every trusted key, at start-up (so that a typo fails loudly, and once).
pub fn read_trusted(paths: &[PathBuf]) -> anyhow::Result<Vec<VerifyingKey>> {
    paths.iter().map(|p| read_verify_key(p)).collect()
}

/// Signing precompiled code into an artifact: the same flag for `compile` and `-compile`.
#[derive(Debug, Clone, clap::Args)]
pub struct SignArgs {
    /// Write a signed artifact: a zip of the module, its precompiled code and a signature
    /// with this key (from `wasmloop keygen`). Runtimes that --trust-key its verify key
    /// load the code without compiling; others compile the module inside.
    #[arg(long, env = "WASMLOOP_SIGN_KEY", value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
}
