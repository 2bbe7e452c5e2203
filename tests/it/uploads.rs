//! Uploads (docs/protocol.md 1.3, 1.4): zip, tar.gz, confinement, caps and the compiler hook.

use std::io::Write;
use std::path::Path;

use serde_json::json;

use crate::support::{Backend, Server, init_binary, init_text, read, zip_of};

const OK: &str = "{\"ok\":true}\n";

fn tar_gz_of(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, bytes, mode) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(*mode);
        // Written raw, so that hostile names like `../x` get into the archive.
        header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_cksum();
        tar.append(&header, *bytes).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// The action folders under the server's action dir.
fn action_folders(server: &Server) -> usize {
    std::fs::read_dir(server.action_dir.path()).unwrap().count()
}

#[test]
fn a_zip_whose_exec_lacks_the_execute_bit_still_runs() {
    let server = Server::in_process();
    let zip = zip_of(&[("exec", &read(&Backend::Native.guest("echo")), 0o644)]);
    server.init(&init_binary(&zip)).assert(200, OK);
    server
        .run(json!({"zip": true}))
        .assert(200, "{\"zip\":true}\n");
}

#[test]
fn a_tar_gz_is_unpacked_and_run() {
    let server = Server::in_process();
    let archive = tar_gz_of(&[
        ("data/readme.txt", b"hi", 0o644),
        ("exec", &read(&Backend::Native.guest("echo")), 0o600),
    ]);
    server.init(&init_binary(&archive)).assert(200, OK);
    server
        .run(json!({"tar": true}))
        .assert(200, "{\"tar\":true}\n");
}

#[test]
fn a_corrupt_zip_is_a_502_not_a_dropped_connection() {
    let server = Server::in_process();
    let mut zip = zip_of(&[("exec", b"#!/bin/sh\n", 0o755)]);
    let len = zip.len();
    zip[len - 22..].fill(0xAA); // the end-of-central-directory record
    let reply = server.init(&init_binary(&zip));
    assert_eq!(reply.status, 502);
    assert!(
        reply.error().starts_with("cannot read zip archive"),
        "{}",
        reply.text()
    );
    let reply = server.init(&init_binary(b"\x1f\x8b\x08 not gzip at all"));
    assert_eq!(reply.status, 502, "{}", reply.text());
    server
        .init(&init_binary(&read(&Backend::Native.guest("echo"))))
        .assert(200, OK);
}

#[test]
fn archive_entries_outside_the_folder_are_refused() {
    let server = Server::in_process();
    let outside = server
        .action_dir
        .path()
        .parent()
        .unwrap()
        .join("zip-slip-victim");
    let hostile: Vec<Vec<u8>> = vec![
        zip_of(&[("../zip-slip-victim", b"pwned", 0o644)]),
        zip_of(&[("a/../../zip-slip-victim", b"pwned", 0o644)]),
        zip_of(&[("/tmp/zip-slip-victim", b"pwned", 0o644)]),
        zip_of(&[("link", b"../../zip-slip-victim", 0o120777)]),
        zip_of(&[("link", b"/etc", 0o120777)]),
        tar_gz_of(&[("../zip-slip-victim", b"pwned", 0o644)]),
    ];
    for archive in hostile {
        let reply = server.init(&init_binary(&archive));
        reply.assert_error(502, "outside the action folder");
    }
    assert!(!outside.exists());
    assert!(!Path::new("/tmp/zip-slip-victim").exists());
    assert_eq!(
        action_folders(&server),
        0,
        "failed inits leave no folder behind"
    );
}

#[test]
fn links_inside_the_folder_are_kept() {
    let server = Server::in_process();
    let zip = zip_of(&[
        ("bin/real", &read(&Backend::Native.guest("echo")), 0o755),
        ("exec", b"bin/real", 0o120777),
    ]);
    server.init(&init_binary(&zip)).assert(200, OK);
    server
        .run(json!({"linked": 1}))
        .assert(200, "{\"linked\":1}\n");
}

