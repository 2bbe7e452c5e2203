//! HTTP components (the `wasi:http/proxy` world): activations as web requests, responses as
//! web-action results, and every way a request or a component can go wrong.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{HttpServer, Server, http_guest, init_binary, read};

fn http_server(args: &[&str]) -> Server {
    Server::builder()
        .args(args)
        .start()
        .installed(&http_guest())
}

/// A web request as OpenWhisk's controller delivers a raw web action's.
fn web(method: &str, path: &str, query: &str, headers: Value, body: Option<&str>) -> Value {
    let mut value = json!({
        "__ow_method": method, "__ow_path": path, "__ow_query": query, "__ow_headers": headers,
    });
    if let Some(body) = body {
        value["__ow_body"] = json!(body);
    }
    value
}

fn result(server: &Server, value: Value) -> Value {
    let reply = server.run(value);
    assert_eq!(reply.status, 200, "{}", reply.text());
    serde_json::from_str(&reply.text()).unwrap()
}

/// The JSON the test component answers `/echo` with.
fn echoed(result: &Value) -> Value {
    assert_eq!(result["statusCode"], 200, "{result}");
    serde_json::from_str(result["body"].as_str().unwrap()).unwrap()
}

#[test]
fn a_plain_invoke_is_a_post_of_the_value_and_the_response_a_web_action_result() {
    let server = http_server(&[]);
    let got = result(&server, json!({"name": "Mike"}));
    assert_eq!(
        got,
        json!({"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{\"message\":\"Hello, Mike!\"}"})
    );
}

