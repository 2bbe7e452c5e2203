//! Returns its process id, so a test can tell whether it was restarted or is still running.
fn main() {
    wasmloop_test_guest::serve(|_| wasmloop_test_guest::json!({ "pid": std::process::id() }));
}
