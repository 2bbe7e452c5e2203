//! Returns its input, and logs one line on each stream.
fn main() {
    wasmloop_test_guest::serve(|value| {
        wasmloop_test_guest::log_stdout("hello stdout");
        wasmloop_test_guest::log_stderr("hello stderr");
        value
    });
}
