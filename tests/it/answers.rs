//! Every answer reaches its client, also one given before the request's body was read:
//! the body is drained first, or the connection closes lingering, never on a reset.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::json;

use crate::support::{Backend, Server};

const ALREADY: &str = "{\"error\":\"Cannot initialize the action more than once.\"}\n";

/// POSTs `body` as a strict client does (Python's `requests`, curl without `Expect`): it
/// sends the whole body before it reads, and a send that fails (a broken pipe, a reset) is
/// the request's failure. Returns the status line and the body.
fn post_strictly(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .write_all(body)
        .unwrap_or_else(|e| panic!("{path}: sending the body failed: {e}"));
    // One answer: read up to its end (its Content-Length), whether or not the connection
    // stays open after it.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("{path}: reading the answer failed: {e}"));
        assert!(n > 0, "{path}: the connection closed before a whole answer");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap();
            if rest.len() >= length {
                let status = head.lines().next().unwrap().to_owned();
                return (status, rest[..length].to_owned());
            }
        }
    }
}

each_backend! {
    fn a_large_second_init_gets_its_403_every_time(backend: Backend) {
        let server = Server::in_process_with_guest(backend, "echo_quietly");
        // 6 MB: under the cap, so it is read and dropped, and the answer follows.
        let mut body = backend.init_guest("echo_quietly");
        body["value"]["padding"] = json!("x".repeat(6_000_000));
        let body = body.to_string();
        for _ in 0..5 {
            let (status, answer) = post_strictly(server.addr, "/init", body.as_bytes());
            assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
            assert_eq!(answer, ALREADY);
        }
        server.run(json!({"still": 1})).assert(200, "{\"still\":1}\n");
    }
}

/// Past the cap the body is never read: the 413 goes out at once, and the connection closes
/// only once the client has stopped sending, so the answer is not reset away.
#[test]
fn a_body_far_past_the_cap_gets_its_413_every_time() {
    let server = Server::builder()
        .in_process()
        .args(&["--max-init-bytes", "100000", "--max-run-bytes", "1000"])
        .start();
    let big = vec![b' '; 20_000_000];
    for _ in 0..5 {
        let (status, answer) = post_strictly(server.addr, "/init", &big);
        assert!(status.starts_with("HTTP/1.1 413 "), "{status}: {answer}");
        assert!(answer.contains("--max-init-bytes"), "{answer}");
    }
    // A script: the test actions are larger than this init cap.
    let script = "#!/bin/sh\nwhile read -r l; do echo '{\"ok\":1}' >&3; done\n";
    server
        .init(&crate::support::init_text(script))
        .assert(200, "{\"ok\":true}\n");
    for _ in 0..5 {
        let (status, answer) = post_strictly(server.addr, "/run", &big);
        assert!(status.starts_with("HTTP/1.1 413 "), "{status}: {answer}");
        assert!(answer.contains("--max-run-bytes"), "{answer}");
    }
    // A second /init is refused before its size is even looked at.
    server.post("/init", &big).assert(403, ALREADY);
}

/// Refused before its body for want of an action: the 500 arrives, body and all.
#[test]
fn a_large_run_before_init_gets_its_500() {
    let server = Server::in_process();
    let body = json!({"value": {"padding": "x".repeat(6_000_000)}}).to_string();
    for _ in 0..5 {
        let (status, answer) = post_strictly(server.addr, "/run", body.as_bytes());
        assert!(status.starts_with("HTTP/1.1 500 "), "{status}");
        assert_eq!(answer, "{\"error\":\"no action defined yet\"}\n");
    }
}

/// A client that waits for `100 Continue` before sending its body is answered at once,
/// without being asked for the body it would only send to be dropped.
#[test]
fn a_client_expecting_100_continue_gets_the_refusal_without_sending() {
    let server = Server::in_process_with_guest(Backend::Wasm, "echo_quietly");
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(
            b"POST /init HTTP/1.1\r\nHost: localhost\r\nContent-Length: 6000000\r\n\
              Expect: 100-continue\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.ends_with(ALREADY), "{answer}");
}

/// Turned away while the server drains (after SIGTERM), a large request still gets its 503,
/// the status the platform reads as "this container is going away".
#[test]
fn a_large_request_during_the_drain_gets_its_503() {
    let server = Server::builder()
        .args(&["--log-filter", "wasmloop::runtime=debug"])
        .start()
        .initialized_with(Backend::Native, "slow");
    std::thread::scope(|scope| {
        let run = scope.spawn(|| server.run(json!({"sleep_ms": 1500})));
        server.wait_stderr("slow: started");
        // SAFETY: kill(2) on the server we started.
        unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
        server.wait_stderr("draining: new requests get 503");
        let body = json!({"value": {"padding": "x".repeat(6_000_000)}}).to_string();
        let (status, answer) = post_strictly(server.addr, "/run", body.as_bytes());
        assert!(status.starts_with("HTTP/1.1 503 "), "{status}");
        assert_eq!(
            answer,
            "{\"error\":\"the runtime is shutting down and takes no new requests\"}\n"
        );
        run.join().unwrap().assert(200, "{\"sleep_ms\":1500}\n");
    });
}
