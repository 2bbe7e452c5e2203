//! Returns its input and logs nothing: OpenWhisk's `echoSh`, for the cases that expect
//! both streams empty but for the sentinels.
fn main() {
    wasmloop_test_guest::serve(|value| value);
}
