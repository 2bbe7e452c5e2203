//! `--protocol http`: the built-in action serves plain HTTP on every path, as Kubernetes,
//! Knative and Cloud Run send it, with health and readiness paths of the runtime's own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, Server, http_guest};

/// One request written as it is (`Connection: close`), and the answer: its status line's
/// code, its header lines (lower-case names) and its body (a chunked one whole, decoded).
fn send(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let (status, headers, body) = send_raw(addr, head, body);
    if header(&headers, "transfer-encoding") != Some("chunked") {
        return (status, headers, body);
    }
    let (body, ended) = dechunk(&body);
    assert!(ended, "a chunked body without its last chunk");
    (status, headers, body)
}

/// `send`, the body as it came.
fn send_raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!(
        "{head}\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {}", String::from_utf8_lossy(&answer)));
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, answer[split + 4..].to_vec())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A server in plain HTTP mode with `action` built in.
fn plain(action: &std::path::Path, args: &[&str]) -> Server {
    let action = action.to_str().unwrap();
    Server::builder()
        .args(&["--protocol", "http", "--action", action])
        .args(args)
        .start()
}

#[test]
fn any_path_reaches_a_stdio_action_as_a_web_actions_parameters() {
    let server = plain(&Backend::Wasm.guest("echo"), &[]);
    let (status, headers, body) = send(
        server.addr,
        "POST /orders/7?expand=items HTTP/1.1\r\nContent-Type: application/json\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        br#"{"qty":2}"#,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    let value: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["qty"], 2, "the JSON body's fields");
    assert_eq!(value["expand"], "items", "the query's");
    assert_eq!(value["__ow_method"], "post");
    assert_eq!(value["__ow_path"], "/orders/7");
    assert_eq!(value["__ow_query"], "expand=items");
    assert_eq!(
        value["__ow_headers"]["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "the trace context passes through"
    );
    // /init and /run are ordinary paths here.
    let (status, _, body) = send(server.addr, "GET /init HTTP/1.1", b"");
    assert_eq!(status, 200);
    let value: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["__ow_path"], "/init");
}

#[test]
fn an_http_component_gets_the_request_and_its_response_is_the_answer() {
    let server = plain(&http_guest(), &[]);
    let (status, headers, body) = send(server.addr, "GET /status?418 HTTP/1.1", b"");
    assert_eq!((status, body.as_slice()), (418, &b"status 418"[..]));
    assert_eq!(header(&headers, "content-type"), Some("text/plain"));
    let (status, headers, body) = send(
        server.addr,
        "POST /raw HTTP/1.1\r\nContent-Type: image/png",
        &[0, 1, 2, 255],
    );
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("image/png"));
    assert_eq!(body, [0, 1, 2, 255], "binary both ways");
    let (_, _, body) = send(server.addr, "PUT /echo?a=1 HTTP/1.1\r\nX-Thing: yes", b"hi");
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["method"], "PUT");
    assert_eq!(seen["path"], "/echo?a=1");
    assert_eq!(seen["headers"]["x-thing"], "yes");
    assert_eq!(seen["body"], "hi");
}

