//! A WebAssembly ActionLoop action in Rust: `{"name":"Mike"}` → `{"message":"Hello, Mike!"}`.
//!
//! Guest contract (wasmloop's PROTOCOL.md Part 2): one JSON request per line on stdin, one
//! JSON result per line on **stdout**, logs on **stderr**. The instance stays alive between
//! activations, so anything kept in `main` survives from one request to the next.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

fn hello(args: &Value) -> Value {
    let name = args["name"].as_str().unwrap_or("Stranger");
    eprintln!("hello: greeting {name}");
    json!({ "message": format!("Hello, {name}!") })
}

fn main() {
    let mut stdout = std::io::stdout().lock();
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        writeln!(stdout, r#"{{"ok":true}}"#).unwrap();
        stdout.flush().unwrap();
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let result = match serde_json::from_str::<Value>(&line) {
            Ok(request) => hello(&request["value"]),
            Err(e) => json!({ "error": format!("the request is not JSON: {e}") }),
        };
        writeln!(stdout, "{result}").unwrap();
        stdout.flush().unwrap();
    }
}
