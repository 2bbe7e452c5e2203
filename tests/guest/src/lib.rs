//! The ActionLoop action side (docs/protocol.md 1.8 and Part 2) shared by the test actions.

use std::io::{BufRead, Write};

pub use serde_json::{json, Value};

/// Where results go: fd 3 for a native child, stdout for a WebAssembly guest.
fn results() -> Box<dyn Write> {
    #[cfg(target_os = "wasi")]
    {
        Box::new(std::io::stdout())
    }
    #[cfg(not(target_os = "wasi"))]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: the runtime opens fd 3 for us and nothing else in this process uses it.
        Box::new(unsafe { std::fs::File::from_raw_fd(3) })
    }
}

/// A log line meant for "stdout": on wasm stdout carries results, so logs go to stderr.
pub fn log_stdout(line: &str) {
    #[cfg(target_os = "wasi")]
    eprintln!("{line}");
    #[cfg(not(target_os = "wasi"))]
    println!("{line}");
}

pub fn log_stderr(line: &str) {
    eprintln!("{line}");
}

/// Writes a raw line on the result channel (for actions that misbehave on purpose).
pub fn write_raw(out: &mut dyn Write, line: &str) {
    out.write_all(line.as_bytes()).unwrap();
    out.write_all(b"\n").unwrap();
    out.flush().unwrap();
}

/// Serves activations: `handle` gets the request's `value` and returns the result line.
pub fn serve_lines(mut handle: impl FnMut(Value) -> String) {
    let mut out = results();
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        write_raw(&mut *out, r#"{"ok":true}"#);
    }
    serve_after_ack(&mut *out, &mut handle);
}

/// As `serve_lines`, for actions that wrote their own ack on `out`.
pub fn serve_after_ack(out: &mut dyn Write, handle: &mut dyn FnMut(Value) -> String) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let mut request: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
        let value = request.remove("value").unwrap_or(Value::Null);
        for (key, v) in request {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            std::env::set_var(format!("__OW_{}", key.to_uppercase()), text);
        }
        let result = handle(value);
        std::io::stdout().flush().unwrap();
        std::io::stderr().flush().unwrap();
        write_raw(out, &result);
    }
}

/// Serves activations whose results are JSON values.
pub fn serve(mut handle: impl FnMut(Value) -> Value) {
    serve_lines(|value| handle(value).to_string())
}

/// The result channel, for actions that write their own ack.
pub fn result_channel() -> Box<dyn Write> {
    results()
}

pub fn env(name: &str) -> Value {
    std::env::var(name)
        .map(Value::String)
        .unwrap_or(Value::Null)
}

/// What `logs_a_long_line` repeats: 8 bytes, so that a MiB holds it a whole number of times,
/// and with characters a piece could split.
pub const LONG_LINE_UNIT: &str = "xyz€é";
