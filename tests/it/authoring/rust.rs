//! `wasmloop new rust`: the template on every backend, and its SDK's errors and panics.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::Server;

use super::{built, new_project, says_hello, wasmloop_run};

/// The backends a Rust project builds for: the cargo target, and the built file's suffix.
const RUST_TARGETS: [(Option<&str>, &str); 3] = [
    (Some("wasm32-wasip1"), ".wasm"),
    (Some("wasm32-wasip2"), ".wasm"),
    (None, ""),
];

/// Builds `project` with cargo for `target` (native without one) and returns the built
/// action. The test runs share one target folder, so that the SDK and its dependencies
/// compile once per target.
fn cargo_build(project: &Path, target: Option<&str>, file: &str) -> PathBuf {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("template-rust");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .current_dir(project)
        .args(["build", "--quiet", "--release", "--target-dir"])
        .arg(&target_dir);
    if let Some(target) = target {
        command.args(["--target", target]);
    }
    let status = command.status().unwrap();
    assert!(
        status.success(),
        "cargo build {target:?} of the template failed"
    );
    target_dir
        .join(target.unwrap_or(""))
        .join("release")
        .join(file)
}

#[test]
fn the_rust_template_answers_the_hello_on_every_backend() {
    let (_dir, project) = new_project("rust", "greeter");
    for (target, suffix) in RUST_TARGETS {
        says_hello(
            &cargo_build(&project, target, &format!("greeter{suffix}")),
            &[],
        );
    }
}

/// The hello with an error and a panic of its own, as an author's action would have.
const FAILING_ACTION: &str = r#"
use serde_json::{json, Value};
use wasmloop_action::Context;

#[derive(serde::Deserialize)]
struct Args {
    name: Option<String>,
}

fn act(args: Args, ctx: &Context) -> Result<Value, String> {
    match args.name.as_deref() {
        Some("") => Err("a name cannot be empty".to_owned()),
        Some("panic") => panic!("asked to panic"),
        Some("print") => {
            println!("debugging");
            Ok(json!({ "printed": true }))
        }
        name => Ok(json!({ "hello": name, "id": ctx.activation_id })),
    }
}

fn main() {
    wasmloop_action::serve(act);
}
"#;

#[test]
fn the_rust_sdk_answers_errors_and_panics_as_the_platform_expects() {
    let (_dir, project) = new_project("rust", "fails");
    std::fs::write(project.join("src/main.rs"), FAILING_ACTION).unwrap();
    let inputs = "{\"name\":\"\"}\n{\"name\":\"panic\"}\n{\"name\":\"Mike\"}\n{\"name\":5}\n";
    let wrong_type = "{\"error\":\"the request's value does not fit the action's arguments: \
                      invalid type: integer `5`, expected a string\"}";
    let panicked = "the action panicked at src/main.rs:13:26: asked to panic";

    // Natively the panic is caught: its activation answers an error, the process goes on.
    let native = cargo_build(&project, None, "fails");
    let ran = wasmloop_run(&native, &[], inputs);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "{\"error\":\"a name cannot be empty\"}",
            &format!("{{\"error\":\"{panicked}\"}}"),
            "{\"hello\":\"Mike\",\"id\":\"abc\"}",
            wrong_type,
        ]
    );
    assert!(String::from_utf8_lossy(&ran.stderr).contains(panicked));

    // In WebAssembly a panic stops the instance: its message and place are in the logs, and
    // the next activation meets a fresh instance.
    let module = cargo_build(&project, Some("wasm32-wasip1"), "fails.wasm");
    let ran = wasmloop_run(&module, &[], inputs);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "{\"error\":\"a name cannot be empty\"}",
            "{\"hello\":\"Mike\",\"id\":\"abc\"}",
            wrong_type,
        ]
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    // The activation's error says what happened, quoting what the guest logged last.
    assert!(
        stderr.contains(&format!(
            "input line 2: command exited: the action panicked or aborted (wasm trap: wasm \
             `unreachable` instruction executed); it logged `{panicked}`"
        )),
        "{stderr}"
    );
    assert!(!ran.status.success(), "the panicked input counts as failed");

    // Natively a print is a log line. In a module it lands on the result channel, which the
    // SDK cannot prevent: the answer is the platform's 502, and the logs say what to use.
    let native = Server::start().installed(&native);
    native
        .run(json!({"name": "print"}))
        .assert(200, "{\"printed\":true}\n");
    native.wait_sentinels(1);
    assert!(native.stdout().contains("debugging\n"));
    let module = Server::builder().arg("--hints").start().installed(&module);
    module.run(json!({"name": "print"})).assert(
        502,
        "{\"error\":\"The action did not return a dictionary or array.\"}\n",
    );
    module.wait_stderr("log with eprintln! in Rust");
    assert!(
        module.stderr().contains("`debugging`"),
        "{}",
        module.stderr()
    );
    module
        .run(json!({"name": "Mike"}))
        .assert(200, "{\"hello\":\"Mike\",\"id\":\"\"}\n");
}

/// Folder names Cargo refuses as a package name (a keyword, a number) still make projects
/// that build.
#[test]
fn a_rust_project_in_any_folder_builds() {
    for folder in ["fn", "123", "a.b", "my action", "héllo"] {
        let (_dir, project) = new_project("rust", folder);
        let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap()
            .to_owned();
        assert!(
            cargo_build(&project, None, &name).is_file(),
            "{folder}: {name}"
        );
    }
}

