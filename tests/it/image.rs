//! The runtime image, run as OpenWhisk's invoker runs it (scripts/image-test.sh builds it
//! and runs these with `WASMLOOP_TEST_IMAGE` set; without an image they are skipped).

use std::time::Duration;

use serde_json::json;

use crate::support::{Backend, Server, docker, init_text, test_image};

const OK: &str = "{\"ok\":true}\n";
const NEEDS_IMAGE: &str = "these checks need the image: run scripts/image-test.sh";

fn image() -> String {
    test_image().expect(NEEDS_IMAGE)
}

fn container(docker_args: &[&str]) -> Server {
    Server::builder().start_container(&image(), docker_args)
}

/// `docker build` of `context` as `tag` (without BuildKit, which needs a registry here).
fn build_image(context: &std::path::Path, tag: &str) {
    let built = std::process::Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(context)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

fn container_id(server: &Server) -> &str {
    server.container().expect("a container")
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn it_runs_as_an_unprivileged_user_and_reports_its_size_and_idle_memory() {
    let server = container(&[]);
    let id = container_id(&server);
    assert_eq!(docker(&["exec", id, "id", "-u"]), "10001");
    let size = docker(&["image", "inspect", "-f", "{{.Size}}", &image()]);
    let memory = docker(&["stats", "--no-stream", "--format", "{{.MemUsage}}", id]);
    // Figures for the record, in the test's output: nothing to assert about them.
    eprintln!("image size: {size} bytes; idle container: {memory}");
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn a_guest_growing_past_what_the_container_holds_traps_with_the_cap_and_the_container_lives() {
    for (limit, cap_mib) in [("128m", 80), ("256m", 192)] {
        let server = container(&["--memory", limit, "--memory-swap", limit]);
        let reply = server.grow_wasm_guest_by(cap_mib + 40);
        assert_eq!(reply.status, 400, "{limit}: {}", reply.text());
        let cap = format!("past its cap of {} bytes ({cap_mib} MiB)", cap_mib << 20);
        assert!(reply.error().contains(&cap), "{limit}: {}", reply.text());
        // The kernel did not step in: the same container answers the next activation.
        server
            .run(json!({"mib": 1}))
            .assert(200, "{\"allocated_mib\":1}\n");
        let id = container_id(&server);
        assert_eq!(
            docker(&["inspect", "-f", "{{.State.OOMKilled}}", id]),
            "false"
        );
    }
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn a_paused_container_serves_again_once_unpaused() {
    for backend in [Backend::Wasm, Backend::Native] {
        let server = container(&[]);
        server.init(&backend.init_guest("counter")).assert(200, OK);
        server.run(json!({})).assert(200, "{\"count\":1}\n");
        // The invoker pauses a container after 10 s without activations.
        std::thread::sleep(Duration::from_secs(10));
        let id = container_id(&server);
        docker(&["pause", id]);
        std::thread::sleep(Duration::from_secs(2));
        docker(&["unpause", id]);
        server.run(json!({})).assert(200, "{\"count\":2}\n");
    }
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn orphans_of_native_actions_are_reaped() {
    let server = container(&[]);
    // Each activation leaves a process whose parent is gone: it is handed to PID 1.
    let script = "#!/bin/sh\nwhile read -r l; do (sleep 0.05 &); echo '{\"ok\":1}' >&3; done\n";
    server.init(&init_text(script)).assert(200, OK);
    for _ in 0..20 {
        server.run(json!({})).assert(200, "{\"ok\":1}\n");
    }
    std::thread::sleep(Duration::from_millis(500));
    let zombies = docker(&[
        "exec",
        container_id(&server),
        "sh",
        "-c",
        "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l",
    ]);
    assert_eq!(zombies, "0", "zombies left in the container");
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn a_read_only_root_with_a_tmpfs_serves() {
    let server = container(&["--read-only", "--tmpfs", "/tmp"]);
    server
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, OK);
    server.run(json!({"a": 1})).assert(200, "{\"a\":1}\n");
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn a_derived_image_serves_its_built_in_action_after_an_init_without_code() {
    let context = tempfile::tempdir().unwrap();
    std::fs::copy(
        Backend::Wasm.guest("counter"),
        context.path().join("exec.wasm"),
    )
    .unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!(
            "FROM {}\nCOPY exec.wasm /opt/action/exec.wasm\nENV WASMLOOP_ACTION=/opt/action/exec.wasm\n",
            image()
        ),
    )
    .unwrap();
    let derived = format!("{}-derived", image());
    build_image(context.path(), &derived);
    let server = Server::builder().start_container(&derived, &[]);
    // As the invoker sends it to an image created without a file.
    let codeless =
        json!({"value": {"main": "main", "env": {"__OW_ACTION_NAME": "/guest/counter"}}});
    server.init(&codeless).assert(200, OK);
    server.run(json!({})).assert(200, "{\"count\":1}\n");
    server.run(json!({})).assert(200, "{\"count\":2}\n");
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn forged_artifacts_leave_a_128m_container_up_and_are_answered_at_once() {
    // A real artifact of the image's own binary, so that its engine is the one trusted:
    // each forged one then passes the key and engine checks, and meets the code's.
    let keys = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(Backend::Wasm.guest("echo"), work.path().join("echo.wasm")).unwrap();
    let mount = |dir: &tempfile::TempDir, at: &str| format!("{}:{at}", dir.path().display());
    let (keys_at, work_at) = (mount(&keys, "/keys"), mount(&work, "/work"));
    // As root, the owner of the sign key (the image's user may not read it).
    let image = image();
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--rm", "--user", "0", "-v", &keys_at, "-v", &work_at];
        all.push(&image);
        all.extend_from_slice(args);
        docker(&all)
    };
    run(&["keygen", "/keys"]);
    run(&[
        "compile",
        "/work/echo.wasm",
        "--output",
        "/work/artifact.zip",
        "--sign-key",
        "/keys/sign.key",
    ]);
    let real = std::fs::read(work.path().join("artifact.zip")).unwrap();
    let verify = format!(
        "{}:/keys/verify.key:ro",
        keys.path().join("verify.key").display()
    );
    for module in [false, true] {
        for (what, upload, says) in crate::signed::forged_artifacts(&real, module) {
            let server = Server::builder()
                .args(&["-v", "--trust-key", "/keys/verify.key"])
                .start_container(
                    &image,
                    &["--memory", "128m", "--memory-swap", "128m", "-v", &verify],
                );
            let started = std::time::Instant::now();
            let reply = server.init(&crate::support::init_binary(&upload));
            let took = started.elapsed();
            eprintln!("{what}, module {module}: {} in {took:?}", reply.status);
            if module {
                assert_eq!(reply.status, 200, "{what}: {}", reply.text());
                server.wait_stderr(says);
                server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
            } else {
                reply.assert_error(502, says);
            }
            // A liveness bound, generous for a loaded machine: the refusal reads no more
            // than the upload, where inflating what it claims took the container down.
            assert!(took < Duration::from_secs(10), "{what}: {took:?}");
            let id = container_id(&server);
            assert_eq!(
                docker(&[
                    "inspect",
                    "-f",
                    "{{.State.Running}} {{.State.OOMKilled}}",
                    id
                ]),
                "true false",
                "{what}"
            );
        }
    }
}

/// The Dockerfile's `sandboxed` stage, which scripts/image-test.sh builds beside the stock
/// image.
fn sandboxed() -> Server {
    let image = std::env::var("WASMLOOP_TEST_SANDBOXED_IMAGE")
        .ok()
        .filter(|i| !i.is_empty())
        .expect(NEEDS_IMAGE);
    Server::builder().start_container(&image, &[])
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn the_sandboxed_image_refuses_native_code_and_gives_each_activation_a_fresh_instance() {
    let server = sandboxed();
    // What the stock image would run with the container's privileges.
    server
        .init(&init_text(
            "#!/bin/sh\nwhile read line; do echo '{}' >&3; done\n",
        ))
        .assert_error(
            502,
            "which this runtime does not run: --backends (WASMLOOP_BACKENDS) allows \
             http,wasm,component",
        );
    server
        .init(&Backend::Wasm.init_guest("counter"))
        .assert(200, OK);
    // Nothing of the activation before: each count starts again.
    for _ in 0..3 {
        server.run(json!({})).assert(200, "{\"count\":1}\n");
    }
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn the_sandboxed_image_denies_components_the_network_in_json_records_of_the_activation() {
    let server = sandboxed();
    server
        .init(&Backend::Component.init_guest("http_get"))
        .assert(200, OK);
    let run = json!({
        "value": {"url": "http://192.0.2.1/"},
        "activation_id": "a-denied",
        "namespace": "guest",
        "action_name": "/guest/get",
    });
    let reply = server.post("/run", run.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().contains("HttpRequestDenied"),
        "{}",
        reply.text()
    );
    server.wait_stderr("denied an HTTP request to 192.0.2.1:80");
    let stderr = server.stderr();
    let record: serde_json::Value = stderr
        .lines()
        .find(|line| line.contains("denied an HTTP request"))
        .map(|line| serde_json::from_str(line).expect("a JSON record"))
        .unwrap();
    assert_eq!(record["activationId"], "a-denied", "{record}");
    assert_eq!(record["action"], "/guest/get", "{record}");
    assert_eq!(record["stream"], "stderr", "{record}");
}

/// One GET on a fresh connection: the status and the body.
fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn plain_http_runs_as_kubernetes_runs_it_port_probes_read_only_root_and_sigterm() {
    let sandboxed = std::env::var("WASMLOOP_TEST_SANDBOXED_IMAGE")
        .ok()
        .filter(|i| !i.is_empty())
        .expect(NEEDS_IMAGE);
    // The two-line Dockerfile deploy/ documents, from this build's sandboxed image.
    let context = tempfile::tempdir().unwrap();
    std::fs::copy(
        Backend::Wasm.guest("echo"),
        context.path().join("hello.wasm"),
    )
    .unwrap();
    let documented = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/Dockerfile.action"
    ))
    .unwrap();
    assert!(
        documented.contains("FROM wasmloop:sandboxed"),
        "{documented}"
    );
    std::fs::write(
        context.path().join("Dockerfile"),
        documented.replace("FROM wasmloop:sandboxed", &format!("FROM {sandboxed}")),
    )
    .unwrap();
    let derived = format!("{sandboxed}-hello");
    build_image(context.path(), &derived);
    // As deploy/kubernetes.yaml runs it: PORT set, root read-only, /tmp writable.
    let id = docker(&[
        "run",
        "-d",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--cap-drop",
        "ALL",
        "-e",
        "PORT=9000",
        "-e",
        "WASMLOOP_PROTOCOL=http",
        "-e",
        "WASMLOOP_ACTION=/action/hello.wasm",
        "-e",
        "WASMLOOP_CACHE_DIR=/tmp/wasmloop-cache",
        "-e",
        "WASMLOOP_ACTION_DIR=/tmp",
        "-e",
        "WASMLOOP_METRICS_LISTEN=0.0.0.0:9090",
        &derived,
        "serve",
    ]);
    let ip = docker(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id]);
    let addr: std::net::SocketAddr = format!("{ip}:9000").parse().unwrap();
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nothing on $PORT: {}",
            docker(&["logs", &id])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(addr, "/.well-known/wasmloop/health").0, 200);
    assert_eq!(get(addr, "/.well-known/wasmloop/ready").0, 200);
    let (status, body) = get(addr, "/hello?name=Mike");
    assert_eq!(status, 200, "{body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["name"], "Mike", "{body}");
    assert_eq!(value["__ow_path"], "/hello", "{body}");
    // Its metrics, on the port the manifest names for them.
    let metrics: std::net::SocketAddr = format!("{ip}:9090").parse().unwrap();
    let (status, exposition) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    assert!(
        exposition.contains(r#"wasmloop_activations_total{backend="wasm",outcome="success"} 1"#),
        "{exposition}"
    );
    // SIGTERM, as a platform stops a pod: a clean exit well within the grace period.
    let stopping = std::time::Instant::now();
    docker(&["stop", "-t", "20", &id]);
    let took = stopping.elapsed();
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &id]);
    let _ = docker(&["rm", &id]);
    assert_eq!(code, "0");
    assert!(took < Duration::from_secs(15), "SIGTERM took {took:?}");
}
