//! Signed artifacts: precompiled code loaded for who signed it, compiled from the module
//! inside in every other case.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{Backend, Server, init_binary, read, zip_of};

fn wasmloop(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(args)
        .output()
        .unwrap()
}

fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    let made = wasmloop(&["keygen", dir.to_str().unwrap()]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (dir.join("sign.key"), dir.join("verify.key"))
}

/// `wasmloop compile --sign-key`: the artifact's bytes.
fn artifact(guest: &Path, key: &Path, extra: &[&str]) -> Vec<u8> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut args = vec![
        "compile",
        guest.to_str().unwrap(),
        "--output",
        out.path().to_str().unwrap(),
        "--sign-key",
        key.to_str().unwrap(),
    ];
    args.extend(extra);
    let made = wasmloop(&args);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    read(out.path())
}

/// The artifact's entries, to rebuild it altered.
fn entries(zip: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    (0..archive.len())
        .map(|i| {
            let mut file = archive.by_index(i).unwrap();
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).unwrap();
            (file.name().to_owned(), bytes)
        })
        .collect()
}

const CODE: &str = "exec.cwasm.lz4";
/// Where artifacts before format 4 keep their code, as zstd frames.
const CODE_V3: &str = "exec.cwasm.zst";

/// The slices packed code is made of, one frame each.
const SLICE: usize = 1 << 20;

/// The code `exec.cwasm.lz4` holds, inflated: an LZ4 frame per slice, each one block with
/// the slice's size in its header (15 bytes), then an end mark.
fn inflate(mut packed: &[u8]) -> Vec<u8> {
    let mut code = Vec::new();
    while !packed.is_empty() {
        let size = u64::from_le_bytes(packed[6..14].try_into().unwrap()) as i32;
        let length = u32::from_le_bytes(packed[15..19].try_into().unwrap());
        let block = &packed[19..19 + (length & !(1 << 31)) as usize];
        if length & (1 << 31) != 0 {
            code.extend_from_slice(block);
        } else {
            code.extend(lz4::block::decompress(block, Some(size)).unwrap());
        }
        packed = &packed[19 + block.len() + 4..];
    }
    code
}

/// The artifact with its code (inflated) changed by `change`, and packed again.
fn with_code(zip: &[u8], change: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut altered = entries(zip);
    let packed = altered.iter_mut().find(|(n, _)| n == CODE).unwrap();
    let mut code = inflate(&packed.1);
    assert!(code.starts_with(b"\x7fELF"), "the code is not inflated");
    change(&mut code);
    packed.1 = wasmloop::signing::pack(&code).unwrap();
    rezip(&altered)
}

/// One LZ4 frame of a slice of zeros, whose header says it holds `size` bytes.
fn lz4_zeros(size: u64) -> Vec<u8> {
    let zeros = vec![0u8; SLICE];
    let mode = lz4::block::CompressionMode::HIGHCOMPRESSION(9);
    let block = lz4::block::compress(&zeros, Some(mode), false).unwrap();
    wasmloop::signing::lz4_frame(size, &block, false)
}

