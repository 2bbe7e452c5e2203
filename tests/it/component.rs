//! WebAssembly components: what tells them apart at /init, and the outbound allow-list,
//! against real servers on loopback (an HTTP server of the test's own, and Redis).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, HttpServer, Server, init_binary};

/// A port that accepts connections and never says a word.
fn silent_server() -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in listener.incoming().flatten() {
            kept.push(stream);
        }
    });
    (addr, held)
}

fn component_server(name: &str, args: &[&str]) -> Server {
    let server = Server::builder().args(args).start();
    server
        .init(&Backend::Component.init_guest(name))
        .assert(200, "{\"ok\":true}\n");
    server
}

fn result(server: &Server, value: Value) -> Value {
    let reply = server.run(value);
    assert_eq!(reply.status, 200, "{}", reply.text());
    serde_json::from_str(&reply.text()).unwrap()
}

#[test]
fn http_is_denied_by_default_with_a_log_line_that_names_the_flag() {
    let web = HttpServer::start("hello from loopback");
    let server = component_server("http_get", &[]);
    let got = result(&server, json!({"url": web.url("/a")}));
    assert_eq!(got, json!({"error": "ErrorCode::HttpRequestDenied"}));
    let entry = web.addr.to_string();
    server.wait_stderr(&format!(
        "wasmloop: denied an HTTP request to {entry}: components reach only what \
         --allow-outbound (WASMLOOP_ALLOW_OUTBOUND) lists; add `{entry}` to it to allow this\n"
    ));
}

#[test]
fn an_allowed_http_request_gets_its_answer_and_a_denied_one_does_not_spoil_the_next() {
    let web = HttpServer::start("hello from loopback");
    let other = HttpServer::start("not for you");
    let allowed = format!("localhost:{}", web.addr.port());
    let server = component_server("http_get", &["--allow-outbound", &allowed]);
    let url = format!("http://localhost:{}/x", web.addr.port());
    assert_eq!(
        result(&server, json!({"url": url})),
        json!({"status": 200, "length": 19})
    );
    // Allowed by name, not by address; and another port of the same host is not allowed.
    assert_eq!(
        result(&server, json!({"url": web.url("/x")})),
        json!({"error": "ErrorCode::HttpRequestDenied"})
    );
    let elsewhere = format!("http://localhost:{}/x", other.addr.port());
    assert_eq!(
        result(&server, json!({"url": elsewhere})),
        json!({"error": "ErrorCode::HttpRequestDenied"})
    );
    assert_eq!(
        result(&server, json!({"url": url})),
        json!({"status": 200, "length": 19})
    );
}

#[test]
fn a_wildcard_port_entry_allows_any_host_on_that_port() {
    let web = HttpServer::start("ok");
    let entry = format!("*:{}", web.addr.port());
    let server = component_server("http_get", &["--allow-outbound", &entry]);
    assert_eq!(
        result(&server, json!({"url": web.url("/")})),
        json!({"status": 200, "length": 2})
    );
}

/// A Redis server of the test's own on a free loopback port, stopped when dropped.
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start redis-server: install it (Debian: redis-server; .ci/run does)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis { child, addr }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_tcp_connection_to_a_real_service_follows_the_allow_list() {
    let redis = Redis::start();
    let ping = json!({"tcp": redis.addr.to_string(), "send": "PING\r\n"});

    let denied = component_server("connects", &["--allow-outbound", "127.0.0.1:1"]);
    let got = result(&denied, ping.clone());
    assert!(got["error"].is_string(), "{got}");
    denied.wait_stderr(&format!(
        "wasmloop: denied a TCP connection to {}: components reach only what --allow-outbound \
         (WASMLOOP_ALLOW_OUTBOUND) lists; add `{}` to it to allow this\n",
        redis.addr, redis.addr
    ));

    let allowed = component_server("connects", &["--allow-outbound", &redis.addr.to_string()]);
    assert_eq!(result(&allowed, ping.clone()), json!({"reply": "+PONG"}));
    // The instance keeps working, and keeps its connection rights, across activations.
    let set = json!({"tcp": redis.addr.to_string(), "send": "SET k v\r\n"});
    assert_eq!(result(&allowed, set), json!({"reply": "+OK"}));
}

