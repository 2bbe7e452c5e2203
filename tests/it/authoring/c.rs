//! `wasmloop new c`: the C template on both backends, its header's error paths and JSON reader.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::Server;

use super::{new_project, says_hello, wasmloop_run};

/// The backends a C project builds for: the Makefile's target, and the built file's suffix.
const C_TARGETS: [(&str, &str); 2] = [("wasm", ".wasm"), ("native", "")];

/// Builds `project` with its Makefile (`make wasm` or `make native`) and returns the built
/// action, `file` in the project. The header builds without a warning under `-Wall -Wextra`
/// (the Makefile's flags), with the author's code as the template has it: make's stderr is
/// read for warnings, which `super::built` would only show on a failure.
fn make(project: &Path, target: &str, file: &str) -> PathBuf {
    let built = Command::new("make")
        .current_dir(project)
        .arg(target)
        .env_remove("CFLAGS")
        .env_remove("CC")
        .output()
        .expect(
            "cannot run make: apt-get install make clang lld wasi-libc libclang-rt-14-dev-wasm32",
        );
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(
        built.status.success(),
        "make {target} of the template failed (the wasm build needs Debian's clang, lld, \
         wasi-libc and libclang-rt-14-dev-wasm32): {stderr}"
    );
    assert!(!stderr.contains("warning"), "make {target}: {stderr}");
    project.join(file)
}

#[test]
fn the_c_template_answers_the_hello_as_a_module_and_natively() {
    let (_dir, project) = new_project("c", "greeter");
    assert!(project.join("sdk/wasmloop.h").is_file());
    assert!(project.join(".gitignore").is_file());
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains("wasmloop run greeter.wasm"), "{readme}");
    assert!(!readme.contains("{{"), "{readme}");
    for (target, suffix) in C_TARGETS {
        let action = make(&project, target, &format!("greeter{suffix}"));
        says_hello(&action, &[]);
        // Its logs are on stderr, where they belong on both backends.
        let ran = wasmloop_run(&action, &[], "{\"name\":\"Mike\"}\n");
        assert!(
            String::from_utf8_lossy(&ran.stderr).contains("greeting Mike"),
            "{target}"
        );
    }

    // Given its input as an argument, the executable answers once on stdout, no runtime
    // needed.
    let once = Command::new(project.join("greeter"))
        .arg(r#"{"name":"Mike"}"#)
        .output()
        .unwrap();
    assert!(once.status.success());
    assert_eq!(
        String::from_utf8_lossy(&once.stdout),
        "{\"message\":\"Hello, Mike!\"}\n"
    );
}

/// An action with errors of its own, results that are not objects, and a stop on
/// `wl_fail`, as an author's action would have. Its line numbers are in the expected
/// answers below.
const FAILING_ACTION: &str = r#"#include <assert.h>
#include <string.h>
#include "sdk/wasmloop.h"

static const char *act(const wl_value *args, const wl_context *ctx, wl_writer *result) {
    const char *name = wl_get_string(args, "name", "Stranger");
    if (!strcmp(name, "")) return "a name cannot be empty";
    if (!strcmp(name, "many")) return wl_errorf(result, "%d names, one expected", 3);
    if (!strcmp(name, "fail")) wl_fail("asked to fail");
    if (!strcmp(name, "assert")) {
        fprintf(stderr, "checking the name\n");
        assert(strcmp(name, "assert") != 0);
    }
    if (!strcmp(name, "list")) {
        wl_array_begin(result);
        return wl_array_end(result);
    }
    if (!strcmp(name, "none")) return NULL;
    wl_object_begin(result);
    wl_member_string(result, "hello", name);
    wl_member_string(result, "id", ctx->activation_id);
    return wl_object_end(result);
}

int main(int argc, char **argv) { return wasmloop_main(argc, argv, act); }
"#;

