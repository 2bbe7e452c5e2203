//! Returns an array whatever the input.
fn main() {
    wasmloop_test_guest::serve(|_| wasmloop_test_guest::json!(["a", "b"]));
}