/// HTTP/1.1 requires a Host header of every request: without one it is the client's
/// mistake (400, saying so), never the action's failure. HTTP/1.0 requires none: the
/// request is served, its authority the address it was sent to.
#[test]
fn a_request_without_host_is_the_clients_mistake_under_http_1_1_and_served_under_1_0() {
    let server = plain(&http_guest(), &[]);
    let answer = exchange(
        server.addr,
        b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("the request has no Host header, which HTTP/1.1 requires"),
        "{answer}"
    );
    let answer = exchange(server.addr, b"GET /echo HTTP/1.0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    let seen: Value = serde_json::from_str(body).unwrap();
    assert_eq!(seen["authority"], server.addr.to_string(), "{seen}");
    let stderr = server.stderr();
    assert!(!stderr.contains("the action failed"), "{stderr}");
}

/// The runtime's own paths take GET and HEAD only, and no other path under their prefix
/// is the action's: a POST to readiness must not run it.
#[test]
fn the_runtimes_own_paths_take_get_and_head_only_and_never_reach_the_action() {
    let http = plain(&http_guest(), &[]);
    let openwhisk = Server::builder().start();
    for addr in [http.addr, openwhisk.addr] {
        for path in [
            "/.well-known/wasmloop/health",
            "/.well-known/wasmloop/ready",
        ] {
            let (status, headers, body) = send(addr, &format!("POST {path} HTTP/1.1"), b"{}");
            let body = String::from_utf8_lossy(&body);
            assert_eq!(status, 405, "{path}: {body}");
            assert_eq!(header(&headers, "allow"), Some("GET, HEAD"), "{path}");
            assert!(
                body.contains("is the runtime's own probe and takes GET or HEAD only, not POST"),
                "{body}"
            );
            let (status, _, body) = send(addr, &format!("HEAD {path} HTTP/1.1"), b"");
            assert!(status == 200 || status == 503, "{path}: {status}");
            assert!(body.is_empty());
        }
        let (status, _, body) = send(addr, "PUT /.well-known/wasmloop/other HTTP/1.1", b"");
        assert_eq!(status, 404);
        assert!(
            String::from_utf8_lossy(&body).contains("the runtime's own paths are"),
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
}

#[test]
fn health_and_readiness_are_the_runtimes_own_paths_under_both_protocols() {
    let server = plain(&Backend::Wasm.guest("echo"), &[]);
    for path in [
        "/.well-known/wasmloop/health",
        "/.well-known/wasmloop/ready",
    ] {
        let (status, _, body) = send(server.addr, &format!("GET {path} HTTP/1.1"), b"");
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    }
    // Under OpenWhisk's protocol: ready once an action is there.
    let openwhisk = Server::builder().start();
    let ready = || {
        send(
            openwhisk.addr,
            "GET /.well-known/wasmloop/ready HTTP/1.1",
            b"",
        )
    };
    let (status, _, body) = ready();
    assert_eq!(status, 503);
    assert!(String::from_utf8_lossy(&body).contains("not ready: no action yet"));
    let (status, _, _) = send(
        openwhisk.addr,
        "GET /.well-known/wasmloop/health HTTP/1.1",
        b"",
    );
    assert_eq!(status, 200);
    openwhisk
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, "{\"ok\":true}\n");
    assert_eq!(ready().0, 200);
}

#[test]
fn the_actions_mistakes_are_502s_and_a_slow_one_a_504() {
    let server = plain(&http_guest(), &["--timeout", "500ms"]);
    let (status, _, body) = send(server.addr, "GET /trap HTTP/1.1", b"");
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let error: Value = serde_json::from_slice(&body).unwrap();
    // The panic's own place and message, not the backtrace hint Rust logs after them.
    let said = error["error"].as_str().unwrap();
    assert!(
        said.contains("panicked at")
            && said.contains(": asked to trap`")
            && !said.contains("RUST_BACKTRACE"),
        "{error}"
    );
    let (status, _, _) = send(server.addr, "GET /spin HTTP/1.1", b"");
    assert_eq!(status, 504);
    let (status, _, _) = send(server.addr, "GET /status?200 HTTP/1.1", b"");
    assert_eq!(status, 200, "the next request is served");
}

#[test]
fn a_result_no_response_can_be_is_a_502_and_a_log_line() {
    let server = plain(&Backend::Wasm.guest("echo"), &[]);
    // The echo guest answers its value: a web result made of the request's own fields.
    let cases = [
        (
            json!({"statusCode": 1000}),
            "statusCode 1000 is no HTTP status",
        ),
        (
            json!({"headers": {"x-a": "one\ntwo"}}),
            "no header value can",
        ),
    ];
    for (result, told) in cases {
        let (status, _, body) = send(
            server.addr,
            "POST / HTTP/1.1\r\nContent-Type: application/json",
            result.to_string().as_bytes(),
        );
        assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains(told), "{told}");
        server.wait_stderr(told);
    }
}

#[test]
fn a_body_past_the_cap_is_413() {
    let server = plain(&Backend::Wasm.guest("echo"), &["--max-run-bytes", "1000"]);
    let (status, _, body) = send(server.addr, "POST / HTTP/1.1", &[b'x'; 5000]);
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("--max-run-bytes"));
}

