//! `--metrics-listen`: Prometheus metrics on a listener of their own, read with the
//! Prometheus project's own parser, whose counts match what the clients saw.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{Backend, Server};

/// A port nothing listens on now.
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

/// A server whose metrics are at the returned address.
fn with_metrics(args: &[&str]) -> (Server, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = addr.to_string();
    let mut all = vec!["--metrics-listen", listen.as_str()];
    all.extend_from_slice(args);
    (Server::builder().args(&all).start(), addr)
}

/// `GET /metrics`: the status, its content type and the body.
fn scrape_raw(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// Every sample, as the reference parser (PyPI prometheus_client, OpenMetrics) reads the
/// exposition: `name{label="value",...}` (labels sorted) to its value. A body it refuses
/// fails the test.
fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let (head, body) = scrape_raw(addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    let parser = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    let mut python = Command::new("python3")
        .args(["-c", parser])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed (scripts/test.sh installs it and prometheus_client)");
    python
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let parsed = python.wait_with_output().unwrap();
    assert!(
        parsed.status.success(),
        "the reference parser refused the exposition ({}):\n{body}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let samples: HashMap<String, Value> = serde_json::from_slice(&parsed.stdout).unwrap();
    samples
        .into_iter()
        .map(|(k, v)| (k, v.as_f64().unwrap()))
        .collect()
}

fn value(samples: &HashMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no {key} among {samples:#?}"))
}

#[test]
fn after_n_activations_at_any_concurrency_the_counters_say_n() {
    let (server, metrics) = with_metrics(&["--concurrency", "4"]);
    server
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    let (threads, each) = (8, 40);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let server = &server;
            scope.spawn(move || {
                for i in 0..each {
                    // One in four is the action saying it failed: an application error.
                    let value = if i % 4 == 0 {
                        json!({"error": "asked to fail"})
                    } else {
                        json!({"n": t * each + i})
                    };
                    assert_eq!(server.run(value).status, 200);
                }
            });
        }
    });
    let samples = scrape(metrics);
    let total = f64::from(threads * each);
    let success = value(
        &samples,
        r#"wasmloop_activations_total{backend="wasm",outcome="success"}"#,
    );
    let failed = value(
        &samples,
        r#"wasmloop_activations_total{backend="wasm",outcome="application_error"}"#,
    );
    assert_eq!((success, failed), (total * 0.75, total * 0.25));
    assert_eq!(
        value(
            &samples,
            r#"wasmloop_activation_duration_seconds_count{backend="wasm"}"#
        ),
        total
    );
    assert_eq!(
        value(&samples, r#"wasmloop_inits_total{outcome="success"}"#),
        1.0
    );
    assert_eq!(
        value(&samples, "wasmloop_init_duration_seconds_count{}"),
        1.0
    );
    let alive = value(&samples, "wasmloop_instances{}");
    assert!((1.0..=4.0).contains(&alive), "{alive} instances alive");
    let made: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("wasmloop_instances_made_total"))
        .map(|(_, v)| v)
        .sum();
    assert!(made >= alive, "{made} made, {alive} alive");
    assert_eq!(value(&samples, "wasmloop_queue_depth{}"), 0.0);
    // Its code was compiled here, or found in the compile cache a run before left.
    let compiled: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("wasmloop_compiles_total") || k.contains(r#"result="hit""#))
        .map(|(_, v)| v)
        .sum();
    assert!(compiled >= 1.0, "{samples:#?}");
}

#[test]
fn refusals_timeouts_and_failures_are_counted_as_the_clients_saw_them() {
    let (server, metrics) = with_metrics(&[
        "--concurrency",
        "1",
        "--max-queue",
        "1",
        "--timeout",
        "1500ms",
    ]);
    server
        .init(&Backend::Wasm.init_guest("slow"))
        .assert(200, "{\"ok\":true}\n");
    // Six at once at an instance that takes 400 ms each: one runs, one waits, the rest
    // are refused at once.
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let started: Vec<_> = (0..6)
            .map(|_| {
                let server = &server;
                scope.spawn(move || server.run(json!({"sleep_ms": 400})).status)
            })
            .collect();
        started.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let refused = statuses.iter().filter(|s| **s == 429).count() as f64;
    let served = statuses.iter().filter(|s| **s == 200).count() as f64;
    assert_eq!(refused + served, 6.0, "{statuses:?}");
    assert!(refused >= 1.0, "{statuses:?}");
    assert_eq!(server.run(json!({"sleep_ms": 5000})).status, 504);
    let samples = scrape(metrics);
    let count = |outcome: &str| {
        value(
            &samples,
            &format!(r#"wasmloop_activations_total{{backend="wasm",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(count("refused"), refused);
    assert_eq!(value(&samples, "wasmloop_queue_full_total{}"), refused);
    assert_eq!(
        value(&samples, r#"wasmloop_refusals_total{reason="busy"}"#),
        refused
    );
    assert_eq!(count("success"), served);
    assert_eq!(count("timeout"), 1.0);
    // The timed-out instance was dropped, and the next activation made another.
    assert_eq!(server.run(json!({})).status, 200);
    let samples = scrape(metrics);
    assert!(
        value(
            &samples,
            r#"wasmloop_instances_made_total{reason="demand"}"#
        ) >= 1.0
    );
}

#[test]
fn a_crashing_action_and_refused_outbound_calls_are_counted() {
    let (server, metrics) = with_metrics(&[]);
    server
        .init(&Backend::Wasm.init_guest("non_object"))
        .assert(200, "{\"ok\":true}\n");
    assert_eq!(server.run(json!({})).status, 502);
    let samples = scrape(metrics);
    assert_eq!(
        value(
            &samples,
            r#"wasmloop_activations_total{backend="wasm",outcome="action_error"}"#
        ),
        1.0
    );
    // Three connections the allow-list refuses, from a component.
    let (component, component_metrics) = with_metrics(&["--allow-outbound", "127.0.0.1:1"]);
    component
        .init(&Backend::Component.init_guest("connects"))
        .assert(200, "{\"ok\":true}\n");
    for _ in 0..3 {
        let reply = component.run(json!({"tcp": "127.0.0.1:2", "send": "PING\r\n"}));
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let samples = scrape(component_metrics);
    assert_eq!(value(&samples, "wasmloop_outbound_refused_total{}"), 3.0);
    assert_eq!(
        value(
            &samples,
            r#"wasmloop_activations_total{backend="component",outcome="application_error"}"#
        ),
        3.0,
        "the guest answers each refusal as its error"
    );
    // Other paths are not the metrics'.
    let (head, body) = scrape_raw(metrics, "/");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert!(body.contains("GET /metrics"));
}

#[test]
fn metrics_are_off_unless_asked_for_and_a_bad_address_is_told() {
    let refused = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "192.0.2.1:9",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("cannot listen for metrics on 192.0.2.1:9 (--metrics-listen)"),
        "{stderr}"
    );
}

#[test]
fn a_metrics_connection_that_never_sends_its_request_is_closed_at_the_head_bound() {
    let (server, addr) = with_metrics(&["--header-read-timeout", "500ms"]);
    // Answered once the process has bound both listeners (the main one was bound for it).
    server.post("/run", b"{}");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    stream.write_all(b"GET /metr").unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    // Ends when the server closes the connection (or, were it held, at the read timeout).
    let _ = stream.read_to_end(&mut rest);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "held for {:?}",
        started.elapsed()
    );
    server.wait_stderr("did not arrive within 500ms (see --header-read-timeout)");
    let (head, _) = scrape_raw(addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// One request written by hand on a fresh connection: the status it got (0 for none).
fn status_of(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// What an SRE alerts on under plain HTTP: every request by the status class its client
/// got, each refusal by its reason (those hyper answers itself too), the process's own
/// figures and the build, and histogram bounds a person can read.
#[test]
fn under_plain_http_every_answer_is_counted_by_status_and_every_refusal_by_reason() {
    let guest = crate::support::http_guest();
    let (server, metrics) = with_metrics(&[
        "--protocol",
        "http",
        "--action",
        guest.to_str().unwrap(),
        "--max-run-bytes",
        "1000",
        "--drain-period",
        "0s",
        "--shutdown-timeout",
        "5s",
        "--timeout",
        "20s",
        "--body-read-timeout",
        "500ms",
        "--header-read-timeout",
        "2s",
    ]);
    let addr = server.addr;
    let get = |path: &str| {
        status_of(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    assert_eq!(get("/status?200"), 200);
    assert_eq!(get("/status?204"), 204);
    assert_eq!(get("/status?404"), 404);
    assert_eq!(get("/trap"), 502);
    let big = "x".repeat(2000);
    let announced = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    );
    assert_eq!(status_of(addr, announced.as_bytes()), 413);
    let chunked = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    assert_eq!(status_of(addr, chunked.as_bytes()), 413);
    assert_eq!(
        status_of(addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
        400
    );
    let long = format!("GET /?q={} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(70_000));
    assert_eq!(status_of(addr, long.as_bytes()), 414);
    let head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1_500_000)
    );
    assert_eq!(status_of(addr, head.as_bytes()), 431);
    // A body that never comes is 408; a head that never ends closes its connection.
    let slow = b"POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 10\r\n\r\n";
    assert_eq!(status_of(addr, slow), 408);
    assert_eq!(status_of(addr, b"GET / HTTP/1.1\r\nHost: t\r\n"), 0);
    // hyper's own refusals are counted as their connections end, just before their lines.
    server.wait_stderr("(answered 414");
    server.wait_stderr("(answered 431");
    server.wait_stderr("did not arrive within 2s (see --header-read-timeout)");

    let samples = scrape(metrics);
    let class = |code: &str| {
        value(
            &samples,
            &format!(r#"wasmloop_http_requests_total{{code="{code}"}}"#),
        )
    };
    assert_eq!(class("2xx"), 2.0);
    assert_eq!(
        class("4xx"),
        5.0,
        "404, two 413s, the Host-less 400, the 408"
    );
    assert_eq!(class("5xx"), 1.0);
    let refused = |reason: &str| {
        value(
            &samples,
            &format!(r#"wasmloop_refusals_total{{reason="{reason}"}}"#),
        )
    };
    assert_eq!(
        refused("body_too_large"),
        2.0,
        "announced and chunked alike"
    );
    assert_eq!(refused("bad_request"), 1.0);
    assert_eq!(refused("uri_too_long"), 1.0);
    assert_eq!(refused("head_too_large"), 1.0);
    assert_eq!(refused("body_timeout"), 1.0);
    assert_eq!(refused("head_timeout"), 1.0);
    let activations = |outcome: &str| {
        value(
            &samples,
            &format!(r#"wasmloop_activations_total{{backend="http",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(activations("action_error"), 1.0, "the trap");

    // The process and the build.
    assert!(value(&samples, "process_cpu_seconds_total{}") > 0.0);
    let resident = value(&samples, "process_resident_memory_bytes{}");
    assert!((1e6..1e10).contains(&resident), "{resident}");
    let fds = value(&samples, "process_open_fds{}");
    assert!((4.0..10_000.0).contains(&fds), "{fds}");
    assert!(value(&samples, "process_max_fds{}") >= fds);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(&samples, "process_start_time_seconds{}");
    assert!(
        now - started >= 0.0 && now - started < 600.0,
        "{started} vs {now}"
    );
    let build = samples
        .iter()
        .find(|(k, _)| k.starts_with("wasmloop_build_info{"))
        .unwrap_or_else(|| panic!("no build info: {samples:#?}"));
    assert_eq!(*build.1, 1.0);
    assert!(
        build
            .0
            .contains(&format!(r#"version="{}""#, env!("CARGO_PKG_VERSION"))),
        "{}",
        build.0
    );
    // Bounds a person reads at a glance.
    let mut bounds: Vec<String> = samples
        .keys()
        .filter(|k| k.starts_with("wasmloop_activation_duration_seconds_bucket{"))
        .filter_map(|k| {
            k.split("le=\"")
                .nth(1)?
                .split('"')
                .next()
                .map(str::to_owned)
        })
        .collect();
    bounds.sort_by(|a, b| {
        let n = |s: &str| s.parse::<f64>().unwrap_or(f64::INFINITY);
        n(a).total_cmp(&n(b))
    });
    bounds.dedup();
    let readable = [
        "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0",
        "2.5", "5.0", "10.0", "30.0", "+Inf",
    ];
    assert_eq!(bounds, readable);

    // A stopping server's 503s are counted too.
    let busy = std::thread::spawn(move || {
        status_of(
            addr,
            b"GET /spin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    server.wait_stderr("SIGTERM: stopping");
    assert_eq!(get("/status?200"), 503);
    let samples = scrape(metrics);
    assert_eq!(
        value(
            &samples,
            r#"wasmloop_refusals_total{reason="shutting_down"}"#
        ),
        1.0
    );
    assert_eq!(
        value(&samples, r#"wasmloop_http_requests_total{code="5xx"}"#),
        2.0
    );
    assert_eq!(busy.join().unwrap(), 503);
}

#[test]
fn a_web_actions_answer_counts_as_its_report_says_it_went() {
    let echo = Backend::Wasm.guest("echo");
    let (server, metrics) = with_metrics(&[
        "--protocol",
        "http",
        "--action",
        echo.to_str().unwrap(),
        "--log-format",
        "json",
    ]);
    // The echo answers its value: what each body asks for is its result.
    let post = |body: &str| {
        status_of(
            server.addr,
            format!(
                "POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
    };
    assert_eq!(post(r#"{"statusCode":503}"#), 503);
    assert_eq!(post(r#"{"statusCode":201}"#), 201);
    assert_eq!(post(r#"{"error":"no name"}"#), 200);
    let samples = scrape(metrics);
    let activations = |outcome: &str| {
        value(
            &samples,
            &format!(r#"wasmloop_activations_total{{backend="wasm",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(
        (activations("success"), activations("application_error")),
        (1.0, 2.0),
        "a 5xx is the action's word that it failed, as an error field is"
    );
    let reports = || -> Vec<(String, u64)> {
        let mut reported: Vec<(String, u64)> = server
            .stderr()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|record| record.get("report").cloned())
            .map(|report| {
                let outcome = report["outcome"].as_str().unwrap_or_default().to_owned();
                (outcome, report["status"].as_u64().unwrap_or_default())
            })
            .collect();
        reported.sort();
        reported
    };
    let started = std::time::Instant::now();
    let mut reported = reports();
    while reported.len() < 3 && started.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        reported = reports();
    }
    assert_eq!(
        reported,
        [
            ("application_error".to_owned(), 200),
            ("application_error".to_owned(), 503),
            ("success".to_owned(), 201),
        ],
        "{}",
        server.stderr()
    );
}

/// A WASI 0.3 instance that serves several activations at once counts once among the
/// instances, and each activation once among the activations.
#[test]
fn wasi_0_3_instances_count_as_instances_however_many_activations_share_them() {
    let guest = crate::support::p3_guest();
    let (server, metrics) = with_metrics(&[
        "--wasip3",
        "--protocol",
        "http",
        "--concurrency",
        "1",
        "--action",
        guest.to_str().unwrap(),
    ]);
    let addr = server.addr;
    let threads: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                wasmloop_bench::harness::request(addr, "GET", "/overlap?ms=300", b"").unwrap()
            })
        })
        .collect();
    for thread in threads {
        let reply = thread.join().unwrap();
        assert_eq!(reply.status, 200);
        assert_ne!(reply.content(), b"1\n", "the six shared the one instance");
    }
    let seen = scrape(metrics);
    assert_eq!(seen["wasmloop_instances{}"], 1.0, "{seen:?}");
    assert_eq!(
        seen[r#"wasmloop_instances_made_total{reason="first"}"#], 1.0,
        "{seen:?}"
    );
    let answered: f64 = seen
        .iter()
        .filter(|(name, _)| name.starts_with("wasmloop_activations_total{"))
        .map(|(_, value)| value)
        .sum();
    assert_eq!(answered, 6.0, "{seen:?}");
}
