//! An action's folder packed back into a zip: what `-compile` and `wasmloop compile --sign-key` write.

use std::path::Path;

/// A zip of everything under `dir`, modes and links kept.
pub fn zip_folder(dir: &Path) -> anyhow::Result<Vec<u8>> {
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
            let mut options = zip::write::SimpleFileOptions::default()
                .unix_permissions(meta.permissions().mode() & 0o777);
            if name == crate::signing::CODE_ENTRY {
                // Compressed already, and read in place by the runtime.
                options = options.compression_method(zip::CompressionMethod::Stored);
            }
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