#[test]
fn it_listens_on_port_and_refuses_to_start_without_an_action() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let guest = Backend::Wasm.guest("echo");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["serve", "--protocol", "http", "--action"])
        .arg(&guest)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nothing on $PORT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _, _) = send(addr, "GET /.well-known/wasmloop/ready HTTP/1.1", b"");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);

    let refused = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["serve", "--protocol", "http"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr
            .contains("--protocol http serves the action built into the image: give --action FILE"),
        "{stderr}"
    );
}

#[test]
fn a_body_that_arrives_too_slowly_is_408_and_the_server_serves_on() {
    let server = plain(
        &Backend::Wasm.guest("echo"),
        &["--body-read-timeout", "300ms"],
    );
    let mut stream = connect(server.addr);
    // Ten bytes of the hundred it announces, then nothing.
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n0123456789")
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("see --body-read-timeout"), "{answer}");
    let (status, _, _) = send(server.addr, "GET /?name=after HTTP/1.1", b"");
    assert_eq!(status, 200);
}

#[test]
fn readiness_turns_503_once_sigterm_starts_the_drain() {
    // An activation still running holds the drain open.
    let (server, busy) = sigterm_while_spinning(&http_guest(), "2s", &[]);
    let addr = server.addr;
    let started = Instant::now();
    let (status, body) = loop {
        let (status, _, body) = send(addr, "GET /.well-known/wasmloop/ready HTTP/1.1", b"");
        if status != 200 || started.elapsed() > Duration::from_secs(10) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(
        String::from_utf8_lossy(&body).contains("not ready: the server is draining"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    // The stopped activation is answered, not lost.
    assert_eq!(busy.join().unwrap(), 503);
}

/// A plain HTTP server without a drain (`--shutdown-timeout grace`, `args` besides), sent
/// SIGTERM while one activation spins: the server, and the thread that has its status.
fn sigterm_while_spinning(
    action: &std::path::Path,
    grace: &str,
    args: &[&str],
) -> (Server, std::thread::JoinHandle<u16>) {
    let mut all = vec![
        "--drain-period",
        "0s",
        "--shutdown-timeout",
        grace,
        "--timeout",
        "20s",
    ];
    all.extend_from_slice(args);
    let server = plain(action, &all);
    let addr = server.addr;
    let busy = std::thread::spawn(move || send(addr, "GET /spin HTTP/1.1", b"").0);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    (server, busy)
}

/// A rolling update, as Kubernetes makes one: SIGTERM comes while the Service still routes
/// here. Readiness fails at once; every request sent during the drain is served; then the
/// server exits 0, having said what it was doing.
#[test]
fn requests_that_come_during_the_drain_after_sigterm_are_all_served() {
    let server = plain(
        &http_guest(),
        &["--drain-period", "4s", "--shutdown-timeout", "2s"],
    );
    let addr = server.addr;
    assert_eq!(send(addr, "GET /status?200 HTTP/1.1", b"").0, 200);
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    let signalled = Instant::now();
    // Clients keep sending for most of the drain (the rest is slack for a busy machine).
    let until = Duration::from_secs(3);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(move || {
                    let mut got = Vec::new();
                    while signalled.elapsed() < until {
                        got.push(send(addr, "GET /status?200 HTTP/1.1", b"").0);
                    }
                    got
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    });
    let refused = statuses.iter().filter(|s| **s != 200).count();
    assert!(statuses.len() > 20, "only {} requests sent", statuses.len());
    assert_eq!(refused, 0, "{refused} of {} refused", statuses.len());
    // A client that keeps its connection is told to close it: its next request then goes
    // where the endpoints now point.
    let mut kept = connect(addr);
    kept.write_all(b"GET /.well-known/wasmloop/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    read_until(&mut kept, &mut head, b"\r\n\r\n");
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(
        head.starts_with("http/1.1 503"),
        "readiness must fail for the whole drain: {head}"
    );
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(server.wait_exit(), Some(0));
    let stderr = server.stderr();
    assert!(
        stderr.contains(
            "wasmloop: SIGTERM: stopping; readiness answers 503 from now on, requests are still \
             served for 4s (--drain-period)"
        ),
        "{stderr}"
    );
}

/// An activation still running when `--shutdown-timeout` runs out is stopped, answered
/// 503, and a line under its id says so.
#[test]
fn an_activation_the_shutdown_stops_is_answered_and_named_in_the_log() {
    let guest = http_guest();
    let (server, busy) = sigterm_while_spinning(&guest, "300ms", &["--log-format", "json"]);
    assert_eq!(busy.join().unwrap(), 503);
    assert_eq!(server.wait_exit(), Some(0));
    let stderr = server.stderr();
    let stopped: Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("was stopped by the shutdown"))
        })
        .unwrap_or_else(|| panic!("no line for the stopped activation: {stderr}"));
    let id = stopped["activationId"].as_str().unwrap();
    assert_eq!(id.len(), 32, "{stopped}");
    let name = guest.file_stem().unwrap().to_str().unwrap();
    assert_eq!(stopped["action"], name, "{stopped}");
    let message = stopped["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("activation {id} was stopped by the shutdown"))
            && message.contains("--shutdown-timeout (300ms)")
            && message.contains("answered 503"),
        "{message}"
    );
    // And its report, under the same id, says how it ended.
    let report = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["activationId"] == id && l.get("report").is_some())
        .unwrap_or_else(|| panic!("no report for {id}: {stderr}"));
    assert_eq!(report["report"]["outcome"], "refused", "{report}");
    assert_eq!(report["report"]["status"], 503, "{report}");
    assert_eq!(
        report["report"]["error"], "the runtime is shutting down; the activation was stopped",
        "{report}"
    );
}

