//! An action author's usual mistakes: each gets a message saying what to change, at once,
//! instead of a hang or a message naming the wrong cause.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Backend, SENTINEL, Server, fixture, init_binary, init_text, read, zip_of};

const OK: &str = "{\"ok\":true}\n";

/// Fails the test if the activation took as long as a deadline would: the point is that
/// the mistake is told at once, not when some limit runs out.
fn promptly(run: impl FnOnce() -> crate::support::Reply) -> crate::support::Reply {
    let started = Instant::now();
    let reply = run();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}: {}",
        started.elapsed(),
        reply.text()
    );
    reply
}

/// A server that explains answers that are not objects (`--hints`; off by default, where
/// OpenWhisk's tests expect stderr to hold only the action's lines).
fn hinting() -> Server {
    Server::builder().arg("--hints").start()
}

#[test]
fn a_native_result_printed_on_stdout_is_pointed_out() {
    let server = Server::with_guest(Backend::Native, "result_on_stdout");
    let reply = promptly(|| server.run(json!({})));
    reply.assert_error(
        502,
        "no result arrived on fd 3, and the action is waiting for its next input; it wrote \
         this JSON line on stdout: `{\"count\":1}`. A native action writes its result on fd 3",
    );
    // The line still reached the logs, before the sentinel.
    server.wait_sentinels(1);
    assert!(
        server.stdout().starts_with("{\"count\":1}\n"),
        "{}",
        server.stdout()
    );
    // The action was out of step: the next activation gets a fresh one, and the same answer.
    promptly(|| server.run(json!({}))).assert_error(502, "no result arrived on fd 3");
}