#[test]
fn the_c_sdk_answers_errors_wrong_types_and_results_that_are_not_objects_and_goes_on() {
    let (_dir, project) = new_project("c", "fails");
    std::fs::write(project.join("main.c"), FAILING_ACTION).unwrap();
    let inputs = "{\"name\":\"\"}\n{\"name\":\"many\"}\n{\"name\":\"list\"}\n{\"name\":\"none\"}\n\
                  {\"name\":5}\n{\"name\":\"fail\"}\n{\"name\":\"Mike\"}\n";
    // The SDK's own words where it answers for the action.
    let not_an_object = "{\"error\":\"the action returned an array, not a JSON object\"}";
    let nothing = "{\"error\":\"the action returned no error and wrote no result: a JSON \
                   object was expected\"}";
    let wrong_type = "{\"error\":\"the argument \\\"name\\\" is a number, not a string\"}";
    let failed = "the action failed at main.c:9: asked to fail";

    for (target, suffix) in C_TARGETS {
        let action = make(&project, target, &format!("fails{suffix}"));
        let ran = wasmloop_run(&action, &[], inputs);
        let stdout = String::from_utf8_lossy(&ran.stdout);
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let lines: Vec<&str> = stdout.lines().collect();
        // C cannot survive a crash: the failed input has no line, and the next input meets
        // a fresh instance (a fresh process natively).
        assert_eq!(
            lines,
            [
                "{\"error\":\"a name cannot be empty\"}",
                "{\"error\":\"3 names, one expected\"}",
                not_an_object,
                nothing,
                wrong_type,
                "{\"hello\":\"Mike\",\"id\":\"abc\"}",
            ],
            "{target}: {stderr}"
        );
        assert!(stderr.contains(failed), "{target}: {stderr}");
        let how = if target == "wasm" {
            // The activation's error quotes what the guest logged last.
            format!(
                "input line 6: command exited: the action panicked or aborted (wasm trap: \
                 wasm `unreachable` instruction executed); its last log line: `{failed}`"
            )
        } else {
            "input line 6: command exited: signal: 6 (SIGABRT)".to_owned()
        };
        assert!(stderr.contains(&how), "{target}: {stderr}");
        assert!(!ran.status.success(), "the failed input counts as failed");

        let server = Server::in_process().installed(&action);
        server
            .run(json!({"name": ""}))
            .assert(200, "{\"error\":\"a name cannot be empty\"}\n");
        server
            .run(json!({"name": "list"}))
            .assert(200, &format!("{not_an_object}\n"));
        server
            .run(json!({"name": "none"}))
            .assert(200, &format!("{nothing}\n"));
        server
            .run(json!({"name": 5}))
            .assert(200, &format!("{wrong_type}\n"));
        server
            .run(json!({"name": "fail"}))
            .assert_error(400, "command exited");
        server
            .run(json!({"name": "Mike"}))
            .assert(200, "{\"hello\":\"Mike\",\"id\":\"\"}\n");

        // A failed assertion aborts: its error quotes the assertion (wasi-libc's words in a
        // module, glibc's natively), not the line logged before it, under /run and `run`.
        let assertion = "strcmp(name, \"assert\") != 0";
        let reply = server.run(json!({"name": "assert"}));
        assert_eq!(reply.status, 400, "{target}: {}", reply.text());
        let told = reply.error();
        assert!(
            told.contains("; it logged `")
                && told.contains("Assertion")
                && told.contains(assertion),
            "{target}: {told}"
        );
        assert!(!told.contains("checking the name"), "{target}: {told}");
        let ran = wasmloop_run(&action, &[], "{\"name\":\"assert\"}\n");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let line = stderr
            .lines()
            .find(|l| l.contains("input line 1: command exited"))
            .unwrap_or_else(|| panic!("{target}: {stderr}"));
        assert!(
            line.contains("Assertion") && line.contains(assertion),
            "{target}: {line}"
        );
    }
}

