//! How long an instance lives (`--max-activations-per-instance`), and the activation's own
//! values that never reach one stale.

use serde_json::json;

use crate::support::{Backend, Server};

const OK: &str = "{\"ok\":true}\n";

fn recycling(backend: Backend, guest: &str, args: &[&str]) -> Server {
    let server = Server::builder().in_process().args(args).start();
    server.init(&backend.init_guest(guest)).assert(200, OK);
    server
}

/// A server process whose pool says what each worker cost (`--log-filter`), with
/// `--max-activations-per-instance` at `limit`, and `more` arguments.
fn with_pool_diagnostics(limit: &str, more: &[&str]) -> Server {
    Server::builder()
        .process()
        .args(&["--log-filter", "wasmloop::executor::pool=debug"])
        .args(&["--max-activations-per-instance", limit])
        .args(more)
        .start()
}

/// `with_pool_diagnostics`, serving the `leaves_a_secret` guest on `backend`.
fn keeping_secrets(backend: Backend, limit: &str) -> Server {
    let server = with_pool_diagnostics(limit, &[]);
    server
        .init(&backend.init_guest("leaves_a_secret"))
        .assert(200, OK);
    server
}

/// The whole microseconds `field=` gives in a diagnostic line.
fn micros(line: &str, field: &str) -> Option<u64> {
    let (_, after) = line.split_once(&format!("{field}="))?;
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A fresh native child starts on its activation's arrival (to get its values), so the
/// time it took is said there, and its end on its own.
#[test]
fn a_fresh_native_childs_start_on_arrival_and_its_end_are_timed() {
    let server = with_pool_diagnostics("1", &[]);
    server
        .init(&Backend::Native.init_guest("counter"))
        .assert(200, OK);
    assert_eq!(count(&server), 1);
    assert_eq!(count(&server), 1);
    server.wait_stderr_count("worker ended ended_us=", 2);
    let stderr = server.stderr();
    let started: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("worker started on arrival"))
        .collect();
    assert_eq!(started.len(), 2, "{stderr}");
    for line in started {
        assert!(
            micros(line, "made_us").is_some_and(|us| us > 0),
            "no start time in {line:?}"
        );
    }
}

/// A module's instance renewed in place for each activation, like a component's new one,
/// holds nothing the activation before it left in its memory, and sees it at the size a
/// new instance has; an instance that serves on holds it (what shows the search works).
#[test]
fn what_an_activation_leaves_in_memory_never_reaches_the_next_fresh_one() {
    for backend in [Backend::Wasm, Backend::Component] {
        for (limit, kept) in [("1", false), ("0", true)] {
            let server = keeping_secrets(backend, limit);
            let find = || {
                let reply = server.run(json!({"find": "s3cr3t-0f-th3-l4st"}));
                assert_eq!(reply.status, 200, "{}", reply.text());
                reply.json()
            };
            let before = find();
            assert_eq!(before["found"], false, "{backend:?}: {before}");
            let left = server.run(json!({"leave": "s3cr3t-0f-th3-l4st"}));
            assert_eq!(left.status, 200, "{}", left.text());
            let after = find();
            assert_eq!(after["found"], kept, "{backend:?}, limit {limit}: {after}");
            if !kept {
                assert_eq!(
                    after["pages"], before["pages"],
                    "{backend:?}: the size a new one has"
                );
            }
            // A module's instance was renewed, not replaced (a reset that left the guest
            // unable to start again would have been, and so hidden a leak).
            if backend == Backend::Wasm && !kept {
                server.wait_stderr_count("worker renewed in place", 3);
                assert!(
                    !server.stderr().contains("successor made ahead"),
                    "{}",
                    server.stderr()
                );
            }
        }
    }
}

#[test]
fn what_an_activation_logged_is_never_told_as_why_the_next_fresh_one_ended() {
    for backend in [Backend::Wasm, Backend::Component] {
        // Kept for the instance's life, the last line is what it said before it aborted.
        for (limit, kept) in [("1", false), ("0", true)] {
            let server = keeping_secrets(backend, limit);
            let logged = server.run(json!({"log": "t0k3n-0f-th3-l4st"}));
            assert_eq!(logged.status, 200, "{}", logged.text());
            if backend == Backend::Wasm && !kept {
                server.wait_stderr_count("worker renewed in place", 1);
            }
            let aborted = server.run(json!({"abort": true}));
            assert_ne!(aborted.status, 200, "{}", aborted.text());
            assert!(
                aborted.text().contains("panicked or aborted"),
                "{backend:?}: {}",
                aborted.text()
            );
            assert_eq!(
                aborted.text().contains("t0k3n-0f-th3-l4st"),
                kept,
                "{backend:?}, limit {limit}: {}",
                aborted.text()
            );
        }
    }
}