/// Ctrl-C is a person at a terminal: no drain, whatever --drain-period says.
#[test]
fn ctrl_c_stops_at_once_without_the_drain() {
    let server = plain(&http_guest(), &["--drain-period", "1m"]);
    let (ready, _, _) = send(server.addr, "GET /.well-known/wasmloop/ready HTTP/1.1", b"");
    assert_eq!(ready, 200);
    let began = Instant::now();
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGINT) };
    assert_eq!(server.wait_exit(), Some(0));
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
    let stderr = server.stderr();
    assert!(
        stderr.contains("wasmloop: interrupted: stopping; new requests get 503"),
        "{stderr}"
    );
}

/// Under OpenWhisk's protocol a stopping container answers 503 at once (the invoker's
/// signal to place the activation elsewhere): a drain period there is a mistake to say.
#[test]
fn a_drain_period_under_openwhisks_protocol_is_refused_with_the_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .args(["serve", "--listen", "127.0.0.1:0", "--drain-period", "5s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("--drain-period (WASMLOOP_DRAIN_PERIOD) applies under --protocol http only"),
        "{stderr}"
    );
}

/// A connection to write a request on by hand, whose reads give up after 20 s.
/// A `/stream` request whose first piece is sent and whose body never ends: its response
/// goes on as long as the component does.
fn a_stream_never_ended(addr: SocketAddr) -> TcpStream {
    let mut stream = connect(addr);
    stream
        .write_all(
            b"POST /stream HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n",
        )
        .unwrap();
    stream
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Reads from `stream` until `want` has come (or panics after a while), returning all read.
fn read_until(stream: &mut TcpStream, read: &mut Vec<u8>, want: &[u8]) {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    while !read.windows(want.len()).any(|w| w == want) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?} never came: {}",
            String::from_utf8_lossy(want),
            String::from_utf8_lossy(read)
        );
        match stream.read(&mut buffer) {
            Ok(0) => panic!(
                "closed before {:?}: {}",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(read)
            ),
            Ok(n) => read.extend_from_slice(&buffer[..n]),
            Err(e) => panic!("{e}: {}", String::from_utf8_lossy(read)),
        }
    }
}

/// A chunked body's data (`Transfer-Encoding: chunked`), and whether its last chunk came.
fn dechunk(mut body: &[u8]) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    loop {
        let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
            return (data, false);
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return (data, true);
        }
        let start = end + 2;
        if body.len() < start + size {
            data.extend_from_slice(&body[start..]);
            return (data, false);
        }
        data.extend_from_slice(&body[start..start + size]);
        body = &body[(start + size + 2).min(body.len())..];
    }
}

