//! `wasmloop run`: an action invoked locally, through the same executors, without HTTP.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::support::Backend;

fn wasmloop_run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("run")
        .args(args)
        .env_clear()
        .env("WASMLOOP_NO_CACHE", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

both_backends! {
    fn run_prints_one_result_per_input(backend: Backend) {
        let guest = backend.guest("counter");
        let output = wasmloop_run(&[guest.to_str().unwrap()], "{}\n\n{\"again\":true}\n");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout), "{\"count\":1}\n{\"count\":2}\n");
    }

    fn run_passes_the_actions_logs_through_and_writes_no_sentinel(backend: Backend) {
        let guest = backend.guest("echo");
        let output = wasmloop_run(&[guest.to_str().unwrap()], "{\"a\":1}\n{\"b\":2}\n");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        // A wasm guest's stdout carries its results: both its log lines come out on stderr.
        let (out, err) = backend.split_logs("hello stdout\n", "hello stderr\n");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("{out}{{\"a\":1}}\n{out}{{\"b\":2}}\n")
        );
        assert_eq!(String::from_utf8_lossy(&output.stderr), err.repeat(2));
    }

    fn run_passes_the_input_flag_and_env(backend: Backend) {
        let guest = backend.guest("init_env");
        let output = wasmloop_run(
            &[guest.to_str().unwrap(), "--env", "SOME_VAR=a=b", "--input", "{}"],
            "",
        );
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "{\"ANOTHER_VAR\":null,\"PATH\":null,\"SOME_VAR\":\"a=b\"}\n"
        );
    }

    fn run_fails_with_the_error_on_stderr(backend: Backend) {
        let guest = backend.guest("exits_when_asked");
        let output = wasmloop_run(&[guest.to_str().unwrap(), "--input", "{\"exit\":3}"], "");
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("command exited: exit status: 3"), "{stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("XXX_THE_END"));
    }
}

#[test]
fn run_refuses_input_that_is_not_json_and_actions_that_do_not_start() {
    let guest = Backend::Wasm.guest("echo");
    let output = wasmloop_run(&[guest.to_str().unwrap(), "--input", "{nope"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("the input is not JSON"));

    let guest = Backend::Wasm.guest("exits_at_start");
    let output = wasmloop_run(&[guest.to_str().unwrap(), "--input", "{}"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot initialize"));
}
