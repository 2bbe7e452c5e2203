//! `wasmloop new python` and `new js`: the hello builds and answers; the SDKs' error paths.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{HttpServer, Server};

use super::{built, new_project, says_hello, wasmloop_run};

/// `wasmloop new LANGUAGE` for a component, whose world and the WASI packages it names come
/// with the project: its build needs no download.
fn new_component_project(language: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, project) = new_project(language, name);
    assert!(project.join("wit/world.wit").is_file());
    assert!(project.join("wit/deps/http.wit").is_file());
    (dir, project)
}

/// The README's build command: componentize-py from the PATH (component-examples/build.sh
/// installs it).
fn componentize_py(project: &Path, file: &str) -> PathBuf {
    let mut command = Command::new("componentize-py");
    command.args([
        "-d",
        "wit",
        "-w",
        "action",
        "componentize",
        "app",
        "-o",
        file,
    ]);
    built(&mut command, project, file)
}

/// The README's build command, with the examples' componentize-js (installed by
/// component-examples/build.sh), so that the test needs no `npm install` of its own.
fn componentize_js(project: &Path, file: &str) -> PathBuf {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("component-examples/js/node_modules/.bin/componentize-js");
    assert!(
        tool.is_file(),
        "{} is missing: run component-examples/build.sh first",
        tool.display()
    );
    let mut command = Command::new(tool);
    command.args([
        "app.js",
        "--wit",
        "wit",
        "--world-name",
        "action",
        "-o",
        file,
    ]);
    built(&mut command, project, file)
}

/// An error answers 200 through a server too, and the instance serves on.
fn answers_an_error_then_serves_on(component: &Path, input: serde_json::Value, error: &str) {
    let server = Server::in_process().installed(component);
    server.run(input).assert(200, &format!("{error}\n"));
    let reply = server.run(json!({"name": "Mike"}));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["hello"], "Mike");
}

/// Each way a Python action can fail, then one that succeeds and shows its context.
const FAILING_PYTHON: &str = r#"
from wasmloop_action import action


def main(args, ctx):
    kind = args.get("kind")
    if kind == "raise":
        raise ValueError("no such thing")
    if kind == "text":
        return "just text"
    if kind == "set":
        return {"tags": {"a"}}
    if kind == "interrupt":
        raise KeyboardInterrupt("asked to stop")
    print(f"a stray print for {ctx.activation_id}")
    left = ctx.time_left()
    return {
        "hello": args.get("name"),
        "id": ctx.activation_id,
        "left": left is not None and 0 < left <= 30,
        "host": ctx.api_host,
        "namespace": ctx.namespace,
        "action": ctx.action_name,
    }


Run = action(main)
"#;

#[test]
fn the_python_template_builds_a_component_and_its_sdk_answers_errors() {
    let (_dir, project) = new_component_project("python", "greeter");
    // Asking for the ack the SDK sends, so that a start that fails is told apart.
    says_hello(
        &componentize_py(&project, "greeter.wasm"),
        &["--wait-for-ack"],
    );

    std::fs::write(project.join("app.py"), FAILING_PYTHON).unwrap();
    let fails = componentize_py(&project, "fails.wasm");
    let inputs = "{\"kind\":\"raise\"}\n{\"kind\":\"text\"}\n{\"kind\":\"set\"}\n\
                  {\"name\":\"Mike\"}\n";
    let ran = wasmloop_run(
        &fails,
        &["--env", "__OW_API_HOST=https://api.example"],
        inputs,
    );
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "{\"error\":\"ValueError: no such thing\"}",
            "{\"error\":\"the action returned a string (str), not an object (a dict): 'just text'\"}",
            "{\"error\":\"the action's result cannot be written as JSON: Object of type set \
             is not JSON serializable\"}",
            "{\"hello\":\"Mike\",\"id\":\"abc\",\"left\":true,\"host\":\"https://api.example\",\
             \"namespace\":\"_\",\"action\":\"/_/fails\"}",
        ],
        "{stderr}"
    );
    // The traceback starts at the action's own frame; a plain print() reaches the logs,
    // not the results.
    assert!(
        stderr.contains("app.py\", line 8, in main")
            && stderr.contains("ValueError: no such thing"),
        "{stderr}"
    );
    assert!(stderr.contains("a stray print for abc"), "{stderr}");
    // Each error answer is a result, printed, and counts as an application error.
    assert_eq!(ran.status.code(), Some(3), "{stderr}");

    answers_an_error_then_serves_on(
        &fails,
        json!({"kind": "raise"}),
        "{\"error\":\"ValueError: no such thing\"}",
    );

    // An exception the SDK does not catch (a BaseException) ends the instance: its error
    // quotes Python's exception, not the panic componentize-py's runtime logs after the
    // traceback, under `run` and /run.
    let told = "; it logged `KeyboardInterrupt: asked to stop`";
    let ran = wasmloop_run(
        &fails,
        &[],
        "{\"kind\":\"interrupt\"}\n{\"name\":\"Mike\"}\n",
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        stderr.contains("input line 1: command exited: the action panicked or aborted")
            && stderr.contains(told),
        "{stderr}"
    );
    assert_eq!(ran.status.code(), Some(4), "{stderr}");
    let server = Server::in_process().installed(&fails);
    let reply = server.run(json!({"kind": "interrupt"}));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.error().contains(told), "{}", reply.text());
    assert_eq!(server.run(json!({"name": "Mike"})).json()["hello"], "Mike");
}

