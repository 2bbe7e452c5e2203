//! Returns a JSON string, which is not a dictionary or array.
fn main() {
    wasmloop_test_guest::serve_lines(|_| "\"not a dictionary\"".to_owned());
}
