//! Resource bounds: what the operator allows to run, how many instances a pool holds, and
//! what a hostile upload or guest gets when it reaches a bound.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Backend, Server, init_binary, init_text, read, zip_of};

const OK: &str = "{\"ok\":true}\n";

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
         allows wasm,component. Build it as a module (Rust: `cargo build --target wasm32-wasip1`) or as a \
         component (Rust: `cargo build --target wasm32-wasip2`), or add native to the setting (an image that \
         allows it)\"}\n",
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
         (Rust: `cargo build --target wasm32-wasip1`), or add component to the setting",
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
            && stderr.contains("[possible values: http, http-p3, wasm, component, native]"),
        "{stderr}"
    );
}

each_backend! {
    fn two_hundred_activations_at_once_get_two_hundred_instances_and_their_own_answers(
        backend: Backend
    ) {
        // Past the 128 instances the engine's pool once reserved whatever the setting.
        let server = Server::builder().args(&["--concurrency", "200"]).start();
        server.init(&backend.init_guest("slow")).assert(200, OK);
        let server = &server;
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..200)
                .map(|n| scope.spawn(move || (n, server.run(json!({"n": n, "sleep_ms": 4000})))))
                .collect();
            // All of them are running at once: none could start while another held its instance.
            server.wait_stderr_count("slow: started", 200);
            for run in runs {
                let (n, reply) = run.join().unwrap();
                reply.assert(200, &format!("{{\"n\":{n},\"sleep_ms\":4000}}\n"));
            }
        });
    }
}

/// How many descriptors the server process holds, once it has settled on `expected` (a
/// connection of the test's own may take a moment to be closed).
/// How many descriptors the server holds once the count has held still for 300 ms (the
/// holding servers compile with Cranelift, so no background compile comes later).
fn settled(server: &Server) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
            .unwrap()
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut last, mut since) = (count(), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = count();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(300) || Instant::now() > deadline {
            return last;
        }
    }
}

