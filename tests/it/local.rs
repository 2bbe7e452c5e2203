//! `wasmloop run`: an action invoked locally, through the same executors, without HTTP.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::support::Backend;

/// `wasmloop run ARGS`, its three standard streams piped.
fn run_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wasmloop"));
    command
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn wasmloop_run(args: &[&str], stdin: &str) -> Output {
    crate::support::output_with_input(
        run_command(args)
            .env_clear()
            .env("WASMLOOP_NO_CACHE", "true"),
        stdin,
    )
}

each_backend! {
    fn run_prints_one_result_per_input(backend: Backend) {
        let guest = backend.guest("counter");
        let output = wasmloop_run(&[guest.to_str().unwrap()], "{}\n\n{\"again\":true}\n");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout), "{\"count\":1}\n{\"count\":2}\n");
    }

    fn run_sends_each_input_in_a_request_line_as_the_platform_does(backend: Backend) {
        let guest = backend.guest("context");
        let path = guest.to_str().unwrap();
        let sent = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let output = wasmloop_run(&[path, "--timeout", "20s"], "{}\n{}\n");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let seen: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<&str> = seen.iter().map(|s| s["activation_id"].as_str().unwrap()).collect();
        assert!(ids.iter().all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())), "{ids:?}");
        assert_ne!(ids[0], ids[1], "each activation its own id");
        let deadline: u128 = seen[0]["deadline"].as_str().unwrap().parse().unwrap();
        assert!((sent + 19_000..sent + 60_000).contains(&deadline), "{deadline} against {sent}");
        assert_eq!(seen[0]["namespace"], "_");
        assert_eq!(seen[0]["action_name"], "/_/context");
        // Fixed, or the input line as it is.
        let fixed = wasmloop_run(&[path, "--activation-id", "abc", "--namespace", "ns"], "{}\n");
        let fixed: serde_json::Value = serde_json::from_slice(&fixed.stdout).unwrap();
        assert_eq!((&fixed["activation_id"], &fixed["action_name"]), (&json!("abc"), &json!("/ns/context")));
        let raw = wasmloop_run(&[path, "--raw"], "{\"value\":{},\"activation_id\":\"r\"}\n");
        let raw: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
        assert_eq!((&raw["activation_id"], &raw["deadline"]), (&json!("r"), &json!(null)));
    }

    fn run_gives_each_input_a_fresh_instance_when_asked(backend: Backend) {
        let guest = backend.guest("counter");
        let path = guest.to_str().unwrap();
        let output = wasmloop_run(&[path, "--max-activations-per-instance", "1"], "{}\n{}\n{}\n");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "{\"count\":1}\n{\"count\":1}\n{\"count\":1}\n"
        );
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
        // Besides the action's logs, only the word that the code was compiled (wasm).
        let stderr = String::from_utf8_lossy(&output.stderr);
        let logs: String = stderr
            .split_inclusive('\n')
            .filter(|line| !line.starts_with("wasmloop: compiled the action with "))
            .collect();
        assert_eq!(logs, err.repeat(2));
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
        assert_eq!(output.status.code(), Some(4), "an action error");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let exited = format!("command exited: exit status: {}", backend.exit_code(3));
        assert!(stderr.contains(&exited), "{stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("XXX_THE_END"));
    }
    /// A script tells from the exit status alone how the inputs fared: an application error
    /// (a result with "error", still printed as the result), an action error, or none.
    fn run_exits_non_zero_for_an_error_answer_and_tells_the_two_kinds_apart(backend: Backend) {
        let echo = backend.guest("echo_quietly");
        let echo = echo.to_str().unwrap();
        let output = wasmloop_run(&[echo], "{\"a\":1}\n[1]\n");
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let output = wasmloop_run(&[echo], "{\"a\":1}\n{\"error\":\"no such user\"}\n{\"b\":2}\n");
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "{\"a\":1}\n{\"error\":\"no such user\"}\n{\"b\":2}\n"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.ends_with(
                "wasmloop: 1 input failed: 1 application error (\"error\" in its result) (exit \
                 status 3)\n"
            ),
            "{stderr}"
        );
        // The runtime's own error (here: a JSON string, no object) outranks it.
        let non_object = backend.guest("non_object");
        let output = wasmloop_run(&[non_object.to_str().unwrap()], "{\"raw\":\"{\\\"error\\\":1}\"}\n{}\n");
        assert_eq!(output.status.code(), Some(4));
        assert_eq!(String::from_utf8_lossy(&output.stdout), "{\"error\":1}\n");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("wasmloop: input line 2: The action did not return a dictionary or array."),
            "{stderr}"
        );
        assert!(
            stderr.ends_with(
                "wasmloop: 2 inputs failed: 1 action error, 1 application error (\"error\" in \
                 its result) (exit status 4)\n"
            ),
            "{stderr}"
        );
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

