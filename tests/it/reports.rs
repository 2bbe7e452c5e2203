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

/// Each report says how its activation ended (the outcome the metrics count it as), the
/// status its client got, and a failure's message: a success, the action's own error, a
/// crash and a timeout under OpenWhisk's protocol; a crash, a component's own status and
/// a stopped activation under plain HTTP.
#[test]
fn a_report_says_how_its_activation_ended_what_its_client_got_and_why() {
    let server = Server::builder()
        .args(&["--log-format", "json", "--timeout", "1s"])
        .start();
    server
        .init(&Backend::Wasm.init_guest("exits_when_asked"))
        .assert(200, "{\"ok\":true}\n");
    run_as(&server, "fine", json!({"n": 1}));
    run_as(&server, "own-error", json!({"error": "no such user"}));
    let body = json!({"value": {"exit": 3}, "activation_id": "crashed"});
    let crashed = server.post("/run", body.to_string().as_bytes());
    assert_eq!(crashed.status, 400, "{}", crashed.text());
    server.wait_sentinels(3);
    let only = |id: &str| {
        let reports = reports_of(&server, id);
        assert_eq!(reports.len(), 1, "{id}: {}", server.stderr());
        reports[0].clone()
    };
    let fine = only("fine");
    assert_eq!(
        (&fine["outcome"], &fine["status"]),
        (&json!("success"), &json!(200))
    );
    assert!(fine.get("error").is_none(), "{fine}");
    let own = only("own-error");
    assert_eq!(
        (&own["outcome"], &own["status"]),
        (&json!("application_error"), &json!(200)),
        "{own}"
    );
    let crash = only("crashed");
    assert_eq!(
        (&crash["outcome"], &crash["status"]),
        (&json!("action_error"), &json!(400)),
        "{crash}"
    );
    assert_eq!(
        crash["error"],
        crashed.error(),
        "the message its client got"
    );

    let slow = Server::builder()
        .args(&["--log-format", "json", "--timeout", "300ms"])
        .start();
    slow.init(&Backend::Wasm.init_guest("slow"))
        .assert(200, "{\"ok\":true}\n");
    let body = json!({"value": {"sleep_ms": 5000}, "activation_id": "late"});
    let late = slow.post("/run", body.to_string().as_bytes());
    assert_eq!(late.status, 504, "{}", late.text());
    slow.wait_sentinels(1);
    let report = reports_of(&slow, "late");
    assert_eq!(report.len(), 1, "{}", slow.stderr());
    assert_eq!(
        (&report[0]["outcome"], &report[0]["status"]),
        (&json!("timeout"), &json!(504)),
        "{}",
        report[0]
    );
    assert!(
        report[0]["error"]
            .as_str()
            .unwrap()
            .contains("did not finish in time"),
        "{}",
        report[0]
    );
}

/// Under plain HTTP a failure line carries its activation's id and trace id, and names the
/// action; its report has the 502 the client got, a component's report its own status.
#[test]
fn under_plain_http_a_failure_is_filed_under_its_request_and_reported_with_its_status() {
    let guest = crate::support::http_guest();
    let server = Server::builder()
        .args(&["--log-format", "json", "--protocol", "http", "--action"])
        .args(&[guest.to_str().unwrap(), "--action-name", "greeter"])
        .start();
    let send = |path: &str| {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\ntraceparent: {TRACEPARENT}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    };
    assert!(send("/status?404").starts_with("HTTP/1.1 404"));
    assert!(send("/trap").starts_with("HTTP/1.1 502"));
    let name = "greeter";
    let started = std::time::Instant::now();
    let (failed, reported) = loop {
        let records = records(&server);
        let failed = records
            .iter()
            .find(|r| {
                r["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("wasmloop: the action failed"))
            })
            .cloned();
        let reports: Vec<Value> = records
            .iter()
            .filter(|r| r.get("report").is_some())
            .cloned()
            .collect();
        if let (Some(failed), 2) = (&failed, reports.len()) {
            break (failed.clone(), reports);
        }
        assert!(started.elapsed().as_secs() < 10, "{}", server.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let id = failed["activationId"].as_str().unwrap();
    assert_eq!(id.len(), 32, "{failed}");
    assert_eq!(failed["traceId"], TRACE_ID, "{failed}");
    assert_eq!(failed["action"], name, "{failed}");
    let mut statuses: Vec<(Value, Value)> = reported
        .iter()
        .map(|r| {
            (
                r["report"]["outcome"].clone(),
                r["report"]["status"].clone(),
            )
        })
        .collect();
    statuses.sort_by_key(|(_, status)| status.as_u64());
    assert_eq!(
        statuses,
        [
            (json!("success"), json!(404)),
            (json!("action_error"), json!(502))
        ],
        "{reported:?}"
    );
    let crash = reported
        .iter()
        .find(|r| r["report"]["status"] == 502)
        .unwrap();
    assert_eq!(
        crash["activationId"], id,
        "the failure and its report, one activation"
    );
    assert_eq!(crash["action"], name);
}

/// A WASI 0.3 activation's report: its own wall time, the memory of the instance it ran in,
/// and no CPU (an instance's CPU is not split among the activations sharing it). Its log
/// lines carry its id while it has the instance to itself, and only the action's name when
/// activations share one: never another activation's.
#[test]
fn a_wasi_0_3_activations_report_and_logs_say_only_what_is_known_of_it() {
    let init = crate::support::init_binary(&crate::support::read(&crate::support::p3_guest()));
    let log = |line: &str| json!({"__ow_method": "get", "__ow_path": "/log", "__ow_query": format!("line={line}")});
    let alone = Server::builder()
        .args(&["--wasip3", "--log-format", "json"])
        .start();
    alone.init(&init).assert(200, "{\"ok\":true}\n");
    run_as(&alone, "p3-alone", log("said-alone"));
    alone.wait_sentinels(1);
    let report = &reports_of(&alone, "p3-alone")[0];
    assert!(report["wallMs"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report.get("cpuMs").is_none(), "{report}");
    assert!(
        report["memoryBytes"].as_u64().unwrap() > 64 * 1024,
        "{report}"
    );
    let said = records(&alone)
        .into_iter()
        .find(|r| r["message"] == "said-alone")
        .expect("the guest's line");
    assert_eq!(said["activationId"], "p3-alone", "{said}");

    let shared = Server::builder()
        .args(&["--wasip3", "--log-format", "json"])
        .env("__OW_ALLOW_CONCURRENT", "true")
        .start();
    shared.init(&init).assert(200, "{\"ok\":true}\n");
    run_as(&shared, "p3-shared", log("said-shared"));
    shared.wait_sentinels(1);
    let said = records(&shared)
        .into_iter()
        .find(|r| r["message"] == "said-shared")
        .expect("the guest's line");
    assert!(said.get("activationId").is_none_or(|id| id == ""), "{said}");
    assert_eq!(reports_of(&shared, "p3-shared").len(), 1);
}
