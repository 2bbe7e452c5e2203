//! Overlapping activations' log lines: whole, each attributed to its activation in JSON,
//! unchanged in text, and the sentinels one per activation.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::support::{Backend, SENTINEL, Server};

/// Activations sent, and at once.
const ACTIVATIONS: usize = 400;
const CLIENTS: usize = 8;
/// Log lines each activation writes per stream.
const LINES: usize = 3;
/// What tests/guest's `logs_a_long_line` repeats (its `LONG_LINE_UNIT`).
const LONG_LINE_UNIT: &str = "xyz€é";

/// Sends the activations from several clients at once to a server at `--concurrency 4`
/// with `format`, and returns it once every activation's sentinels are out.
fn overlapping(backend: Backend, format: &str) -> Server {
    let server = Server::builder()
        .args(&["--concurrency", "4", "--log-format", format])
        .start();
    server
        .init(&backend.init_guest("logs_its_activation"))
        .assert(200, "{\"ok\":true}\n");
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let server = &server;
            scope.spawn(move || {
                for n in (client..ACTIVATIONS).step_by(CLIENTS) {
                    let id = format!("act-{n}");
                    let body = json!({
                        "value": {"id": id, "lines": LINES},
                        "activation_id": id,
                        "namespace": "guest",
                        "action_name": "/guest/logs",
                    });
                    let reply = server.post("/run", body.to_string().as_bytes());
                    assert_eq!(reply.status, 200, "{}", reply.text());
                }
            });
        }
    });
    server.wait_sentinels(ACTIVATIONS);
    server
}

/// 64 MiB floods in a row, after the first.
const FLOODS: usize = 8;

/// What a flood may raise the server's memory high-water mark by: an eighth of what it
/// would take held whole. Held whole is the bug these tests were written for (a 64 MiB
/// line raised the mark by up to 58 MiB; a 1 MiB write of newlines became 150 MB of JSON
/// records); streamed, a flood costs a few 16 KiB pieces and the guest's 1 MiB writes,
/// and the allocator's arenas vary by a few MiB between runs on a busy machine (2.06 MiB
/// once broke a fixed 2 MiB bound), which an eighth of a flood leaves room for.
fn flood_headroom(held_whole: u64) -> u64 {
    held_whole / 8
}

/// The streams an action's log lines come on: a wasm guest's stdout carries its results.
fn log_streams(backend: Backend) -> &'static [&'static str] {
    match backend {
        Backend::Native => &["stdout", "stderr"],
        _ => &["stderr"],
    }
}

