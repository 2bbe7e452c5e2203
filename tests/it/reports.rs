//! Each activation's report (time, CPU, memory, which instance) in json logs and under
//! `wasmloop run -v`, and the W3C trace context: a `traceparent` that came joins every
//! record of its activation and reaches the action; none is invented.

use std::io::{Read, Write};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Backend, SENTINEL, Server};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

/// The JSON records on the server's stderr (sentinels left out).
fn records(server: &Server) -> Vec<Value> {
    server
        .stderr()
        .lines()
        .filter(|line| *line != SENTINEL.trim_end())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn reports_of(server: &Server, id: &str) -> Vec<Value> {
    records(server)
        .into_iter()
        .filter(|r| r["activationId"] == id && r.get("report").is_some())
        .map(|r| r["report"].clone())
        .collect()
}

fn run_as(server: &Server, id: &str, value: Value) {
    let body = json!({"value": value, "activation_id": id, "action_name": "/guest/a"});
    let reply = server.post("/run", body.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
}

each_backend! {
    fn in_json_each_activation_ends_with_its_report_before_its_sentinel(backend: Backend) {
        let server = Server::builder().args(&["--log-format", "json"]).start();
        server
            .init(&backend.init_guest("echo"))
            .assert(200, "{\"ok\":true}\n");
        for id in ["first", "second"] {
            run_as(&server, id, json!({"n": 1}));
            server.wait_sentinels(if id == "first" { 1 } else { 2 });
        }
        let first = reports_of(&server, "first");
        let second = reports_of(&server, "second");
        assert_eq!((first.len(), second.len()), (1, 1), "one report each");
        let (first, second) = (&first[0], &second[0]);
        for report in [first, second] {
            assert!(report["wallMs"].as_f64().unwrap() > 0.0, "{report}");
            let cpu = report["cpuMs"].as_f64().unwrap();
            assert!(cpu >= 0.0 && cpu <= report["wallMs"].as_f64().unwrap() + 50.0, "{report}");
            assert!(report["memoryBytes"].as_u64().unwrap() > 64 * 1024, "{report}");
        }
        assert_eq!(first["instance"], "fresh", "{first}");
        assert_eq!(second["instance"], "reused", "{second}");
        assert!(first["initMs"].as_f64().unwrap() > 0.0, "the first after /init: {first}");
        assert!(second.get("initMs").is_none(), "{second}");
        // The report is the activation's last record: the sentinel follows it.
        let stderr = server.stderr();
        let lines: Vec<&str> = stderr.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            if line.contains("\"report\":") {
                assert_eq!(lines.get(at + 1).copied(), Some(SENTINEL.trim_end()), "{stderr}");
            }
        }
    }

    fn a_traceparent_joins_every_record_of_its_activation_and_reaches_the_action(backend: Backend) {
        let server = Server::builder().args(&["--log-format", "json"]).start();
        server
            .init(&backend.init_guest("traceparent"))
            .assert(200, "{\"ok\":true}\n");
        // A web action's request, as the controller sends it, with its trace context.
        let value = json!({"__ow_method": "get", "__ow_headers": {"traceparent": TRACEPARENT}});
        let body = json!({"value": value, "activation_id": "traced"});
        let reply = server.post("/run", body.to_string().as_bytes());
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer: Value = serde_json::from_str(&reply.text()).unwrap();
        assert_eq!(answer["traceparent"], TRACEPARENT);
        run_as(&server, "untraced", json!({}));
        server.wait_sentinels(2);
        let all = records(&server);
        let traced: Vec<_> = all.iter().filter(|r| r["activationId"] == "traced").collect();
        assert!(traced.len() >= 2, "its line and its report: {all:?}");
        for record in traced {
            assert_eq!(record["traceId"], TRACE_ID, "{record}");
        }
        for record in all.iter().filter(|r| r["activationId"] == "untraced") {
            assert!(record.get("traceId").is_none(), "none invented: {record}");
        }
    }
}

#[test]
fn in_text_the_logs_hold_only_the_actions_lines() {
    let server = Server::start();
    server
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    server.run(json!({})).assert(200, "{}\n");
    server.wait_sentinels(1);
    assert!(!server.stderr().contains("report"), "{}", server.stderr());
}

#[test]
fn a_native_childs_report_is_its_own_process_cpu_and_peak_memory() {
    let server = Server::builder().args(&["--log-format", "json"]).start();
    server
        .init(&Backend::Native.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    run_as(&server, "native", json!({}));
    server.wait_sentinels(1);
    let report = &reports_of(&server, "native")[0];
    // A Rust child's peak resident set: more than a page, less than a gigabyte.
    let memory = report["memoryBytes"].as_u64().unwrap();
    assert!((100 * 1024..1 << 30).contains(&memory), "{report}");
    assert!(report["cpuMs"].as_f64().is_some(), "{report}");
}

#[test]
fn plain_http_files_each_request_under_its_own_traceparent() {
    let server = Server::builder()
        .args(&["--log-format", "json", "--protocol", "http", "--action"])
        .args(&[Backend::Wasm.guest("traceparent").to_str().unwrap()])
        .start();
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "GET /anything HTTP/1.1\r\nHost: t\r\ntraceparent: {TRACEPARENT}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    let answer: Value = serde_json::from_str(body).unwrap();
    assert_eq!(answer["traceparent"], TRACEPARENT, "it reached the action");
    let started = std::time::Instant::now();
    while !server.stderr().contains(TRACE_ID) {
        assert!(started.elapsed().as_secs() < 10, "{}", server.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let traced: Vec<Value> = records(&server)
        .into_iter()
        .filter(|r| r["traceId"] == TRACE_ID)
        .collect();
    assert!(
        traced.iter().any(|r| r["message"] == "tracing"),
        "{traced:?}"
    );
}

#[test]
fn run_v_prints_each_inputs_report() {
    let guest = Backend::Wasm.guest("echo");
    let out = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["run", "-v", "--input", r#"{"n":1}"#])
        .arg(&guest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("wasmloop: report: "))
        .unwrap_or_else(|| panic!("no report: {stderr}"));
    for figure in [
        "ms wall",
        "ms CPU",
        "MiB memory",
        "fresh instance",
        "ms init",
    ] {
        assert!(line.contains(figure), "{figure} missing: {line}");
    }
    // Without -v, none.
    let quiet = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["run", "--input", r#"{"n":1}"#])
        .arg(&guest)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("report"));
}
