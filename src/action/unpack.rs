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
    // The zip reader keeps every entry of the central directory, a few times its bytes:
    // an archive declaring more entries than allowed is refused before it is read.
    if declared_zip_entries(bytes).any(|entries| entries > limits.max_entries as u64) {
        return Err(too_many_entries(&limits));
    }
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
    // its code is loaded, its module is not needed either (inflating the Go hello's was a
    // noticeable part of its /init).
    let artifact = signing::is_artifact(&archive);
    let mut code_loaded = false;
    if artifact && let Some(trust) = trust {
        // The code counts against the cap only if it is the code used.
        let mut left = budget.left;
        let opened = signing::open_artifact(bytes, &mut archive, trust, &mut left);
        if opened.is_ok() {
            budget.left = left;
            code_loaded = true;
        }
        unpacked.signed = Some(opened);
    }
    let runtime_only = |name: &str| {
        artifact && (signing::RUNTIME_ENTRIES.contains(&name) || code_loaded && name == "exec.wasm")
    };
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| unpack_error(format!("cannot read zip entry {index}: {e}")))?;
        if runtime_only(entry.name()) {
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

/// The entry counts a zip's end records declare: each end-of-central-directory record in
/// its last 64 KiB (a reader may take any of them), and the zip64 one it points to.
fn declared_zip_entries(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    const END: &[u8] = b"PK\x05\x06";
    const END64: &[u8] = b"PK\x06\x06";
    const END64_LOCATOR: &[u8] = b"PK\x06\x07";
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u64::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let u64_at = |at: usize| {
        let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    };
    // The record is 22 bytes and its comment at most 65535.
    let from = bytes.len().saturating_sub(22 + 65535);
    memchr::memmem::find_iter(&bytes[from..], END).flat_map(move |found| {
        let at = from + found;
        let zip32 = u16_at(at + 10);
        // A zip64 archive says 0xFFFF here; its count is in the record the locator
        // (just before this one) points to.
        let zip64 = at
            .checked_sub(20)
            .filter(|&locator| bytes.get(locator..locator + 4) == Some(END64_LOCATOR))
            .and_then(|locator| u64_at(locator + 8))
            .and_then(|end64| usize::try_from(end64).ok())
            .filter(|&end64| bytes.get(end64..end64 + 4) == Some(END64))
            .and_then(|end64| u64_at(end64 + 32));
        zip32.into_iter().chain(zip64)
    })
}

fn link_target(entry: &tar::Entry<impl Read>, index: usize) -> Result<PathBuf, PrepareError> {
    Ok(entry
        .link_name()
        .map_err(|e| unpack_error(format!("bad tar.gz link {index}: {e}")))?
        .ok_or_else(|| unpack_error(format!("tar.gz link {index} has no target")))?
        .into_owned())
}

/// Longest GNU long name (or link target) a tar.gz may carry: a path, not data.
const LONG_NAME_MAX: u64 = 4096;
/// Largest PAX extended header a tar.gz may carry.
const PAX_HEADER_MAX: u64 = 64 * 1024;

/// Reads every header of a tar.gz before anything is unpacked. The tar reader keeps a
/// long name or a PAX header whole in memory, whatever size it declares (300 KB of gzip
/// can declare hundreds of MiB), and follows sparse maps without end: those are refused
/// here, as is an archive whose files declare more than the cap, before their bytes are read.
fn check_tar_headers(bytes: &[u8], limits: Limits) -> Result<(), PrepareError> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let entries = archive
        .entries()
        .map_err(|e| unpack_error(format!("cannot read tar.gz archive: {e}")))?
        .raw(true);
    let mut declared = 0u64;
    for (index, entry) in entries.enumerate() {
        // Up to three extension headers may come before each entry.
        if index >= limits.max_entries.saturating_mul(4) {
            return Err(too_many_entries(&limits));
        }
        let entry =
            entry.map_err(|e| unpack_error(format!("cannot read tar.gz entry {index}: {e}")))?;
        let kind = entry.header().entry_type();
        let size = entry.header().entry_size().unwrap_or(u64::MAX);
        if (kind.is_gnu_longname() || kind.is_gnu_longlink()) && size > LONG_NAME_MAX {
            return Err(unpack_error(format!(
                "tar.gz entry {index} is a long name of {size} bytes; names longer than \
                 {LONG_NAME_MAX} bytes are refused"
            )));
        }
        if (kind.is_pax_local_extensions() || kind.is_pax_global_extensions())
            && size > PAX_HEADER_MAX
        {
            return Err(unpack_error(format!(
                "tar.gz entry {index} is a PAX header of {size} bytes; headers larger than \
                 {PAX_HEADER_MAX} bytes are refused"
            )));
        }
        if kind.is_gnu_sparse() {
            return Err(unpack_error(format!(
                "tar.gz entry {index} is a sparse file, which an action has no use for: \
                 archive it as a plain file"
            )));
        }
        if kind.is_file() {
            declared = declared.saturating_add(size);
            if declared > limits.max_bytes {
                return Err(Budget { left: 0 }.exceeded());
            }
        }
    }
    Ok(())
}

