//! Standing in for the reference proxy in existing images: its flags, and the Dockerfile.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::{Backend, Server};

fn wasmloop(args: &[&str], envs: &[(&str, &str)], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn dash_version_prints_the_version() {
    let output = wasmloop(&["-version"], &[], b"");
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("wasmloop {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn dash_debug_allows_a_second_init_and_speaks_on_stderr() {
    let server = Server::builder().arg("-debug").start();
    server
        .init(&Backend::Native.init_guest("counter"))
        .assert(200, "{\"ok\":true}\n");
    server.run(json!({})).assert(200, "{\"count\":1}\n");
    server
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    server
        .run(json!({"second": true}))
        .assert(200, "{\"second\":true}\n");
    assert!(!server.stderr().contains("Cannot initialize"));
    server.wait_stderr("DEBUG");
}

fn compiler() -> String {
    crate::support::fixture("compiler.sh")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn dash_compile_turns_a_source_on_stdin_into_a_zip_of_bin_on_stdout() {
    let output = wasmloop(
        &["-compile", "niam", "-env", "{\"A\":\"b\"}"],
        &[("OW_COMPILER", &compiler())],
        b"fn niam() {}",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(output.stdout)).unwrap();
    let mut exec = zip.by_name("exec").expect("the zip holds bin/exec as exec");
    assert_eq!(
        exec.unix_mode().map(|m| m & 0o111),
        Some(0o111),
        "executable"
    );
    let mut script = String::new();
    exec.read_to_string(&mut script).unwrap();
    assert!(script.contains("{\"main\":\"niam\"}"), "{script}");
}

#[test]
fn dash_compile_fails_with_the_compilers_words_on_stderr() {
    let output = wasmloop(
        &["-compile", "main"],
        &[("OW_COMPILER", &compiler())],
        b"ERROR",
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("syntax error in main"));
}

#[test]
fn the_dockerfile_builds_the_binary_this_crate_defines() {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    let build = dockerfile
        .lines()
        .find(|l| l.starts_with("RUN cargo build"))
        .expect("a cargo build step");
    assert!(
        build.contains("--locked") && build.contains("--bin wasmloop"),
        "{build}"
    );
    assert!(dockerfile.contains("EXPOSE 8080"));
    assert!(
        dockerfile.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\", \"/usr/local/bin/wasmloop\"]")
    );
    assert!(dockerfile.contains("CMD [\"serve\"]"));
    assert!(
        dockerfile
            .lines()
            .any(|l| l.starts_with("USER ") && !l.contains("root")),
        "not root"
    );
}