#[test]
fn run_goes_on_after_a_failing_input_and_fails_at_the_end() {
    let guest = Backend::Native.guest("counter");
    let output = wasmloop_run(
        &[guest.to_str().unwrap()],
        "{}\n{\"exit\":true}\n{}\nnot json\n{}\n",
    );
    assert_eq!(output.status.code(), Some(1));
    // The second input ended the action: the third met a fresh one.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"count\":1}\n{\"count\":1}\n{\"count\":2}\n"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wasmloop: input line 2: command exited: exit status: 3"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wasmloop: input line 4: the input is not JSON"),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "wasmloop: 2 inputs failed: 1 action error, 1 input that is not JSON (exit status 1)\n"
        ),
        "{stderr}"
    );
}

#[test]
fn run_stops_an_activation_at_its_timeout() {
    let guest = Backend::Native.guest("slow");
    let output = wasmloop_run(
        &[
            guest.to_str().unwrap(),
            "--timeout",
            "1s",
            "--input",
            "{\"sleep_ms\":20000}",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the action did not finish within --timeout 1s and was stopped"),
        "{stderr}"
    );
}

#[test]
fn a_guest_stuck_in_its_start_up_is_told_the_flag_run_has() {
    let guest = Backend::Wasm.guest("loops_at_start");
    let output = wasmloop_run(
        &[
            guest.to_str().unwrap(),
            "--timeout",
            "500ms",
            "--input",
            "{}",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "still running its start-up code after 500ms and had not read its input: a guest \
             must reach its first read of stdin within --ack-timeout (is it stuck"
        ),
        "{stderr}"
    );
    // --ack-timeout bounds the start alone, below the activations' --timeout.
    let output = wasmloop_run(
        &[
            guest.to_str().unwrap(),
            "--ack-timeout",
            "300ms",
            "--input",
            "{}",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("start-up code after 300ms"), "{stderr}");
}

#[test]
fn a_result_past_max_result_bytes_names_the_flag_run_takes() {
    let guest = Backend::Wasm.guest("echo");
    let big = format!("{{\"text\":\"{}\"}}", "x".repeat(2000));
    let output = wasmloop_run(
        &[
            guest.to_str().unwrap(),
            "--max-result-bytes",
            "1000",
            "--input",
            &big,
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("longer than 1000 bytes (see --max-result-bytes)"),
        "{stderr}"
    );
    let fits = wasmloop_run(
        &[
            guest.to_str().unwrap(),
            "--max-result-bytes",
            "100000",
            "--input",
            &big,
        ],
        "",
    );
    assert!(
        fits.status.success(),
        "{}",
        String::from_utf8_lossy(&fits.stderr)
    );
}

#[test]
fn run_help_lists_what_applies_to_run() {
    let output = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("--timeout <TIMEOUT>") && help.contains("[default: 30s]"),
        "{help}"
    );
    for server_flag in [
        "--listen",
        "--max-queue",
        "--concurrency",
        "--shutdown-timeout",
    ] {
        assert!(!help.contains(server_flag), "{server_flag} in {help}");
    }
}

#[test]
fn run_ends_quietly_when_its_reader_goes_away() {
    use std::io::BufRead;
    let guest = Backend::Native.guest("counter");
    let mut child = run_command(&[guest.to_str().unwrap()]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for _ in 0..2000 {
            if stdin.write_all(b"{}\n").is_err() {
                break;
            }
        }
    });
    // What `| head -1` does: read one line, then close the pipe.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "{\"count\":1}\n");
    drop(stdout);
    writer.join().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn run_removes_its_action_folder_when_stopped() {
    use std::io::BufRead;
    let temp = tempfile::tempdir().unwrap();
    let guest = Backend::Native.guest("slow");
    let mut child = run_command(&[guest.to_str().unwrap()])
        .env("TMPDIR", temp.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"sleep_ms\":20000}\n").unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("slow: started") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no activation");
    }
    let folders = || {
        std::fs::read_dir(temp.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("action-")
            })
            .count()
    };
    assert_eq!(folders(), 1);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("stopped by a signal"), "{rest}");
    assert_eq!(folders(), 0, "the action's folder is gone");
    drop(stdin);
}

