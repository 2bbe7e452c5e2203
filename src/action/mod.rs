//! Turns an `/init` upload into a folder holding something startable: decode, detect, unpack, compile.

pub mod decode;
pub mod detect;
mod hook;
pub mod pack;
pub mod unpack;

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use detect::{Kind, WASM_MAGIC};
pub use hook::Compiler;
pub use unpack::Limits;

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The upload could not be unpacked; the text says why.
    #[error("{0}")]
    Unpack(String),
    /// The compiler hook failed; the text is its output, as the platform expects.
    #[error("{0}")]
    Compile(String),
    /// A signed artifact whose code is refused, and which holds no module to compile instead.
    #[error(
        "the artifact's signed code is not loaded ({0}), and it carries no module (exec.wasm) \
         to compile instead: make artifacts with `wasmloop compile --sign-key`, which puts \
         both in"
    )]
    SignedCodeOnly(crate::signing::Refusal),
    /// The thread unpacking the upload panicked or was stopped.
    #[error("unpacking stopped: {0}")]
    Interrupted(tokio::task::JoinError),
    /// The compiler hook was stopped at its limit.
    #[error("{}", crate::config::compile_timed_out(*.0))]
    CompileTimedOut(std::time::Duration),
    /// The action's file (`--action`) cannot be read.
    #[error("cannot read the action {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare the action folder {path}: {source}")]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `/init` found to start. Which backend runs it is the backends' to say (each
/// `Backend::claims` it or not, in the registry's order), not this module's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The entry point file of the action's folder (docs/protocol.md 1.3): `exec`,
    /// `exec.wasm` or `<main>.wasm`, or `exec` as the compiler hook left it.
    File(PathBuf),
    /// A signed artifact's code, verified against a key the runtime trusts.
    Signed(crate::signing::SignedCode),
}

/// An unpacked action: its folder lives (and is removed) with this value. A file run
/// where it lies (`in_place`) has none.
#[derive(Debug)]
pub struct Prepared {
    pub folder: Option<tempfile::TempDir>,
    pub bin_dir: PathBuf,
    pub entry: Entry,
    /// The upload was a zip or tar.gz (its folder may hold data the action reads).
    pub archive: bool,
    /// A raw WebAssembly upload's SHA-256 in hex (the compile cache's key), taken while
    /// the file was written: hashing it afterwards would read a 20 MB component back.
    pub wasm_sha256: Option<String>,
}

pub struct Upload<'a> {
    pub bytes: bytes::Bytes,
    pub main: &'a str,
}

fn folder_error(path: &Path) -> impl FnOnce(std::io::Error) -> PrepareError + '_ {
    move |source| PrepareError::Folder {
        path: path.to_owned(),
        source,
    }
}

/// `prepare` with the caps, compiler hook and folder the configuration names; `env` is the
/// action's environment, which the compiler gets too.
pub async fn prepare_as_configured(
    upload: Upload<'_>,
    env: &[(String, String)],
    config: &crate::config::Config,
    trust: Option<crate::signing::Trust>,
) -> Result<Prepared, PrepareError> {
    let compiler = config
        .action
        .compiler_hook
        .as_deref()
        .map(|program| Compiler {
            program,
            env,
            path: config.action.path_env.as_deref(),
            timeout: config.action.compile_timeout,
        });
    let limits = Limits {
        max_entries: config.limits.max_archive_entries,
        max_bytes: config.limits.max_unpacked_bytes,
    };
    let base = &config.action.dir;
    prepare(upload, base, limits, compiler.as_ref(), trust).await
}