pub fn untar_gz(bytes: &[u8], dest: &Path, limits: Limits) -> Result<(), PrepareError> {
    check_tar_headers(bytes, limits)?;
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

    fn limits() -> Limits {
        Limits {
            max_entries: 10,
            max_bytes: 1 << 20,
        }
    }

    fn tar_gz(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        build(&mut builder);
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    }

    fn file(builder: &mut tar::Builder<Vec<u8>>, path: &str, size: u64) {
        let mut header = tar::Header::new_gnu();
        header.set_size(size);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, path, std::io::repeat(0).take(size))
            .unwrap();
    }

    #[test]
    fn tar_headers_that_would_be_held_whole_are_refused_before_unpacking() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |bytes: Vec<u8>| {
            untar_gz(&bytes, dir.path(), limits())
                .unwrap_err()
                .to_string()
        };
        // The tar writer makes a GNU long-name entry for a long path.
        let long = format!("{}/x", "d".repeat(5000));
        let message = refused(tar_gz(|b| file(b, &long, 1)));
        assert!(message.contains("a long name of 5"), "{message}");
        // A PAX header larger than any a path needs.
        let message = refused(tar_gz(|b| {
            let mut header = tar::Header::new_ustar();
            header.set_entry_type(tar::EntryType::XHeader);
            header.set_size(100_000);
            b.append_data(&mut header, "pax", std::io::repeat(b'a').take(100_000))
                .unwrap();
        }));
        assert!(message.contains("PAX header of 100000 bytes"), "{message}");
        // Files declaring more than the cap, refused before their bytes are read.
        let message = refused(tar_gz(|b| {
            file(b, "a", 600_000);
            file(b, "b", 600_000);
        }));
        assert!(message.contains("--max-unpacked-bytes"), "{message}");
        assert!(!dir.path().join("a").exists(), "nothing was unpacked");
        // Within the bounds, it unpacks.
        untar_gz(&tar_gz(|b| file(b, "ok", 10)), dir.path(), limits()).unwrap();
        assert_eq!(std::fs::read(dir.path().join("ok")).unwrap().len(), 10);
    }

    #[test]
    fn a_zip_declaring_too_many_entries_is_refused_before_it_is_read() {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        zip.start_file("a", zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.finish().unwrap();
        let mut bytes = out.into_inner();
        assert_eq!(declared_zip_entries(&bytes).collect::<Vec<_>>(), [1]);
        let end = bytes.len() - 22;
        // Entries on this disk, and in all.
        bytes[end + 8..end + 10].copy_from_slice(&60_000u16.to_le_bytes());
        bytes[end + 10..end + 12].copy_from_slice(&60_000u16.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        let Err(refused) = unzip(&bytes, dir.path(), limits(), None) else {
            panic!("a zip declaring 60000 entries was read");
        };
        let message = refused.to_string();
        assert_eq!(
            message,
            "archive has more than 10 entries (see --max-archive-entries)"
        );
    }

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
