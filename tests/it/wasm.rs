//! What only the WebAssembly backend does: entry points in archives, the /action folder,
//! the memory cap, bad modules, the compile cache and precompiled modules.

use std::process::Command;

use serde_json::json;

use crate::support::{Backend, SENTINEL, Server, init_binary, read, zip_of};

const OK: &str = "{\"ok\":true}\n";

fn wasm(name: &str) -> Vec<u8> {
    read(&Backend::Wasm.guest(name))
}

#[test]
fn an_archive_entry_point_may_be_exec_wasm_or_main_wasm_or_a_wasm_exec() {
    let echo = wasm("echo");
    for (entry, main) in [
        ("exec.wasm", "main"),
        ("niam.wasm", "niam"),
        ("exec", "main"),
    ] {
        let server = Server::start();
        let mut body = init_binary(&zip_of(&[(entry, &echo, 0o644)]));
        body["value"]["main"] = json!(main);
        server.init(&body).assert(200, OK);
        server
            .run(json!({"entry": entry}))
            .assert(200, &format!("{{\"entry\":\"{entry}\"}}\n"));
    }
}

#[test]
fn an_archive_is_the_guests_read_only_action_folder() {
    let server = Server::start();
    let zip = zip_of(&[
        ("exec.wasm", &wasm("reads_action_file"), 0o644),
        ("data.txt", b"bundled", 0o644),
    ]);
    server.init(&init_binary(&zip)).assert(200, OK);
    server
        .run(json!({"file": "data.txt"}))
        .assert(200, "{\"text\":\"bundled\",\"write_refused\":true}\n");
}

#[test]
fn a_bare_module_sees_no_host_files() {
    let server = Server::with_guest(Backend::Wasm, "reads_action_file");
    let reply = server.run(json!({"file": "data.txt"}));
    assert_eq!(reply.status, 200);
    assert!(reply.json()["error_kind"].is_string(), "{}", reply.text());
}

/// Engines belong to the server made from their settings, not to the process: two servers
/// side by side in this process, each with its own cap and compiler.
#[test]
fn two_servers_in_one_process_each_keep_their_own_engine_settings() {
    let small = Server::builder()
        .in_process()
        .args(&["--max-memory-bytes", "67108864", "--wasm-compiler", "winch"])
        .start();
    let large = Server::builder()
        .in_process()
        .args(&[
            "--max-memory-bytes",
            "268435456",
            "--wasm-compiler",
            "cranelift",
        ])
        .start();
    small
        .grow_wasm_guest_by(100)
        .assert_error(400, "past its cap of 67108864 bytes (64 MiB)");
    large
        .grow_wasm_guest_by(100)
        .assert(200, "{\"allocated_mib\":100}\n");
    // The first server's instance was replaced, under its own cap still.
    small
        .run(json!({"mib": 100}))
        .assert_error(400, "past its cap of 67108864 bytes (64 MiB)");
}

#[test]
fn growing_past_the_memory_cap_fails_the_activation_not_the_server() {
    let server = Server::builder()
        .arg("--max-memory-bytes")
        .arg("67108864")
        .start();
    let reply = server.grow_wasm_guest_by(100);
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = reply.error();
    assert!(
        error.starts_with("command exited: ") && error.contains("memory"),
        "{error}"
    );
    assert!(!error.contains('\n'), "one line, not a backtrace: {error}");
    server
        .run(json!({"mib": 1}))
        .assert(200, "{\"allocated_mib\":1}\n");
    server.wait_sentinels(3);
}

#[test]
fn a_module_that_does_not_validate_is_a_502() {
    let server = Server::start();
    let reply = server.init(&init_binary(b"\0asm\x01\0\0\0 definitely not sections"));
    assert_eq!(reply.status, 502);
    assert!(
        reply
            .error()
            .starts_with("cannot start action: invalid WebAssembly module"),
        "{}",
        reply.text()
    );
    server
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, OK);
}

#[test]
fn a_module_without_start_or_with_unknown_imports_is_a_502() {
    let server = Server::start();
    let no_start =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "main")))"#).unwrap();
    let reply = server.init(&init_binary(&no_start));
    reply.assert_error(502, "exports no `_start`");

    let unknown = wat::parse_str(
        r#"(module (import "env" "launch_missiles" (func)) (func (export "_start")))"#,
    )
    .unwrap();
    let reply = server.init(&init_binary(&unknown));
    reply.assert_error(502, "cannot link the module");
}

