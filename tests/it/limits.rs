//! Resource bounds: what the operator allows to run, how many instances a pool holds, and
//! what a hostile upload or guest gets when it reaches a bound.

use serde_json::json;

use crate::support::{Backend, Server, init_text};

#[test]
fn an_image_for_sandboxed_actions_refuses_native_uploads_and_never_runs_them() {
    let server = Server::builder()
        .env("WASMLOOP_BACKENDS", "wasm,component")
        .start();
    let marker = server.action_dir.path().join("ran");
    let script = format!(
        "#!/bin/sh\ntouch {}\nwhile read line; do echo '{{}}' >&3; done\n",
        marker.display()
    );
    let refused = server.init(&init_text(&script));
    refused.assert(
        502,
        "{\"error\":\"cannot start action: this upload is a native executable or script (the \
         native backend), which this runtime does not run: --backends (WASMLOOP_BACKENDS) \
         allows wasm,component. Build the action as WebAssembly (a wasm32-wasip1 module, or a \
         wasm32-wasip2 component), or deploy it on an image that allows native\"}\n",
    );
    assert!(!marker.exists(), "the refused script ran");
    let refused = server.init(&Backend::Native.init_guest("echo"));
    refused.assert_error(502, "allows wasm,component");
    // What the setting allows still runs, after the refusals.
    server
        .init(&Backend::Component.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
}

#[test]
fn each_webassembly_kind_is_refused_where_the_setting_leaves_it_out() {
    let modules_only = Server::builder().args(&["--backends", "wasm"]).start();
    let refused = modules_only.init(&Backend::Component.init_guest("echo"));
    refused.assert_error(
        502,
        "this upload is a WebAssembly component (WASI 0.2) (the component backend), which this \
         runtime does not run: --backends (WASMLOOP_BACKENDS) allows wasm. Build it as a module \
         (Rust: --target wasm32-wasip1), or add component to the setting",
    );
    modules_only
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");

    let no_modules = Server::builder()
        .args(&["--backends", "component,native"])
        .start();
    let refused = no_modules.init(&Backend::Wasm.init_guest("echo"));
    refused.assert_error(
        502,
        "this upload is a WebAssembly module (WASI preview 1) (the wasm backend)",
    );
    refused.assert_error(502, "allows component,native");
    no_modules
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
}

#[test]
fn an_unknown_backend_is_refused_at_start_with_the_ones_there_are() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["serve", "--backends", "wasm,docker"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value 'docker' for '--backends <LIST>'")
            && stderr.contains("[possible values: wasm, component, native]"),
        "{stderr}"
    );
}
