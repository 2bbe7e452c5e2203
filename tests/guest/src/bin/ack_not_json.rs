//! Acknowledges start-up with a line that is not JSON.
fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    wasmloop_test_guest::write_raw(&mut *out, "ready!");
    wasmloop_test_guest::serve_after_ack(&mut *out, &mut |v| v.to_string());
}