#[test]
fn returning_from_start_is_an_exit() {
    let server = Server::start();
    let returns =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "_start")))"#)
            .unwrap();
    let reply = server.init(&init_binary(&returns));
    assert_eq!(reply.status, 502);
    assert_eq!(
        reply.error(),
        "cannot start action: command exited: the guest returned from _start"
    );
}

/// The compiled modules in a cache folder.
fn cached(cache: &tempfile::TempDir) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

fn count_is(server: &Server, count: u64) {
    server
        .run(json!({}))
        .assert(200, &format!("{{\"count\":{count}}}\n"));
}

#[test]
fn a_second_init_of_the_same_module_loads_it_from_the_compile_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let server = || {
        Server::builder()
            .args(&[
                "-v",
                "--wasm-compiler",
                "cranelift",
                "--cache-dir",
                cache_dir,
            ])
            .start()
    };
    let first = server();
    first
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, OK);
    first.wait_stderr("module compiled");
    assert_eq!(cached(&cache).len(), 1, "one compiled module in the cache");

    let second = server();
    second
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, OK);
    second.wait_stderr("module loaded from the compile cache");
    assert!(!second.stderr().contains("module compiled"));
    second
        .run(json!({"cached": true}))
        .assert(200, "{\"cached\":true}\n");
}

#[test]
fn tiered_serves_quick_code_first_and_keeps_the_state_of_an_instance_that_has_served() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let server = || {
        Server::builder()
            .args(&["-v", "--cache-dir", cache_dir])
            .start()
    };
    let first = server();
    first
        .init(&Backend::Wasm.init_guest("counter"))
        .assert(200, OK);
    first.wait_stderr("codegen=\"winch\"");
    // Activations all through the background compile: the count never goes back.
    let mut count = 0;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !first.stderr().contains("optimized code ready") {
        assert!(std::time::Instant::now() < until, "no optimized code");
        count += 1;
        count_is(&first, count);
    }
    assert!(first.stderr().contains("codegen=\"cranelift\""));
    assert!(first.stderr().contains("swapped=0"), "{}", first.stderr());
    for _ in 0..3 {
        count += 1;
        count_is(&first, count);
    }
    // Its successor, once it ends, is made from the optimized code.
    assert_eq!(first.run(json!({"exit": true})).status, 400);
    count_is(&first, 1);
    first.wait_stderr("instance started codegen=\"cranelift\"");
    // Only the optimized code is kept: the quick code is never wanted again.
    assert_eq!(cached(&cache).len(), 1, "the optimized code in the cache");

    // The optimized code is in the cache: nothing to compile, nothing to tier.
    let second = server();
    second
        .init(&Backend::Wasm.init_guest("counter"))
        .assert(200, OK);
    second.wait_stderr("module loaded from the compile cache");
    for count in 1..=3 {
        count_is(&second, count);
    }
    let log = second.stderr();
    assert!(!log.contains("module compiled"), "{log}");
    assert!(!log.contains("optimized code ready"), "{log}");
}

#[test]
fn tiered_swaps_an_instance_that_has_not_served_yet() {
    let server = Server::builder().args(&["-v", "--no-cache"]).start();
    server
        .init(&Backend::Wasm.init_guest("counter"))
        .assert(200, OK);
    server.wait_stderr("optimized code ready");
    assert!(server.stderr().contains("swapped=1"), "{}", server.stderr());
    count_is(&server, 1);
    count_is(&server, 2);
}

#[test]
fn a_compile_that_outlives_compile_timeout_fails_the_init_not_the_server() {
    for compiler in ["tiered", "cranelift"] {
        let server = Server::builder()
            .args(&[
                "--no-cache",
                "--compile-timeout",
                "1ms",
                "--wasm-compiler",
                compiler,
            ])
            .start();
        let reply = server.init(&Backend::Wasm.init_guest("echo"));
        assert_eq!(reply.status, 502);
        let error = reply.error();
        assert!(
            error.contains("(see --compile-timeout)"),
            "{compiler}: {error}"
        );
        assert_eq!(
            server.post("/run", b"{}").status,
            500,
            "no action, still serving"
        );
    }
}

/// The echo guest precompiled by `wasmloop compile ARGS...`.
fn precompiled_echo(dir: &tempfile::TempDir, args: &[&str]) -> Vec<u8> {
    let cwasm = dir.path().join("echo.cwasm");
    let status = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("compile")
        .arg(Backend::Wasm.guest("echo"))
        .arg("-o")
        .arg(&cwasm)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success());
    read(&cwasm)
}

