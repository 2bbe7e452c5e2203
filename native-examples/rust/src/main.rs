//! A native ActionLoop action in Rust: `{"name":"Mike"}` → `{"message":"Hello, Mike!"}`.
//!
//! Protocol (see wasmloop's docs/protocol.md 1.8): acknowledge on fd 3 when asked, then read one
//! JSON request per line on stdin, export the context as `__OW_*` variables, log on
//! stdout/stderr, and write one JSON result per line on fd 3.

use std::fs::File;
use std::io::{BufRead, LineWriter, Write};
use std::os::fd::FromRawFd;

use serde_json::{json, Value};

fn hello(args: &Value, log: &mut impl Write) -> Value {
    let name = args["name"].as_str().unwrap_or("Stranger");
    // `wasmloop bench --rows pipe-logs` asks for a line on stdout too, as many actions log.
    if args["logs"] == true {
        println!("hello: a log line on stdout");
    }
    // `wasmloop bench --compare` crashes it on purpose, to time the restart.
    if args["crash"] == true {
        std::process::abort();
    }
    writeln!(log, "hello: greeting {name}").expect("cannot write to stderr");
    json!({ "message": format!("Hello, {name}!") })
}

fn main() {
    // Whole lines, one write each: every piece of an unbuffered `eprintln!` would be a
    // system call of its own.
    let mut log = LineWriter::new(std::io::stderr());
    // Given the JSON as first argument, run once and print the result (handy for testing,
    // and how the "exec" benchmark row runs a fresh process per activation).
    if let Some(arg) = std::env::args().nth(1) {
        let args: Value = serde_json::from_str(&arg).unwrap_or(Value::Null);
        println!("{}", hello(&args, &mut log));
        return;
    }
    // SAFETY: the runtime opened fd 3 for our results; nothing else here uses it.
    let mut results = unsafe { File::from_raw_fd(3) };
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        writeln!(results, r#"{{"ok":true}}"#).expect("cannot write the ack on fd 3");
    }
    // Each result is put together in memory and written in one go: fd 3 is unbuffered, so
    // serializing straight into it would cost a system call per piece of JSON.
    let mut answer = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let result = match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(request)) => {
                for (key, value) in &request {
                    if key != "value" {
                        let text = value
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| value.to_string());
                        // SAFETY: single-threaded; nothing reads the environment concurrently.
                        unsafe { std::env::set_var(format!("__OW_{}", key.to_uppercase()), text) };
                    }
                }
                hello(request.get("value").unwrap_or(&Value::Null), &mut log)
            }
            _ => json!({ "error": "the request is not a JSON object" }),
        };
        answer.clear();
        serde_json::to_writer(&mut answer, &result).expect("a JSON value always serializes");
        answer.push(b'\n');
        std::io::stdout().flush().ok();
        log.flush().ok();
        results
            .write_all(&answer)
            .expect("cannot write the result on fd 3");
    }
}
