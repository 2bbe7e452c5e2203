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
