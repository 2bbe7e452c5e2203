//! `--protocol http`: the built-in action serves plain HTTP on every path, as Kubernetes,
//! Knative and Cloud Run send it, with health and readiness paths of the runtime's own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, Server, http_guest};

/// One request written as it is (`Connection: close`), and the answer: its status line's
/// code, its header lines (lower-case names) and its body.
fn send(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
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
    assert!(
        error["error"].as_str().unwrap().contains("panicked"),
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
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
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
    let server = plain(
        &http_guest(),
        &["--shutdown-timeout", "2s", "--timeout", "20s"],
    );
    let addr = server.addr;
    // An activation still running holds the drain open.
    let busy = std::thread::spawn(move || send(addr, "GET /spin HTTP/1.1", b"").0);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
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
