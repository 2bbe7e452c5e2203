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

/// How a manifest in deploy/ runs its container, as `docker run` can reproduce it: read by
/// PyYAML (which the deploy tests use too).
#[derive(serde::Deserialize, Debug)]
struct Settings {
    name: String,
    user: Option<String>,
    read_only: bool,
    drop_all: bool,
    /// Where the manifest mounts an emptyDir volume (nothing else is writable).
    volumes: Vec<String>,
    env: Vec<(String, String)>,
    /// The platform sets PORT where the manifest does not.
    port: u16,
    /// The metrics port the manifest names, if any.
    metrics: Option<u16>,
    grace: u64,
}

fn manifests() -> Vec<Settings> {
    let script = r#"
import json, sys, yaml
out = []
for path in sys.argv[1:]:
    doc = next(d for d in yaml.safe_load_all(open(path)) if "template" in d["spec"])
    meta = doc["spec"]["template"].get("metadata", {})
    pod = doc["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    user = None
    if "runAsUser" in sc:
        user = f'{sc["runAsUser"]}:{sc.get("runAsGroup", sc["runAsUser"])}'
    env = [(e["name"], e["value"]) for e in c.get("env", [])]
    port = next((int(v) for n, v in env if n == "PORT"), 8080)
    mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
    metrics = next((int(v.rsplit(":", 1)[1]) for n, v in env if n == "WASMLOOP_METRICS_LISTEN"), None)
    if doc["apiVersion"].startswith("apps/"):
        grace = pod.get("terminationGracePeriodSeconds", 30)
    elif any(k.startswith("run.googleapis.com/") for k in meta.get("annotations", {})):
        grace = 10
    else:
        grace = pod.get("timeoutSeconds", 300)
    out.append(dict(name=path.rsplit("/", 1)[1], user=user,
        read_only=sc.get("readOnlyRootFilesystem", False),
        drop_all="ALL" in sc.get("capabilities", {}).get("drop", []),
        volumes=mounts, env=env, port=port, metrics=metrics, grace=grace))
print(json.dumps(out))
"#;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    let read = std::process::Command::new("python3")
        .args(["-c", script])
        .args(["kubernetes.yaml", "knative.yaml", "cloudrun.yaml"].map(|f| format!("{dir}/{f}")))
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    serde_json::from_slice(&read.stdout).unwrap()
}

/// The image deploy/Dockerfile.action documents (FROM this build's sandboxed image, the
/// echo guest as its hello.wasm), run under each manifest's container settings and nothing
/// more: its user, its read-only root, only the volumes it declares, its env, PORT where
/// the platform sets it. Each answers on every path and on its probes, counts in its
/// metrics, and stops on SIGTERM with 0 within its grace period, drain and all.
#[test]
#[ignore = "needs the image: scripts/image-test.sh"]
fn the_image_starts_and_stops_as_each_manifest_runs_it() {
    let sandboxed = std::env::var("WASMLOOP_TEST_SANDBOXED_IMAGE")
        .ok()
        .filter(|i| !i.is_empty())
        .expect(NEEDS_IMAGE);
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
    // Side by side: each stop takes its drain.
    std::thread::scope(|scope| {
        for settings in manifests() {
            let derived = &derived;
            scope.spawn(move || run_as_the_manifest_says(&settings, derived));
        }
    });
}

fn run_as_the_manifest_says(settings: &Settings, image: &str) {
    let name = &settings.name;
    let mut args: Vec<String> = ["run", "-d"].map(String::from).to_vec();
    if settings.read_only {
        args.push("--read-only".into());
    }
    if let Some(user) = &settings.user {
        args.extend(["--user".into(), user.clone()]);
    }
    if settings.drop_all {
        args.extend(["--cap-drop".into(), "ALL".into()]);
    }
    for path in &settings.volumes {
        // An emptyDir: writable by the pod's user.
        args.extend(["--tmpfs".into(), format!("{path}:mode=1777")]);
    }
    let mut env = settings.env.clone();
    if !env.iter().any(|(n, _)| n == "PORT") {
        env.push(("PORT".into(), settings.port.to_string()));
    }
    for (n, v) in &env {
        args.extend(["-e".into(), format!("{n}={v}")]);
    }
    args.extend([image.to_owned(), "serve".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = docker(&args);
    // Both streams: the runtime's lines are on stderr.
    let logs = || {
        let out = std::process::Command::new("docker")
            .args(["logs", &id])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let ip = docker(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id]);
    let addr: std::net::SocketAddr = format!("{ip}:{}", settings.port).parse().unwrap();
    let started = std::time::Instant::now();
    while get_or_nothing(addr, "/.well-known/wasmloop/ready") != Some(200) {
        let running = docker(&["inspect", "-f", "{{.State.Running}}", &id]);
        assert!(
            running == "true" && started.elapsed() < Duration::from_secs(60),
            "{name}: not ready (running: {running}): {}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(addr, "/.well-known/wasmloop/health").0, 200, "{name}");
    let (status, body) = get(addr, "/hello?name=Mike");
    assert_eq!(status, 200, "{name}: {body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["name"], "Mike", "{name}: {body}");
    assert_eq!(value["__ow_path"], "/hello", "{name}: {body}");
    if let Some(port) = settings.metrics {
        let metrics: std::net::SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let (status, exposition) = get(metrics, "/metrics");
        assert_eq!(status, 200, "{name}");
        assert!(
            exposition
                .contains(r#"wasmloop_activations_total{backend="wasm",outcome="success"} 1"#),
            "{name}: {exposition}"
        );
    }
    let cache_off = logs().contains("the compile cache is off");
    let cache_dir = settings.env.iter().any(|(n, _)| n == "WASMLOOP_CACHE_DIR");
    assert_eq!(
        cache_off,
        settings.read_only && !cache_dir,
        "{name}: the image's cache unless the root is read-only and the manifest gives none \
         of its own; else one line saying it is off: {}",
        logs()
    );
    // SIGTERM, as the platform stops it: a clean exit within the grace period.
    let stopping = std::time::Instant::now();
    docker(&["stop", "-t", &settings.grace.to_string(), &id]);
    let took = stopping.elapsed();
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &id]);
    let said = logs();
    let _ = docker(&["rm", &id]);
    assert_eq!(code, "0", "{name}: {said}");
    assert!(
        took < Duration::from_secs(settings.grace),
        "{name}: SIGTERM took {took:?}: {said}"
    );
    assert!(
        said.contains("wasmloop: SIGTERM: stopping"),
        "{name}: {said}"
    );
}

/// A GET's status, or nothing while no connection is taken.
fn get_or_nothing(addr: std::net::SocketAddr, path: &str) -> Option<u16> {
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    Some(get(addr, path).0)
}