each_backend! {
    /// Without --hints, in text mode: a line that is no JSON at all gets one short line in
    /// the logs (what came, cut, and where logs go), while a JSON value that is not an object
    /// (OpenWhisk's canonical case) leaves the streams to the action.
    fn a_line_that_is_not_json_is_told_in_one_short_line_by_default(backend: Backend) {
        let server = Server::with_guest(backend, "non_object");
        server.run(json!({"raw": "debug: about to answer"})).assert(502, NOT_AN_OBJECT);
        server.run(json!({"raw": "y".repeat(500)})).assert(502, NOT_AN_OBJECT);
        server.run(json!({"raw": "\"hello\""})).assert(502, NOT_AN_OBJECT);
        server.wait_sentinels(3);
        let told = |what: &str| {
            format!(
                "wasmloop: the action's answer is not JSON: `{what}`. Write only results on the \
                 result channel (stdout in WebAssembly, fd 3 in a native action) and logs on \
                 stderr (--hints says how in each language)\n{SENTINEL}\n"
            )
        };
        let cut = format!("{}…", "y".repeat(80));
        let expected = told("debug: about to answer") + &told(&cut) + SENTINEL + "\n";
        assert_eq!(server.stderr(), expected);
        assert_eq!(server.stdout(), format!("{SENTINEL}\n").repeat(3));
    }

    fn a_result_that_is_not_an_object_is_said_with_what_it_was_given_hints(backend: Backend) {
        let server = hinting().initialized_with(backend, "non_object");
        let cases = [
            ("\"hello\"", "is a JSON string, not an object or array: `\"hello\"`"),
            ("42", "is a JSON number, not an object or array: `42`"),
            ("null", "is JSON null, not an object or array: `null`"),
        ];
        for (n, (raw, said)) in cases.into_iter().enumerate() {
            // The body is the contract's, word for word; the logs say what came.
            server.run(json!({"raw": raw})).assert(502, NOT_AN_OBJECT);
            server.wait_sentinels(n + 1);
            let stderr = server.stderr();
            assert!(stderr.contains(&format!("wasmloop: the action's answer {said}")), "{stderr}");
        }
        server.run(json!({"raw": "\u{feff}{\"a\":1}"})).assert(502, NOT_AN_OBJECT);
        server.wait_sentinels(4);
        let stderr = server.stderr();
        assert!(
            stderr.contains(
                "wasmloop: the action's answer starts with a byte-order mark (\\ufeff), which \
                 JSON does not allow, so it was not taken as its result: `\\ufeff{\"a\":1}`"
            ),
            "{stderr}"
        );
        assert!(!stderr.contains("write logs on stderr"), "not blamed on a log line: {stderr}");
        server.run(json!({"raw": "{\"fine\":1}"})).assert(200, "{\"fine\":1}\n");
    }

    fn a_result_without_its_newline_is_pointed_out(backend: Backend) {
        let server = Server::with_guest(backend, "no_newline");
        let channel = backend.result_channel();
        promptly(|| server.run(json!({}))).assert_error(
            502,
            &format!(
                "the action wrote 11 bytes on {channel} without a newline (`{{\"count\":1}}`) \
                 and is waiting for its next input: end each result with a newline, and flush it"
            ),
        );
        server.wait_sentinels(1);
    }

    fn a_result_never_flushed_is_pointed_out(backend: Backend) {
        let server = Server::with_guest(backend, "never_flushes");
        let channel = backend.result_channel();
        promptly(|| server.run(json!({}))).assert_error(
            502,
            &format!(
                "no result arrived on {channel}: the action read its request and is waiting for \
                 more input without having answered"
            ),
        );
    }

    fn reading_the_input_to_its_end_is_pointed_out(backend: Backend) {
        let server = Server::with_guest(backend, "reads_to_eof");
        let reply = promptly(|| server.run(json!({})));
        reply.assert_error(502, "is waiting for more input without having answered");
        reply.assert_error(502, "do not read stdin to its end");
        // Still so on the next activation, with a fresh instance or child.
        promptly(|| server.run(json!({}))).assert_error(502, "do not read stdin to its end");
        server.wait_sentinels(2);
    }

    fn output_after_the_result_goes_to_the_logs(backend: Backend) {
        let server = Server::with_guest(backend, "answers_twice");
        server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
        server.run(json!({"n": 2})).assert(200, "{\"n\":2}\n");
        server.wait_stderr(
            "wasmloop: dropped output the action wrote after its result: `{\"stray\":{\"n\":1}}`",
        );
    }

    fn a_request_queued_past_its_deadline_says_it_never_started(backend: Backend) {
        let server = Server::with_guest(backend, "slow");
        let busy = {
            let addr = server.addr;
            std::thread::spawn(move || {
                let body = json!({"value": {"sleep_ms": 3000}});
                crate::support::http(addr, "POST", "/run", body.to_string().as_bytes())
            })
        };
        server.wait_stderr("slow: started");
        let in_ms = |ms: u128| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                + ms
        };
        let body = json!({"value": {}, "deadline": in_ms(300).to_string()});
        let reply = server.post("/run", body.to_string().as_bytes());
        // Said as the time it had, not as the deadline's epoch milliseconds.
        reply.assert_error(504, "the action did not start within its deadline (");
        reply.assert_error(504, "ms after it arrived): it waited ");
        reply.assert_error(504, " ms for a busy instance and was never started (see --concurrency)");
        assert_eq!(busy.join().unwrap().status, 200, "the busy one was left alone");

        // Running past it: the time it had, in brackets, then what happened.
        let body = json!({"value": {"sleep_ms": 3000}, "deadline": in_ms(300).to_string()});
        let reply = server.post("/run", body.to_string().as_bytes());
        let said = reply.error();
        assert_eq!(reply.status, 504, "{said}");
        let had = said
            .strip_prefix("the action did not finish within its deadline (")
            .and_then(|rest| rest.strip_suffix(" after it arrived) and was stopped"))
            .unwrap_or_else(|| panic!("{said}"));
        assert!(had.ends_with("ms") && had.len() <= 5, "{said}");
    }
}

