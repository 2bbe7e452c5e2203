//! Fuzzes what `/init` does with untrusted bytes: parse the request, decode, detect and
//! unpack, checking that nothing unpacked can reach outside the action's folder.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wasmloop::action::{Limits, decode, detect, unpack};
use wasmloop::protocol::InitRequest;

const LIMITS: Limits = Limits { max_entries: 64, max_bytes: 1 << 20 };

fuzz_target!(|data: &[u8]| {
    // Either a whole /init body, or the upload itself.
    let upload = match serde_json::from_slice::<InitRequest>(data) {
        Ok(request) => {
            let value = request.value.unwrap_or_default();
            let Some(code) = value.code else { return };
            match decode::decode_code(&code, value.binary.unwrap_or(false)) {
                Ok(bytes) => bytes,
                Err(_) => return,
            }
        }
        Err(_) => data.to_vec(),
    };
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("src");
    std::fs::create_dir(&dest).unwrap();
    let unpacked = match detect::detect(&upload) {
        detect::Kind::Zip => unpack::unzip(&upload, &dest, LIMITS),
        detect::Kind::TarGz => unpack::untar_gz(&upload, &dest, LIMITS),
        _ => return,
    };
    let _ = unpacked;
    // Whatever happened, nothing may exist outside `dest`, and every link must resolve
    // inside it (or nowhere).
    let outside: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
    assert_eq!(outside.len(), 1, "something was written beside the action folder");
    check_confined(&dest, &dest.canonicalize().unwrap());
});

fn check_confined(dir: &Path, root: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            if let Ok(target) = path.canonicalize() {
                assert!(target.starts_with(root), "{} escapes to {}", path.display(), target.display());
            }
        } else if meta.is_dir() {
            check_confined(&path, root);
        }
    }
}