#[test]
fn a_guest_retrying_refused_calls_logs_a_burst_and_then_how_many_were_left_out() {
    let server = component_server("connects", &["--allow-outbound", "127.0.0.1:1"]);
    let refused = json!({"tcp": "127.0.0.1:9", "send": "PING\r\n"});
    let started = std::time::Instant::now();
    for _ in 0..30 {
        let got = result(&server, refused.clone());
        assert!(got["error"].is_string(), "{got}");
    }
    // Ten at once, then one a second: however slow this machine, 30 tries in fewer than
    // 20 s leave some out, and an activation's logs end by saying how many.
    let seconds = started.elapsed().as_secs() as usize;
    assert!(seconds < 20, "30 activations took {seconds} s");
    server.wait_sentinels(30);
    let logs = server.stderr();
    let logged = logs
        .matches("wasmloop: denied a TCP connection to 127.0.0.1:9")
        .count();
    assert!(
        (10..=11 + seconds).contains(&logged),
        "{logged} lines in {seconds} s:\n{logs}"
    );
    let told: usize = logs
        .lines()
        .filter_map(|line| line.strip_prefix("wasmloop: "))
        .filter_map(|line| line.split_once(" more refusals were not logged"))
        .map(|(count, _)| count.parse::<usize>().unwrap())
        .sum();
    assert_eq!(
        logged + told,
        30,
        "every refusal logged or counted:\n{logs}"
    );
}

#[test]
fn only_the_names_the_list_has_are_looked_up() {
    let redis = Redis::start();
    let port = redis.addr.port();
    let by_name = json!({"tcp": format!("localhost:{port}"), "send": "PING\r\n"});
    let by_address = component_server("connects", &["--allow-outbound", &redis.addr.to_string()]);
    let got = result(&by_address, by_name.clone());
    assert!(
        got["error"].as_str().unwrap().contains("lookup"),
        "no lookup without a named entry: {got}"
    );
    by_address.wait_stderr(
        "wasmloop: denied a name lookup of localhost: components look up only the names \
         --allow-outbound (WASMLOOP_ALLOW_OUTBOUND) lists; add `localhost:PORT` to it to allow \
         this\n",
    );
    let named = format!("localhost:{port}");
    let by_host = component_server("connects", &["--allow-outbound", &named]);
    assert_eq!(result(&by_host, by_name.clone()), json!({"reply": "+PONG"}));
    // Another name is not looked up, not even to be refused by address afterwards: a
    // lookup alone carries data to whoever answers for the domain.
    let other = json!({"tcp": format!("data.exfil.invalid:{port}"), "send": "PING\r\n"});
    let got = result(&by_host, other);
    assert!(got["error"].is_string(), "{got}");
    by_host.wait_stderr("wasmloop: denied a name lookup of data.exfil.invalid: ");
    // A `*` entry lets every name be looked up.
    let any = component_server("connects", &["--allow-outbound", "*"]);
    assert_eq!(result(&any, by_name), json!({"reply": "+PONG"}));
}

#[test]
fn the_deadline_stops_an_activation_waiting_on_a_request_and_the_next_one_works() {
    let (silent, _held) = silent_server();
    let web = HttpServer::start("ok");
    let list = format!("{silent},{}", web.addr);
    let server = component_server("http_get", &["--allow-outbound", &list, "--timeout", "1s"]);
    server
        .run(json!({"url": format!("http://{silent}/")}))
        .assert(
            504,
            "{\"error\":\"the action did not finish within --timeout 1s and was stopped\"}\n",
        );
    assert_eq!(
        result(&server, json!({"url": web.url("/")})),
        json!({"status": 200, "length": 2})
    );
}

