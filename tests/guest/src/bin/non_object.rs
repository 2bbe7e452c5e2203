//! Returns a JSON string, which is not a dictionary or array; given `{"raw": LINE}`, answers
//! LINE as it is instead (a number, `null`, a line with a byte-order mark...).
fn main() {
    wasmloop_test_guest::serve_lines(|value| match value["raw"].as_str() {
        Some(line) => line.to_owned(),
        None => "\"not a dictionary\"".to_owned(),
    });
}
