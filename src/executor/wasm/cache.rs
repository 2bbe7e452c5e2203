//! The compile cache: compiled modules kept by wasm digest and engine, in a folder only we write.

use std::hash::{Hash, Hasher};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::code::Code;
use super::engine::WasmEngine;

impl WasmEngine {
    /// The module with `digest` compiled for this engine, if the compile cache holds it.
    pub fn cached(&self, digest: &WasmDigest, cache_dir: Option<&Path>) -> Option<Code> {
        let path = cache_dir?.join(self.cache_name(digest));
        if !path.is_file() {
            return None;
        }
        // SAFETY: the cache folder holds only what compile children of this program wrote;
        // the file name ties it to these bytes and this engine's settings.
        match unsafe { Code::deserialize_file(&self.engine, &path) } {
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

    /// The wasm's hash and the engine's compatibility hash: a cache entry is only ever
    /// loaded by an engine that could have written it. SHA-256 for both: `DefaultHasher`'s
    /// algorithm may change with a Rust release, and every entry would silently miss.
    pub(super) fn cache_name(&self, digest: &WasmDigest) -> String {
        format!("{}-{}.cwasm", digest.0, engine_id(&self.engine))
    }
}

/// The engine's compatibility hash in hex: code compiled by one engine loads in another
/// with the same id (wasmtime version, compiler, its settings).
pub fn engine_id(engine: &wasmtime::Engine) -> String {
    let mut hasher = StableHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
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

/// Feeds what `Hash` writes into SHA-256, whose output is the same on every build.
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }
}

/// Whether `dir` can be trusted to hold compiled code, which is loaded and run unchecked:
/// ours (or root's), and writable by nobody else. Made (private) if missing. The default
/// folder is under the shared temp dir, where anyone could have made it first.
pub fn usable_cache_dir(dir: &Path) -> bool {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new()
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
            true
        }
        Ok(_) => {
            tracing::debug!(dir = %dir.display(), "not using the compile cache: others could write to it");
            false
        }
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "not using the compile cache");
            false
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stable_hasher_gives_the_same_value_on_every_build() {
        let mut hasher = StableHasher(Sha256::new());
        ("wasmloop", 48u32, [1u8, 2, 3]).hash(&mut hasher);
        // The first 8 bytes of SHA-256 over what `Hash` writes: b"wasmloop\xff", 48 as a
        // little-endian u32, the array's length as a u64, then its bytes (as computed by
        // Python's hashlib).
        assert_eq!(format!("{:016x}", hasher.finish()), "69bf6eaae43fb72a");
    }
}