#[test]
fn a_wasm_log_line_on_stdout_keeps_the_fixed_answer_and_is_shown_in_the_logs() {
    let server = hinting().initialized_with(Backend::Wasm, "logs_on_stdout");
    server.run(json!({"a": 1})).assert(
        502,
        "{\"error\":\"The action did not return a dictionary or array.\"}\n",
    );
    server.wait_sentinels(1);
    let stderr = server.stderr();
    assert!(
        stderr.contains(
            "wasmloop: the action's answer is not JSON, so it was not taken as its result: \
             `working on {\"a\":1}`. Only result lines go on the result channel"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("dropped output"),
        "the result is not called stray: {stderr}"
    );
    // Shown before the activation's sentinel, with its logs.
    assert!(stderr.find("working on").unwrap() < stderr.find(crate::support::SENTINEL).unwrap());
}

#[test]
fn a_guest_stuck_in_its_start_up_fails_init_within_the_ack_timeout() {
    let server = Server::builder().args(&["--ack-timeout", "500ms"]).start();
    let started = Instant::now();
    let reply = server.init(&Backend::Wasm.init_guest("loops_at_start"));
    reply.assert_error(
        502,
        "cannot start action: the guest was still running its start-up code after 500ms and \
         had not read its input: a guest must reach its first read of stdin within --ack-timeout",
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn an_archive_without_entry_point_says_what_it_looked_for_and_found() {
    let server = Server::start();
    let zip = zip_of(&[
        ("main.py", b"def main(a): return a\n", 0o644),
        ("lib/x.py", b"", 0o644),
    ]);
    let mut body = init_binary(&zip);
    body["value"]["main"] = json!("niam");
    server.init(&body).assert_error(
        502,
        "cannot start action: the upload has no entry point: looked for \
         `exec`, `exec.wasm` and `niam.wasm`, and it holds lib/, main.py. Name the executable",
    );
    // And the logs say so too.
    server.wait_stderr("wasmloop: cannot start the action: the upload has no entry point");
}

/// The OpenWhisk CLI sends every file but a .zip, .jar or .balx as text: base64 text of a
/// module is decoded as such, while base64 of an executable is pointed out.
#[test]
fn base64_code_sent_without_binary_true_is_decoded_or_pointed_out() {
    let server = Server::start();
    let mut body = init_binary(&read(&Backend::Wasm.guest("echo")));
    body["value"]["binary"] = json!(false);
    server.init(&body).assert(200, "{\"ok\":true}\n");
    server
        .run(json!({"as": "text"}))
        .assert(200, "{\"as\":\"text\"}\n");

    let server = Server::start();
    let mut body = init_binary(&read(&Backend::Native.guest("echo")));
    body["value"]["binary"] = json!(false);
    server.init(&body).assert_error(
        502,
        "cannot start action: the code is base64 text (of an ELF executable), \
         taken as it is because the /init request does not say \"binary\": true",
    );
}

#[test]
fn spawn_failures_name_their_cause() {
    let cases = [
        (
            "#!/usr/bin/python9\nprint(1)\n",
            "its interpreter `/usr/bin/python9` (named on its #! line) does not exist here",
        ),
        (
            // The interpreter exists but cannot be executed: EACCES.
            "#!/etc/passwd\n",
            "permission denied running `exec`",
        ),
        (
            "#!/bin/sh\nexec /no/such/program\n",
            "exit status: 127 (127: a program it runs, or a shared library it needs, was not found",
        ),
    ];
    for (script, part) in cases {
        let server = Server::builder().args(&["--start-probe", "1s"]).start();
        server.init(&init_text(script)).assert_error(502, part);
    }
}

#[test]
fn growing_past_the_memory_cap_names_the_cap_and_the_flag() {
    let server = Server::builder()
        .args(&["--max-memory-bytes", "67108864"])
        .start();
    server.grow_wasm_guest_by(100).assert_error(
        400,
        "past its cap of 67108864 bytes (64 MiB): raise --max-memory-bytes",
    );
}

/// The Python example's launcher and a `main.py`, zipped as an action.
fn python_action(main_py: &str) -> serde_json::Value {
    let launcher = read(&fixture("../../native-examples/python/launcher.py"));
    init_binary(&zip_of(&[
        ("exec", &launcher, 0o755),
        ("main.py", main_py.as_bytes(), 0o644),
    ]))
}

#[test]
fn a_python_action_that_cannot_load_fails_init_with_the_errors_last_line() {
    let cases = [
        ("def main(args)\n    return args\n", "SyntaxError: "),
        (
            "import no_such_module\n",
            "ModuleNotFoundError: No module named 'no_such_module'",
        ),
        (
            "def niam(args):\n    return args\n",
            "AttributeError: main.py has no function 'main'",
        ),
    ];
    for (main_py, part) in cases {
        let server = Server::builder().env("OW_WAIT_FOR_ACK", "1").start();
        server.init(&python_action(main_py)).assert_error(
            502,
            &format!("cannot start action: The action did not initialize properly. {part}"),
        );
        // Without ack mode, /init waits for the launcher to read its first request: its
        // failure shows there too.
        let server = Server::start();
        server.init(&python_action(main_py)).assert_error(
            502,
            &format!("cannot start action: command exited: exit status: 1; it said: {part}"),
        );
        server.wait_stderr("Traceback (most recent call last)");
    }
}

#[test]
fn a_python_action_runs_the_function_init_names() {
    let server = Server::builder().env("OW_WAIT_FOR_ACK", "1").start();
    let mut body = python_action("def niam(args):\n    return {\"niam\": args}\n");
    body["value"]["main"] = json!("niam");
    server.init(&body).assert(200, OK);
    server
        .run(json!({"x": 1}))
        .assert(200, "{\"niam\":{\"x\":1}}\n");
}

/// What both refusals of a Linux executable named as WebAssembly say.
const ELF_NAMED_WASM: &str = "is a Linux executable (ELF), not WebAssembly: build it for \
                              WebAssembly (`cargo build --target wasm32-wasip1`";

#[test]
fn a_linux_executable_named_exec_wasm_in_a_zip_is_refused_with_how_to_build_for_wasm() {
    let native = read(&Backend::Native.guest("echo"));
    let server = Server::in_process();
    let reply = server.init(&init_binary(&zip_of(&[("exec.wasm", &native, 0o755)])));
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(
        reply
            .error()
            .contains(&format!("exec.wasm {ELF_NAMED_WASM}")),
        "{}",
        reply.text()
    );
}

#[test]
fn wasmloop_run_never_runs_a_linux_executable_named_wasm_natively() {
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("hello.wasm");
    std::fs::copy(Backend::Native.guest("echo"), &named).unwrap();
    let ran = std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("run")
        .arg(&named)
        .args(["--input", "{}"])
        .output()
        .unwrap();
    assert!(!ran.status.success());
    assert!(
        ran.stdout.is_empty(),
        "it ran: {}",
        String::from_utf8_lossy(&ran.stdout)
    );
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(
        said.contains(&format!("hello.wasm {ELF_NAMED_WASM}")),
        "{said}"
    );
}

/// What the logs say of an answer that is JSON but not an object, or JSON behind a mark.
const NOT_AN_OBJECT: &str = "{\"error\":\"The action did not return a dictionary or array.\"}\n";

#[test]
fn webassembly_text_is_told_as_such_with_how_to_convert_it() {
    let server = Server::in_process();
    let reply = server.init(&init_text(";; mine\n(module (func (export \"_start\")))\n"));
    reply.assert_error(
        502,
        "cannot start action: it is WebAssembly text (.wat), not a binary module: convert it \
         with `wasm-tools parse",
    );
    assert!(
        !reply.error().contains("command exited"),
        "nothing ran: {}",
        reply.text()
    );
}

#[test]
fn a_zip_whose_only_module_has_another_name_is_told_the_main_that_picks_it() {
    let module = read(&Backend::Wasm.guest("echo"));
    let zip = zip_of(&[("hello.wasm", &module, 0o644)]);
    let server = Server::in_process();
    server.init(&init_binary(&zip)).assert_error(
        502,
        "cannot start action: the upload has no entry point: looked for `exec`, `exec.wasm` \
         and `main.wasm`, and it holds hello.wasm. To run hello.wasm, give the action \
         \"main\": \"hello\"",
    );
    // And that `main` does pick it.
    let server = Server::in_process();
    let mut body = init_binary(&zip);
    body["value"]["main"] = json!("hello");
    server.init(&body).assert(200, OK);
    server.run(json!({"a": 1})).assert(200, "{\"a\":1}\n");
}

/// A module of one function type and one import, `gojs`.`x`: what Go's GOOS=js builds
/// import from, with none of the rest.
const GOJS_MODULE: &[u8] = b"\0asm\x01\0\0\0\x01\x04\x01\x60\0\0\x02\x0a\x01\x04gojs\x01x\0\0";
/// A module exporting one function, `add`, and no `_start`: a library.
const LIBRARY_MODULE: &[u8] =
    b"\0asm\x01\0\0\0\x01\x04\x01\x60\0\0\x03\x02\x01\0\x07\x07\x01\x03add\0\0\x0a\x04\x01\x02\0\x0b";

#[test]
fn a_module_for_the_browser_or_a_library_is_told_how_to_build_a_command() {
    let server = Server::in_process();
    server.init(&init_binary(GOJS_MODULE)).assert_error(
        502,
        "cannot start action: the module was built by Go for a browser (GOOS=js: it imports \
         `gojs`), not for WASI: build it with `GOOS=wasip1 GOARCH=wasm go build`",
    );
    let server = Server::in_process();
    server.init(&init_binary(LIBRARY_MODULE)).assert_error(
        502,
        "cannot start action: the module exports no `_start`: it is a library (it exports \
         `add`), not a command. Build a program with a `main` instead",
    );
}