each_backend! {
    /// A 64 MiB line with no newline reaches stderr whole (in pieces of at most 16 KiB, each
    /// written as it fills, so memory stays bounded), ended at the activation's end.
    fn a_64_mib_line_reaches_stderr_whole_in_text(backend: Backend) {
        let server = Server::with_guest(backend, "logs_a_long_line");
        server.run(json!({"mib": 64})).assert(200, "{\"mib\":64}\n");
        server.wait_sentinels(1);
        let stderr = server.stderr();
        let line = LONG_LINE_UNIT.repeat((64 << 20) / LONG_LINE_UNIT.len());
        assert_eq!(stderr.len(), line.len() + 1 + SENTINEL.len() + 1, "{backend:?}");
        assert!(stderr == format!("{line}\n{SENTINEL}\n"), "{backend:?}: not the line, whole");
    }

    /// However fast an action writes a line with no newline, the server holds no more of
    /// it than a few pieces: its memory high-water mark stays flat across repeated 64 MiB
    /// floods (an action that writes faster than the runtime reads never lets the pipe run
    /// dry, and the pieces once piled up until it did).
    fn repeated_64_mib_floods_leave_the_servers_memory_flat(backend: Backend) {
        let server = Server::builder().discard_logs().start().initialized_with(backend, "logs_a_long_line");
        // A first, small one grows what stays: the guest's 1 MiB chunk, the allocator's
        // arenas. Not a flood: a buffer it left grown would hide the next ones.
        server.run(json!({"mib": 1})).assert(200, "{\"mib\":1}\n");
        let before = server.reset_high_water();
        for _ in 0..FLOODS {
            server.run(json!({"mib": 64})).assert(200, "{\"mib\":64}\n");
        }
        let grew = server.memory("VmHWM").saturating_sub(before);
        eprintln!("{backend:?}: high-water {} KiB above the resident {} KiB", grew >> 10, before >> 10);
        assert!(grew < flood_headroom(64 << 20), "{backend:?}: {FLOODS} floods raised the high-water mark by {grew} bytes");
    }

    /// In JSON each empty line is a record of a hundred bytes and more: a burst of them is
    /// written as it is rendered, not rendered whole first (a guest's 1 MiB write of
    /// newlines was 150 MB of records at once).
    fn a_burst_of_empty_lines_in_json_leaves_the_servers_memory_flat(backend: Backend) {
        let server = Server::builder()
            .args(&["--log-format", "json"])
            .discard_logs()
            .start()
            .initialized_with(backend, "floods_empty_lines");
        server.run(json!({"mib": 0})).assert(200, "{\"mib\":0}\n");
        let before = server.reset_high_water();
        for _ in 0..3 {
            server.run(json!({"mib": 2})).assert(200, "{\"mib\":2}\n");
        }
        let grew = server.memory("VmHWM").saturating_sub(before);
        eprintln!("{backend:?}: high-water {} KiB above the resident {} KiB", grew >> 10, before >> 10);
        // Each empty line a record of at least a hundred bytes.
        assert!(grew < flood_headroom(100 * (2 << 20)), "{backend:?}: the records raised the high-water mark by {grew} bytes");
    }

    fn in_json_every_line_is_whole_and_names_the_activation_that_wrote_it(backend: Backend) {
        let server = overlapping(backend, "json");
        let mut per_activation: HashMap<String, usize> = HashMap::new();
        let mut reports: HashMap<String, usize> = HashMap::new();
        for (stream, text) in [("stdout", server.stdout()), ("stderr", server.stderr())] {
            let mut sentinels = 0;
            for line in text.lines() {
                if line == SENTINEL.trim_end() {
                    sentinels += 1;
                    continue;
                }
                let entry: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{stream}: not JSON ({e}): {line}"));
                assert_eq!(entry["stream"], stream, "{line}");
                let message = entry["message"].as_str().unwrap();
                let id = entry["activationId"].as_str().unwrap();
                // Each activation's report, on stderr: counted apart from its lines.
                if entry.get("report").is_some() {
                    assert_eq!(stream, "stderr", "{line}");
                    *reports.entry(id.to_owned()).or_default() += 1;
                    continue;
                }
                // The line names the activation it came from: never merged, never another's.
                let (said, rest) = message
                    .strip_prefix("id ")
                    .and_then(|m| m.split_once(' '))
                    .unwrap_or_else(|| panic!("a torn line: {line}"));
                assert_eq!(said, id, "{line}");
                assert!(rest.starts_with("line ") && rest.len() == 6, "{line}");
                assert_eq!(entry["namespace"], "guest");
                assert_eq!(entry["action"], "/guest/logs");
                assert!(entry["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
                *per_activation.entry(id.to_owned()).or_default() += 1;
            }
            assert_eq!(sentinels, ACTIVATIONS, "{stream}: one sentinel per activation");
        }
        let streams = log_streams(backend).len();
        assert_eq!(per_activation.len(), ACTIVATIONS, "every activation's lines");
        for (id, count) in per_activation {
            assert_eq!(count, LINES * streams, "{id}: none lost, none merged");
            assert_eq!(reports.get(&id), Some(&1), "{id}: one report");
        }
    }

    /// With json logs the runtime's explanation of a bad answer is a record of the
    /// activation that gave it: four at once, a number (no object) or a line that is no
    /// JSON, each explained under its own id, quoting its own answer.
    fn each_bad_answer_is_explained_under_its_own_activation(backend: Backend) {
        let server = Server::builder()
            .args(&["--concurrency", "4", "--log-format", "json"])
            .start();
        server
            .init(&backend.init_guest("non_object"))
            .assert(200, "{\"ok\":true}\n");
        const ROUNDS: usize = 5;
        let answer = |n: usize| if n.is_multiple_of(2) { n.to_string() } else { format!("no json {n}") };
        for round in 0..ROUNDS {
            std::thread::scope(|scope| {
                for n in round * 4..round * 4 + 4 {
                    let server = &server;
                    scope.spawn(move || {
                        let body = json!({
                            "value": {"raw": answer(n)},
                            "activation_id": format!("bad-{n}"),
                            "namespace": "guest",
                            "action_name": "/guest/bad",
                        });
                        let reply = server.post("/run", body.to_string().as_bytes());
                        assert_eq!(reply.status, 502, "{}", reply.text());
                    });
                }
            });
        }
        server.wait_sentinels(ROUNDS * 4);
        let stderr = server.stderr();
        let mut explained: HashMap<String, String> = HashMap::new();
        for line in stderr.lines().filter(|l| *l != SENTINEL.trim_end()) {
            let entry: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let message = entry["message"].as_str().unwrap_or_default();
            if message.contains("the action's answer") {
                assert_eq!(entry["action"], "/guest/bad", "{line}");
                assert_eq!(entry["namespace"], "guest", "{line}");
                let id = entry["activationId"].as_str().unwrap().to_owned();
                assert!(explained.insert(id, message.to_owned()).is_none(), "{line}");
            }
        }
        for n in 0..ROUNDS * 4 {
            let message = explained
                .get(&format!("bad-{n}"))
                .unwrap_or_else(|| panic!("no explanation under bad-{n}:\n{stderr}"));
            assert!(message.contains(&format!("`{}`", answer(n))), "bad-{n}: {message}");
        }
    }

    fn in_text_every_line_is_whole_and_as_written(backend: Backend) {
        let server = overlapping(backend, "text");
        let mut lines = 0;
        for stream in [server.stdout(), server.stderr()] {
            for line in stream.lines().filter(|l| *l != SENTINEL.trim_end()) {
                let rest = line
                    .strip_prefix("id act-")
                    .unwrap_or_else(|| panic!("a torn or merged line: {line}"));
                let (n, tail) = rest.split_once(' ').unwrap();
                assert!(n.parse::<usize>().is_ok() && tail.len() == 6, "{line}");
                lines += 1;
            }
        }
        assert_eq!(lines, ACTIVATIONS * LINES * log_streams(backend).len());
    }
}

/// An unfinished last line is written whole at the activation's end, before its sentinel,
/// and a line past 16 KiB goes out in pieces, each but the last marked partial.
#[test]
fn an_unfinished_line_ends_with_its_activation_and_a_long_one_goes_out_in_pieces() {
    for backend in [Backend::Native, Backend::Wasm] {
        let server = Server::builder().args(&["--log-format", "json"]).start();
        server
            .init(&backend.init_guest("logs_its_activation"))
            .assert(200, "{\"ok\":true}\n");
        let long = "x".repeat(20_000);
        let input = json!({"id": "a1", "lines": 0, "unfinished": format!("{long}\nhalf a line")});
        let body = json!({"value": input, "activation_id": "a1"}).to_string();
        assert_eq!(server.post("/run", body.as_bytes()).status, 200);
        server.wait_sentinels(1);
        let stderr = server.stderr();
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(
            lines.len(),
            5,
            "{backend:?}: {}",
            &stderr[..stderr.len().min(300)]
        );
        let entry = |line: &str| serde_json::from_str::<Value>(line).unwrap();
        let (first, rest) = (entry(lines[0]), entry(lines[1]));
        assert_eq!(first["partial"], true, "{backend:?}");
        assert_eq!(first["activationId"], "a1", "{backend:?}");
        assert_eq!(
            first["message"].as_str().unwrap().len(),
            16 * 1024,
            "{backend:?}"
        );
        assert_eq!(
            rest.get("partial"),
            None,
            "{backend:?}: the last piece is not partial"
        );
        assert_eq!(rest["activationId"], "a1", "{backend:?}");
        let whole = format!(
            "{}{}",
            first["message"].as_str().unwrap(),
            rest["message"].as_str().unwrap()
        );
        assert_eq!(whole, long, "{backend:?}: the pieces make the line");
        assert_eq!(entry(lines[2])["message"], "half a line", "{backend:?}");
        // Then the activation's report, then its end.
        assert!(
            entry(lines[3])["report"]["wallMs"].is_number(),
            "{backend:?}"
        );
        assert_eq!(lines[4], SENTINEL.trim_end(), "{backend:?}");
    }
}

/// wasmloop's own line about an activation (a refused connection) names that activation
/// in JSON, like the action's lines.
#[test]
fn a_refusal_is_logged_under_the_activation_that_was_refused() {
    let server = Server::builder()
        .args(&["--log-format", "json", "--allow-outbound", "127.0.0.1:1"])
        .start();
    server
        .init(&Backend::Component.init_guest("connects"))
        .assert(200, "{\"ok\":true}\n");
    let body = json!({
        "value": {"tcp": "127.0.0.1:9", "send": "PING\r\n"},
        "activation_id": "refused-1",
        "namespace": "guest",
        "action_name": "/guest/connects",
    });
    assert_eq!(server.post("/run", body.to_string().as_bytes()).status, 200);
    server.wait_sentinels(1);
    let stderr = server.stderr();
    let denial = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|entry| {
            entry["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("wasmloop: denied a TCP connection to 127.0.0.1:9"))
        })
        .unwrap_or_else(|| panic!("no denial line: {stderr}"));
    assert_eq!(denial["activationId"], "refused-1", "{denial}");
    assert_eq!(denial["action"], "/guest/connects", "{denial}");
    assert_eq!(denial["stream"], "stderr");
}

/// With json logs, a start that fails is told under the action the `/init` named (its
/// `__OW_ACTION_NAME` and `__OW_NAMESPACE` when the platform gives them, else `name`).
#[test]
fn a_failed_start_is_told_under_the_action_the_init_named() {
    let server = Server::builder().args(&["--log-format", "json"]).start();
    let zip = crate::support::zip_of(&[("lib/x.py", b"", 0o644)]);
    let mut body = crate::support::init_binary(&zip);
    body["value"]["name"] = json!("broken");
    body["value"]["env"] = json!({"__OW_NAMESPACE": "guest", "__OW_ACTION_NAME": "/guest/broken"});
    assert_eq!(server.init(&body).status, 502);
    server.wait_stderr("cannot start the action");
    let told = server
        .stderr()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|entry| {
            entry["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot start the action"))
        })
        .expect("the failed start, as a record");
    assert_eq!(told["action"], "/guest/broken", "{told}");
    assert_eq!(told["namespace"], "guest", "{told}");

    // Without the platform's variables, the /init's own name.
    let server = Server::builder().args(&["--log-format", "json"]).start();
    body["value"]["env"] = json!(null);
    assert_eq!(server.init(&body).status, 502);
    server.wait_stderr("cannot start the action");
    let named = server.stderr().contains("\"action\":\"broken\"");
    assert!(named, "{}", server.stderr());
}
