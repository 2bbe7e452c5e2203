//! Starting and restarting actions: the ack, exec.env, init errors, crashes, for both backends.

use serde_json::json;

use crate::support::{Backend, Reply, Server, init_text, read, split_sentinels, zip_of};

const OK: &str = "{\"ok\":true}\n";

/// A native action counts as started once it has lived through the start probe (2 ms by
/// default); on a loaded machine an action that exits at once may take longer than that
/// to do so. The tests about such exits give it ample time.
const SURE_PROBE: &str = "500ms";

fn fixture(name: &str) -> String {
    String::from_utf8(read(&crate::support::fixture(name))).unwrap()
}

fn init_with_ack(backend: Backend, name: &str) -> (Server, Reply) {
    let server = Server::builder().env("OW_WAIT_FOR_ACK", "1").start();
    let reply = server.init(&backend.init_guest(name));
    (server, reply)
}

each_backend! {
    fn an_action_that_acks_starts_and_serves(backend: Backend) {
        for name in ["echo", "ack_spaced"] {
            let (server, reply) = init_with_ack(backend, name);
            reply.assert(200, OK);
            server.run(json!({"acked": name})).assert(200, &format!("{{\"acked\":\"{name}\"}}\n"));
        }
    }

    fn an_ack_that_is_not_json_fails_init_with_the_parser_message(backend: Backend) {
        let (_server, reply) = init_with_ack(backend, "ack_not_json");
        assert_eq!(reply.status, 502);
        let error = reply.error();
        assert!(error.starts_with("cannot start action: expected value"), "{error}");
    }

    fn an_ack_without_ok_fails_init(backend: Backend) {
        let (_server, reply) = init_with_ack(backend, "ack_not_ok");
        reply.assert(
            502,
            "{\"error\":\"cannot start action: The action did not initialize properly.\"}\n",
        );
    }

    fn an_exit_before_the_ack_fails_init_and_a_later_init_works(backend: Backend) {
        let (server, reply) = init_with_ack(backend, "exits_at_start");
        reply.assert(
            502,
            "{\"error\":\"cannot start action: Command exited abruptly during initialization.\"}\n",
        );
        server.init(&backend.init_guest("echo")).assert(200, OK);
        server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
    }

    fn an_ack_that_never_comes_times_out(backend: Backend) {
        let server =
            Server::builder().env("OW_WAIT_FOR_ACK", "1").arg("--ack-timeout").arg("300ms").start();
        let reply = server.init(&backend.init_guest("never_acks"));
        assert_eq!(reply.status, 502);
        let error = reply.error();
        assert!(error.contains("did not acknowledge its start within 300ms"), "{error}");
    }

    fn an_exit_during_init_is_a_502(backend: Backend) {
        let server = Server::builder().arg("--start-probe").arg(SURE_PROBE).start();
        let reply = server.init(&backend.init_guest("exits_at_start"));
        assert_eq!(reply.status, 502);
        // The reference's text, then how it exited.
        assert_eq!(
            reply.error(),
            "cannot start action: command exited: exit status: 1"
        );
        server.wait_stderr("exits_at_start: giving up");
    }

    fn an_exit_during_init_is_logged_when_asked(backend: Backend) {
        let server = Server::builder()
            .env("OW_LOG_INIT_ERROR", "1")
            .arg("--start-probe")
            .arg(SURE_PROBE)
            .start();
        let reply = server.init(&backend.init_guest("exits_at_start"));
        reply.assert(502, "{\"error\":\"Cannot start action. Check logs for details.\"}\n");
        server.wait_sentinels(1);
        let (count, err) = split_sentinels(&server.stderr());
        assert_eq!(count, 1);
        assert!(err.starts_with("exits_at_start: giving up\ncommand exited"), "{err}");
        assert_eq!(split_sentinels(&server.stdout()), (1, String::new()));
    }

    fn the_execution_env_must_match_when_set(backend: Backend) {
        let exec = read(&backend.guest("echo"));
        let name = match backend {
            Backend::Native => "exec",
            Backend::Wasm | Backend::Component => "exec.wasm",
        };
        let server = Server::builder().env("OW_EXECUTION_ENV", "wasmloop:1").start();
        let zip = zip_of(&[(name, &exec, 0o755), ("exec.env", b"wasmloop:1\n", 0o644)]);
        server.init(&crate::support::init_binary(&zip)).assert(200, OK);

        let server = Server::builder().env("OW_EXECUTION_ENV", "wasmloop:1").start();
        let zip = zip_of(&[(name, &exec, 0o755), ("exec.env", b"other:2", 0o644)]);
        server.init(&crate::support::init_binary(&zip)).assert(
            502,
            "{\"error\":\"cannot start action: Execution environment version mismatch. See logs for details.\"}\n",
        );
        server.wait_stdout("Actual value");
        assert_eq!(
            server.stdout(),
            "Expected exec.env should start with wasmloop:1\nActual value: other:2\n"
        );
    }

    fn an_exit_during_a_run_is_a_400_and_the_next_run_works(backend: Backend) {
        let server = Server::with_guest(backend, "exits_when_asked");
        server
            .run(json!({"exit": 3}))
            .assert(400, &format!("{{\"error\":\"command exited: exit status: {}\"}}\n", backend.exit_code(3)));
        server.run(json!({"after": "exit"})).assert(200, "{\"after\":\"exit\"}\n");
        let reply = server.run(json!({"abort": true}));
        assert_eq!(reply.status, 400);
        let expected = match backend {
            Backend::Native => "command exited: signal: 6",
            Backend::Wasm | Backend::Component => {
                "command exited: the action panicked or aborted (wasm trap: wasm `unreachable` \
                 instruction executed)"
            }
        };
        assert!(reply.error().starts_with(expected), "{}", reply.text());
        server.run(json!({"after": "abort"})).assert(200, "{\"after\":\"abort\"}\n");
        server.wait_sentinels(4);
    }
}