#[test]
fn a_web_request_arrives_with_its_method_path_query_headers_body_and_context() {
    let server = http_server(&[]);
    let body = json!({
        "value": web("put", "/echo", "a=1&b=2", json!({"content-type": "text/plain", "x-ow-activation-id": "forged"}), Some("hi there")),
        "activation_id": "0123abcd", "action_name": "/ns/web", "deadline": "1700000000000",
    });
    let reply = server.post("/run", body.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = echoed(&reply.json());
    assert_eq!(seen["method"], "PUT");
    assert_eq!(seen["path"], "/echo?a=1&b=2");
    assert_eq!(seen["body"], "hi there");
    assert_eq!(seen["headers"]["content-type"], "text/plain");
    assert_eq!(
        seen["headers"]["x-ow-activation-id"], "0123abcd",
        "the context, never the caller's"
    );
    assert_eq!(seen["headers"]["x-ow-action-name"], "/ns/web");
    assert_eq!(seen["headers"]["x-ow-deadline"], "1700000000000");
}

#[test]
fn the_components_status_is_its_answer_and_binary_bodies_travel_as_base64() {
    let server = http_server(&[]);
    let teapot = result(&server, web("get", "/status", "418", json!({}), None));
    assert_eq!(
        teapot,
        json!({"statusCode": 418, "headers": {"content-type": "text/plain"}, "body": "status 418"})
    );
    let png = result(
        &server,
        web(
            "post",
            "/raw",
            "",
            json!({"content-type": "image/png"}),
            Some("AAEC/w=="),
        ),
    );
    assert_eq!(
        png["body"], "AAEC/w==",
        "decoded on the way in, encoded on the way out"
    );
    assert_eq!(png["headers"]["content-type"], "image/png");
}

#[test]
fn bodies_are_text_or_base64_exactly_where_openwhisks_controller_takes_them_so() {
    let server = http_server(&[]);
    let raw = |content_type: &str, body: &str| {
        result(
            &server,
            web(
                "post",
                "/raw",
                "",
                json!({"content-type": content_type}),
                Some(body),
            ),
        )
    };
    // SVG is binary to Akka, which the controller renders with: base64 both ways.
    let svg = raw("image/svg+xml", "PHN2Zy8+");
    assert_eq!(svg["body"], "PHN2Zy8+", "{svg}");
    // A JSON body of `true` would look like base64 to the controller and be decoded:
    // sent as base64 of itself, it reaches the client as `true`.
    let truth = raw("application/json", "dHJ1ZQ==");
    assert_eq!(truth["body"], "dHJ1ZQ==", "{truth}");
    assert_eq!(truth["headers"]["content-type"], "application/json");
    // A JSON body that is no object comes, not raw, as the JSON value itself.
    let mut parsed = json!({
        "__ow_method": "post", "__ow_path": "/echo",
        "__ow_headers": {"content-type": "application/json"}, "__ow_body": [1, 2],
    });
    assert_eq!(echoed(&result(&server, parsed.clone()))["body"], "[1,2]");
    parsed["__ow_body"] = json!("hello");
    assert_eq!(echoed(&result(&server, parsed))["body"], "\"hello\"");
}

#[test]
fn an_instance_is_reused_by_default_and_fresh_for_each_activation_when_asked() {
    let reused = http_server(&[]);
    let handled: Vec<Value> = (0..3)
        .map(|_| {
            echoed(&result(&reused, web("get", "/echo", "", json!({}), None)))["handled"].clone()
        })
        .collect();
    assert_eq!(handled, [json!(1), json!(2), json!(3)]);
    let fresh = http_server(&["--max-activations-per-instance", "1"]);
    for _ in 0..3 {
        let seen = echoed(&result(
            &fresh,
            json!({"__ow_method": "get", "__ow_path": "/echo", "__ow_query": ""}),
        ));
        assert_eq!(seen["handled"], 1);
    }
}

#[test]
fn a_fresh_instance_reads_its_own_activation_id_in_its_environment() {
    let server = http_server(&["--max-activations-per-instance", "1"]);
    for id in ["first", "second"] {
        let body = json!({"value": web("get", "/echo", "", json!({}), None), "activation_id": id});
        let reply = server.post("/run", body.to_string().as_bytes());
        assert_eq!(echoed(&reply.json())["env_activation_id"], id);
    }
}

#[test]
fn its_stdout_and_stderr_are_logs_of_the_activation() {
    let server = http_server(&[]);
    let got = result(&server, web("get", "/log", "", json!({}), None));
    assert_eq!(got["body"], "logged");
    server.wait_sentinels(1);
    assert!(
        server.stdout().contains("a line on stdout\n"),
        "{}",
        server.stdout()
    );
    assert!(
        server.stderr().contains("a line on stderr\n"),
        "{}",
        server.stderr()
    );
}

#[test]
fn json_logs_carry_the_activation_id() {
    let server = http_server(&["--log-format", "json"]);
    let body = json!({"value": web("get", "/log", "", json!({}), None), "activation_id": "act-42"});
    server.post("/run", body.to_string().as_bytes()).json();
    server.wait_stdout("a line on stdout");
    let line = server
        .stdout()
        .lines()
        .find(|l| l.contains("a line on stdout"))
        .unwrap()
        .to_owned();
    let record: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(record["activationId"], "act-42", "{line}");
}

#[test]
fn a_trap_a_missing_response_and_an_unfinished_one_are_the_actions_errors_and_the_next_activation_runs()
 {
    let server = http_server(&[]);
    let cases = [
        // The panic's own place and message, not the backtrace hint Rust logs after them.
        ("/trap", "the action panicked or aborted"),
        ("/trap", ": asked to trap`"),
        (
            "/no-response",
            "without setting a response: call response-outparam.set",
        ),
        (
            "/unfinished",
            "without finishing its response: call outgoing-body.finish",
        ),
    ];
    for (path, told) in cases {
        let reply = server.run(web("get", path, "", json!({}), None));
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert!(reply.error().contains(told), "{path}: {}", reply.text());
        let next = result(&server, json!({"name": "again"}));
        assert_eq!(
            next["statusCode"], 200,
            "{path}: the next activation gets a new instance"
        );
    }
    server.wait_stderr("asked to trap");
}

#[test]
fn a_response_past_the_result_cap_is_refused_naming_the_flag() {
    let server = http_server(&["--max-result-bytes", "100000"]);
    let reply = server.run(web("get", "/big", "200000", json!({}), None));
    reply.assert_error(
        502,
        "the component's response body is longer than 100000 bytes (see --max-result-bytes",
    );
    let small = result(&server, web("get", "/big", "1000", json!({}), None));
    assert_eq!(small["body"].as_str().unwrap().len(), 1000);
}

#[test]
fn a_deadline_stops_a_component_that_never_answers() {
    let server = http_server(&["--timeout", "500ms"]);
    let reply = server.run(web("get", "/spin", "", json!({}), None));
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(result(&server, json!({"name": "after"}))["statusCode"], 200);
}

#[test]
fn the_memory_cap_holds_for_http_components() {
    let server = http_server(&["--max-memory-bytes", "33554432"]);
    let reply = server.run(web("get", "/grow", "64", json!({}), None));
    assert_eq!(reply.status, 400, "{}", reply.text());
    let fine = result(&server, web("get", "/grow", "1", json!({}), None));
    assert_eq!(fine["body"], format!("held {} bytes", 1 << 20));
}

#[test]
fn bad_requests_are_told_what_to_change_and_leave_the_instance_serving() {
    let server = http_server(&[]);
    let before =
        echoed(&result(&server, web("get", "/echo", "", json!({}), None)))["handled"].clone();
    let cases = [
        (
            web(
                "post",
                "/raw",
                "",
                json!({"content-type": "application/octet-stream"}),
                Some("not base64!"),
            ),
            "__ow_body is not valid base64",
        ),
        (
            web("get", "/echo", "", json!({"x": "a\nb"}), None),
            "no header value can",
        ),
        (
            web("get", "/echo", "", json!("text"), None),
            "__ow_headers must be an object",
        ),
        (
            json!({"__ow_method": "not a method"}),
            "__ow_method is no HTTP method",
        ),
    ];
    for (value, told) in cases {
        server.run(value).assert_error(400, told);
    }
    let after =
        echoed(&result(&server, web("get", "/echo", "", json!({}), None)))["handled"].clone();
    assert_eq!(
        after.as_u64(),
        before.as_u64().map(|n| n + 1),
        "the same instance serves on"
    );
}

#[test]
fn forbidden_and_non_text_response_headers_are_dropped_with_a_log_line() {
    let server = http_server(&[]);
    let got = result(&server, web("get", "/headers", "", json!({}), None));
    assert_eq!(
        got["headers"],
        json!({"content-type": "text/plain", "x-fine": "yes"})
    );
    server.wait_sentinels(1);
    let logs = server.stderr();
    assert!(
        logs.contains("header connection refused"),
        "WASI refuses hop-by-hop headers: {logs}"
    );
    assert!(
        logs.contains("wasmloop: dropped the response header `x-bytes`: its value is not text"),
        "{logs}"
    );
}

#[test]
fn outgoing_requests_go_through_the_allow_list() {
    let web_server = HttpServer::start("hello from loopback");
    let to = format!("{}/x", web_server.addr);
    let denied = http_server(&[]);
    let got = result(&denied, web("get", "/fetch", &to, json!({}), None));
    assert_eq!(got["body"], "failed: ErrorCode::HttpRequestDenied");
    denied.wait_stderr("wasmloop: denied an HTTP request to");
    let allowed = http_server(&["--allow-outbound", &web_server.addr.to_string()]);
    let got = result(&allowed, web("get", "/fetch", &to, json!({}), None));
    assert_eq!(got["body"], "status 200");
}

#[test]
fn backends_names_it_http_so_an_image_can_refuse_it() {
    let server = Server::builder()
        .args(&["--backends", "wasm,component"])
        .start();
    let reply = server.init(&init_binary(&read(&http_guest())));
    reply.assert_error(502, "HTTP component (wasi:http/proxy) (the http backend)");
    reply.assert_error(
        502,
        "Build it as a module (Rust: `cargo build --target wasm32-wasip1`) or as a component (Rust: \
         `cargo build --target wasm32-wasip2`), or add http to the setting",
    );
    let only = Server::builder()
        .args(&["--backends", "http"])
        .start()
        .installed(&http_guest());
    assert_eq!(result(&only, json!({"name": "x"}))["statusCode"], 200);
    // A stdio component there is told the one way that image takes, not a module.
    let stdio = Server::builder().args(&["--backends", "http"]).start();
    stdio
        .init(&crate::support::Backend::Component.init_guest("echo"))
        .assert_error(
            502,
            "allows http. Build it as an HTTP component (wasmloop new rust-http), or add \
             component to the setting",
        );
}

#[test]
fn a_component_of_another_wasi_version_is_told_which_version_to_build_for() {
    let server = Server::start();
    for (export, told) in [
        (
            "wasi:http/incoming-handler@0.3.0-rc-2026-01-06",
            "a version of wasi:http this runtime does not run: build it for the \
             wasi:http/proxy world at 0.2.x",
        ),
        (
            "wasi:cli/run@0.3.0",
            "a version of wasi:cli this runtime does not run: build it as a WASI 0.2 command",
        ),
    ] {
        let component = wat::parse_str(format!(
            r#"(component (instance $i) (export "{export}" (instance $i)))"#
        ))
        .unwrap();
        let reply = server.init(&init_binary(&component));
        assert_eq!(reply.status, 502, "{}", reply.text());
        let error = reply.error();
        assert!(error.contains(export) && error.contains(told), "{error}");
    }
}

#[test]
fn a_handler_export_without_handle_is_told_what_to_export() {
    let component = wat::parse_str(
        r#"(component (instance $i) (export "wasi:http/incoming-handler@0.2.0" (instance $i)))"#,
    )
    .unwrap();
    let reply = Server::start().init(&init_binary(&component));
    assert_eq!(reply.status, 502, "{}", reply.text());
    let error = reply.error();
    assert!(
        error.contains("is not the one the wasi:http/proxy 0.2 world defines")
            && error.contains("export `handle: func(request: incoming-request"),
        "{error}"
    );
}

#[test]
fn a_component_importing_what_the_runtime_lacks_is_refused_naming_each_import() {
    let component = wat::parse_str(
        r#"(component
            (import "fermyon:spin/key-value@2.0.0" (instance (export "open" (func))))
            (import "wasi:keyvalue/store@0.2.0-draft" (instance (export "open" (func))))
            (import "wasi:cli/environment@0.2.0" (instance))
            (instance $handler)
            (export "wasi:http/incoming-handler@0.2.0" (instance $handler)))"#,
    )
    .unwrap();
    let server = Server::start();
    let reply = server.init(&init_binary(&component));
    assert_eq!(reply.status, 502, "{}", reply.text());
    let error = reply.error();
    assert!(
        error.contains("the component imports what wasmloop does not provide: fermyon:spin/key-value@2.0.0, wasi:keyvalue/store@0.2.0-draft."),
        "{error}"
    );
    assert!(!error.contains("wasi:cli/environment"), "{error}");
}

