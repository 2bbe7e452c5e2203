//! WASI 0.3 HTTP components (`http-p3`, on with --wasip3): as web actions and as plain HTTP, several activations sharing an instance where that is allowed, and what becomes of the others when one runs late, spins or traps.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::support::{Server, init_binary, p3_guest, read};

/// An answer to a request as it came (plain HTTP), its chunked body decoded.
fn get(addr: SocketAddr, path: &str) -> wasmloop_bench::harness::Reply {
    wasmloop_bench::harness::request(addr, "GET", path, b"")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

fn text(reply: &wasmloop_bench::harness::Reply) -> String {
    String::from_utf8_lossy(&reply.content()).into_owned()
}

/// A plain HTTP server with the p3 guest built in.
fn plain(args: &[&str]) -> Server {
    let guest = p3_guest();
    Server::builder()
        .args(&["--wasip3", "--protocol", "http", "--action"])
        .arg(guest.to_str().unwrap())
        .args(args)
        .start()
}

/// An OpenWhisk server started with `--wasip3` and `args`, in a container that allows
/// concurrent activations (`__OW_ALLOW_CONCURRENT=true`), the p3 guest initialized.
fn concurrent(args: &[&str]) -> Server {
    let server = Server::builder()
        .args(&["--wasip3"])
        .args(args)
        .env("__OW_ALLOW_CONCURRENT", "true")
        .start();
    server
        .init(&init_binary(&read(&p3_guest())))
        .assert(200, "{\"ok\":true}\n");
    server
}

/// `/run`'s value for a request to `path` (with `query`), as OpenWhisk's web actions give it.
fn web(path: &str, query: &str) -> Value {
    json!({"__ow_method": "get", "__ow_path": path, "__ow_query": query})
}

/// `/run`'s body for activation `id` of `value`, due by `deadline` (ms since the epoch).
fn run_body(value: Value, id: &str, deadline: u64) -> Vec<u8> {
    json!({"value": value, "activation_id": id, "deadline": deadline.to_string()})
        .to_string()
        .into_bytes()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sends `count` requests at once from threads of their own, and their answers.
fn at_once<T: Send + 'static>(
    count: usize,
    send: impl Fn() -> T + Send + Sync + 'static,
) -> Vec<T> {
    let send = std::sync::Arc::new(send);
    let threads: Vec<_> = (0..count)
        .map(|_| {
            let send = send.clone();
            std::thread::spawn(move || send())
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn without_the_flag_a_p3_component_is_refused_naming_the_flag_and_why_it_is_off() {
    let server = Server::builder().in_process().start();
    let reply = server.init(&init_binary(&read(&p3_guest())));
    assert_eq!(reply.status, 502, "{}", reply.text());
    let error = reply.error();
    for part in [
        "--wasip3",
        "WASMLOOP_WASIP3",
        "experimental in wasmtime 48",
        "security fixes",
    ] {
        assert!(error.contains(part), "{part:?} missing from: {error}");
    }
    // An image that leaves the backend out says so, naming it and how to build instead.
    let sandboxed = Server::builder()
        .args(&["--wasip3", "--backends", "http,wasm,component"])
        .in_process()
        .start();
    let reply = sandboxed.init(&init_binary(&read(&p3_guest())));
    assert_eq!(reply.status, 502, "{}", reply.text());
    let error = reply.error();
    assert!(
        error.contains("WASI 0.3 HTTP component (the http-p3 backend)"),
        "{error}"
    );
    assert!(error.contains("wasmloop new rust-http"), "{error}");
}

#[test]
fn as_a_web_action_it_answers_status_headers_and_body_with_its_own_context() {
    let server = Server::builder().args(&["--wasip3"]).in_process().start();
    server
        .init(&init_binary(&read(&p3_guest())))
        .assert(200, "{\"ok\":true}\n");
    let hello = server.run(web("/hello", ""));
    assert_eq!(hello.status, 200);
    assert_eq!(
        hello.json(),
        json!({"statusCode": 200, "headers": {"content-type": "text/plain"}, "body": "hello from p3\n"})
    );
    // A binary type's body is base64, as the controller decodes it.
    let bytes = server.run(web("/bytes", ""));
    assert_eq!(bytes.json()["body"], "iVBORwABAv8=");
    // Each activation's own context reaches it as x-ow-* headers.
    for id in ["act-1", "act-2"] {
        let run =
            json!({"value": web("/context", ""), "activation_id": id, "action_name": "/ns/p3"});
        let reply = server.post("/run", run.to_string().as_bytes());
        let body = reply.json()["body"].as_str().unwrap().to_owned();
        assert!(
            body.contains(&format!("x-ow-activation-id={id}\n")),
            "{body}"
        );
        assert!(body.contains("x-ow-action-name=/ns/p3\n"), "{body}");
    }
    // A route it does not have is its own 404, inside a successful activation.
    assert_eq!(server.run(web("/nowhere", "")).json()["statusCode"], 404);
}

#[test]
fn under_openwhisk_parallel_runs_share_an_instance_only_when_the_platform_allows_it() {
    let most_at_once = |server: &Server| -> Vec<u64> {
        let addr = server.addr;
        let mut seen = at_once(6, move || {
            let reply = crate::support::http(
                addr,
                "POST",
                "/run",
                json!({"value": web("/overlap", "ms=400")})
                    .to_string()
                    .as_bytes(),
            );
            let body = reply.json()["body"].as_str().unwrap().trim().to_owned();
            body.parse::<u64>().unwrap()
        });
        seen.sort();
        seen
    };
    let init = init_binary(&read(&p3_guest()));
    let alone = Server::builder().args(&["--wasip3"]).process().start();
    alone.init(&init).assert(200, "{\"ok\":true}\n");
    assert_eq!(most_at_once(&alone), vec![1; 6], "one activation at a time");
    let shared = Server::builder()
        .args(&["--wasip3"])
        .env("__OW_ALLOW_CONCURRENT", "true")
        .start();
    shared.init(&init).assert(200, "{\"ok\":true}\n");
    let seen = most_at_once(&shared);
    assert!(seen.iter().all(|&most| most > 1), "never shared: {seen:?}");
    // Each activation's logs still end with its sentinels.
    shared.wait_sentinels(6);
}

#[test]
fn as_plain_http_concurrent_requests_share_an_instance_unless_each_must_have_its_own() {
    let server = plain(&["--concurrency", "1"]);
    let addr = server.addr;
    let seen = at_once(8, move || text(&get(addr, "/overlap?ms=400")));
    assert!(
        seen.iter().all(|most| most.trim() != "1"),
        "never shared: {seen:?}"
    );
    // One instance (--concurrency counts instances), kept: its state carries from one
    // request to the next.
    let first: u64 = text(&get(addr, "/state")).trim().parse().unwrap();
    let next: u64 = text(&get(addr, "/state")).trim().parse().unwrap();
    assert_eq!(next, first + 1);
    // The body comes in streamed and goes back the same way.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = wasmloop_bench::harness::request(addr, "POST", "/echo", &body).unwrap();
    assert_eq!(echoed.status, 200);
    assert!(
        echoed.content() == body,
        "the echo differs from what was sent"
    );

    let fresh = plain(&["--max-activations-per-instance", "1"]);
    let addr = fresh.addr;
    let seen = at_once(4, move || text(&get(addr, "/overlap?ms=300")));
    assert_eq!(
        seen,
        vec!["1\n"; 4],
        "each activation had an instance of its own"
    );
    assert_eq!(text(&get(addr, "/state")), "1\n");
    assert_eq!(text(&get(addr, "/state")), "1\n");
}

#[test]
fn a_late_activation_retires_its_instance_naming_itself_to_the_others_and_the_next_is_served() {
    let server = concurrent(&[]);
    let addr = server.addr;
    let late = run_body(web("/sleep", "ms=5000"), "the-late-one", now_ms() + 1000);
    let late = std::thread::spawn(move || crate::support::http(addr, "POST", "/run", &late));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let patient = run_body(web("/sleep", "ms=3000"), "a-patient-one", now_ms() + 60_000);
    let sharing = server.post("/run", &patient);
    let late = late.join().unwrap();
    assert_eq!(late.status, 504, "{}", late.text());
    // Under OpenWhisk's protocol the action's failure is a 400, as the reference's.
    assert_eq!(sharing.status, 400, "{}", sharing.text());
    let error = sharing.error();
    assert!(
        error.contains("activation the-late-one ran past its deadline"),
        "{error}"
    );
    assert!(
        error.contains("new activations go to a new instance"),
        "{error}"
    );
    let next = server.run(web("/state", ""));
    assert_eq!(
        next.json()["body"],
        "1\n",
        "a new instance, its count begun again"
    );
}

#[test]
fn a_handler_that_never_yields_still_meets_its_deadline_and_the_others_learn_why() {
    let server = concurrent(&[]);
    let addr = server.addr;
    let patient = run_body(web("/sleep", "ms=4000"), "a-patient-one", now_ms() + 60_000);
    let sleeper = std::thread::spawn(move || crate::support::http(addr, "POST", "/run", &patient));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let spin = server.post(
        "/run",
        &run_body(web("/spin", ""), "the-spinner", now_ms() + 1000),
    );
    assert_eq!(spin.status, 504, "{}", spin.text());
    let sleeper = sleeper.join().unwrap();
    assert_eq!(sleeper.status, 400, "{}", sleeper.text());
    assert!(
        sleeper
            .error()
            .contains("activation the-spinner ran past its deadline")
    );
    assert_eq!(
        server.run(web("/hello", "")).json()["body"],
        "hello from p3\n"
    );
}

#[test]
fn a_trap_fails_the_activations_sharing_the_instance_and_a_new_one_serves_the_next() {
    let server = Server::builder()
        .args(&["--wasip3", "--protocol", "http", "--action"])
        .arg(p3_guest().to_str().unwrap())
        .process()
        .start();
    let addr = server.addr;
    let sleeper = std::thread::spawn(move || get(addr, "/sleep?ms=1000"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let trap = get(addr, "/trap");
    let sleeper = sleeper.join().unwrap();
    for reply in [&trap, &sleeper] {
        assert_eq!(reply.status, 502, "{}", text(reply));
        let error = text(reply);
        assert!(
            error.contains("the instance it shared was dropped"),
            "{error}"
        );
        // What the guest said as it crashed is in the message, not only in the logs.
        assert!(error.contains("asked to trap"), "{error}");
    }
    assert_eq!(text(&get(addr, "/state")), "1\n", "a new instance");
    server.wait_stderr("asked to trap");
}

#[test]
fn its_limits_hold_the_response_cap_and_the_memory_cap() {
    let server = Server::builder()
        .args(&[
            "--wasip3",
            "--max-result-bytes",
            "100000",
            "--max-memory-bytes",
            "67108864",
        ])
        .in_process()
        .start();
    server
        .init(&init_binary(&read(&p3_guest())))
        .assert(200, "{\"ok\":true}\n");
    // Its result carries the response body: past the cap, the activation fails.
    let big =
        json!({"__ow_method": "post", "__ow_path": "/echo", "__ow_body": "x".repeat(200_000)});
    server.run(big).assert_error(502, "--max-result-bytes");
    let grow = server.run(web("/alloc", "mb=200"));
    grow.assert_error(
        400,
        "past its cap of 67108864 bytes (64 MiB): raise --max-memory-bytes",
    );
    assert_eq!(server.run(web("/hello", "")).json()["statusCode"], 200);
}

#[test]
fn a_component_with_both_handlers_is_served_by_its_wasi_0_3_one_and_only_with_the_flag() {
    let dual = crate::support::dual_guest();
    let server = Server::builder().args(&["--wasip3"]).in_process().start();
    server
        .init(&init_binary(&read(&dual)))
        .assert(200, "{\"ok\":true}\n");
    assert_eq!(server.run(web("/", "")).json()["body"], "wasi 0.3\n");
    let off = Server::builder().in_process().start();
    off.init(&init_binary(&read(&dual)))
        .assert_error(502, "--wasip3");
}

#[test]
fn past_what_its_instances_take_at_once_activations_queue_and_then_get_429() {
    // One instance of two activations at once, one more waiting: of four at once, one is
    // refused with the runtime's 429.
    let server = concurrent(&[
        "--concurrency",
        "1",
        "--wasip3-activations-at-once",
        "2",
        "--max-queue",
        "1",
    ]);
    let addr = server.addr;
    let statuses = at_once(4, move || {
        let body = json!({"value": web("/sleep", "ms=800")}).to_string();
        let reply = crate::support::http(addr, "POST", "/run", body.as_bytes());
        if reply.status == 429 {
            assert!(reply.error().contains("--max-queue"), "{}", reply.text());
        }
        reply.status
    });
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, vec![200, 200, 200, 429], "{statuses:?}");
}

#[test]
fn an_instance_is_retired_after_its_activations_and_after_its_idle_time() {
    let state = |addr| text(&get(addr, "/state"));
    // --max-activations-per-instance counts what one instance serves in all.
    let reused = plain(&["--concurrency", "1", "--max-activations-per-instance", "2"]);
    let seen: Vec<String> = (0..3).map(|_| state(reused.addr)).collect();
    assert_eq!(seen, ["1\n", "2\n", "1\n"]);
    // --wasip3-idle-timeout drops one idle that long; kept, it would count on.
    let idle = plain(&["--concurrency", "1", "--wasip3-idle-timeout", "200ms"]);
    assert_eq!(state(idle.addr), "1\n");
    assert_eq!(state(idle.addr), "2\n");
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(
        state(idle.addr),
        "1\n",
        "a new instance after the idle time: {}",
        idle.stderr()
    );
}