#[test]
fn a_trap_on_resource_order_is_a_400_with_the_fix_and_the_next_run_gets_a_fresh_instance() {
    let server = component_server("drops_out_of_order", &[]);
    let reply = server.run(json!({"drop": "wrong"}));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply
            .error()
            .contains("resource has children: the component dropped a WASI resource"),
        "{}",
        reply.text()
    );
    assert_eq!(result(&server, json!({"after": 1})), json!({"after": 1}));
}

#[test]
fn a_component_that_is_not_valid_says_so() {
    let server = Server::start();
    server
        .init(&init_binary(b"\0asm\x0d\x00\x01\x00\x01"))
        .assert_error(502, "cannot start action: invalid WebAssembly component");
}

#[test]
fn a_component_without_a_run_export_is_told_how_to_build_one() {
    let library = wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (export "f" (func $f)))"#,
    )
    .unwrap();
    let server = Server::start();
    server.init(&init_binary(&library)).assert_error(
        502,
        "the component exports no `wasi:cli/run@0.2.x` interface (it exports f): build it as \
         a WASI command",
    );
}

#[test]
fn a_component_that_imports_what_the_runtime_lacks_is_told_which_import() {
    let needs_a_database = wat::parse_str(
        r#"(component
             (import "acme:db/query@1.0.0" (instance (export "get" (func))))
             (core module $m (func (export "run") (result i32) i32.const 0))
             (core instance $i (instantiate $m))
             (func $run (result (result)) (canon lift (core func $i "run")))
             (instance $r (export "run" (func $run)))
             (export "wasi:cli/run@0.2.0" (instance $r)))"#,
    )
    .unwrap();
    let server = Server::start();
    let reply = server.init(&init_binary(&needs_a_database));
    reply.assert_error(
        502,
        "cannot start action: the component imports what wasmloop does not provide: \
         acme:db/query@1.0.0. wasmloop gives components WASI 0.2",
    );
}

#[test]
fn a_precompiled_component_loads_only_with_allow_precompiled() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("echo.cwasm");
    let status = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("compile")
        .arg(Backend::Component.guest("echo"))
        .arg("--output")
        .arg(&cwasm)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&cwasm).unwrap();

    Server::start()
        .init(&init_binary(&bytes))
        .assert_error(502, "--allow-precompiled");
    let server = Server::builder().arg("--allow-precompiled").start();
    server
        .init(&init_binary(&bytes))
        .assert(200, "{\"ok\":true}\n");
    assert_eq!(result(&server, json!({"n": 1})), json!({"n": 1}));
}

/// The component examples, as an action author would use them: built by
/// component-examples/build.sh, in Rust, Python and JavaScript.
const LANGUAGES: [&str; 3] = ["rust", "python", "js"];

fn example(file: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("component-examples/out")
        .join(file);
    assert!(
        path.is_file(),
        "{} is missing: run component-examples/build.sh first",
        path.display()
    );
    crate::support::read(&path)
}

fn example_server(file: &str, args: &[&str]) -> Server {
    let server = Server::builder().args(args).start();
    server
        .init(&init_binary(&example(file)))
        .assert(200, "{\"ok\":true}\n");
    server
}

#[test]
fn every_component_hello_greets_and_logs() {
    for lang in LANGUAGES {
        crate::examples::says_hello(&example_server(&format!("hello-{lang}.wasm"), &[]));
    }
}

