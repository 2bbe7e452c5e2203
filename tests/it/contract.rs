//! docs/protocol.md Part 1 beyond OpenWhisk's own cases (canonical.rs), for each backend.

use serde_json::json;

use crate::support::{Backend, SENTINEL, Server, http, init_text};

const OK: &str = "{\"ok\":true}\n";
const MISSING_CODE: &str = "{\"error\":\"Missing main/no code to execute.\"}\n";

each_backend! {
    fn init_without_code_is_refused_and_leaves_the_runtime_uninitialized(backend: Backend) {
        let server = Server::in_process();
        for body in [
            json!({}),
            json!({"value": {}}),
            json!({"value": {"code": null, "main": "main"}}),
            json!({"value": {"code": "", "binary": false}}),
            json!({"value": null}),
        ] {
            server.init(&body).assert(403, MISSING_CODE);
        }
        server.init(&backend.init_guest("echo")).assert(200, OK);
    }

    fn the_seven_context_values_reach_the_action(backend: Backend) {
        let host = "https://openwhisk.example:443/api?x=a=b";
        let server = Server::builder().env("__OW_API_HOST", host).start();
        server.init(&backend.init_guest("context")).assert(200, OK);
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

    fn arrays_work_as_results_and_as_input(backend: Backend) {
        let server = Server::in_process_with_guest(backend, "array_result");
        server.run(json!({})).assert(200, "[\"a\",\"b\"]\n");
        let server = Server::in_process_with_guest(backend, "echo");
        server.run(json!(["x", 1])).assert(200, "[\"x\",1]\n");
    }

    fn newlines_in_the_request_body_are_not_passed_on(backend: Backend) {
        let server = Server::in_process_with_guest(backend, "echo");
        let reply = server.post("/run", b"{\n  \"value\": {\n    \"a\": \"line\\nbreak\"\n  }\n}\n");
        reply.assert(200, "{\"a\":\"line\\nbreak\"}\n");
    }

    /// OpenWhisk sends /init and /run as POST; any other method is refused before the body
    /// is read: it neither installs nor runs the action, nor writes into the action's logs
    /// (a GET /init once loaded was a 403 with its line on stderr).
    fn init_and_run_take_post_only(backend: Backend) {
        let server = Server::start();
        let init = backend.init_guest("echo_quietly").to_string();
        let refused = |method: &str, path: &str, body: &[u8]| {
            let reply = http(server.addr, method, path, body);
            reply.assert(
                405,
                &format!(
                    "{{\"error\":\"{path} takes POST only (as OpenWhisk's invoker sends it), \
                     not {method}\"}}\n"
                ),
            );
            assert_eq!(reply.header("allow"), Some("POST"), "{method} {path}");
        };
        for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
            refused(method, "/init", init.as_bytes());
            refused(method, "/run", b"{\"value\":{\"m\":1}}");
        }
        server.run(json!({"m": 1})).assert(500, "{\"error\":\"no action defined yet\"}\n");
        server.init(&backend.init_guest("echo_quietly")).assert(200, OK);
        for method in ["GET", "PUT"] {
            refused(method, "/init", init.as_bytes());
            refused(method, "/run", b"{\"value\":{\"m\":1}}");
        }
        server.run(json!({"m": 1})).assert(200, "{\"m\":1}\n");
        server.wait_sentinels(1);
        let sentinel = format!("{SENTINEL}\n");
        assert_eq!((server.stdout(), server.stderr()), (sentinel.clone(), sentinel));
    }

    fn a_malformed_run_body_is_a_400_and_the_action_keeps_serving(backend: Backend) {
        let server = Server::in_process_with_guest(backend, "echo");
        for body in [&b"{\"value\":"[..], b"[1,2]", b"\"text\""] {
            let reply = server.post("/run", body);
            assert_eq!(reply.status, 400, "{}", reply.text());
            let error = reply.error();
            assert!(error.starts_with("Error unmarshaling request: "), "{error}");
        }
        server.run(json!({"ok": 1})).assert(200, "{\"ok\":1}\n");
    }

    fn the_action_keeps_its_state_between_runs(backend: Backend) {
        // Not tiered: moving to the optimized code would start a fresh instance, once, at a
        // moment of its own (tested in wasm.rs).
        let server = Server::builder().in_process().arg("--wasm-compiler").arg("cranelift").start();
        server.init(&backend.init_guest("counter")).assert(200, "{\"ok\":true}\n");
        for count in 1..=3 {
            server.run(json!({})).assert(200, &format!("{{\"count\":{count}}}\n"));
        }
    }

    fn parallel_runs_each_get_their_own_answer(backend: Backend) {
        let server = Server::with_guest(backend, "echo");
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..48)
                .map(|n| {
                    let server = &server;
                    scope.spawn(move || (n, server.run(json!({"n": n, "pad": "x".repeat(n * 100)}))))
                })
                .collect();
            for run in runs {
                let (n, reply) = run.join().unwrap();
                assert_eq!(reply.status, 200);
                assert_eq!(reply.json(), json!({"n": n, "pad": "x".repeat(n * 100)}));
            }
        });
        server.wait_sentinels(48);
    }
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

