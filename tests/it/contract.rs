//! PROTOCOL.md Part 1 as the platform's own runtime tests exercise it, against native actions.

use serde_json::json;

use crate::support::{SENTINEL, Server, guest, init_binary, read, split_sentinels};

const MISSING_CODE: &str = "{\"error\":\"Missing main/no code to execute.\"}\n";

#[test]
fn init_without_code_is_refused_and_leaves_the_runtime_uninitialized() {
    let server = Server::start();
    for body in [
        json!({}),
        json!({"value": {}}),
        json!({"value": {"code": null, "main": "main"}}),
        json!({"value": {"code": "", "binary": false}}),
        json!({"value": null}),
    ] {
        server.init(&body).assert(403, MISSING_CODE);
    }
    server
        .init(&init_binary(&read(&guest("echo"))))
        .assert(200, "{\"ok\":true}\n");
}

#[test]
fn run_before_init_is_a_500() {
    let server = Server::start();
    server
        .run(json!({}))
        .assert(500, "{\"error\":\"no action defined yet\"}\n");
    let (out, err) = (server.stdout(), server.stderr());
    assert!(
        out.is_empty() && err.is_empty(),
        "no sentinel without an action: {out:?} {err:?}"
    );
}

#[test]
fn a_result_that_is_not_an_object_is_a_502_with_one_sentinel_per_stream() {
    let server = Server::with_guest("non_object");
    server.post("/run", b"{}").assert(
        502,
        "{\"error\":\"The action did not return a dictionary or array.\"}\n",
    );
    server.wait_sentinels(1);
    assert_eq!(split_sentinels(&server.stdout()), (1, String::new()));
    assert_eq!(split_sentinels(&server.stderr()), (1, String::new()));
}

#[test]
fn a_second_init_is_refused_with_a_message_on_stderr_and_no_sentinel() {
    let server = Server::with_guest("echo");
    server.init(&init_binary(&read(&guest("echo")))).assert(
        403,
        "{\"error\":\"Cannot initialize the action more than once.\"}\n",
    );
    server.wait_stderr("Cannot initialize the action more than once.");
    assert_eq!(
        server.stderr(),
        "Cannot initialize the action more than once.\n"
    );
    assert_eq!(server.stdout(), "");
    // The first action still serves.
    server
        .run(json!({"still": "here"}))
        .assert(200, "{\"still\":\"here\"}\n");
}

#[test]
fn a_main_other_than_main_is_accepted() {
    let server = Server::start();
    let mut body = init_binary(&read(&guest("echo")));
    body["value"]["main"] = json!("niam");
    server.init(&body).assert(200, "{\"ok\":true}\n");
    server
        .run(json!({"niam": true}))
        .assert(200, "{\"niam\":true}\n");
}

#[test]
fn four_echo_runs_show_their_logs_each_before_its_sentinel() {
    let server = Server::with_guest("echo");
    let inputs = [
        json!({"string": "hello"}),
        json!({"string": "❄ ☃ ❄"}),
        json!({"numbers": [42, 1]}),
        json!({"object": {"a": "A"}}),
    ];
    for input in &inputs {
        let reply = server.run(input.clone());
        assert_eq!(reply.status, 200);
        assert_eq!(&reply.json(), input);
    }
    server.wait_sentinels(4);
    let expected_out = format!("hello stdout\n{SENTINEL}\n").repeat(4);
    let expected_err = format!("hello stderr\n{SENTINEL}\n").repeat(4);
    assert_eq!(server.stdout(), expected_out);
    assert_eq!(server.stderr(), expected_err);
}

#[test]
fn unicode_passes_through_input_logs_and_result() {
    let server = Server::with_guest("unicode");
    server
        .run(json!({"delimiter": "❄"}))
        .assert(200, "{\"winter\":\"❄ ☃ ❄\"}\n");
    server.wait_sentinels(1);
    assert_eq!(server.stdout(), format!("❄ ☃ ❄\n{SENTINEL}\n"));
    assert_eq!(server.stderr(), format!("❄ ☃ ❄\n{SENTINEL}\n"));
}

#[test]
fn the_init_env_reaches_the_action_and_nothing_else_does() {
    let server = Server::start();
    let mut body = init_binary(&read(&guest("init_env")));
    body["value"]["env"] = json!({"SOME_VAR": "xyz", "ANOTHER_VAR": ""});
    server.init(&body).assert(200, "{\"ok\":true}\n");
    let reply = server.run(json!({}));
    assert_eq!(
        reply.json(),
        json!({"SOME_VAR": "xyz", "ANOTHER_VAR": "", "PATH": null})
    );
}

#[test]
fn the_seven_context_values_reach_the_action() {
    let host = "https://openwhisk.example:443/api?x=a=b";
    let server = Server::builder().env("__OW_API_HOST", host).start();
    server
        .init(&init_binary(&read(&guest("context"))))
        .assert(200, "{\"ok\":true}\n");
    let body = json!({
        "value": {"a": 1},
        "api_key": "xyz:abc",
        "namespace": "ns",
        "action_name": "/ns/action",
        "action_version": "0.0.1",
        "activation_id": "1234",
        "deadline": "1700000000000",
    });
    let reply = server.post("/run", body.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json(),
        json!({
            "api_host": host,
            "api_key": "xyz:abc",
            "namespace": "ns",
            "action_name": "/ns/action",
            "action_version": "0.0.1",
            "activation_id": "1234",
            "deadline": "1700000000000",
            "proxy_version": env!("CARGO_PKG_VERSION"),
        })
    );
}

