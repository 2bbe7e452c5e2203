//! Answers each request with two lines: the second is stray output that must not pass for
//! the next activation's answer.
fn main() {
    wasmloop_test_guest::serve_lines(|value| {
        let stray = wasmloop_test_guest::json!({ "stray": value });
        format!("{value}\n{stray}")
    });
}