#[test]
fn wasmloop_run_prints_each_inputs_web_action_result() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("run")
        .arg(http_guest())
        .env("WASMLOOP_NO_CACHE", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = format!(
        "{}\n{}\n",
        json!({"name": "Mike"}),
        web("get", "/status", "503", json!({}), None)
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(lines[0]["body"], "{\"message\":\"Hello, Mike!\"}");
    assert_eq!(
        lines[1]["statusCode"], 503,
        "a status the component chose is its answer"
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `wasmloop ARGS`, which must succeed.
fn wasmloop(args: &[&str]) {
    let made = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

#[test]
fn a_signed_http_component_loads_its_code_for_a_trusted_key_and_serves_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    wasmloop(&["keygen", keys.to_str().unwrap()]);
    let artifact = dir.path().join("hello.zip");
    let guest = http_guest();
    wasmloop(&[
        "compile",
        guest.to_str().unwrap(),
        "--output",
        artifact.to_str().unwrap(),
        "--sign-key",
        keys.join("sign.key").to_str().unwrap(),
    ]);
    let trusted = keys.join("verify.key");
    let server = Server::builder()
        .args(&["--trust-key", trusted.to_str().unwrap()])
        .start()
        .installed(&artifact);
    assert_eq!(
        result(&server, json!({"name": "Mike"}))["body"],
        "{\"message\":\"Hello, Mike!\"}"
    );
    // Untrusted, the module inside is compiled instead, and runs the same.
    let untrusting = Server::start().installed(&artifact);
    assert_eq!(
        result(&untrusting, json!({"name": "Ann"}))["statusCode"],
        200
    );
}

#[test]
fn a_precompiled_http_component_loads_only_with_allow_precompiled() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("hello.cwasm");
    let guest = http_guest();
    wasmloop(&[
        "compile",
        guest.to_str().unwrap(),
        "--output",
        cwasm.to_str().unwrap(),
    ]);
    let refused = Server::start();
    refused
        .init(&init_binary(&read(&cwasm)))
        .assert_error(502, "--allow-precompiled");
    let allowed = Server::builder()
        .args(&["--allow-precompiled"])
        .start()
        .installed(&cwasm);
    assert_eq!(result(&allowed, json!({"name": "Mike"}))["statusCode"], 200);
}

#[test]
fn a_pool_of_instances_answers_parallel_activations_each_with_its_own_result() {
    let server = http_server(&["--concurrency", "4"]);
    let server = &server;
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..16)
            .map(|n| scope.spawn(move || (n, result(server, json!({"name": format!("n{n}")})))))
            .collect();
        for run in runs {
            let (n, got) = run.join().unwrap();
            assert_eq!(
                got["body"],
                format!("{{\"message\":\"Hello, n{n}!\"}}"),
                "activation {n} got another's answer"
            );
        }
    });
}