#[test]
fn every_http_hello_answers_a_plain_invoke_and_a_web_request_as_a_web_action() {
    let hello = |name: &str| format!("Hello, {name}!");
    for lang in LANGUAGES {
        let file = format!("http-hello-{lang}.wasm");
        // With the runtime's default lifetime: componentize-js's engine answers one request
        // per instance, and the runtime gives it a fresh one for each (a kept instance
        // finds its fetch event used up at the second call, under `wasmtime serve
        // --max-instance-reuse-count` too); the others keep theirs.
        let server = example_server(&file, &[]);
        let web = json!({
            "__ow_method": "post", "__ow_path": "/", "__ow_query": "",
            "__ow_headers": {"content-type": "application/json"},
            // {"name":"Web"}, base64 as the controller sends application/json raw.
            "__ow_body": "eyJuYW1lIjoiV2ViIn0=",
        });
        for (value, name) in [
            (json!({"name": "Mike"}), "Mike"),
            (json!({}), "Stranger"),
            (web, "Web"),
        ] {
            let got = result(&server, value);
            assert_eq!(got["statusCode"], 200, "{lang}: {got}");
            assert_eq!(
                got["headers"]["content-type"], "application/json",
                "{lang}: {got}"
            );
            let body: Value = serde_json::from_str(got["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["message"], hello(name), "{lang}");
        }
        server.wait_stderr("hello: greeting Web");

        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("component-examples/out")
            .join(&file);
        let ran = crate::support::output_with_input(
            Command::new(env!("CARGO_BIN_EXE_wasmloop"))
                .arg("run")
                .arg(&path)
                .env("WASMLOOP_NO_CACHE", "1"),
            "{\"name\":\"Mike\"}\n{\"name\":\"Ann\"}\n",
        );
        let stdout = String::from_utf8_lossy(&ran.stdout);
        let printed: Vec<Value> = stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| {
                    panic!("{lang}: {e}: {}", String::from_utf8_lossy(&ran.stderr))
                })
            })
            .collect();
        assert_eq!(printed.len(), 2, "{lang}: {stdout}");
        for (printed, name) in printed.iter().zip(["Mike", "Ann"]) {
            assert_eq!(printed["statusCode"], 200, "{lang}");
            assert!(
                printed["body"].as_str().unwrap().contains(&hello(name)),
                "{lang}"
            );
        }
        assert!(ran.status.success(), "{lang}");
    }
}

#[test]
fn every_component_fetch_reaches_an_allowed_host_and_is_refused_another() {
    let web = HttpServer::start("twelve bytes");
    let other = HttpServer::start("elsewhere");
    for lang in LANGUAGES {
        let server = example_server(
            &format!("fetch-{lang}.wasm"),
            &["--allow-outbound", &web.addr.to_string()],
        );
        assert_eq!(
            result(&server, json!({"url": web.url("/data")})),
            json!({"status": 200, "length": 12}),
            "{lang}"
        );
        let denied = result(&server, json!({"url": other.url("/data")}));
        assert!(denied["error"].is_string(), "{lang}: {denied}");
        server.wait_stderr(&format!(
            "wasmloop: denied an HTTP request to {}",
            other.addr
        ));
        // The refusal leaves the instance serving.
        assert_eq!(
            result(&server, json!({"url": web.url("/again")})),
            json!({"status": 200, "length": 12}),
            "{lang}"
        );
    }
}

#[test]
fn a_udp_datagram_follows_the_allow_list() {
    let echo = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buffer = [0; 1500];
        while let Ok((n, from)) = echo.recv_from(&mut buffer) {
            let _ = echo.send_to(&buffer[..n], from);
        }
    });
    let ping = json!({"udp": addr.to_string(), "send": "ping"});

    let denied = component_server("connects", &[]);
    let got = result(&denied, ping.clone());
    assert!(got["error"].is_string(), "{got}");
    denied.wait_stderr(&format!("wasmloop: denied a UDP datagram to {addr}: "));

    // The guest waits for the echo without a timeout of its own (wasi-libc has no
    // SO_RCVTIMEO): the activation's deadline bounds it.
    let allowed = component_server(
        "connects",
        &["--allow-outbound", &addr.to_string(), "--timeout", "20s"],
    );
    assert_eq!(result(&allowed, ping), json!({"reply": "ping"}));
}

