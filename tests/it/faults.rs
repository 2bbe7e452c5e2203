//! Misbehaving actions and hostile input: deadlines, output hazards, crashes, shutdown.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::{Backend, Reply, SENTINEL, Server, init_text, read};

/// Generous bounds for a loaded 2-core machine: what matters is that nothing hangs.
const PROMPTLY: Duration = Duration::from_secs(10);

fn epoch_ms_in(delay: Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now + delay).as_millis().to_string()
}

fn run_with_deadline(server: &Server, value: Value, deadline: &str) -> (Reply, Duration) {
    let started = Instant::now();
    let body = json!({"value": value, "deadline": deadline});
    let reply = server.post("/run", body.to_string().as_bytes());
    (reply, started.elapsed())
}

/// Running or sleeping: not gone, and not a zombie waiting for its parent to reap it.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Initializes `server` with the script `fixture`, which writes a pid into `marker`.
fn init_marked_script(server: &Server, fixture: &str, marker: &std::path::Path) {
    let script = std::fs::read_to_string(crate::support::fixture(fixture)).unwrap();
    let mut body = init_text(&script);
    body["value"]["env"] = json!({ "MARKER": marker });
    server.init(&body).assert(200, "{\"ok\":true}\n");
}

/// The pid a test action or compiler wrote into `marker`.
pub(crate) fn marked_pid(marker: &std::path::Path) -> i32 {
    String::from_utf8(read(marker))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

pub(crate) fn wait_until_gone(pid: i32) {
    let deadline = Instant::now() + PROMPTLY;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} outlived its action"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

each_backend! {
    fn a_deadline_stops_an_action_blocked_in_a_host_call(backend: Backend) {
        let server = Server::with_guest(backend, "slow");
        let deadline = epoch_ms_in(Duration::from_millis(400));
        let (reply, took) = run_with_deadline(&server, json!({"sleep_ms": 600_000}), &deadline);
        reply.assert_error(504, "its deadline");
        assert!(took < PROMPTLY, "took {took:?}");
        server.wait_sentinels(1);
        server.run(json!({"after": 1})).assert(200, "{\"after\":1}\n");
    }

    fn a_deadline_stops_an_action_burning_cpu(backend: Backend) {
        let server = Server::with_guest(backend, "slow");
        let deadline = epoch_ms_in(Duration::from_millis(400));
        let (reply, took) = run_with_deadline(&server, json!({"spin_ms": 600_000}), &deadline);
        assert_eq!(reply.status, 504, "{}", reply.text());
        assert!(took < PROMPTLY, "took {took:?}");
        server.run(json!({"after": 1})).assert(200, "{\"after\":1}\n");
    }

    fn the_runtime_timeout_applies_without_a_deadline(backend: Backend) {
        let server = Server::builder().arg("--timeout").arg("300ms").start();
        server.init(&backend.init_guest("slow")).assert(200, "{\"ok\":true}\n");
        let reply = server.run(json!({"sleep_ms": 600_000}));
        reply.assert(504, "{\"error\":\"the action did not finish within --timeout 300ms and was stopped\"}\n");
        server.run(json!({"sleep_ms": 1})).assert(200, "{\"sleep_ms\":1}\n");
    }

    fn a_deadline_already_past_on_arrival_is_ignored(backend: Backend) {
        let server = Server::with_guest(backend, "slow");
        let (reply, _) = run_with_deadline(&server, json!({"sleep_ms": 50}), "123");
        reply.assert(200, "{\"sleep_ms\":50}\n");
    }

    fn a_result_over_the_cap_is_a_502_and_the_next_run_works(backend: Backend) {
        let server = Server::builder().arg("--max-result-bytes").arg("1000").start();
        server.init(&backend.init_guest("echo")).assert(200, "{\"ok\":true}\n");
        let reply = server.run(json!({"big": "x".repeat(2000)}));
        reply.assert_error(502, "--max-result-bytes");
        server.run(json!({"small": 1})).assert(200, "{\"small\":1}\n");
    }

    fn a_stray_second_line_is_not_the_next_answer(backend: Backend) {
        let server = Server::with_guest(backend, "answers_twice");
        for n in 1..=3 {
            server.run(json!({"n": n})).assert(200, &format!("{{\"n\":{n}}}\n"));
        }
    }

    fn a_line_that_is_not_json_is_a_502_and_does_not_poison_the_next_run(backend: Backend) {
        let server = Server::with_guest(backend, "garbage_when_asked");
        server
            .run(json!({"garbage": true}))
            .assert(502, "{\"error\":\"The action did not return a dictionary or array.\"}\n");
        server.run(json!({"n": 2})).assert(200, "{\"n\":2}\n");
    }

    fn twenty_megabytes_of_logs_come_before_the_sentinel(backend: Backend) {
        let server = Server::with_guest(backend, "floods_logs");
        server.run(json!({"mib": 10})).assert(200, "{\"mib\":10}\n");
        server.wait_sentinels(1);
        let (out, err) = (server.stdout(), server.stderr());
        assert!(out.len() + err.len() > 20 * 1024 * 1024);
        assert!(err.ends_with(&format!("last log line\n{SENTINEL}\n")), "the sentinel came early");
        assert!(out.ends_with(&format!("{SENTINEL}\n")));
        assert_eq!(out.matches(SENTINEL).count(), 1);
        server.run(json!({"mib": 0})).assert(200, "{\"mib\":0}\n");
    }

    fn a_client_hanging_up_mid_activation_does_not_leave_its_answer_behind(backend: Backend) {
        use std::io::Write;
        let server = Server::with_guest(backend, "slow");
        let body = json!({"value": {"sleep_ms": 300, "n": 1}}).to_string();
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        write!(stream, "POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len())
            .unwrap();
        server.wait_stderr("slow: started");
        drop(stream);
        server.run(json!({"n": 2})).assert(200, "{\"n\":2}\n");
        server.wait_sentinels(2);
    }

    fn sigterm_lets_an_activation_in_flight_finish(backend: Backend) {
        // Its debug line says when the signal has been taken: a fixed wait could end
        // first on a loaded machine.
        let server = Server::builder()
            .args(&["--log-filter", "wasmloop::runtime=debug"])
            .start()
            .initialized_with(backend, "slow");
        std::thread::scope(|scope| {
            let run = scope.spawn(|| server.run(json!({"sleep_ms": 700})));
            server.wait_stderr("slow: started");
            // SAFETY: kill(2) on the server we started.
            unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
            // What arrives during the drain is turned away with the status the platform
            // reads as "this container is going away".
            server.wait_stderr("draining: new requests get 503");
            server.run(json!({"late": true})).assert(
                503,
                "{\"error\":\"the runtime is shutting down and takes no new requests\"}\n",
            );
            run.join().unwrap().assert(200, "{\"sleep_ms\":700}\n");
        });
        assert_eq!(server.wait_exit(), Some(0));
    }
}

#[test]
fn sigterm_gives_up_on_an_activation_that_outlives_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("grandchild.pid");
    let server = Server::builder()
        .arg("--shutdown-timeout")
        .arg("300ms")
        .start();
    init_marked_script(&server, "spawns_and_hangs.sh", &marker);
    std::thread::scope(|scope| {
        let stopped = scope.spawn(|| server.run(json!({})));
        while !marker.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = Instant::now();
        // SAFETY: kill(2) on the server we started.
        unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
        // The activation is stopped, and told so.
        stopped.join().unwrap().assert(
            503,
            "{\"error\":\"the runtime is shutting down; the activation was stopped\"}\n",
        );
        assert_eq!(server.wait_exit(), Some(0));
        assert!(started.elapsed() < PROMPTLY);
    });
    // Nothing the action started is left.
    wait_until_gone(marked_pid(&marker));
}

#[test]
fn a_deadline_takes_down_what_a_native_action_spawned() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("grandchild.pid");
    let server = Server::start();
    init_marked_script(&server, "spawns_and_hangs.sh", &marker);
    let (reply, _) =
        run_with_deadline(&server, json!({}), &epoch_ms_in(Duration::from_millis(500)));
    assert_eq!(reply.status, 504, "{}", reply.text());
    wait_until_gone(marked_pid(&marker));
}