/// An action that calls out the two ways a Python author would: `urllib.request`, and the
/// SDK's `fetch`.
const CALLING_OUT_PYTHON: &str = r#"
import json
import urllib.request

from wasmloop_action import FetchError, action, fetch


def main(args, ctx):
    if args["with"] == "urllib":
        request = urllib.request.Request(args["url"], headers={"X-Test": "by urllib"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return {"status": response.status, "echo": json.loads(response.read())}
    try:
        response = fetch(args["url"], method="POST", headers={"X-Test": "by fetch"},
                         body=args.get("body"))
    except FetchError as error:
        return {"failed": str(error)}
    return {"status": response.status, "type": response.headers["content-type"],
            "echo": response.json()}


Run = action(main)
"#;

/// Within the allow-list both reach the server, with their method, headers and body;
/// outside it, both are refused as the guest's error, and the instance serves on.
#[test]
fn a_python_component_calls_out_with_urllib_and_with_the_sdks_fetch() {
    let (_dir, project) = new_component_project("python", "calls");
    std::fs::write(project.join("app.py"), CALLING_OUT_PYTHON).unwrap();
    let component = componentize_py(&project, "calls.wasm");
    let web = HttpServer::echo();
    let other = HttpServer::echo();
    let server = Server::builder()
        .args(&["--allow-outbound", &web.addr.to_string()])
        .start()
        .installed(&component);
    let result = |value| -> serde_json::Value {
        let reply = server.run(value);
        assert_eq!(reply.status, 200, "{}", reply.text());
        serde_json::from_str(&reply.text()).unwrap()
    };

    assert_eq!(
        result(json!({"with": "urllib", "url": web.url("/by/urllib?q=1")})),
        json!({"status": 200, "echo": {
            "method": "GET", "path": "/by/urllib?q=1", "x-test": "by urllib", "body": ""
        }})
    );
    assert_eq!(
        result(json!({"with": "fetch", "url": web.url("/by/fetch"), "body": "héllo"})),
        json!({"status": 200, "type": "application/json", "echo": {
            "method": "POST", "path": "/by/fetch", "x-test": "by fetch", "body": "héllo"
        }})
    );

    let refused = result(json!({"with": "fetch", "url": other.url("/")}));
    assert_eq!(
        refused,
        json!({"failed": format!(
            "POST {} got no response: HttpRequestDenied: the host is not in the \
             runtime's --allow-outbound list",
            other.url("/")
        )})
    );
    let refused = result(json!({"with": "urllib", "url": other.url("/")}));
    assert!(
        refused["error"].as_str().unwrap().starts_with("URLError: "),
        "{refused}"
    );
    server.wait_stderr(&format!(
        "wasmloop: denied a TCP connection to {}",
        other.addr
    ));
    assert_eq!(
        result(json!({"with": "fetch", "url": web.url("/again")}))["status"],
        200
    );
}

/// Each way a JavaScript action can fail, a result longer than one WASI write, then one
/// that succeeds and shows its context.
const FAILING_JS: &str = r#"
import { action } from './wasmloop-action.js';

async function main(args, ctx) {
  switch (args.kind) {
    case 'throw':
      throw new TypeError('no such thing');
    case 'reject':
      return Promise.reject({ code: 7 });
    case 'bigint':
      return { n: 1n };
    case 'text':
      return 'just text';
    case 'none':
      return;
    case 'long':
      return { text: 'x'.repeat(10000) };
  }
  console.log(`a stray log for ${ctx.activationId}`);
  const left = ctx.timeLeft();
  return {
    hello: args.name,
    id: ctx.activationId,
    left: left > 0 && left <= 30000,
    host: ctx.apiHost,
    namespace: ctx.namespace,
    action: ctx.actionName,
  };
}

export const run = action(main);
"#;

#[test]
fn the_js_template_builds_a_component_and_its_sdk_answers_errors() {
    let (_dir, project) = new_component_project("js", "greeter");
    assert!(project.join("package.json").is_file());
    says_hello(
        &componentize_js(&project, "greeter.wasm"),
        &["--wait-for-ack"],
    );

    std::fs::write(project.join("app.js"), FAILING_JS).unwrap();
    let fails = componentize_js(&project, "fails.wasm");
    let inputs = ["throw", "reject", "bigint", "text", "none", "long"]
        .map(|kind| format!("{{\"kind\":\"{kind}\"}}\n"))
        .concat()
        + "{\"name\":\"Mike\"}\n";
    let ran = wasmloop_run(
        &fails,
        &["--env", "__OW_API_HOST=https://api.example"],
        &inputs,
    );
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let long = format!("{{\"text\":\"{}\"}}", "x".repeat(10000));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "{\"error\":\"TypeError: no such thing\"}",
            "{\"error\":\"the action threw {\\\"code\\\":7}\"}",
            "{\"error\":\"the action's result cannot be written as JSON: BigInt value can't be \
             serialized in JSON\"}",
            "{\"error\":\"the action returned a string, not an object: \\\"just text\\\"\"}",
            "{\"error\":\"the action returned undefined, not an object: does main end without \
             a return?\"}",
            &long,
            "{\"hello\":\"Mike\",\"id\":\"abc\",\"left\":true,\"host\":\"https://api.example\",\
             \"namespace\":\"_\",\"action\":\"/_/fails\"}",
        ],
        "{stderr}"
    );
    // The stack starts at the action's own frame, not the SDK's; console.log reaches the
    // logs, not the results.
    assert!(
        stderr.contains("TypeError: no such thing\n    at main@app.js:7:"),
        "{stderr}"
    );
    assert!(!stderr.contains("wasmloop-action.js"), "{stderr}");
    assert!(stderr.contains("the action threw {\"code\":7}"), "{stderr}");
    assert!(stderr.contains("a stray log for abc"), "{stderr}");
    // Each error answer is a result, printed, and counts as an application error.
    assert_eq!(ran.status.code(), Some(3), "{stderr}");

    answers_an_error_then_serves_on(
        &fails,
        json!({"kind": "bigint"}),
        "{\"error\":\"the action's result cannot be written as JSON: BigInt value can't be \
         serialized in JSON\"}",
    );

    // Without the SDK, an exception nothing catches ends the component's run with an error,
    // which componentize-js does not log: wasmloop's message names the likely cause.
    std::fs::write(project.join("app.js"), UNCAUGHT_JS).unwrap();
    let uncaught = componentize_js(&project, "uncaught.wasm");
    let ran = wasmloop_run(&uncaught, &[], "{}\n");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        stderr.contains(
            "cannot start action: command exited: exit status: 1 (an uncaught exception in \
             Python or JavaScript, or `exit(1)`); its last log line: `about to fail`"
        ),
        "{stderr}"
    );
}

/// A raw `wasi:cli/run` export that throws.
const UNCAUGHT_JS: &str = r#"
export const run = {
  run() {
    console.error("about to fail");
    throw new Error("nothing catches this");
  },
};
"#;