#[test]
fn a_url_with_user_info_is_refused_even_to_an_allowed_host() {
    let web = HttpServer::start("ok");
    let server = component_server("http_get", &["--allow-outbound", &web.addr.to_string()]);
    let url = format!("http://someone@{}/", web.addr);
    assert_eq!(
        result(&server, json!({"url": url})),
        json!({"error": "ErrorCode::HttpRequestDenied"})
    );
    server.wait_stderr("wasmloop: denied an HTTP request whose URL holds user info");
    assert_eq!(
        result(&server, json!({"url": web.url("/")})),
        json!({"status": 200, "length": 2})
    );
}

#[test]
fn a_component_may_not_listen_for_connections_whatever_the_list() {
    let server = component_server("connects", &["--allow-outbound", "*"]);
    let got = result(&server, json!({"listen": "127.0.0.1:0"}));
    assert!(got["error"].is_string(), "{got}");
    server.wait_stderr("wasmloop: denied listening for connections on");
    server.wait_stderr("components may only reach out (--allow-outbound), not accept connections");
}

#[test]
fn an_http_request_past_the_instances_socket_cap_is_refused_and_the_logs_name_the_cap() {
    let web = HttpServer::start("twelve bytes");
    let to = web.addr.to_string();
    let server = component_server(
        "http_get",
        &["--allow-outbound", &to, "--max-instance-sockets", "0"],
    );
    assert_eq!(
        result(&server, json!({"url": web.url("/x")})),
        json!({"error": "ErrorCode::ConnectionLimitReached"})
    );
    server.wait_stderr(
        "wasmloop: refused to open a socket: too many open sockets for this instance: 0 \
         (--max-instance-sockets, WASMLOOP_MAX_INSTANCE_SOCKETS; HTTP requests count while \
         their connection is open)",
    );
    // With room for one, the same request goes out; its connection is given back after.
    let server = component_server(
        "http_get",
        &["--allow-outbound", &to, "--max-instance-sockets", "1"],
    );
    for _ in 0..3 {
        assert_eq!(
            result(&server, json!({"url": web.url("/x")})),
            json!({"status": 200, "length": 12})
        );
    }
}

/// The WASI 0.3 hello of component-examples/http-rust-p3, on a runtime started with
/// --wasip3: through `/init` and `/run`, `wasmloop run` and as plain HTTP.
#[test]
fn the_wasi_0_3_http_hello_answers_in_both_protocols_and_in_run() {
    let message = |got: &Value| -> Value {
        assert_eq!(got["statusCode"], 200, "{got}");
        serde_json::from_str(got["body"].as_str().unwrap()).unwrap()
    };
    let server = example_server("http-hello-p3-rust.wasm", &["--wasip3"]);
    let got = result(&server, json!({"name": "Mike"}));
    assert_eq!(message(&got)["message"], "Hello, Mike!");
    server.wait_stderr("hello: greeting Mike");

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("component-examples/out/http-hello-p3-rust.wasm");
    let ran = crate::support::output_with_input(
        Command::new(env!("CARGO_BIN_EXE_wasmloop"))
            .arg("run")
            .arg("--wasip3")
            .arg(&path)
            .env("WASMLOOP_NO_CACHE", "1"),
        "{\"name\":\"Ann\"}\n",
    );
    let printed: Value = serde_json::from_slice(&ran.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ran.stderr)));
    assert_eq!(message(&printed)["message"], "Hello, Ann!");

    let plain = Server::builder()
        .args(&["--wasip3", "--protocol", "http", "--action"])
        .arg(path.to_str().unwrap())
        .start();
    let reply =
        wasmloop_bench::harness::request(plain.addr, "POST", "/", b"{\"name\":\"Plain\"}").unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content(), b"{\"message\":\"Hello, Plain!\"}");
}