/// No probe takes an empty 200 for health: a GET elsewhere is a 404 saying what is served,
/// before and after /init. Other methods keep the reference's empty 200.
#[test]
fn a_get_on_another_path_is_a_404_and_other_methods_get_the_references_empty_200() {
    let server = Server::in_process();
    let check = || {
        for path in [
            "/",
            "/ping",
            "/healthz",
            "/metrics",
            "/init/x",
            "/other?x=1",
        ] {
            let shown = path.split('?').next().unwrap();
            http(server.addr, "GET", path, b"").assert(
                404,
                &format!(
                    "{{\"error\":\"no such path: {shown} (the runtime serves POST /init and \
                     POST /run)\"}}\n"
                ),
            );
        }
        for (method, path) in [("POST", "/init/x"), ("PUT", "/metrics"), ("POST", "/")] {
            http(server.addr, method, path, b"").assert(200, "");
        }
    };
    check();
    server
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, OK);
    check();
}

#[test]
fn an_init_body_that_is_not_json_of_the_right_shape_is_a_400() {
    let server = Server::in_process();
    for body in [
        &b"not json"[..],
        b"{\"value\":{\"code\":42}}",
        b"{\"value\":{\"binary\":\"yes\",\"code\":\"x\"}}",
        b"{\"value\":{\"env\":[1],\"code\":\"x\"}}",
        b"",
    ] {
        let reply = server.post("/init", body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = reply.error();
        assert!(error.starts_with("Error unmarshaling request: "), "{error}");
    }
    server
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, OK);
}

#[test]
fn bad_base64_is_a_400() {
    let server = Server::in_process();
    let reply = server.init(&json!({"value": {"code": "%%% not base64", "binary": true}}));
    assert_eq!(reply.status, 400);
    let error = reply.error();
    assert!(error.starts_with("cannot decode the request: "), "{error}");
}

#[test]
fn base64_with_line_breaks_is_accepted() {
    let server = Server::in_process();
    let mut body = Backend::Native.init_guest("echo");
    let code = body["value"]["code"].as_str().unwrap().to_owned();
    let wrapped: Vec<String> = code
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    body["value"]["code"] = json!(wrapped.join("\r\n"));
    server.init(&body).assert(200, OK);
}

#[test]
fn bodies_over_the_caps_are_413_and_the_server_keeps_serving() {
    let server = Server::builder()
        .in_process()
        .arg("--max-init-bytes")
        .arg("200000")
        .arg("--max-run-bytes")
        .arg("1000")
        .start();
    let reply = server.post("/init", &vec![b' '; 300_000]);
    reply.assert_error(413, "--max-init-bytes");
    // The test actions are larger than this init cap; a script is not.
    let script = "#!/bin/sh\nwhile read -r l; do echo '{\"ok\":1}' >&3; done\n";
    server.init(&init_text(script)).assert(200, OK);
    let reply = server.run(json!({"big": "x".repeat(2000)}));
    reply.assert_error(413, "--max-run-bytes");
    server.run(json!({"small": 1})).assert(200, "{\"ok\":1}\n");
}

#[test]
fn sigterm_stops_the_server_and_its_action() {
    let server = Server::with_guest(Backend::Native, "pid");
    let pid = server.run(json!({})).json()["pid"].as_i64().unwrap() as i32;
    let in_container = server.container().is_some();
    assert_eq!(server.terminate(), Some(0));
    if in_container {
        // Its pid is the container's: the exit above, 0 after SIGTERM, is what counts.
        return;
    }
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