/// Forged artifacts: the signature file of a real one (a trusted key, this engine) with
/// code that claims, or inflates to, far more than the upload weighs; `module` keeps the
/// module beside it or not. Each with what its refusal says. The code is packed as each
/// format packs it: LZ4 (4), zstd (3 and 2).
pub fn forged_artifacts(real: &[u8], module: bool) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    use std::io::Write;
    let claimed: usize = 480 << 20;
    let zeros = vec![0u8; SLICE];
    // One frame whose header says 480 MiB (written a slice at a time).
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    encoder.include_contentsize(true).unwrap();
    encoder.set_pledged_src_size(Some(claimed as u64)).unwrap();
    for _ in 0..claimed / SLICE {
        encoder.write_all(&zeros).unwrap();
    }
    let one_frame = encoder.finish().unwrap();
    // 480 frames of a slice of zeros each, a few bytes apiece.
    let many_frames = zstd::bulk::compress(&zeros, 1)
        .unwrap()
        .repeat(claimed / SLICE);
    // The one frame again, its header saying it holds 16 KiB: a size it could pack to.
    let mut lying = one_frame.clone();
    let size_at = lying
        .windows(4)
        .position(|w| w == (claimed as u32).to_le_bytes())
        .expect("the frame header holds its size");
    lying[size_at..size_at + 4].copy_from_slice(&(16u32 << 10).to_le_bytes());
    // The code under `entry`, its signature file of `format` (none: v2).
    let forge = |code: Vec<u8>, entry: &str, format: Option<u32>, deflated: bool| {
        let kept: Vec<(String, Vec<u8>)> = entries(real)
            .into_iter()
            .filter(|(name, _)| module || name != "exec.wasm")
            .map(|(name, bytes)| match name.as_str() {
                CODE => (entry.to_owned(), code.clone()),
                "exec.sig" => {
                    let text = String::from_utf8(bytes).unwrap();
                    assert!(text.contains("\"format\":4,"), "{text}");
                    let format = format.map_or(String::new(), |f| format!("\"format\":{f},"));
                    (name, text.replace("\"format\":4,", &format).into_bytes())
                }
                _ => (name, bytes),
            })
            .collect();
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        for (name, bytes) in &kept {
            let method = if deflated && name == entry {
                zip::CompressionMethod::Deflated
            } else {
                zip::CompressionMethod::Stored
            };
            let options = zip::write::SimpleFileOptions::default().compression_method(method);
            zip.start_file(name.as_str(), options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        out.into_inner()
    };
    let lz4 = |code: Vec<u8>, deflated: bool| forge(code, CODE, Some(4), deflated);
    // An artifact that says it is of format 2, whose signature covers the inflated code,
    // makes the runtime inflate it first: what a forger would choose.
    let v2 = |code: Vec<u8>| forge(code, CODE_V3, None, false);
    vec![
        (
            "one LZ4 frame of 480 MiB",
            lz4(lz4_zeros(claimed as u64), false),
            "each holds one slice of code",
        ),
        (
            "480 LZ4 frames of 1 MiB",
            lz4(lz4_zeros(SLICE as u64).repeat(claimed / SLICE), false),
            "more than code packs",
        ),
        // Signed code is checked before it is inflated (formats 3 and 4).
        (
            "an LZ4 frame whose header lies",
            lz4(lz4_zeros(16 << 10), false),
            "the signature does not match the code",
        ),
        (
            "a zstd frame whose header lies, signed as packed",
            forge(lying.clone(), CODE_V3, Some(3), false),
            "the signature does not match the code",
        ),
        (
            "one zstd frame of 480 MiB",
            v2(one_frame),
            "each holds one slice of code",
        ),
        (
            "480 zstd frames of 1 MiB",
            v2(many_frames),
            "more than code packs",
        ),
        (
            "a zstd frame whose header lies",
            v2(lying),
            "does not inflate to its size",
        ),
        // Packed code deflated in the zip from 100 MiB: a deflate bomb, not code.
        (
            "a deflated code entry of 100 MiB",
            lz4(vec![0u8; 100 << 20], true),
            "exec.cwasm.lz4 inflates to more than twice the whole artifact",
        ),
        (
            "a deflated zstd code entry of 100 MiB",
            forge(vec![0u8; 100 << 20], CODE_V3, Some(3), true),
            "exec.cwasm.zst inflates to more than the whole artifact",
        ),
    ]
}

/// A real signed artifact of the echo guest, and the trusted key's folder.
pub fn real_artifact() -> (Vec<u8>, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let (sign, _) = keygen(keys.path());
    (artifact(&Backend::Wasm.guest("echo"), &sign, &[]), keys)
}

#[test]
fn forged_artifacts_are_refused_before_their_code_is_kept_and_the_module_serves() {
    let (real, keys) = real_artifact();
    let verify = keys.path().join("verify.key");
    for module in [false, true] {
        for (what, upload, says) in forged_artifacts(&real, module) {
            let server = Server::builder()
                .arg("-v")
                .arg("--trust-key")
                .arg(verify.to_str().unwrap())
                .start();
            let reply = server.init(&init_binary(&upload));
            if module {
                // The code is not used: the module inside is compiled instead.
                assert_eq!(reply.status, 200, "{what}: {}", reply.text());
                server.wait_stderr(says);
                server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
            } else {
                reply.assert_error(502, "the artifact's signed code is not loaded");
                reply.assert_error(502, says);
            }
        }
    }
}

fn rezip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let listed: Vec<(&str, &[u8], u32)> = entries
        .iter()
        .map(|(name, bytes)| (name.as_str(), bytes.as_slice(), 0o644))
        .collect();
    zip_of(&listed)
}

/// Initializes `upload` on a server trusting `keys` (verbose, to tell a load from a
/// compile) and checks that the action serves.
fn serve_artifact(upload: &[u8], keys: &[&Path]) -> Server {
    serve_artifact_with(upload, keys, &[])
}