/// Echoes a string argument, its length in bytes, and every argument as it came.
const ECHO_ACTION: &str = r#"#include "sdk/wasmloop.h"

static const char *echo(const wl_value *args, const wl_context *ctx, wl_writer *result) {
    const wl_value *text = wl_get(args, "text");
    (void)ctx;
    if (!wl_string(text)) return "no text";
    wl_object_begin(result);
    wl_key(result, "text");
    wl_string_value_n(result, wl_string(text), wl_length(text));
    wl_member_integer(result, "bytes", (long long)wl_length(text));
    wl_member_json(result, "args", args);
    return wl_object_end(result);
}

int main(int argc, char **argv) { return wasmloop_main(argc, argv, echo); }
"#;

#[test]
fn the_c_sdk_reads_escapes_into_utf8_and_writes_them_back_exactly() {
    let (_dir, project) = new_project("c", "echo");
    std::fs::write(project.join("main.c"), ECHO_ACTION).unwrap();
    // Sent as it is (`--raw`, and a body of bytes): a JSON value of the request would
    // reach the action with its escapes already decoded.
    let request = r#"{"value":{"text":"\u00e9\ud83d\ude00\n\"","n":[1.50,-0,1e2],"ok":true}}"#;
    // é is 2 bytes, the surrogate pair's 😀 4, then a newline and a quote; numbers keep
    // their text.
    let answer = "{\"text\":\"é😀\\n\\\"\",\"bytes\":8,\
                  \"args\":{\"text\":\"é😀\\n\\\"\",\"n\":[1.50,-0,1e2],\"ok\":true}}\n";
    for (target, suffix) in C_TARGETS {
        let action = make(&project, target, &format!("echo{suffix}"));
        let ran = wasmloop_run(
            &action,
            &["--raw"],
            &format!("{request}\n{{\"value\":{{\"text\":\"next\"}}}}\n"),
        );
        assert_eq!(
            String::from_utf8_lossy(&ran.stdout),
            format!("{answer}{{\"text\":\"next\",\"bytes\":4,\"args\":{{\"text\":\"next\"}}}}\n"),
            "{target}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let server = Server::in_process().installed(&action);
        server.post("/run", request.as_bytes()).assert(200, answer);
    }

    // What wasmloop would refuse before the action sees it reaches the reader as an
    // argument: each is answered with what is wrong and where.
    let echo = project.join("echo");
    let too_deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    for (input, error) in [
        (
            r#"{"text":"\ud83d"}"#,
            "a \\\\u escape of a lone surrogate, at byte 9",
        ),
        (
            r#"{"text":"\q"}"#,
            "an unknown escape in a string, at byte 9",
        ),
        (r#"{"text":"a"} x"#, "more follows the value, at byte 13"),
        (
            "{\"text\":\"tab\t\"}",
            "a control character in a string (JSON escapes them), at byte 12",
        ),
        (
            too_deep.as_str(),
            "arrays and objects nested more than 128 deep, at byte 128",
        ),
    ] {
        let once = Command::new(&echo).arg(input).output().unwrap();
        assert!(!once.status.success(), "{input}");
        assert_eq!(
            String::from_utf8_lossy(&once.stdout),
            format!("{{\"error\":\"the input is not JSON: {error}\"}}\n"),
            "{input}"
        );
    }
}

/// A folder named as one of the Makefile's own targets still makes a project that builds.
#[test]
fn a_c_project_in_a_folder_named_like_a_make_target_builds() {
    for folder in ["wasm", "native", "123", "my action"] {
        let (_dir, project) = new_project("c", folder);
        let makefile = std::fs::read_to_string(project.join("Makefile")).unwrap();
        let name = makefile
            .lines()
            .find_map(|line| line.strip_prefix("native: "))
            .unwrap()
            .to_owned();
        assert!(
            make(&project, "native", &name).is_file(),
            "{folder}: {name}"
        );
    }
}