#[test]
fn precompiled_modules_need_the_operators_consent() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = precompiled_echo(&dir, &[]);

    let server = Server::start();
    let reply = server.init(&init_binary(&cwasm));
    reply.assert_error(502, "--allow-precompiled");

    let server = Server::builder().arg("--allow-precompiled").start();
    server.init(&init_binary(&cwasm)).assert(200, OK);
    server
        .run(json!({"precompiled": 1}))
        .assert(200, "{\"precompiled\":1}\n");
}

#[test]
fn compile_refuses_what_is_not_a_command_module() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("not.wasm");
    std::fs::write(&input, b"hello").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wasmloop"))
        .arg("compile")
        .arg(&input)
        .arg("-o")
        .arg(dir.path().join("out.cwasm"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid WebAssembly module"));
}

#[test]
fn with_winch_a_module_serves_traps_and_is_stopped_like_with_cranelift() {
    let server = Server::builder()
        .arg("--wasm-compiler")
        .arg("winch")
        .arg("--timeout")
        .arg("300ms")
        .start();
    server.init(&init_binary(&wasm("slow"))).assert(200, OK);
    server
        .run(json!({"sleep_ms": 1}))
        .assert(200, "{\"sleep_ms\":1}\n");
    // Only epoch interruption can stop a guest spinning in its own code.
    server.run(json!({"spin_ms": 600_000})).assert(
        504,
        "{\"error\":\"the action did not finish within --timeout 300ms and was stopped\"}\n",
    );
    server
        .run(json!({"after": 1}))
        .assert(200, "{\"after\":1}\n");
}

#[test]
fn a_module_precompiled_for_another_compiler_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = precompiled_echo(&dir, &["--wasm-compiler", "winch"]);
    let server = Server::builder().arg("--allow-precompiled").start();
    let reply = server.init(&init_binary(&cwasm));
    reply.assert_error(502, "cannot load the precompiled module");
}

#[test]
fn a_log_line_written_in_pieces_reaches_stderr_whole_while_instances_run_in_parallel() {
    let server = Server::builder().arg("--concurrency").arg("2").start();
    server
        .init(&Backend::Wasm.init_guest("logs_in_pieces"))
        .assert(200, OK);
    let server = &server;
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..40)
            .map(|tag| scope.spawn(move || server.run(json!({"pieces": 300, "tag": tag % 2}))))
            .collect();
        for run in runs {
            assert_eq!(run.join().unwrap().status, 200);
        }
    });
    server.wait_sentinels(40);
    let lines: Vec<String> = server
        .stderr()
        .lines()
        .filter(|l| !l.contains(SENTINEL))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 40, "{lines:?}");
    for line in lines {
        let ok = ["a", "b"]
            .iter()
            .enumerate()
            .any(|(tag, letter)| line == format!("pieces {tag}:{}", letter.repeat(300)));
        assert!(ok, "a torn log line: {line:?}");
    }
}

/// Voluntary context switches of the server's (one) epoch thread so far.
fn epoch_thread_switches(server: &Server) -> u64 {
    let tasks = format!("/proc/{}/task", server.pid());
    let tickers: Vec<u64> = std::fs::read_dir(tasks)
        .unwrap()
        .map(|task| task.unwrap().path())
        .filter(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim() == "wasmloop-epoch")
        })
        .map(|task| {
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("voluntary_ctxt_switches:"))
                .unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(tickers.len(), 1, "one epoch thread");
    tickers[0]
}

#[test]
fn an_idle_server_stops_ticking_and_a_later_spinning_guest_still_meets_its_deadline() {
    // Not tiered: the optimized code's arrival would start a guest during the idle time.
    let server = Server::builder()
        .args(&["--timeout", "500ms", "--wasm-compiler", "cranelift"])
        .start();
    server
        .init(&Backend::Wasm.init_guest("slow"))
        .assert(200, OK);
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
    // Idle for a while: the epoch thread parks (it ticked every 10 ms before).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before = epoch_thread_switches(&server);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let idle_wakeups = epoch_thread_switches(&server) - before;
    assert!(
        idle_wakeups <= 2,
        "{idle_wakeups} wake-ups in 500 ms of idling"
    );
    // A guest spinning in its own code is stopped only by the epoch advancing.
    let started = std::time::Instant::now();
    let reply = server.run(json!({"spin_ms": 600_000}));
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    server.run(json!({"n": 2})).assert(200, "{\"n\":2}\n");
}

