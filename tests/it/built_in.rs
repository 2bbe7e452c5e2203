//! An action built into a derived image (`--action`, `WASMLOOP_ACTION`): loaded at start-up,
//! then served after the platform's `/init` without code.

use serde_json::json;

use crate::support::Server;

const OK: &str = "{\"ok\":true}\n";

each_backend! {
    /// An image derived `FROM wasmloop` with its action copied in: OpenWhisk starts it and
    /// sends an `/init` without code, which finds the action started already.
    fn a_built_in_action_serves_after_an_init_without_code(backend: Backend) {
        let guest = backend.guest("counter");
        let server = Server::builder()
            .env("WASMLOOP_ACTION", guest.to_str().unwrap())
            .start();
        let codeless = json!({"value": {"main": "main", "env": {"__OW_NAMESPACE": "guest"}}});
        server.init(&codeless).assert(200, OK);
        server.run(json!({})).assert(200, "{\"count\":1}\n");
        // A second one (the platform re-sends it after a failed attempt) is harmless.
        server.init(&codeless).assert(200, OK);
        server.run(json!({})).assert(200, "{\"count\":2}\n");
        // Code for another action is refused: the image serves its own.
        server
            .init(&backend.init_guest("echo"))
            .assert_error(403, "this runtime serves the action built into its image");
        server.run(json!({})).assert(200, "{\"count\":3}\n");
    }
}

#[test]
fn a_built_in_action_that_cannot_start_stops_the_server_with_the_reason() {
    let server = Server::builder()
        .env("WASMLOOP_ACTION", "/nonexistent/exec.wasm")
        .start();
    assert_eq!(server.wait_exit(), Some(1));
    // The process may be gone before its last words are read from the pipe.
    server.wait_stderr("cannot read the action /nonexistent/exec.wasm");
}
