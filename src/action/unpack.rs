//! Unpacking untrusted zip and tar.gz uploads into the action's folder, confined and capped.

use std::fs;
use std::io::{self, Cursor, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::{PrepareError, Unpacked};
use crate::signing::{self, Trust};

/// Caps on what one archive may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_entries: usize,
    pub max_bytes: u64,
}

const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;

fn unpack_error(detail: impl std::fmt::Display) -> PrepareError {
    PrepareError::Unpack(detail.to_string())
}

/// A path made only of plain names: no `..`, no root, no prefix. With every entry name and
/// every link target held to this, nothing unpacked can reach outside the folder, even
/// through links made by earlier entries.
fn confined(path: &Path) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => clean.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!clean.as_os_str().is_empty()).then_some(clean)
}

fn entry_path(dest: &Path, name: &Path) -> Result<PathBuf, PrepareError> {
    confined(name).map(|p| dest.join(p)).ok_or_else(|| {
        unpack_error(format!(
            "archive entry {:?} points outside the action folder",
            name
        ))
    })
}

fn make_symlink(dest: &Path, path: &Path, target: &Path) -> Result<(), PrepareError> {
    if confined(target).is_none() {
        return Err(unpack_error(format!(
            "archive link {:?} -> {:?} points outside the action folder",
            path.strip_prefix(dest).unwrap_or(path),
            target
        )));
    }
    create_parent(path)?;
    std::os::unix::fs::symlink(target, path)
        .map_err(|e| unpack_error(format!("cannot create link {}: {e}", path.display())))
}

fn create_parent(path: &Path) -> Result<(), PrepareError> {
    match path.parent() {
        Some(parent) => fs::create_dir_all(parent)
            .map_err(|e| unpack_error(format!("cannot create {}: {e}", parent.display()))),
        None => Ok(()),
    }
}

/// Counts bytes against the archive's budget while copying.
struct Budget {
    left: u64,
}

impl Budget {
    fn copy(&mut self, reader: &mut impl Read, path: &Path) -> Result<(), PrepareError> {
        let mut file = fs::File::create(path)
            .map_err(|e| unpack_error(format!("cannot create {}: {e}", path.display())))?;
        let written = io::copy(&mut reader.take(self.left + 1), &mut file)
            .map_err(|e| unpack_error(format!("cannot unpack {}: {e}", path.display())))?;
        if written > self.left {
            return Err(self.exceeded());
        }
        self.left -= written;
        Ok(())
    }

    fn exceeded(&self) -> PrepareError {
        unpack_error("archive unpacks to more bytes than allowed (see --max-unpacked-bytes)")
    }
}

fn too_many_entries(limits: &Limits) -> PrepareError {
    unpack_error(format!(
        "archive has more than {} entries (see --max-archive-entries)",
        limits.max_entries
    ))
}

/// Only the permission bits: set-user-id and friends are never taken from an upload.
fn set_mode(path: &Path, mode: u32) -> Result<(), PrepareError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| unpack_error(format!("cannot set mode on {}: {e}", path.display())))
}