#[test]
fn a_module_winch_cannot_compile_starts_on_cranelift_code() {
    // `return_call` (tail calls): Cranelift compiles it, Winch does not.
    let tail_calls = wat::parse_str(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func $zero (result i32) (i32.const 0))
          (func $tail (result i32) (return_call $zero))
          (func (export "_start")
            (i32.store (i32.const 0) (i32.const 16))
            (i32.store (i32.const 4) (i32.const 64))
            (loop $serve
              (drop (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
              (drop (call $tail))
              (br $serve))))"#,
    )
    .unwrap();
    let server = Server::builder().args(&["-v", "--no-cache"]).start();
    server.init(&init_binary(&tail_calls)).assert(200, OK);
    // The log is read by another thread: wait for the lines rather than race it.
    server.wait_stderr("not for the quick compiler");
    server.wait_stderr("codegen=\"cranelift\"");

    // A module neither compiler takes is refused at once, with the validator's message.
    let invalid =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "_start") (drop)))"#)
            .unwrap();
    let server = Server::builder().args(&["-v", "--no-cache"]).start();
    let reply = server.init(&init_binary(&invalid));
    reply.assert_error(502, "invalid WebAssembly module");
    assert!(!server.stderr().contains("not for the quick compiler"));
}

#[test]
fn a_cache_folder_others_can_write_to_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let server = Server::builder()
        .args(&["--wasm-compiler", "cranelift", "--cache-dir"])
        .arg(cache.path().to_str().unwrap())
        .start();
    server
        .init(&Backend::Wasm.init_guest("echo"))
        .assert(200, OK);
    server.run(json!({"n": 1})).assert(200, "{\"n\":1}\n");
    // Said once, without -v: an operator must hear that every start compiles.
    server.wait_stderr("could be written by other users, so each start compiles the action");
    assert!(
        cached(&cache).is_empty(),
        "code written where others can write"
    );
}

#[test]
fn stdout_takes_a_write_of_two_buffers_and_a_closed_stderr_refuses_writes() {
    let guest = wat::parse_str(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
          (memory (export "memory") 1)
          (data (i32.const 100) "{\"a\":1}\n")
          (data (i32.const 200) "{\"closed\":true}\n")
          (data (i32.const 300) "{\"closed\":false}\n")
          (data (i32.const 400) "log\n")
          (func $next
            (drop (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))))
          (func $out (param $at i32) (param $len i32)
            (i32.store (i32.const 48) (local.get $at))
            (i32.store (i32.const 52) (local.get $len))
            (drop (call $write (i32.const 1) (i32.const 48) (i32.const 1) (i32.const 40))))
          (func (export "_start")
            (i32.store (i32.const 0) (i32.const 1024))
            (i32.store (i32.const 4) (i32.const 4096))
            ;; The first answer in two buffers of one write: a stream may take only the
            ;; first (a short write, as POSIX allows), so the rest follows in a second one.
            (call $next)
            (i32.store (i32.const 16) (i32.const 100))
            (i32.store (i32.const 20) (i32.const 5))
            (i32.store (i32.const 24) (i32.const 105))
            (i32.store (i32.const 28) (i32.const 3))
            (drop (call $write (i32.const 1) (i32.const 16) (i32.const 2) (i32.const 40)))
            (if (i32.eq (i32.load (i32.const 40)) (i32.const 5))
              (then (drop (call $write (i32.const 1) (i32.const 24) (i32.const 1) (i32.const 40)))))
            ;; The second: with stderr closed, a write to it is EBADF (8).
            (call $next)
            (drop (call $close (i32.const 2)))
            (i32.store (i32.const 56) (i32.const 400))
            (i32.store (i32.const 60) (i32.const 4))
            (if (i32.eq (call $write (i32.const 2) (i32.const 56) (i32.const 1) (i32.const 40))
                        (i32.const 8))
              (then (call $out (i32.const 200) (i32.const 16)))
              (else (call $out (i32.const 300) (i32.const 17))))
            (loop $idle (call $next) (br $idle))))"#,
    )
    .unwrap();
    let server = Server::builder().args(&["--timeout", "5s"]).start();
    server.init(&init_binary(&guest)).assert(200, OK);
    server.run(json!({})).assert(200, "{\"a\":1}\n");
    server.run(json!({})).assert(200, "{\"closed\":true}\n");
    assert!(
        !server.stderr().contains("log\n"),
        "written to a closed stderr"
    );
}

