//! Builds a string around the input's delimiter, logs it and returns it.
use wasmloop_test_guest::{json, log_stderr, log_stdout, serve};
fn main() {
    serve(|value| {
        let d = value["delimiter"].as_str().unwrap_or("?").to_owned();
        let winter = format!("{d} ☃ {d}");
        log_stdout(&winter);
        log_stderr(&winter);
        json!({ "winter": winter })
    });
}