#[test]
fn a_fresh_instance_grown_past_the_mark_is_made_anew_not_renewed() {
    // A renewed instance keeps the memory it grew to: past the mark, that is what to free.
    let server = with_pool_diagnostics("1", &["--recycle-above-memory", "33554432"]);
    server
        .init(&Backend::Wasm.init_guest("grows_and_counts"))
        .assert(200, OK);
    let run = |body: serde_json::Value| {
        let reply = server.run(body);
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()["count"].as_u64().unwrap()
    };
    assert_eq!(run(json!({"mib": 1})), 1);
    server.wait_stderr_count("worker renewed in place", 1);
    // 40 MiB more, none of it written: a renewal would not have to copy it back.
    assert_eq!(run(json!({"reserve_mib": 40})), 1);
    server.wait_stderr("worker past --recycle-above-memory");
    server.wait_stderr("successor made ahead");
    assert_eq!(run(json!({})), 1);
}

fn count(server: &Server) -> u64 {
    let reply = server.run(json!({}));
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["count"].as_u64().unwrap()
}

each_backend! {
    fn with_one_activation_each_every_activation_meets_a_fresh_instance(backend: Backend) {
        let server = recycling(backend, "counter", &["--max-activations-per-instance", "1"]);
        let counts: Vec<u64> = (0..5).map(|_| count(&server)).collect();
        assert_eq!(counts, [1, 1, 1, 1, 1], "nothing kept from the activation before");
    }

    fn an_instance_serves_its_activations_then_a_fresh_one_takes_over(backend: Backend) {
        let server = recycling(backend, "counter", &["--max-activations-per-instance", "3"]);
        let counts: Vec<u64> = (0..7).map(|_| count(&server)).collect();
        assert_eq!(counts, [1, 2, 3, 1, 2, 3, 1]);
    }

    fn without_a_limit_an_instance_keeps_its_state(backend: Backend) {
        let server = recycling(backend, "counter", &["--max-activations-per-instance", "0"]);
        let counts: Vec<u64> = (0..4).map(|_| count(&server)).collect();
        assert_eq!(counts, [1, 2, 3, 4]);
    }

    fn a_crash_in_a_fresh_instance_costs_only_its_own_activation(backend: Backend) {
        let server = recycling(backend, "counter", &["--max-activations-per-instance", "1"]);
        assert_eq!(count(&server), 1);
        let crashed = server.run(json!({"exit": true}));
        assert_eq!(crashed.status, 400, "{}", crashed.text());
        assert_eq!(count(&server), 1);
        assert_eq!(count(&server), 1);
    }

    fn parallel_activations_each_get_a_fresh_instance(backend: Backend) {
        let server = recycling(
            backend,
            "counter",
            &["--max-activations-per-instance", "1", "--concurrency", "4"],
        );
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..16).map(|_| scope.spawn(|| count(&server))).collect();
            for run in runs {
                assert_eq!(run.join().unwrap(), 1);
            }
        });
    }

    fn the_pools_diagnostics_say_what_ending_and_making_each_successor_took(backend: Backend) {
        let server = with_pool_diagnostics("2", &[]);
        server.init(&backend.init_guest("counter")).assert(200, OK);
        let counts: Vec<u64> = (0..4).map(|_| count(&server)).collect();
        assert_eq!(counts, [1, 2, 1, 2]);
        // A module's instance is renewed in place; a component's and a child are replaced.
        let (said, ended, made) = match backend {
            Backend::Wasm => ("worker renewed in place", None, "renewed_us"),
            _ => ("worker ended and its successor made ahead", Some("ended_us"), "made_us"),
        };
        // Made after the answer went out: the line may follow it.
        server.wait_stderr_count(said, 2);
        let stderr = server.stderr();
        for line in stderr.lines().filter(|line| line.contains(said)) {
            if let Some(ended) = ended {
                assert!(micros(line, ended).is_some(), "no ending time in {line:?}");
            }
            assert!(micros(line, made).is_some_and(|us| us > 0), "no making time in {line:?}");
        }
    }

    fn an_instance_that_grew_past_the_mark_is_replaced_once_it_has_answered(backend: Backend) {
        let server = recycling(backend, "grows_and_counts", &["--recycle-above-memory", "33554432"]);
        let grow = |mib: u64| {
            let reply = server.run(json!({ "mib": mib }));
            assert_eq!(reply.status, 200, "{}", reply.text());
            let seen = reply.json();
            (seen["count"].as_u64().unwrap(), seen["kept_mib"].as_u64().unwrap())
        };
        // Below the mark, the instance and what it keeps stay.
        assert_eq!(grow(1), (1, 1));
        assert_eq!(grow(1), (2, 2));
        // Past it, the activation is answered as usual; the next meets a fresh instance.
        assert_eq!(grow(40), (3, 42));
        assert_eq!(grow(0), (1, 0));
        assert_eq!(grow(0), (2, 0));
    }

    fn a_fresh_instance_reads_its_own_activations_values_in_its_environment(backend: Backend) {
        let server = recycling(backend, "env_as_given", &["--max-activations-per-instance", "1"]);
        for id in ["a1", "a2", "a3"] {
            let body = json!({"value": {}, "activation_id": id, "deadline": "42"});
            let reply = server.post("/run", body.to_string().as_bytes());
            assert_eq!(reply.status, 200, "{}", reply.text());
            // Read as it started too: a prepared instance waits for the values there.
            assert_eq!(reply.json(), json!({"at_start": id, "now": id}));
        }
    }

    fn a_fresh_instance_that_must_ack_reads_its_environment_without_waiting(backend: Backend) {
        // The guest reads the environment to learn that it must ack, before its activation:
        // waiting there for the activation's values would hold back the ack for good.
        let server = Server::builder()
            .env("OW_WAIT_FOR_ACK", "1")
            .args(&["--max-activations-per-instance", "1"])
            .start();
        server.init(&backend.init_guest("counter")).assert(200, OK);
        let counts: Vec<u64> = (0..3).map(|_| count(&server)).collect();
        assert_eq!(counts, [1, 1, 1]);
    }

    fn an_instance_serving_several_has_no_activations_values_in_its_env(backend: Backend) {
        for limit in ["0", "3"] {
            let server =
                recycling(backend, "env_as_given", &["--max-activations-per-instance", limit]);
            for id in ["a1", "a2", "a3", "a4"] {
                let body = json!({"value": {}, "activation_id": id});
                let seen = server.post("/run", body.to_string().as_bytes()).json();
                assert_eq!(seen, json!({"at_start": null, "now": null}), "limit {limit}");
            }
        }
    }

    fn the_init_envs_activation_values_never_reach_an_instance(backend: Backend) {
        for limit in ["0", "1"] {
            let server = Server::builder()
                .in_process()
                .args(&["--max-activations-per-instance", limit])
                .start();
            let mut init = backend.init_guest("context");
            // As the platform sends it: the first activation's values, and the action's.
            init["value"]["env"] = json!({
                "__OW_ACTIVATION_ID": "first-activation",
                "__OW_DEADLINE": "1700000000000",
                "__OW_TRANSACTION_ID": "first-transaction",
                "__OW_NAMESPACE": "ns",
                "__OW_ACTION_NAME": "/ns/action",
            });
            server.init(&init).assert(200, OK);
            for _ in 0..2 {
                // A request line without them: what the action sees is absent, not stale.
                let seen = server.run(json!({})).json();
                assert_eq!(seen["activation_id"], json!(null), "limit {limit}: {seen}");
                assert_eq!(seen["deadline"], json!(null), "limit {limit}: {seen}");
                // Values that are the same for every activation stay.
                assert_eq!(seen["namespace"], "ns", "limit {limit}: {seen}");
                assert_eq!(seen["action_name"], "/ns/action", "limit {limit}: {seen}");
            }
            let body = json!({"value": {}, "activation_id": "second", "deadline": "42"});
            let seen = server.post("/run", body.to_string().as_bytes()).json();
            assert_eq!(seen["activation_id"], "second", "limit {limit}: {seen}");
            assert_eq!(seen["deadline"], "42", "limit {limit}: {seen}");
        }
    }
}