#[test]
fn archives_over_the_caps_are_refused() {
    let server = Server::builder()
        .in_process()
        .arg("--max-archive-entries")
        .arg("3")
        .arg("--max-unpacked-bytes")
        .arg("100000")
        .start();
    let many: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("f{i}"), vec![b'x'])).collect();
    let entries: Vec<(&str, &[u8], u32)> = many
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice(), 0o644))
        .collect();
    for archive in [zip_of(&entries), tar_gz_of(&entries)] {
        let reply = server.init(&init_binary(&archive));
        reply.assert_error(502, "more than 3 entries");
    }
    // A small zip that inflates past the byte cap: a decompression bomb in miniature.
    let mut bomb = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut bomb);
    writer
        .start_file("exec", zip::write::SimpleFileOptions::default())
        .unwrap();
    writer.write_all(&vec![0u8; 1_000_000]).unwrap();
    writer.finish().unwrap();
    let bomb = bomb.into_inner();
    assert!(bomb.len() < 10_000);
    let reply = server.init(&init_binary(&bomb));
    reply.assert_error(502, "more bytes than allowed");
}

#[test]
fn each_action_gets_a_fresh_folder() {
    let server = Server::in_process();
    server
        .init(&init_text("print('not executable')"))
        .assert_error(502, "cannot start action: it is neither an executable");
    assert_eq!(action_folders(&server), 0);
    server
        .init(&init_binary(&read(&Backend::Native.guest("echo"))))
        .assert(200, OK);
    assert_eq!(action_folders(&server), 1);
}

fn with_compiler() -> Server {
    let compiler = crate::support::fixture("compiler.sh");
    Server::builder()
        .env("OW_COMPILER", compiler.to_str().unwrap())
        .start()
}

#[test]
fn the_compiler_turns_sources_into_an_action_and_gets_main() {
    let server = with_compiler();
    let mut body = init_text("fn niam() {}");
    body["value"]["main"] = json!("niam");
    server.init(&body).assert(200, OK);
    server.run(json!({})).assert(200, "{\"main\":\"niam\"}\n");
}

#[test]
fn compiler_output_is_the_init_error() {
    let server = with_compiler();
    server
        .init(&init_text("ERROR"))
        .assert(502, "{\"error\":\"syntax error in main\\n\"}\n");
}

#[test]
fn a_compiler_that_outlives_compile_timeout_fails_the_init() {
    let compiler = crate::support::fixture("compiler.sh");
    let server = Server::builder()
        .env("OW_COMPILER", compiler.to_str().unwrap())
        .args(&["--compile-timeout", "300ms"])
        .start();
    let started = std::time::Instant::now();
    server.init(&init_text("SLOW")).assert(
        502,
        "{\"error\":\"compiling took longer than 300ms (see --compile-timeout)\"}\n",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    server
        .run(json!({}))
        .assert(500, "{\"error\":\"no action defined yet\"}\n");
}

#[test]
fn a_compiler_stopped_at_the_inits_deadline_says_which_limit_it_was() {
    let compiler = crate::support::fixture("compiler.sh");
    let server = Server::builder()
        .env("OW_COMPILER", compiler.to_str().unwrap())
        .start();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        + std::time::Duration::from_secs(2);
    let mut body = init_text("SLOW");
    body["value"]["env"] = json!({ "__OW_DEADLINE": deadline.as_millis().to_string() });
    let reply = server.init(&body);
    // The compile's own limit, shortened to what the deadline left, and the deadline.
    reply.assert_error(502, "compiling took longer than 1s");
    reply.assert_error(
        502,
        "(see --compile-timeout); the platform's deadline for this /init (__OW_DEADLINE) left",
    );
}

#[test]
fn a_silent_compiler_that_makes_nothing_cannot_compile() {
    let server = with_compiler();
    server
        .init(&init_text("NOTHING"))
        .assert(502, "{\"error\":\"cannot compile\"}\n");
}

#[test]
fn executables_skip_the_compiler() {
    let server = with_compiler();
    server
        .init(&init_binary(&read(&Backend::Native.guest("echo"))))
        .assert(200, OK);
    server
        .run(json!({"native": 1}))
        .assert(200, "{\"native\":1}\n");
}

#[test]
fn a_daemon_the_compiler_leaves_behind_neither_holds_up_init_nor_survives() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("daemon.pid");
    let compiler = crate::support::fixture("compiler.sh");
    let server = Server::builder()
        .env("OW_COMPILER", compiler.to_str().unwrap())
        .args(&["--compile-timeout", "20s"])
        .start();
    let mut body = init_text("DAEMON");
    body["value"]["env"] = json!({"MARKER": marker});
    let started = std::time::Instant::now();
    server.init(&body).assert(200, OK);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "/init waited {:?} for the daemon's pipes",
        started.elapsed()
    );
    crate::faults::wait_until_gone(crate::faults::marked_pid(&marker));
}