/// A file that runs as it is, run where it lies: a WebAssembly module or component, or an
/// executable (its mode says so) that is a program or a script. Nothing is written, so a
/// built-in action starts on a read-only file system with no writable folder. `None` for
/// anything to unpack or compile (an archive, source), or a file to be made executable:
/// those are prepared as an upload is.
pub fn in_place(file: &Path) -> Result<Option<Prepared>, PrepareError> {
    let unreadable = |source| PrepareError::Read {
        path: file.to_owned(),
        source,
    };
    let meta = fs::metadata(file).map_err(unreadable)?;
    let file = std::path::absolute(file).map_err(unreadable)?;
    let runs = if starts_with(&file, &[WASM_MAGIC]) {
        true
    } else {
        meta.permissions().mode() & 0o111 != 0 && starts_with(&file, &[b"\x7fELF", b"#!"])
    };
    if !meta.is_file() || !runs {
        return Ok(None);
    }
    Ok(Some(Prepared {
        folder: None,
        bin_dir: file
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_owned),
        entry: Entry::File(file),
        archive: false,
        wasm_sha256: None,
    }))
}

/// Unpacks (and, with a compiler, compiles) an upload into a fresh folder under `base`; a
/// signed artifact's code is loaded instead when `trust` vouches for it.
pub async fn prepare(
    upload: Upload<'_>,
    base: &Path,
    limits: Limits,
    compiler: Option<&Compiler<'_>>,
    trust: Option<crate::signing::Trust>,
) -> Result<Prepared, PrepareError> {
    fs::create_dir_all(base).map_err(folder_error(base))?;
    let folder = tempfile::Builder::new()
        .prefix("action-")
        .tempdir_in(base)
        .map_err(folder_error(base))?;
    let src = folder.path().join("src");
    let bin = folder.path().join("bin");
    let unpack_into = src.clone();
    let Upload { bytes, main } = upload;
    let kind = detect::detect(&bytes);
    let archive = matches!(kind, Kind::Zip | Kind::TarGz);
    // A signed artifact's code is checked on the blocking thread too: reading it is most
    // of the work.
    let unpacked = tokio::task::spawn_blocking(move || {
        unpack_upload(&bytes, kind, &unpack_into, limits, trust.as_ref())
    })
    .await
    .map_err(PrepareError::Interrupted)??;
    let wasm_sha256 = unpacked.wasm_sha256;
    let (signed, refused) = match unpacked.signed {
        Some(Ok(code)) => (Some(Entry::Signed(code)), None),
        Some(Err(reason)) => {
            tracing::warn!(%reason, "signed code not used: compiling the module instead");
            (None, Some(reason))
        }
        None => (None, None),
    };

    // WebAssembly, executables and scripts run as they are; anything else is source for
    // the compiler hook (docs/protocol.md 1.4).
    let entry = signed.or_else(|| find_entry(&src, main).filter(runs_as_it_is));
    if let (Some(reason), None) = (refused, &entry) {
        return Err(PrepareError::SignedCodeOnly(reason));
    }
    let entry = match (entry, compiler) {
        (None, Some(compiler)) => {
            fs::create_dir_all(&bin).map_err(folder_error(&bin))?;
            compiler.compile(main, &src, &bin).await?;
            find_entry(&bin, main).unwrap_or(Entry::File(bin.join("exec")))
        }
        (entry, _) => {
            fs::rename(&src, &bin).map_err(folder_error(&bin))?;
            let rebase = |p: PathBuf| bin.join(p.strip_prefix(&src).unwrap_or(&p));
            match entry.or_else(|| find_entry(&bin, main)) {
                Some(Entry::File(p)) => Entry::File(rebase(p)),
                Some(signed @ Entry::Signed(_)) => signed,
                None => Entry::File(bin.join("exec")),
            }
        }
    };
    if let Entry::File(exec) = &entry
        && exec.file_name().is_some_and(|name| name == "exec")
        && exec.is_file()
    {
        // Zip entries often lack the execute bit (archives made by Java tooling).
        fs::set_permissions(exec, fs::Permissions::from_mode(0o755)).map_err(folder_error(exec))?;
    }
    Ok(Prepared {
        folder: Some(folder),
        bin_dir: bin,
        entry,
        archive,
        wasm_sha256,
    })
}

/// What unpacking learnt besides the files.
#[derive(Default)]
struct Unpacked {
    /// A raw WebAssembly upload's SHA-256, in hex.
    wasm_sha256: Option<String>,
    /// A signed artifact's code, or why it may not be loaded.
    signed: Option<Result<crate::signing::SignedCode, crate::signing::Refusal>>,
}

