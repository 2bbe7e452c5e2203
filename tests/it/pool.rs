//! `--concurrency N`: up to N instances or children serve in parallel, the rest queue, and a
//! full queue answers 429.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::support::{Backend, Server};

fn deadline_in(delay: Duration) -> String {
    (SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + delay)
        .as_millis()
        .to_string()
}

each_backend! {
    fn two_workers_serve_two_activations_at_once(backend: Backend) {
        let server = Server::builder().arg("--concurrency").arg("2").start();
        server.init(&backend.init_guest("slow")).assert(200, "{\"ok\":true}\n");
        let deadline = deadline_in(Duration::from_secs(5));
        let body = json!({"value": {"sleep_ms": 600_000}, "deadline": deadline}).to_string();
        let (server, body) = (&server, &body);
        std::thread::scope(|scope| {
            let runs: Vec<_> =
                (0..2).map(|_| scope.spawn(|| server.post("/run", body.as_bytes()))).collect();
            // Both are running while neither has finished: with one worker, the second
            // would only start once the first had been stopped at the deadline.
            server.wait_stderr_count("slow: started", 2);
            for run in runs {
                assert_eq!(run.join().unwrap().status, 504);
            }
        });
        server.run(json!({"after": 1})).assert(200, "{\"after\":1}\n");
    }

    fn parallel_runs_on_a_pool_each_get_their_own_answer(backend: Backend) {
        let server = Server::builder().arg("--concurrency").arg("3").start();
        server.init(&backend.init_guest("echo")).assert(200, "{\"ok\":true}\n");
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..48)
                .map(|n| {
                    let server = &server;
                    scope.spawn(move || (n, server.run(json!({"n": n}))))
                })
                .collect();
            for run in runs {
                let (n, reply) = run.join().unwrap();
                reply.assert(200, &format!("{{\"n\":{n}}}\n"));
            }
        });
        server.wait_sentinels(48);
    }
}

#[test]
fn a_full_queue_answers_429_with_a_retry_after() {
    let server = Server::builder().arg("--max-queue").arg("1").start();
    server
        .init(&Backend::Native.init_guest("slow"))
        .assert(200, "{\"ok\":true}\n");
    let server = &server;
    std::thread::scope(|scope| {
        let busy = scope.spawn(move || server.run(json!({"sleep_ms": 1500})));
        server.wait_stderr("slow: started");
        // One of these two waits for the worker; the other finds the queue full.
        let queued: Vec<_> = (0..2)
            .map(|n| scope.spawn(move || server.run(json!({"n": n}))))
            .collect();
        let statuses: Vec<u16> = queued
            .into_iter()
            .map(|r| r.join().unwrap())
            .map(|reply| {
                if reply.status == 429 {
                    let error = reply.error();
                    assert!(error.contains("--max-queue"), "{error}");
                    let retry = reply
                        .headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"));
                    assert_eq!(
                        retry.map(|(_, v)| v.as_str()),
                        Some("1"),
                        "{:?}",
                        reply.headers
                    );
                }
                reply.status
            })
            .collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            1,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "{statuses:?}"
        );
        busy.join().unwrap().assert(200, "{\"sleep_ms\":1500}\n");
    });
}