#[test]
fn stdin_fills_the_first_non_empty_buffer_and_a_read_outside_memory_traps() {
    // Reads each request 3 bytes at a time into the second of two buffers (the first is
    // empty) and echoes every piece; asked to (a request of "trap"), it reads into a
    // buffer past the end of memory: the guest traps, and the next request meets a fresh
    // instance.
    let guest = wat::parse_str(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "_start")
            (i32.store (i32.const 0) (i32.const 100))
            (i32.store (i32.const 4) (i32.const 0))
            (i32.store (i32.const 8) (i32.const 200))
            (i32.store (i32.const 12) (i32.const 3))
            (i32.store (i32.const 64) (i32.const 65533))
            (i32.store (i32.const 68) (i32.const 8))
            (loop $serve
              (drop (call $read (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 16)))
              ;; "{"t" starts a trap request: read on, into a buffer outside memory.
              (if (i32.eq (i32.and (i32.load (i32.const 200)) (i32.const 0xffffff))
                          (i32.const 0x74227b))
                (then (drop (call $read (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 16)))))
              (i32.store (i32.const 32) (i32.const 200))
              (i32.store (i32.const 36) (i32.load (i32.const 16)))
              (drop (call $write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 48)))
              (br $serve))))"#,
    )
    .unwrap();
    let server = Server::builder().args(&["--timeout", "5s"]).start();
    server.init(&init_binary(&guest)).assert(200, OK);
    for name in ["Mike", "a longer name, read in many pieces ❄"] {
        let body = json!({"value": {"name": name}}).to_string();
        server
            .post("/run", body.as_bytes())
            .assert(200, &format!("{body}\n"));
    }
    server
        .post("/run", br#"{"t":1}"#)
        .assert_error(400, "command exited: ");
    let body = json!({"value": {"name": "after"}}).to_string();
    server
        .post("/run", body.as_bytes())
        .assert(200, &format!("{body}\n"));
}

/// The pid of a compile child working for the server `parent`, if one runs now.
fn compile_child_of(parent: u32) -> Option<u32> {
    let marker = format!("\0--parent-pid\0{parent}\0");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&marker)
                .then_some(pid)
        })
}

/// Whether `pid` still runs (a zombie waiting to be reaped does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|s| !s.starts_with('Z'))
    })
}

#[test]
fn a_compile_child_dies_with_its_server() {
    use std::io::Write;
    // Thousands of functions: ~4 s of compiling here, so a child still there a second
    // after its server died would have been left running, not just finishing.
    let module = many_functions(16_000);
    let server = Server::builder()
        .args(&["--wasm-compiler", "cranelift", "--no-cache"])
        .start();
    let body = init_binary(&module).to_string();
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST /init HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let child = loop {
        if let Some(child) = compile_child_of(server.pid()) {
            break child;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compile child seen"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while running(child) {
        assert!(
            std::time::Instant::now() < deadline,
            "the compile child outlived its server"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A module of `count` functions `(i32) -> i32` of 50 multiply-adds each, plus `_start`,
/// written in binary: as text, parsing it would take longer than compiling it.
fn many_functions(count: u32) -> Vec<u8> {
    fn leb(mut n: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    fn section(id: u8, content: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(content.len() as u32, out);
        out.extend_from_slice(content);
    }
    // local.set 0 (i32.add (i32.mul (local.get 0) (i32.const 3)) (i32.const 5)), 50 times.
    let mut body = vec![0x00];
    for _ in 0..50 {
        body.extend_from_slice(&[0x20, 0x00, 0x41, 0x03, 0x6c, 0x41, 0x05, 0x6a, 0x21, 0x00]);
    }
    body.extend_from_slice(&[0x20, 0x00, 0x0b]);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(
        1,
        &[0x02, 0x60, 0x01, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00],
        &mut module,
    );
    let mut functions = Vec::new();
    leb(count + 1, &mut functions);
    functions.resize(functions.len() + count as usize, 0x00);
    functions.push(0x01);
    section(3, &functions, &mut module);
    section(5, &[0x01, 0x00, 0x01], &mut module);
    let mut exports = vec![0x02, 0x06];
    exports.extend_from_slice(b"memory");
    exports.extend_from_slice(&[0x02, 0x00, 0x06]);
    exports.extend_from_slice(b"_start");
    exports.push(0x00);
    leb(count, &mut exports);
    section(7, &exports, &mut module);
    let mut code = Vec::new();
    leb(count + 1, &mut code);
    for _ in 0..count {
        leb(body.len() as u32, &mut code);
        code.extend_from_slice(&body);
    }
    code.extend_from_slice(&[0x02, 0x00, 0x0b]);
    section(10, &code, &mut module);
    module
}