#[test]
fn a_restart_that_fails_gives_an_error_on_each_run() {
    let marker = tempfile::tempdir().unwrap();
    let server = Server::builder()
        .arg("--start-probe")
        .arg(SURE_PROBE)
        .start();
    let mut body = init_text(&fixture("fails_on_restart.sh"));
    body["value"]["env"] = json!({"MARKER": marker.path().join("started")});
    server.init(&body).assert(200, OK);
    server
        .run(json!({}))
        .assert(400, "{\"error\":\"command exited: exit status: 3\"}\n");
    for _ in 0..2 {
        server
            .run(json!({}))
            .assert_error(502, "cannot start action: command exited: exit status: ");
    }
    server.wait_sentinels(3);
}

#[test]
fn an_upload_that_cannot_be_unpacked_is_logged_when_asked() {
    let server = Server::builder().env("OW_LOG_INIT_ERROR", "yes").start();
    let reply = server.init(&crate::support::init_binary(
        b"PK\x03\x04 this is not really a zip",
    ));
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
    reply.assert_error(
        502,
        "cannot start action: it is neither an executable for this machine \
         nor a script starting with #! (it starts with `print('no compil…`)",
    );
}

#[test]
fn a_native_script_that_never_acks_times_out() {
    let server = Server::builder()
        .env("OW_WAIT_FOR_ACK", "1")
        .arg("--ack-timeout")
        .arg("300ms")
        .start();
    let reply = server.init(&init_text(&fixture("never_acks.sh")));
    assert_eq!(reply.status, 502);
    assert!(
        reply
            .error()
            .contains("did not acknowledge its start within 300ms")
    );
}

#[test]
fn a_native_action_starts_with_sigpipe_at_its_default_and_no_signal_blocked() {
    // Rust ignores SIGPIPE and ignored signals survive exec: an action inheriting that
    // would see `yes | head -1` fail with EPIPE errors instead of ending quietly.
    let script = "#!/bin/sh\n\
        while read -r line; do\n\
          ign=$(awk '/^SigIgn/ {print $2}' /proc/self/status)\n\
          blk=$(awk '/^SigBlk/ {print $2}' /proc/self/status)\n\
          echo \"{\\\"ign\\\":\\\"$ign\\\",\\\"blk\\\":\\\"$blk\\\"}\" >&3\n\
        done\n";
    let server = Server::start();
    server.init(&init_text(script)).assert(200, OK);
    let reply = server.run(json!({}));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let masks = reply.json();
    let hex = |key: &str| u64::from_str_radix(masks[key].as_str().unwrap(), 16).unwrap();
    const SIGPIPE: u32 = 13;
    assert_eq!(
        hex("ign") & (1 << (SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {masks}"
    );
    assert_eq!(hex("blk"), 0, "signals blocked: {masks}");
}
