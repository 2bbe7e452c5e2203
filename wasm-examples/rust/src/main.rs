//! A WebAssembly ActionLoop action in Rust: `{"name":"Mike"}` → `{"message":"Hello, Mike!"}`.
//!
//! Guest contract (wasmloop's docs/protocol.md Part 2): one JSON request per line on stdin, one
//! JSON result per line on **stdout**, logs on **stderr**. The instance stays alive between
//! activations, so anything kept in `main` survives from one request to the next.

use std::borrow::Cow;
use std::io::{BufRead, LineWriter, Write};

use serde::{Deserialize, Serialize};

/// One activation. Only `value`, the action's parameters, is read: the rest of what the
/// platform sends (activation id, deadline, ...) is skipped without being stored.
#[derive(Deserialize)]
struct Activation<'a> {
    #[serde(default, borrow)]
    value: Params<'a>,
}

#[derive(Default, Deserialize)]
struct Params<'a> {
    // Borrowed from the request line unless the name holds escapes.
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    /// `wasmloop bench --rows wasm-logs`: one more log line (stdout is for results here).
    #[serde(default)]
    logs: bool,
    /// `wasmloop bench --compare` crashes it on purpose, to time the restart.
    #[serde(default)]
    crash: bool,
}

#[derive(Serialize)]
struct Greeting {
    message: String,
}

#[derive(Serialize)]
struct Failure {
    error: String,
}

fn main() {
    let mut stdout = std::io::stdout().lock();
    // Whole lines, one write each: every piece of an unbuffered `eprintln!` would be a
    // write of its own.
    let mut log = LineWriter::new(std::io::stderr());
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        writeln!(stdout, r#"{{"ok":true}}"#).unwrap();
        stdout.flush().unwrap();
    }
    // The answer is put together in memory and written once: serialized straight into
    // stdout, each small piece would go through its line buffer on its own.
    let mut answer = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        answer.clear();
        let written = match serde_json::from_str::<Activation>(&line) {
            Ok(Activation { value }) => {
                let name = value.name.as_deref().unwrap_or("Stranger");
                if value.logs {
                    writeln!(log, "hello: one more log line").unwrap();
                }
                if value.crash {
                    std::process::abort();
                }
                writeln!(log, "hello: greeting {name}").unwrap();
                let message = format!("Hello, {name}!");
                serde_json::to_writer(&mut answer, &Greeting { message })
            }
            Err(e) => {
                let error = format!("bad request: {e}");
                serde_json::to_writer(&mut answer, &Failure { error })
            }
        };
        written.expect("a struct of strings always serializes");
        answer.push(b'\n');
        stdout.write_all(&answer).unwrap();
        stdout.flush().unwrap();
    }
}