fn settles_at(server: &Server, expected: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
            .unwrap()
            .count();
        if open == expected || Instant::now() > deadline {
            return open;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server running `holds_descriptors` for `backend` from a zip, so that it has files in
/// its `/action` folder to open.
fn holding_server(backend: Backend, args: &[&str]) -> Server {
    let server = Server::builder()
        .args(&["--wasm-compiler", "cranelift"])
        .args(args)
        .start();
    let guest = read(&backend.guest("holds_descriptors"));
    let zip = zip_of(&[("exec.wasm", &guest, 0o644), ("data.txt", b"data", 0o644)]);
    server.init(&init_binary(&zip)).assert(200, OK);
    server
}

#[test]
fn files_past_an_instances_cap_fail_in_the_guest_and_the_logs_name_the_cap() {
    for backend in [Backend::Wasm, Backend::Component] {
        let server = holding_server(backend, &["--max-instance-files", "5"]);
        let idle = settled(&server);
        let reply = server.run(json!({"files": 8}));
        assert_eq!(reply.status, 200, "{backend:?}: {}", reply.text());
        let held = reply.json();
        assert_eq!(held["files"], 5, "{backend:?}: {held}");
        let error = held["error"].as_str().unwrap_or_default().to_owned();
        eprintln!("{backend:?}: the guest's error at the cap: {error}");
        assert!(!error.is_empty(), "{backend:?}: {held}");
        server.wait_stderr(
            "wasmloop: refused to open a file: too many open files for this instance: 5 \
             (--max-instance-files, WASMLOOP_MAX_INSTANCE_FILES)",
        );
        assert_eq!(settles_at(&server, idle + 5), idle + 5, "{backend:?}");
        // What it closes makes room again.
        let reply = server.run(json!({"release": true, "files": 5}));
        reply.assert(200, "{\"connections\":0,\"error\":null,\"files\":5}\n");
        // An instance that ends is dropped with all it held: its successor starts from none.
        assert_eq!(server.run(json!({"exit": true})).status, 400, "{backend:?}");
        let restarted = server.run(json!({"files": 0}));
        restarted.assert(200, "{\"connections\":0,\"error\":null,\"files\":0}\n");
        assert_eq!(
            settles_at(&server, idle),
            idle,
            "{backend:?}: held files not closed"
        );
    }
}

#[test]
fn guests_never_take_the_descriptors_the_runtime_keeps_for_itself() {
    // With nofile 256, the runtime keeps 128 for itself: a guest whose own cap is far
    // higher gets the rest and no more.
    let server = Server::builder()
        .nofile(256)
        .args(&["--max-instance-files", "1000"])
        .start();
    let guest = read(&Backend::Wasm.guest("holds_descriptors"));
    let zip = zip_of(&[("exec.wasm", &guest, 0o644), ("data.txt", b"data", 0o644)]);
    server.init(&init_binary(&zip)).assert(200, OK);
    let held = server.run(json!({"files": 1000})).json();
    let files = held["files"].as_u64().unwrap();
    assert!((1..128).contains(&files), "{held}");
    assert!(held["error"].is_string(), "{held}");
    server.wait_stderr(
        "wasmloop: refused to open a file: the runtime holds 128 descriptors, all that the \
         container's open-file limit (nofile) leaves its guests",
    );
    // What it kept serves: connections are accepted, activations answered, and an instance
    // that ends is replaced.
    for _ in 0..20 {
        server.run(json!({"files": 0})).assert(
            200,
            &format!("{{\"connections\":0,\"error\":null,\"files\":{files}}}\n"),
        );
    }
    assert_eq!(server.run(json!({"exit": true})).status, 400);
    server
        .run(json!({"files": 3}))
        .assert(200, "{\"connections\":0,\"error\":null,\"files\":3}\n");
}

#[test]
fn sockets_past_a_components_cap_fail_in_the_guest_and_the_logs_name_the_cap() {
    // Connections wait in its backlog: nobody needs to accept them.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap().to_string();
    let server = holding_server(
        Backend::Component,
        &["--max-instance-sockets", "4", "--allow-outbound", &to],
    );
    let idle = settled(&server);
    let reply = server.run(json!({"tcp": to, "connections": 6}));
    let held = reply.json();
    assert_eq!(held["connections"], 4, "{held}");
    let error = held["error"].as_str().unwrap_or_default().to_owned();
    eprintln!("the guest's error at the cap: {error}");
    assert!(!error.is_empty(), "{held}");
    server.wait_stderr(
        "wasmloop: refused to open a socket: too many open sockets for this instance: 4 \
         (--max-instance-sockets, WASMLOOP_MAX_INSTANCE_SOCKETS",
    );
    assert_eq!(settles_at(&server, idle + 4), idle + 4);
    let reply = server.run(json!({"release": true, "tcp": to, "connections": 4}));
    reply.assert(200, "{\"connections\":4,\"error\":null,\"files\":0}\n");
    assert_eq!(server.run(json!({"exit": true})).status, 400);
    server
        .run(json!({"files": 0}))
        .assert(200, "{\"connections\":0,\"error\":null,\"files\":0}\n");
    assert_eq!(settles_at(&server, idle), idle, "held sockets not closed");
}

#[test]
fn unsent_http_requests_and_headers_a_component_hoards_stay_within_its_resources() {
    let server = Server::start();
    server
        .init(&Backend::Component.init_guest("hoards_http"))
        .assert(200, OK);
    let before = server.resident();
    // A few are fine, and the instance goes on.
    let reply = server.run(json!({"requests": 10, "headers": 10}));
    reply.assert(200, "{\"headers\":10,\"requests\":10}\n");
    // Past what one instance may hold, the guest traps with the bound in its error...
    for hoard in [json!({"requests": 5000}), json!({"headers": 5000})] {
        let reply = server.run(hoard);
        reply.assert_error(
            400,
            "the component holds 1024 WASI resources (files, streams, sockets, HTTP requests, \
             bodies and headers), the most one instance may: drop those it is done with",
        );
    }
    // ...and what it held is bounded: 1024 bodies of 1 MiB each would be a gigabyte.
    let grown = server.resident().saturating_sub(before);
    eprintln!("resident memory grew by {} KiB", grown >> 10);
    assert!(grown < 96 << 20, "grew by {grown} bytes");
    server
        .run(json!({"requests": 1}))
        .assert(200, "{\"headers\":0,\"requests\":1}\n");
}

#[test]
fn stray_stdout_lines_past_a_bound_are_counted_not_kept() {
    let server = Server::with_guest(Backend::Wasm, "floods_stdout");
    let before = server.resident();
    // Two million short lines after the answer: ~4 MB written, ~60 MB as queued lines.
    server
        .run(json!({"lines": 2_000_000}))
        .assert(200, "{\"lines\":2000000}\n");
    server
        .run(json!({"lines": 0}))
        .assert(200, "{\"lines\":0}\n");
    server.wait_stderr("more bytes the action wrote on stdout after its result, unread");
    server.wait_stderr("more lines (");
    let grown = server.resident().saturating_sub(before);
    eprintln!("resident memory grew by {} KiB", grown >> 10);
    assert!(grown < 32 << 20, "grew by {grown} bytes");
}