/// Unzips into `dest`; a signed artifact's code is checked against `trust` instead.
pub(super) fn unzip(
    bytes: &[u8],
    dest: &Path,
    limits: Limits,
    trust: Option<&Trust>,
) -> Result<Unpacked, PrepareError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| unpack_error(format!("cannot read zip archive: {e}")))?;
    if archive.len() > limits.max_entries {
        return Err(too_many_entries(&limits));
    }
    let mut budget = Budget {
        left: limits.max_bytes,
    };
    let mut unpacked = Unpacked::default();
    // A signed artifact's code and signature are for the runtime, not the guest; and once
    // its code is loaded, its module is not needed either (inflating the Go hello's took
    // 7 of the 58 ms of its /init).
    let mut runtime_only: &[&str] = &[];
    if signing::is_artifact(&archive) {
        runtime_only = &[signing::CODE_ENTRY, signing::SIGNATURE_ENTRY];
        if let Some(trust) = trust {
            // The code counts against the cap only if it is the code used.
            let mut left = budget.left;
            let opened = signing::open_artifact(bytes, &mut archive, trust, &mut left);
            if opened.is_ok() {
                budget.left = left;
                runtime_only = &[signing::CODE_ENTRY, signing::SIGNATURE_ENTRY, "exec.wasm"];
            }
            unpacked.signed = Some(opened);
        }
    }
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| unpack_error(format!("cannot read zip entry {index}: {e}")))?;
        if runtime_only.contains(&entry.name()) {
            continue;
        }
        let path = entry_path(dest, Path::new(entry.name()))?;
        let mode = entry.unix_mode();
        if entry.is_dir() {
            fs::create_dir_all(&path)
                .map_err(|e| unpack_error(format!("cannot create {}: {e}", path.display())))?;
        } else if mode.is_some_and(|m| m & S_IFMT == S_IFLNK) {
            let mut target = String::new();
            (&mut entry)
                .take(4096)
                .read_to_string(&mut target)
                .map_err(|e| unpack_error(format!("cannot read zip link {index}: {e}")))?;
            make_symlink(dest, &path, Path::new(&target))?;
        } else {
            create_parent(&path)?;
            budget.copy(&mut entry, &path)?;
            if let Some(mode) = mode {
                set_mode(&path, mode)?;
            }
        }
    }
    Ok(unpacked)
}

fn link_target(entry: &tar::Entry<impl Read>, index: usize) -> Result<PathBuf, PrepareError> {
    Ok(entry
        .link_name()
        .map_err(|e| unpack_error(format!("bad tar.gz link {index}: {e}")))?
        .ok_or_else(|| unpack_error(format!("tar.gz link {index} has no target")))?
        .into_owned())
}

pub fn untar_gz(bytes: &[u8], dest: &Path, limits: Limits) -> Result<(), PrepareError> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let entries = archive
        .entries()
        .map_err(|e| unpack_error(format!("cannot read tar.gz archive: {e}")))?;
    let mut budget = Budget {
        left: limits.max_bytes,
    };
    for (index, entry) in entries.enumerate() {
        if index >= limits.max_entries {
            return Err(too_many_entries(&limits));
        }
        let mut entry =
            entry.map_err(|e| unpack_error(format!("cannot read tar.gz entry {index}: {e}")))?;
        let name = entry
            .path()
            .map_err(|e| unpack_error(format!("bad tar.gz entry name {index}: {e}")))?
            .into_owned();
        let path = entry_path(dest, &name)?;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => fs::create_dir_all(&path)
                .map_err(|e| unpack_error(format!("cannot create {}: {e}", path.display())))?,
            tar::EntryType::Symlink => {
                let target = link_target(&entry, index)?;
                make_symlink(dest, &path, &target)?
            }
            tar::EntryType::Link => {
                // A hard link names another entry of the archive; copy it instead of linking.
                let target = link_target(&entry, index)?;
                let source = entry_path(dest, &target)?;
                create_parent(&path)?;
                let mut file = fs::File::open(&source)
                    .map_err(|e| unpack_error(format!("cannot link {}: {e}", name.display())))?;
                budget.copy(&mut file, &path)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                create_parent(&path)?;
                let mode = entry.header().mode().ok();
                budget.copy(&mut entry, &path)?;
                if let Some(mode) = mode {
                    set_mode(&path, mode)?;
                }
            }
            // Devices, fifos and metadata records have no place in an action.
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_confined() {
        assert_eq!(confined(Path::new("a/b")), Some(PathBuf::from("a/b")));
        assert_eq!(confined(Path::new("./a")), Some(PathBuf::from("a")));
        assert_eq!(confined(Path::new("a/../b")), None);
        assert_eq!(confined(Path::new("../a")), None);
        assert_eq!(confined(Path::new("/etc/passwd")), None);
        assert_eq!(confined(Path::new(".")), None);
    }
}