/// Writes the upload out; for raw WebAssembly, also gives its SHA-256 (hashed on a second
/// thread meanwhile: for the Python hello component, a good part of a cached /init).
fn unpack_upload(
    bytes: &[u8],
    kind: Kind,
    src: &Path,
    limits: Limits,
    trust: Option<&crate::signing::Trust>,
) -> Result<Unpacked, PrepareError> {
    fs::create_dir_all(src).map_err(folder_error(src))?;
    let exec = src.join("exec");
    // Its mode is set once its role is known (`prepare`).
    let write = || fs::write(&exec, bytes).map_err(folder_error(&exec));
    match kind {
        Kind::Zip => unpack::unzip(bytes, src, limits, trust),
        Kind::TarGz => unpack::untar_gz(bytes, src, limits).map(|()| Unpacked::default()),
        Kind::Wasm => std::thread::scope(|scope| {
            let hashing = scope.spawn(|| {
                use sha2::Digest;
                crate::hex(&sha2::Sha256::digest(bytes))
            });
            write()?;
            Ok(Unpacked {
                wasm_sha256: hashing.join().ok(),
                signed: None,
            })
        }),
        _ => write().map(|()| Unpacked::default()),
    }
}

/// Whether the file at `path` begins with one of `magic` (no file: no).
pub(crate) fn starts_with(path: &Path, magic: &[&[u8]]) -> bool {
    let mut head = [0u8; 4];
    let Ok(mut file) = fs::File::open(path) else {
        return false;
    };
    let n = file.read(&mut head).unwrap_or(0);
    magic.iter().any(|m| head[..n].starts_with(m))
}

/// Whether an entry point runs as it is, without the compiler hook (docs/protocol.md 1.3,
/// 1.4): a file named as WebAssembly, or WebAssembly, ELF or a script by its first bytes.
fn runs_as_it_is(entry: &Entry) -> bool {
    match entry {
        Entry::File(path) => {
            path.extension().is_some_and(|ext| ext == "wasm")
                || starts_with(path, &[WASM_MAGIC, b"\x7fELF", b"#!"])
        }
        Entry::Signed(_) => true,
    }
}

/// The entry point of a folder: `exec`, then `exec.wasm`, then `<main>.wasm`.
fn find_entry(dir: &Path, main: &str) -> Option<Entry> {
    // `main` comes from the request: only a plain file name may pick a file.
    let plain = !main.is_empty() && !main.contains('/') && main != "." && main != "..";
    let main_wasm = plain.then(|| format!("{main}.wasm"));
    ["exec", "exec.wasm"]
        .into_iter()
        .chain(main_wasm.as_deref())
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .map(Entry::File)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_point_is_found_by_name_and_runs_as_it_is_by_name_or_first_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = |name: &str| Entry::File(d.join(name));
        assert_eq!(find_entry(d, "main"), None);
        fs::write(d.join("niam.wasm"), b"\0asm\x01\0\0\0").unwrap();
        assert_eq!(find_entry(d, "niam"), Some(file("niam.wasm")));
        assert_eq!(
            find_entry(d, "../niam"),
            None,
            "only a plain name picks a file"
        );
        fs::write(d.join("exec.wasm"), b"\x7fELF\x02").unwrap();
        assert_eq!(find_entry(d, "niam"), Some(file("exec.wasm")));
        assert!(
            runs_as_it_is(&file("exec.wasm")),
            "named as WebAssembly, whatever it holds: the backend tells an ELF file there"
        );
        fs::write(d.join("exec"), b"print('hi')").unwrap();
        assert_eq!(find_entry(d, "niam"), Some(file("exec")));
        assert!(
            !runs_as_it_is(&file("exec")),
            "source, for the compiler hook"
        );
        for head in [&b"#!/bin/sh\n"[..], b"\x7fELF\x02", b"\0asm\x01\0\0\0"] {
            fs::write(d.join("exec"), head).unwrap();
            assert!(runs_as_it_is(&file("exec")), "{head:?}");
        }
    }
}
