//! An action built into a derived image (`--action`, `WASMLOOP_ACTION`): loaded at start-up,
//! then served after the platform's `/init` without code.

use serde_json::json;

use crate::support::{Backend, Server};

const OK: &str = "{\"ok\":true}\n";

each_backend! {
    /// A container whose root is read-only and that has no writable folder (Knative's
    /// manifest): the built-in action runs where it lies, nothing is unpacked, and a
    /// compile cache that cannot be written is off with one line saying so.
    fn a_built_in_action_runs_where_it_lies_without_a_writable_folder(backend: Backend) {
        let guest = backend.guest("counter");
        // Folders that cannot be made, even by root.
        let server = Server::builder()
            .env("WASMLOOP_ACTION", guest.to_str().unwrap())
            .env("WASMLOOP_ACTION_DIR", "/proc/wasmloop-nowhere/actions")
            .env("WASMLOOP_CACHE_DIR", "/proc/wasmloop-nowhere/cache")
            .process()
            .start();
        server
            .init(&json!({"value": {"main": "main"}}))
            .assert(200, OK);
        server.run(json!({})).assert(200, "{\"count\":1}\n");
        let stderr = server.stderr();
        let said = stderr.matches("the compile cache is off").count();
        if backend == Backend::Native {
            assert_eq!(said, 0, "no compile, no word of its cache: {stderr}");
        } else {
            assert_eq!(said, 1, "{stderr}");
            assert!(
                stderr.contains("/proc/wasmloop-nowhere/cache cannot be made")
                    && stderr.contains("give --cache-dir (WASMLOOP_CACHE_DIR) a folder"),
                "{stderr}"
            );
        }
    }

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