#[test]
fn an_http_component_answers_while_it_reads_the_request_both_bodies_streamed() {
    let server = plain(&http_guest(), &[]);
    let mut stream = connect(server.addr);
    stream
        .write_all(b"POST /stream HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    // Its answer begins before the request's body has: neither is held back whole.
    let mut read = Vec::new();
    read_until(&mut stream, &mut read, b"ready\n");
    assert!(
        read.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&read)
    );
    for piece in ["first", "second"] {
        stream
            .write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes())
            .unwrap();
        read_until(&mut stream, &mut read, piece.as_bytes());
    }
    stream.write_all(b"0\r\n\r\n").unwrap();
    read_until(&mut stream, &mut read, b"\r\n0\r\n\r\n");
    let split = read.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let (body, ended) = dechunk(&read[split + 4..]);
    assert!(ended);
    assert_eq!(String::from_utf8_lossy(&body), "ready\nfirstsecond");
    // The connection serves the next request.
    stream
        .write_all(b"GET /status?201 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let mut next = Vec::new();
    read_until(&mut stream, &mut next, b"status 201");
    assert!(next.starts_with(b"HTTP/1.1 201"));
}

#[test]
fn a_streamed_response_is_bound_by_time_not_by_the_result_cap() {
    // A web action's result is held whole, so it has a cap; a streamed body is not held.
    let server = plain(&http_guest(), &["--max-result-bytes", "1000"]);
    let (status, headers, body) = send(server.addr, "GET /big?300000 HTTP/1.1", b"");
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
    assert_eq!(body.len(), 300_000);
}

#[test]
fn a_request_body_past_the_cap_or_too_slow_is_the_runtimes_answer_whatever_the_component_said() {
    let server = plain(
        &http_guest(),
        &["--max-run-bytes", "1000", "--body-read-timeout", "400ms"],
    );
    // Announced too large: refused before the component sees it.
    let (status, _, body) = send(server.addr, "POST /echo HTTP/1.1", &[b'x'; 5000]);
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("--max-run-bytes"));
    // Chunked, found too large as the component reads it.
    let mut stream = connect(server.addr);
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 600, "y".repeat(600));
    stream.write_all(chunk.as_bytes()).unwrap();
    stream.write_all(chunk.as_bytes()).unwrap();
    let mut read = Vec::new();
    read_until(&mut stream, &mut read, b"--max-run-bytes");
    assert!(
        read.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&read)
    );
    drop(stream);
    // Ten bytes of the hundred announced, then nothing: 408 at the read timeout.
    let mut stream = connect(server.addr);
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        .unwrap();
    let mut read = Vec::new();
    read_until(&mut stream, &mut read, b"--body-read-timeout");
    assert!(
        read.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&read)
    );
    let (status, _, _) = send(server.addr, "GET /status?200 HTTP/1.1", b"");
    assert_eq!(status, 200, "the next request is served");
}

#[test]
fn a_components_bad_answers_are_502s_with_a_log_line_and_a_stalled_stream_is_cut_at_the_deadline() {
    let server = plain(&http_guest(), &["--timeout", "700ms"]);
    for (path, told) in [
        (
            "/status?700",
            "answered status 700: answer a status from 200 to 599",
        ),
        ("/no-response", "without setting a response"),
    ] {
        let (status, _, body) = send(server.addr, &format!("GET {path} HTTP/1.1"), b"");
        assert_eq!(status, 502, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains(told), "{path}");
        server.wait_stderr(told);
    }
    // Its head and first bytes went out, and it goes on reading a body that never ends:
    // the deadline cuts it, the client sees the connection close before the last chunk,
    // and the logs say why.
    let mut stream = a_stream_never_ended(server.addr);
    let mut read = Vec::new();
    let _ = stream.read_to_end(&mut read);
    let text = String::from_utf8_lossy(&read);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("first") && !text.ends_with("0\r\n\r\n"),
        "{text}"
    );
    server.wait_stderr("the response was cut short: the action did not finish in time");
    let (status, _, _) = send(server.addr, "GET /status?200 HTTP/1.1", b"");
    assert_eq!(status, 200, "the next request is served");
}

