//! The native backend: start-up (ack, exec.env, init errors), crashes, restarts, concurrency.

use std::path::Path;

use serde_json::json;

use crate::support::{Server, guest, init_binary, init_text, read, split_sentinels, zip_of};

const OK: &str = "{\"ok\":true}\n";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    String::from_utf8(read(&path)).unwrap()
}

fn init_guest_with_ack(name: &str) -> (Server, crate::support::Reply) {
    let server = Server::builder().env("OW_WAIT_FOR_ACK", "1").start();
    let reply = server.init(&init_binary(&read(&guest(name))));
    (server, reply)
}

#[test]
fn an_action_that_acks_starts_and_serves() {
    for name in ["echo", "ack_spaced"] {
        let (server, reply) = init_guest_with_ack(name);
        reply.assert(200, OK);
        server
            .run(json!({"acked": name}))
            .assert(200, &format!("{{\"acked\":\"{name}\"}}\n"));
    }
}

#[test]
fn an_ack_that_is_not_json_fails_init_with_the_parser_message() {
    let (_server, reply) = init_guest_with_ack("ack_not_json");
    assert_eq!(reply.status, 502);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("cannot start action: expected value"),
        "{error}"
    );
}

#[test]
fn an_ack_without_ok_fails_init() {
    let (_server, reply) = init_guest_with_ack("ack_not_ok");
    reply.assert(
        502,
        "{\"error\":\"cannot start action: The action did not initialize properly.\"}\n",
    );
}

#[test]
fn an_exit_before_the_ack_fails_init_and_a_later_init_works() {
    let (server, reply) = init_guest_with_ack("exits_at_start");
    reply.assert(
        502,
        "{\"error\":\"cannot start action: Command exited abruptly during initialization.\"}\n",
    );
    server
        .init(&init_binary(&read(&guest("echo"))))
        .assert(200, OK);
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
}

#[test]
fn an_ack_that_never_comes_times_out() {
    let server = Server::builder()
        .env("OW_WAIT_FOR_ACK", "1")
        .arg("--ack-timeout")
        .arg("300ms")
        .start();
    let started = std::time::Instant::now();
    let reply = server.init(&init_text(&fixture("never_acks.sh")));
    assert_eq!(reply.status, 502);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("did not acknowledge its start within 300ms"),
        "{error}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn an_exit_during_init_is_a_502() {
    let server = Server::start();
    let reply = server.init(&init_binary(&read(&guest("exits_at_start"))));
    reply.assert(502, "{\"error\":\"cannot start action: command exited\"}\n");
}

#[test]
fn an_exit_during_init_is_logged_when_asked() {
    let server = Server::builder().env("OW_LOG_INIT_ERROR", "1").start();
    let reply = server.init(&init_binary(&read(&guest("exits_at_start"))));
    reply.assert(
        502,
        "{\"error\":\"Cannot start action. Check logs for details.\"}\n",
    );
    server.wait_sentinels(1);
    let (count, err) = split_sentinels(&server.stderr());
    assert_eq!(count, 1);
    assert!(err.ends_with("command exited"), "{err}");
    assert_eq!(split_sentinels(&server.stdout()), (1, String::new()));
}

#[test]
fn an_upload_that_cannot_be_unpacked_is_logged_when_asked() {
    let server = Server::builder().env("OW_LOG_INIT_ERROR", "yes").start();
    let reply = server.init(&init_binary(b"PK\x03\x04 this is not really a zip"));
    reply.assert(
        502,
        "{\"error\":\"The action failed to generate or locate a binary. See logs for details.\"}\n",
    );
    server.wait_sentinels(1);
    let (_, err) = split_sentinels(&server.stderr());
    assert!(err.contains("cannot read zip archive"), "{err}");
}

#[test]
fn an_upload_that_is_not_executable_fails_to_start() {
    let server = Server::start();
    let reply = server.init(&init_text("print('no compiler here')"));
    reply.assert(502, "{\"error\":\"cannot start action: command exited\"}\n");
}

#[test]
fn the_execution_env_must_match_when_set() {
    let exec = read(&guest("echo"));
    let server = Server::builder()
        .env("OW_EXECUTION_ENV", "wasmloop:1")
        .start();
    let zip = zip_of(&[("exec", &exec, 0o755), ("exec.env", b"wasmloop:1\n", 0o644)]);
    server.init(&init_binary(&zip)).assert(200, OK);

    let server = Server::builder()
        .env("OW_EXECUTION_ENV", "wasmloop:1")
        .start();
    let zip = zip_of(&[("exec", &exec, 0o755), ("exec.env", b"other:2", 0o644)]);
    server.init(&init_binary(&zip)).assert(
        502,
        "{\"error\":\"cannot start action: Execution environment version mismatch. See logs for details.\"}\n",
    );
    server.wait_stdout("Actual value");
    assert_eq!(
        server.stdout(),
        "Expected exec.env should start with wasmloop:1\nActual value: other:2\n"
    );
}

#[test]
fn an_exit_during_a_run_is_a_400_and_the_next_run_works() {
    let server = Server::with_guest("exits_when_asked");
    server
        .run(json!({"exit": 3}))
        .assert(400, "{\"error\":\"command exited: exit status: 3\"}\n");
    server
        .run(json!({"after": "exit"}))
        .assert(200, "{\"after\":\"exit\"}\n");
    let reply = server.run(json!({"abort": true}));
    assert_eq!(reply.status, 400);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("command exited: signal: 6"), "{error}");
    server
        .run(json!({"after": "abort"}))
        .assert(200, "{\"after\":\"abort\"}\n");
    server.wait_sentinels(4);
}

#[test]
fn a_restart_that_fails_gives_an_error_on_each_run() {
    let marker = tempfile::tempdir().unwrap();
    let server = Server::start();
    let mut body = init_text(&fixture("fails_on_restart.sh"));
    body["value"]["env"] = json!({"MARKER": marker.path().join("started")});
    server.init(&body).assert(200, OK);
    server
        .run(json!({}))
        .assert(400, "{\"error\":\"command exited: exit status: 3\"}\n");
    for _ in 0..2 {
        server
            .run(json!({}))
            .assert(502, "{\"error\":\"cannot start action: command exited\"}\n");
    }
    server.wait_sentinels(3);
}

#[test]
fn parallel_runs_each_get_their_own_answer() {
    let server = Server::with_guest("echo");
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

#[test]
fn the_action_keeps_its_state_between_runs() {
    let server = Server::with_guest("pid");
    let first = server.run(json!({})).json();
    assert_eq!(
        server.run(json!({})).json(),
        first,
        "one child serves every run"
    );
}