#[test]
fn a_one_megabyte_argument_comes_back_whole() {
    let server = Server::with_guest("echo");
    let arg = "a".repeat(1_048_561);
    let reply = server.run(json!({"arg": arg}));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["arg"].as_str().map(str::len), Some(1_048_561));
}

#[test]
fn arrays_work_as_results_and_as_input() {
    let server = Server::with_guest("array_result");
    server.run(json!({})).assert(200, "[\"a\",\"b\"]\n");
    let server = Server::with_guest("echo");
    server.run(json!(["x", 1])).assert(200, "[\"x\",1]\n");
}

#[test]
fn newlines_in_the_request_body_are_not_passed_on() {
    let server = Server::with_guest("echo");
    let reply = server.post(
        "/run",
        b"{\n  \"value\": {\n    \"a\": \"line\\nbreak\"\n  }\n}\n",
    );
    reply.assert(200, "{\"a\":\"line\\nbreak\"}\n");
}

#[test]
fn other_paths_answer_200_with_an_empty_body() {
    let server = Server::start();
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/ping"),
        ("POST", "/init/x"),
        ("PUT", "/metrics"),
    ] {
        let reply = crate::support::http(server.addr, method, path, b"");
        reply.assert(200, "");
    }
}

#[test]
fn init_and_run_accept_any_method() {
    let server = Server::start();
    let body = init_binary(&read(&guest("echo"))).to_string();
    crate::support::http(server.addr, "PUT", "/init", body.as_bytes())
        .assert(200, "{\"ok\":true}\n");
    crate::support::http(server.addr, "GET", "/run", b"{\"value\":{\"m\":1}}")
        .assert(200, "{\"m\":1}\n");
}

#[test]
fn an_init_body_that_is_not_json_of_the_right_shape_is_a_400() {
    let server = Server::start();
    for body in [
        &b"not json"[..],
        b"{\"value\":{\"code\":42}}",
        b"{\"value\":{\"binary\":\"yes\",\"code\":\"x\"}}",
        b"{\"value\":{\"env\":[1],\"code\":\"x\"}}",
        b"",
    ] {
        let reply = server.post("/init", body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.starts_with("Error unmarshaling request: "), "{error}");
    }
    server
        .init(&init_binary(&read(&guest("echo"))))
        .assert(200, "{\"ok\":true}\n");
}

#[test]
fn bad_base64_is_a_400() {
    let server = Server::start();
    let reply = server.init(&json!({"value": {"code": "%%% not base64", "binary": true}}));
    assert_eq!(reply.status, 400);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("cannot decode the request: "), "{error}");
}

#[test]
fn base64_with_line_breaks_is_accepted() {
    let server = Server::start();
    let mut body = init_binary(&read(&guest("echo")));
    let code = body["value"]["code"].as_str().unwrap().to_owned();
    let wrapped: Vec<String> = code
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    body["value"]["code"] = json!(wrapped.join("\r\n"));
    server.init(&body).assert(200, "{\"ok\":true}\n");
}

#[test]
fn a_malformed_run_body_is_a_400_and_the_action_keeps_serving() {
    let server = Server::with_guest("echo");
    for body in [&b"{\"value\":"[..], b"[1,2]", b"\"text\""] {
        let reply = server.post("/run", body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(
            reply.json()["error"]
                .as_str()
                .unwrap()
                .starts_with("Error unmarshaling request: ")
        );
    }
    server.run(json!({"ok": 1})).assert(200, "{\"ok\":1}\n");
}

#[test]
fn bodies_over_the_caps_are_413_and_the_server_keeps_serving() {
    let server = Server::builder()
        .arg("--max-init-bytes")
        .arg("200000")
        .arg("--max-run-bytes")
        .arg("1000")
        .start();
    let reply = server.post("/init", &vec![b' '; 300_000]);
    assert_eq!(reply.status, 413);
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap()
            .contains("--max-init-bytes")
    );
    // The test actions are larger than this init cap; a script is not.
    let script = "#!/bin/sh\nwhile read -r l; do echo '{\"ok\":1}' >&3; done\n";
    server
        .init(&crate::support::init_text(script))
        .assert(200, "{\"ok\":true}\n");
    let reply = server.run(json!({"big": "x".repeat(2000)}));
    assert_eq!(reply.status, 413);
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap()
            .contains("--max-run-bytes")
    );
    server.run(json!({"small": 1})).assert(200, "{\"ok\":1}\n");
}

#[test]
fn sigterm_stops_the_server_and_its_action() {
    let server = Server::with_guest("pid");
    let pid = server.run(json!({})).json()["pid"].as_i64().unwrap() as i32;
    assert_eq!(server.terminate(), Some(0));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // SAFETY: signal 0 only checks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the action outlived the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