/// As `serve_artifact`, on a server given `args` as well.
fn serve_artifact_with(upload: &[u8], keys: &[&Path], args: &[&str]) -> Server {
    let mut builder = Server::builder().arg("-v").arg("--no-cache");
    for key in keys {
        builder = builder.arg("--trust-key").arg(key.to_str().unwrap());
    }
    for arg in args {
        builder = builder.arg(arg);
    }
    let server = builder.start();
    server
        .init(&init_binary(upload))
        .assert(200, "{\"ok\":true}\n");
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
    server
}

const LOADED: &str = "signed precompiled code loaded";
const NOT_USED: &str = "signed code not used: compiling the module instead";

#[test]
fn a_trusted_signature_loads_the_code_for_modules_and_components() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    for backend in [Backend::Wasm, Backend::Component] {
        let upload = artifact(&backend.guest("echo"), &sign, &[]);
        let server = serve_artifact(&upload, &[&verify]);
        server.wait_stderr(LOADED);
        assert!(
            !server.stderr().contains("module compiled"),
            "{}",
            server.stderr()
        );
    }
}

#[test]
fn wasmloop_run_trusts_a_key_as_serve_does() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let upload = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        upload.path(),
        artifact(&Backend::Wasm.guest("echo"), &sign, &[]),
    )
    .unwrap();
    let path = upload.path().to_str().unwrap();
    let run = |extra: &[&str]| {
        let args = [
            &["run", "-v", path, "--no-cache", "--input", "{\"n\":1}"],
            extra,
        ]
        .concat();
        let ran = wasmloop(&args);
        assert_eq!(String::from_utf8_lossy(&ran.stdout), "{\"n\":1}\n");
        String::from_utf8_lossy(&ran.stderr).into_owned()
    };
    let trusted = run(&["--trust-key", verify.to_str().unwrap()]);
    assert!(trusted.contains(LOADED), "{trusted}");
    assert!(!trusted.contains("module compiled"), "{trusted}");
    let untrusted = run(&[]);
    assert!(untrusted.contains("module compiled"), "{untrusted}");
}

#[test]
fn altered_code_another_key_or_another_engine_is_compiled_from_the_module_instead() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let guest = Backend::Wasm.guest("echo");
    let upload = artifact(&guest, &sign, &[]);

    // One byte of the code changed (and packed again, as another tool would: one frame).
    let altered = with_code(&upload, |code| {
        let middle = code.len() / 2;
        code[middle] ^= 0xff;
    });
    let server = serve_artifact(&altered, &[&verify]);
    server.wait_stderr(NOT_USED);
    server.wait_stderr("does not match the code");

    // The packed code damaged: it does not even inflate.
    let mut damaged = entries(&upload);
    let packed = damaged.iter_mut().find(|(n, _)| n == CODE).unwrap();
    let middle = packed.1.len() / 2;
    packed.1[middle..middle + 64].fill(0xAA);
    let server = serve_artifact(&rezip(&damaged), &[&verify]);
    server.wait_stderr(NOT_USED);

    let other = tempfile::tempdir().unwrap();
    let (_, stranger) = keygen(other.path());
    let server = serve_artifact(&upload, &[&stranger]);
    server.wait_stderr("signed by a key this runtime does not trust");

    // Code made by another compiler is for another engine than this runtime's.
    let winch = artifact(&guest, &sign, &["--wasm-compiler", "winch"]);
    let server = serve_artifact(&winch, &[&verify]);
    server.wait_stderr("the code was compiled for another engine");
}

#[test]
fn without_a_trusted_key_an_artifact_is_a_zip_like_any_other() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, _) = keygen(keys.path());
    let upload = artifact(&Backend::Wasm.guest("echo"), &sign, &[]);
    let server = serve_artifact(&upload, &[]);
    server.wait_stderr("module compiled");
    assert!(!server.stderr().contains(LOADED));
}