#[test]
fn a_native_action_that_closes_its_result_channel_is_restarted() {
    let server = Server::with_guest(Backend::Native, "closes_result_channel");
    server.run(json!({"close": true})).assert(
        400,
        "{\"error\":\"command exited: the action closed its result channel (fd 3)\"}\n",
    );
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
}

#[test]
fn a_native_action_killed_between_runs_is_restarted_transparently() {
    let server = Server::with_guest(Backend::Native, "pid");
    let first = server.run(json!({})).json()["pid"].as_i64().unwrap() as i32;
    // SAFETY: SIGKILL to the action's own process, started by the server for this test.
    unsafe { libc::kill(first, libc::SIGKILL) };
    wait_until_gone(first);
    let reply = server.run(json!({}));
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_ne!(reply.json()["pid"].as_i64().unwrap() as i32, first);
}

#[test]
fn a_declared_length_over_the_cap_is_refused_before_the_body_is_sent() {
    use std::io::{Read, Write};
    let server = Server::with_guest(Backend::Native, "echo");
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(PROMPTLY)).unwrap();
    // Announces a gigabyte and sends none of it: the answer must not wait for it.
    stream
        .write_all(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = stream
        .read(&mut answer)
        .expect("an answer before any body byte");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("--max-run-bytes"), "{answer}");
    server
        .run(json!({"still": "serving"}))
        .assert(200, "{\"still\":\"serving\"}\n");
}