#[test]
fn run_compiles_into_the_cache_once_and_says_so() {
    let cache = tempfile::tempdir().unwrap();
    for backend in [Backend::Wasm, Backend::Component] {
        let guest = backend.guest("echo");
        let run = || {
            let ran = run_command(&[
                guest.to_str().unwrap(),
                "--cache-dir",
                cache.path().to_str().unwrap(),
                "--input",
                "{\"n\":1}",
            ])
            .env_clear()
            .output()
            .unwrap();
            assert_eq!(String::from_utf8_lossy(&ran.stdout), "{\"n\":1}\n");
            String::from_utf8_lossy(&ran.stderr).into_owned()
        };
        // The quick code (a tier-up would never finish in one run), kept.
        let first = run();
        assert!(
            first.contains("wasmloop: compiled the action with winch in ")
                && first.contains(&format!(
                    "kept for the next run in {}",
                    cache.path().display()
                )),
            "{backend:?}: {first}"
        );
        let second = run();
        assert!(!second.contains("compiled"), "{backend:?}: {second}");
    }
}

#[test]
fn run_without_a_cache_compiles_the_quick_code_and_says_nothing_is_kept() {
    let guest = Backend::Wasm.guest("echo");
    let ran = run_command(&[guest.to_str().unwrap(), "--no-cache", "--input", "{}"])
        .env_clear()
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(
        said.contains("compiled the action with winch in ") && said.contains("(no compile cache"),
        "{said}"
    );
}

/// `serve` takes what `run` compiled: one compile cache, one key, so a server's first
/// `/init` of the same module (or component) loads the quick code `run` kept instead of
/// compiling it again, and tiers up from there.
#[test]
fn serve_loads_what_run_compiled() {
    for backend in [Backend::Wasm, Backend::Component] {
        let cache = tempfile::tempdir().unwrap();
        let cache_dir = cache.path().to_str().unwrap();
        let guest = backend.guest("echo");
        let ran = crate::support::output_with_input(
            run_command(&[guest.to_str().unwrap(), "--cache-dir", cache_dir]).env_clear(),
            "{\"a\":1}\n",
        );
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let server = crate::support::Server::builder()
            .args(&["-v", "--cache-dir", cache_dir])
            .start();
        server
            .init(&backend.init_guest("echo"))
            .assert(200, "{\"ok\":true}\n");
        server.wait_stderr("module loaded from the compile cache");
        server.run(json!({"b": 2})).assert(200, "{\"b\":2}\n");
    }
}

#[test]
fn run_takes_the_native_start_probe_and_says_an_action_that_exits_at_start_cannot_start() {
    let guest = Backend::Native.guest("exits_at_start");
    let output = wasmloop_run(&["--start-probe", "500ms", guest.to_str().unwrap()], "{}\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot start action: command exited: exit status: 1"),
        "{stderr}"
    );
}