#[test]
fn altered_code_without_its_module_says_what_to_do_and_intact_code_needs_none() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let upload = artifact(&Backend::Wasm.guest("echo"), &sign, &[]);
    let without_module = |zip: &[u8]| {
        let kept: Vec<_> = entries(zip)
            .into_iter()
            .filter(|(name, _)| name != "exec.wasm")
            .collect();
        rezip(&kept)
    };
    let altered = with_code(&upload, |code| code.push(0));
    let server = Server::builder()
        .arg("--trust-key")
        .arg(verify.to_str().unwrap())
        .start();
    server
        .init(&init_binary(&without_module(&altered)))
        .assert_error(
            502,
            "the artifact's signed code is not loaded (the signature does not match the code \
         (altered, or signed for other code)), and it carries no module (exec.wasm) to \
         compile instead: make artifacts with `wasmloop compile --sign-key`, which puts both in",
        );
    // The module is only there for runtimes that cannot use the code.
    let server = serve_artifact(&without_module(&upload), &[&verify]);
    server.wait_stderr(LOADED);
}

#[test]
fn the_code_counts_against_the_unpacked_bytes_cap() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let guest = Backend::Wasm.guest("echo");
    let upload = artifact(&guest, &sign, &[]);
    let module = std::fs::metadata(&guest).unwrap().len();
    // Room for the module, not for its code (several times its size).
    let cap = (module + 1024).to_string();
    let server = serve_artifact_with(&upload, &[&verify], &["--max-unpacked-bytes", &cap]);
    server.wait_stderr("unpacks to more bytes than allowed (see --max-unpacked-bytes)");
    server.wait_stderr("module compiled");
}

#[test]
fn a_trusted_key_that_cannot_be_read_stops_the_server_at_once() {
    let server = Server::builder()
        .arg("--trust-key")
        .arg("/nonexistent/verify.key")
        .start();
    assert_eq!(server.wait_exit(), Some(1));
    // The process may be gone before its last words are read from the pipe.
    server.wait_stderr("cannot read the key /nonexistent/verify.key");
}

#[test]
fn keygen_never_replaces_a_key() {
    let keys = tempfile::tempdir().unwrap();
    keygen(keys.path());
    let again = wasmloop(&["keygen", keys.path().to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwritten"));
}

/// The operator's step in an image: `docker run -i IMAGE -compile main < src > action.zip`.
#[test]
fn the_reference_compile_flag_signs_with_the_key_in_its_environment() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["-compile", "main"])
        .env("WASMLOOP_SIGN_KEY", &sign)
        .env("WASMLOOP_NO_CACHE", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let module = read(&Backend::Wasm.guest("echo"));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &module).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names: Vec<String> = entries(&output.stdout)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.iter().any(|n| n == "exec.sig"), "{names:?}");
    let server = serve_artifact(&output.stdout, &[&verify]);
    server.wait_stderr(LOADED);
}

#[test]
fn the_guest_sees_the_artifacts_files_but_not_its_code_signature_or_unused_module() {
    let keys = tempfile::tempdir().unwrap();
    let (sign, verify) = keygen(keys.path());
    let upload = artifact(&Backend::Wasm.guest("reads_action_file"), &sign, &[]);
    let mut with_data = entries(&upload);
    with_data.push(("data.txt".to_owned(), b"bundled".to_vec()));
    // Where artifacts before format 4 kept their code: the runtime's too, whichever it reads.
    with_data.push((CODE_V3.to_owned(), b"older code".to_vec()));
    let upload = rezip(&with_data);
    let sees = |server: &Server, file: &str| {
        let reply = server.run(json!({ "file": file }));
        assert_eq!(reply.status, 200, "{}", reply.text());
        // A binary file is there too, just not text (InvalidData).
        reply.json()["error_kind"] != "NotFound"
    };
    let start = |keys: &[&Path]| {
        let server = Server::builder()
            .arg("-v")
            .args(
                &keys
                    .iter()
                    .flat_map(|k| ["--trust-key", k.to_str().unwrap()])
                    .collect::<Vec<_>>(),
            )
            .start();
        server
            .init(&init_binary(&upload))
            .assert(200, "{\"ok\":true}\n");
        server
    };
    // The code loaded: the module was never unpacked.
    let loaded = start(&[&verify]);
    loaded.wait_stderr(LOADED);
    assert!(sees(&loaded, "data.txt"));
    for hidden in ["exec.wasm", CODE, CODE_V3, "exec.sig"] {
        assert!(!sees(&loaded, hidden), "{hidden} is in /action");
    }
    // Compiled from the module: it is there, the code and signature still are not.
    let compiled = start(&[]);
    assert!(sees(&compiled, "data.txt") && sees(&compiled, "exec.wasm"));
    assert!(!sees(&compiled, CODE) && !sees(&compiled, CODE_V3) && !sees(&compiled, "exec.sig"));
}