#[test]
fn the_rust_http_template_is_a_handler_that_answers_as_a_web_action() {
    let (_dir, project) = new_project("rust-http", "web-hello");
    let component = cargo_build(&project, Some("wasm32-wasip2"), "web_hello.wasm");
    let ran = wasmloop_run(&component, &[], "{\"name\":\"Mike\"}\n{}\n");
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&ran.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let hello = |name: &str| {
        json!({"statusCode": 200, "headers": {"content-type": "application/json"},
               "body": format!("{{\"message\":\"Hello, {name}!\"}}")})
    };
    assert_eq!(
        answers,
        [hello("Mike"), hello("Stranger")],
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        String::from_utf8_lossy(&ran.stderr).contains("greeting Mike (activation abc)"),
        "the context reaches it as headers: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    // Deployed as its README packs it: the zip wsk sends intact.
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    let pack = readme
        .lines()
        .find(|line| line.starts_with("mkdir -p pkg"))
        .expect("the README packs the component into a zip");
    let in_project = project.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&in_project).unwrap();
    std::fs::copy(&component, in_project.join("web_hello.wasm")).unwrap();
    let zip = built(
        Command::new("sh").args(["-c", pack]),
        &project,
        "web-hello.zip",
    );
    let server = Server::in_process().installed(&zip);
    let web = json!({"__ow_method": "get", "__ow_path": "/", "__ow_query": "name=Web", "__ow_headers": {}});
    assert_eq!(server.run(web).json(), hello("Web"));
}

/// A panic in an HTTP handler (no SDK: Rust's own panic hook) is told by its place and
/// message, which Rust logs before its `RUST_BACKTRACE` hint: under `wasmloop run`, as an
/// OpenWhisk activation and as plain HTTP.
#[test]
fn a_panicking_http_handler_is_told_by_its_panic_in_both_protocols_and_in_run() {
    let (_dir, project) = new_project("rust-http", "web-panics");
    let lib = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
    let anchor = "let name = name.unwrap_or_else(|| \"Stranger\".to_owned());";
    assert!(lib.contains(anchor), "the template changed: {lib}");
    let panicking = format!(
        "{anchor}\n        if name == \"panic\" {{\n            panic!(\"asked to panic\");\n        }}"
    );
    std::fs::write(project.join("src/lib.rs"), lib.replace(anchor, &panicking)).unwrap();
    let component = cargo_build(&project, Some("wasm32-wasip2"), "web_panics.wasm");
    let told = |text: &str| {
        text.contains("the action panicked or aborted")
            && text.contains("; it logged `thread ")
            && text.contains("panicked at src/lib.rs:")
            && text.contains(": asked to panic`")
            && !text.contains("RUST_BACKTRACE")
    };

    let ran = wasmloop_run(
        &component,
        &[],
        "{\"name\":\"panic\"}\n{\"name\":\"Mike\"}\n",
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("input line 1: command exited"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(told(line), "{line}");
    assert_eq!(ran.status.code(), Some(4), "{stderr}");

    let openwhisk = Server::in_process().installed(&component);
    let reply = openwhisk.run(json!({"name": "panic"}));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(told(&reply.error()), "{}", reply.text());

    let plain = Server::builder()
        .args(&[
            "--protocol",
            "http",
            "--action",
            component.to_str().unwrap(),
        ])
        .start();
    let reply = plain.post("/", b"{\"name\":\"panic\"}");
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(told(&reply.error()), "{}", reply.text());
}

/// The WASI 0.3 template builds from the project it writes, and its handler answers under
/// `wasmloop run`, as an OpenWhisk web action and as plain HTTP, on a runtime started with
/// --wasip3.
#[test]
fn the_rust_http_p3_template_builds_and_answers_in_both_protocols_and_in_run() {
    let (_dir, project) = new_project("rust-http-p3", "p3-hello");
    let component = cargo_build(&project, Some("wasm32-wasip2"), "p3_hello.wasm");
    let hello = |name: &str| {
        json!({"statusCode": 200, "headers": {"content-type": "application/json"},
               "body": format!("{{\"message\":\"Hello, {name}!\"}}")})
    };
    let ran = wasmloop_run(&component, &["--wasip3"], "{\"name\":\"Mike\"}\n{}\n");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&ran.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers, [hello("Mike"), hello("Stranger")], "{stderr}");
    assert!(
        stderr.contains("greeting Mike (activation abc)"),
        "{stderr}"
    );
    // Without the flag, the author learns which one to give.
    let refused = wasmloop_run(&component, &[], "{}\n");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--wasip3"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let openwhisk = Server::builder().args(&["--wasip3"]).in_process().start();
    openwhisk
        .init(&crate::support::init_binary(&crate::support::read(
            &component,
        )))
        .assert(200, "{\"ok\":true}\n");
    let web = json!({"__ow_method": "get", "__ow_path": "/", "__ow_query": "name=Web", "__ow_headers": {}});
    assert_eq!(openwhisk.run(web).json(), hello("Web"));

    let plain = Server::builder()
        .args(&["--wasip3", "--protocol", "http", "--action"])
        .arg(component.to_str().unwrap())
        .start();
    let reply = wasmloop_bench::harness::request(plain.addr, "GET", "/?name=Plain", b"").unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content(), b"{\"message\":\"Hello, Plain!\"}");
}