#[test]
fn a_body_left_unfinished_when_handle_returns_is_cut_at_once_under_the_activations_labels() {
    let server = plain(&http_guest(), &["--timeout", "60s", "--log-format", "json"]);
    let started = Instant::now();
    let (status, _, body) = send_raw(server.addr, "GET /unfinished HTTP/1.1", b"");
    assert_eq!(status, 200);
    let (data, ended) = dechunk(&body);
    assert_eq!(data, b"half");
    assert!(!ended, "a cut body must not look whole");
    // Not at the deadline a minute away: nothing could ever finish it once handle returned.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let told = "the response was cut short: command exited: the component returned from \
                handle without finishing its response: call outgoing-body.finish";
    server.wait_stderr(told);
    let stderr = server.stderr();
    let line: Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("cut short"))
        })
        .expect("the line is JSON");
    assert_eq!(
        line["activationId"].as_str().map(str::len),
        Some(32),
        "{line}"
    );
    // Dropped unfinished instead, wasmtime fails the body: cut, and said.
    let (status, _, body) = send_raw(server.addr, "GET /dropped HTTP/1.1", b"");
    assert_eq!(status, 200);
    assert!(!dechunk(&body).1, "a failed body must not look whole");
    server.wait_stderr("the response was cut short: command exited: the component's response body failed before its end");
    let (status, _, _) = send(server.addr, "GET /status?200 HTTP/1.1", b"");
    assert_eq!(status, 200, "the next request is served");
}

#[test]
fn a_response_cut_by_the_shutdown_is_said() {
    let server = plain(
        &http_guest(),
        &[
            "--drain-period",
            "0s",
            "--shutdown-timeout",
            "300ms",
            "--timeout",
            "20s",
        ],
    );
    // Its head and first piece go out; its request's body never ends, so it never does.
    let mut stream = a_stream_never_ended(server.addr);
    let mut read = Vec::new();
    read_until(&mut stream, &mut read, b"first");
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    server.wait_stderr("the response was cut short: the runtime is shutting down");
    let _ = stream.read_to_end(&mut read);
    let text = String::from_utf8_lossy(&read);
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut body must not look whole: {text}"
    );
    // A drain that ran its course, not a process killed by the signal.
    assert_eq!(server.wait_exit(), Some(0));
}

#[test]
fn an_http_component_gets_the_trace_context_and_its_activations_id_no_caller_can_forge() {
    let server = plain(&http_guest(), &[]);
    let (status, _, body) = send(
        server.addr,
        "GET /echo HTTP/1.1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nx-ow-activation-id: forged",
        b"",
    );
    assert_eq!(status, 200);
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        seen["headers"]["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    let id = seen["headers"]["x-ow-activation-id"].as_str().unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert!(
        seen["headers"]["x-ow-deadline"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .is_ok()
    );
}

/// Writes `request` (as much of it as the server takes before it answers) and reads the
/// answer until the server closes the connection.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = connect(addr);
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_head_past_hypers_limits_or_too_slow_is_told_to_the_client_and_in_the_logs() {
    let server = plain(&http_guest(), &["--header-read-timeout", "500ms"]);
    // Headers far past what hyper buffers (about 400 KB; a read may take it a little over).
    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1_500_000)
    );
    let answer = exchange(server.addr, big.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    server.wait_stderr("its request's head is larger than the server takes (answered 431");
    // A URI past what hyper takes is 414, and the log says the same status.
    let long = format!("GET /?q={} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(70_000));
    let answer = exchange(server.addr, long.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    server.wait_stderr("its request's URI is longer than the server takes (answered 414");
    let answer = exchange(server.addr, b"NOT HTTP AT ALL\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    server.wait_stderr("is no HTTP/1.1 request (answered 400)");
    assert!(
        !server
            .stderr()
            .contains("answered 431: fewer or shorter headers)\n")
            || server.stderr().matches("answered 431").count() == 1,
        "one 431 only: {}",
        server.stderr()
    );
    // Half a head, then nothing: the connection is closed at the limit.
    let started = Instant::now();
    let answer = exchange(server.addr, b"GET /status?200 HTTP/1.1\r\nHost: t\r\n");
    assert!(answer.is_empty(), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10), "held open");
    server.wait_stderr("did not arrive within 500ms (see --header-read-timeout)");
    let (status, _, _) = send(server.addr, "GET /status?200 HTTP/1.1", b"");
    assert_eq!(status, 200, "the server serves on");
}
