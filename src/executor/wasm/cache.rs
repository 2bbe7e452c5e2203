//! The compile cache: compiled modules kept by wasm digest and engine, in a folder only we write.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::code::Code;
use super::engine::WasmEngine;

/// A compile cache: a folder that only we write (see `CompileCache::at`), holding code by
/// the wasm's digest and the id of the engine it was compiled for.
#[derive(Debug, Clone)]
pub struct CompileCache(PathBuf);

impl CompileCache {
    /// The cache in `dir`, if it can be trusted with code that is loaded unchecked; else
    /// why not, said in one line (every start then compiles).
    pub fn at(dir: &Path, format: crate::logs::LogFormat) -> Option<CompileCache> {
        match usable_cache_dir(dir) {
            Ok(()) => Some(CompileCache(dir.to_owned())),
            Err(why) => {
                crate::logs::runtime_line(
                    format,
                    None,
                    &format!(
                        "wasmloop: the compile cache is off: {} {why}, so each start compiles \
                         the action; give --cache-dir (WASMLOOP_CACHE_DIR) a folder only this \
                         user can write, or --no-cache to go without and say so",
                        dir.display()
                    ),
                );
                None
            }
        }
    }

    /// Where `engine`'s code for the wasm with `digest` is kept: a cache entry is only
    /// ever loaded by an engine that could have written it.
    pub fn entry(&self, engine: &WasmEngine, digest: &WasmDigest) -> PathBuf {
        self.0.join(format!("{}-{}.cwasm", digest.0, engine.id))
    }

    /// The module with `digest` compiled for `engine`, if the cache holds it.
    pub fn load(&self, engine: &WasmEngine, digest: &WasmDigest) -> Option<Code> {
        let path = self.entry(engine, digest);
        let found = path.is_file();
        if let Some(metrics) = &engine.metrics {
            metrics.cache_lookup(found);
        }
        if !found {
            return None;
        }
        // SAFETY: the cache folder holds only what compile children of this program wrote;
        // the file name ties it to these bytes and this engine's settings.
        match unsafe { Code::deserialize_file(&engine.engine, &path) } {
            Ok(module) => {
                tracing::debug!(path = %path.display(), "module loaded from the compile cache");
                Some(module)
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "ignoring a bad cache entry");
                None
            }
        }
    }
}

/// A WebAssembly module's SHA-256, in hex: what names its compiled code in the cache.
/// Taken once per `/init`, so that neither the bytes nor their hashing are kept around for
/// the later, background compile.
#[derive(Debug, Clone)]
pub struct WasmDigest(pub(super) String);

impl WasmDigest {
    /// The digest of a file, read in pieces: a 20 MB component need not be in memory whole.
    pub fn of_file(path: &Path) -> std::io::Result<Self> {
        let mut hasher = Sha256::new();
        std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
        Ok(WasmDigest(crate::hex(&hasher.finalize())))
    }
}

/// Whether `dir` can be trusted to hold compiled code, which is loaded and run unchecked:
/// ours (or root's), and writable by nobody else. Made (private) if missing. The default
/// folder is under the shared temp dir, where anyone could have made it first.
fn usable_cache_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    let me = rustix::process::geteuid().as_raw();
    match std::fs::metadata(dir) {
        Ok(meta)
            if meta.is_dir()
                && (meta.uid() == me || meta.uid() == 0)
                && meta.mode() & 0o022 == 0 =>
        {
            // A read-only file system (a container's root) says so here, not at each store.
            rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
                .map_err(|e| format!("cannot be written ({e})"))
        }
        Ok(meta) if !meta.is_dir() => Err("is no folder".to_owned()),
        Ok(_) => Err("could be written by other users".to_owned()),
        Err(e) => Err(match made {
            Err(made) => format!("cannot be made ({made})"),
            Ok(()) => format!("cannot be read ({e})"),
        }),
    }
}

/// Writes a compiled module into the cache, aside and renamed so that a reader never sees
/// half a file. A cache that cannot be written only costs the next `/init` a compile.
pub(super) fn store_in_cache(compiled: &[u8], path: &Path) -> bool {
    let write = || -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut file, compiled)?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    match write() {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "cannot write the compile cache");
            false
        }
    }
}