#[test]
fn what_a_crashed_native_action_started_dies_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("helper.pid");
    let server = Server::start();
    init_marked_script(&server, "leaves_a_helper.sh", &marker);
    server
        .run(json!({}))
        .assert(400, "{\"error\":\"command exited: exit status: 3\"}\n");
    wait_until_gone(marked_pid(&marker));
}

#[test]
fn actions_do_not_inherit_the_listening_socket() {
    let script = std::fs::read_to_string(crate::support::fixture("counts_sockets.sh")).unwrap();
    let server = Server::builder().listen_fd(7).start();
    server
        .init(&init_text(&script))
        .assert(200, "{\"ok\":true}\n");
    server.run(json!({})).assert(200, "{\"sockets\":0}\n");
}

/// The platform gives `/init` the action's timeout and passes its end as `__OW_DEADLINE`:
/// a start that cannot finish by then gets a 502 that says so, before the platform gives up.
#[test]
fn an_init_that_cannot_start_before_its_deadline_says_so_in_time() {
    let server = Server::start();
    let mut body = Backend::Wasm.init_guest("loops_at_start");
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        + Duration::from_secs(2);
    body["value"]["env"] = json!({ "__OW_DEADLINE": deadline.as_millis().to_string() });
    let started = Instant::now();
    let reply = server.init(&body);
    reply.assert_error(
        502,
        "a guest must reach its first read of stdin within --ack-timeout",
    );
    reply.assert_error(
        502,
        "the platform's deadline for this /init (__OW_DEADLINE) left",
    );
    reply.assert_error(502, "raise the action's timeout");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not the 60 s --ack-timeout"
    );
}

/// A wasm guest runs only while polled: one that yielded between its answer and a stray
/// line writes the stray one before it reads the next request, not after it. What decides
/// is that read, not timing: the next request is sent the moment each answer arrives, many
/// times over, and each gets its own answer, every stray line told as such.
fn a_stray_line_after_a_pause_is_not_the_next_answer(backend: Backend) {
    const RUNS: usize = 40;
    let server = Server::with_guest(backend, "strays_after_a_pause");
    for n in 1..=RUNS {
        server
            .run(json!({"n": n}))
            .assert(200, &format!("{{\"n\":{n}}}\n"));
    }
    // Each told at the next activation, when the guest has got back to its stdin.
    server.wait_stderr_count("dropped output the action wrote after its result", RUNS - 1);
    for n in 1..RUNS {
        server.wait_stderr(&format!("after its result: `{{\"stray\":{{\"n\":{n}}}}}`"));
    }
}

#[test]
fn a_wasm_guests_stray_line_after_a_pause_is_not_the_next_answer() {
    a_stray_line_after_a_pause_is_not_the_next_answer(Backend::Wasm);
}

#[test]
fn a_components_stray_line_after_a_pause_is_not_the_next_answer() {
    a_stray_line_after_a_pause_is_not_the_next_answer(Backend::Component);
}
